"""Check a whole checkpoint: index structure, every tensor's CRC32C, shards, slices, ``.meta``.

Unlike :func:`~ckpt_tools.open_checkpoint`, which stops at the first problem, :func:`verify`
keeps going and reports every problem it finds, each with the file and byte offset. It walks the
index block by block (so one bad block does not hide the others), checks each entry against its
data shard, and recomputes checksums without building arrays, in chunks, so memory stays flat
for any checkpoint size. The data checks are written independently of the reader on purpose:
a verifier should not share the reader's blind spots.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from .checkpoint import Checkpoint
from .errors import CheckpointError
from .formats._io import close_map, map_file
from .formats.meta import read_meta_graph
from .formats.savedmodel import read_saved_model
from .formats.v1 import shard_files
from .locate import Location, locate
from .verify_v2 import verify_v2, walk_table

#: ``progress(done, total)``: work done so far (bytes of tensor data for V2, tensors for V1).
ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a checkpoint.

    Attributes:
        file: the file the problem is in.
        offset: byte offset in ``file``, when known.
        message: what is wrong (and what was expected).
        tensor: the checkpoint key concerned, if any.
    """

    file: str
    offset: int | None
    message: str
    tensor: str | None = None

    def __str__(self) -> str:
        where = self.file if self.offset is None else f"{self.file} at byte {self.offset}"
        return f"{where}: {self.message}"

    def to_dict(self) -> dict:
        return {"file": self.file, "offset": self.offset, "message": self.message,
                "tensor": self.tensor}


@dataclass
class VerifyReport:
    """Result of :func:`verify`.

    Attributes:
        path: the checkpoint prefix (V2) or file (V1, Keras HDF5 / ``.keras``).
        format: ``"v2"``, ``"v1"``, ``"h5"`` or ``"keras"`` (the last three have no
            per-tensor checksums: every value is decoded instead; a ``.keras`` archive's
            weights member is checked against its zip CRC-32 first).
        files: files examined.
        tensors: stored tensors (or slices) whose data was checked.
        bytes: bytes of tensor data checksummed (for ``.keras``: of the weights member).
        problems: everything found wrong, in file order.
        unreferenced: data file -> bytes that no index entry points at (informational;
            TensorFlow never leaves gaps, so a non-zero value hints at a foreign writer).
    """

    path: str
    format: str
    files: list[str] = field(default_factory=list)
    tensors: int = 0
    bytes: int = 0
    problems: list[Problem] = field(default_factory=list)
    unreferenced: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems

    def add(self, file: str, offset: int | None, message: str, tensor: str | None = None) -> None:
        self.problems.append(Problem(file, offset, message, tensor))

    def add_error(self, exc: CheckpointError, file: str, tensor: str | None = None) -> None:
        """Records a library error, splitting its ``"<file> at byte N: "`` prefix off."""
        path = getattr(exc, "path", None) or file
        offset = getattr(exc, "offset", None)
        text = str(exc)
        for prefix in (f"{path} at byte {offset}: ", f"{path}: "):
            if text.startswith(prefix):
                text = text[len(prefix):]
                break
        self.problems.append(Problem(path, offset, text, tensor))

    def to_dict(self) -> dict:
        """The ``ckpt verify --json`` document."""
        return {"checkpoint": self.path, "format": self.format, "ok": self.ok,
                "files": list(self.files), "tensors": self.tensors, "bytes": self.bytes,
                "problems": [p.to_dict() for p in self.problems],
                "unreferenced_bytes": dict(self.unreferenced)}


def verify(target: str | os.PathLike | Checkpoint, *,
           progress: ProgressFn | None = None) -> VerifyReport:
    """Checks every structure and checksum of a checkpoint and reports all problems.

    Args:
        target (`str` or `Checkpoint`): any path :func:`~ckpt_tools.open_checkpoint` accepts,
            or an open checkpoint (only its location is used; the files are re-read).
        progress (`Callable[[int, int], None]`, *optional*): called with ``(done, total)``
            as data is checked, for a progress bar.

    Returns:
        `VerifyReport`: ``report.ok`` is True when nothing is wrong.

    Raises:
        CheckpointNotFoundError: if there is no checkpoint at ``target``.
        CorruptCheckpointError: if ``target`` is a file that is not a checkpoint at all.

    Example:
        >>> report = verify("fixtures/linear_v2")
        >>> report.ok, report.tensors
        (True, 4)
    """
    loc = target.location if isinstance(target, Checkpoint) else locate(target)
    report = VerifyReport(path=loc.prefix, format=loc.format)
    if loc.format == "v2":
        verify_v2(loc.prefix, report, progress)
    elif loc.format != "v1":  # Keras: the archive member's CRC-32 (.keras), then every value
        _read_all(loc, report, progress)
    else:
        _verify_v1(loc, report, progress)
    if loc.meta_path:
        report.files.append(loc.meta_path)
        try:
            read_meta_graph(loc.meta_path)
        except CheckpointError as exc:
            report.add_error(exc, loc.meta_path)
    if loc.saved_model:
        report.files.append(loc.saved_model)
        try:
            read_saved_model(loc.saved_model)
        except CheckpointError as exc:
            report.add_error(exc, loc.saved_model)
    return report


# -- V1 and Keras: no per-tensor checksums ---------------------------------------------------
def _verify_v1(loc: Location, report: VerifyReport, progress: ProgressFn | None) -> None:
    for path in shard_files(loc.prefix):  # every shard of a sharded V1 checkpoint
        report.files.append(path)
        data = map_file(path)
        try:
            walk_table(data, path, report)
        finally:
            close_map(data)
    clean = not report.problems
    if clean:  # otherwise the reader would only stop at the problem already reported
        _read_all(loc, report, progress)


def _read_all(loc: Location, report: VerifyReport, progress: ProgressFn | None) -> None:
    """Decodes every tensor (V1 and HDF5 store no per-tensor checksums), after checking a
    ``.keras`` archive's weights member against its zip CRC-32: a mismatch is one problem,
    which every value of the member would repeat."""
    if not report.files:
        report.files.append(loc.prefix)
    try:
        ckpt = Checkpoint(loc, verify=True, meta=False)
    except CheckpointError as exc:
        report.add_error(exc, loc.prefix)
        return
    with ckpt:
        if loc.format == "keras" and ckpt.reader.config is None:
            # Keras refuses such an archive; the weights themselves are read as stored.
            report.add(loc.prefix, None, "no config.json in the archive: Keras cannot load it")
        if loc.format in ("h5", "keras"):
            try:
                report.bytes += ckpt.reader.check_member()
            except CheckpointError as exc:
                report.add_error(exc, loc.prefix)
                return
        names = ckpt.keys()
        for i, name in enumerate(names):
            try:
                ckpt.tensor(name)
                report.tensors += 1
            except CheckpointError as exc:
                report.add_error(exc, loc.prefix, name)
            if progress:
                progress(i + 1, len(names))
