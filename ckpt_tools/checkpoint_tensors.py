"""Reading a checkpoint's stored tensors by key: its entries, values and streamed chunks.

:class:`StoredTensors` is the part of :class:`~ckpt_tools.checkpoint.Checkpoint` that maps
keys to what the format reader stores (metadata and CRC-checked data); it needs no roles,
no ``.meta`` and no object graph.
"""

from __future__ import annotations

from collections.abc import Iterator

from .errors import VariableNotFoundError
from .formats._io import is_url
from .formats.entry import TensorEntry
from .locate import errors_in
from .variable import shell_word

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    import numpy as np

    from .formats import Reader
    from .locate import Location

# One streamed chunk: CRC-checked, then consumed while it is still in cache. On the 2-core
# bench machine a verified read of 1 GiB (bench/run.py) takes 51 ms in 4 MiB chunks, 54 ms in
# 2 MiB and 57-72 ms in 1 MiB ones (per-chunk Python and thread hand-offs); 8 MiB gains nothing.
CHUNK_BYTES = 4 << 20


class StoredTensors:
    """Mapping-like access to the stored keys and their tensors; a base of
    :class:`~ckpt_tools.checkpoint.Checkpoint`, which opens ``_reader``."""

    _reader: Reader
    path: str
    location: Location
    _fragment_alias: dict[str, str] | None

    def keys(self) -> list[str]:
        """Returns every stored key in storage order: sorted for TensorFlow checkpoints, save
        order for Keras files (slices of partitioned variables are hidden)."""
        return list(self._reader.entries)

    def entries(self) -> dict[str, TensorEntry]:
        """Returns checkpoint key -> :class:`~ckpt_tools.formats.entry.TensorEntry`
        (storage details)."""
        return self._reader.entries

    def stored_key(self, key: str) -> str:
        """Returns the key under which ``key`` (a key TensorFlow saved, or a graph variable's
        checkpoint key) is read: the group's key for one part of a tensor TF1 saved under one
        key per part (``net/w//w/part_0/avg`` -> ``net/w//w/part_*/avg``, see
        :func:`~ckpt_tools.formats.slices.fragment_groups`), else ``key`` itself."""
        alias = self._fragment_alias
        if alias is None:
            alias = self._fragment_alias = {
                m: k for k, e in self._reader.entries.items()
                if e.extra and e.extra.get("fragments") for m in e.extra["fragments"]}
        return alias.get(key, key)

    def __contains__(self, name: str) -> bool:
        return name in self._reader.entries

    def __len__(self) -> int:
        return len(self._reader.entries)

    def __iter__(self):
        return iter(self._reader.entries)

    def entry(self, name: str) -> TensorEntry:
        try:
            return self._reader.entries[name]
        except KeyError:
            raise self._missing(name) from None

    def _missing(self, name: str) -> VariableNotFoundError:
        import difflib

        close = difflib.get_close_matches(name, self._reader.entries, n=3)
        hint = f"; did you mean {', '.join(map(shell_word, close))}?" if close else ""
        return VariableNotFoundError(f"{self.path}: no variable named {name!r}{hint}")

    def tensor(self, name: str) -> np.ndarray:
        """Returns the value stored under ``name`` as a NumPy array.

        Numeric tensors are read-only views over the memory-mapped data file (copy them to
        modify); strings come back as an ``object`` array of ``bytes``, like TensorFlow's.

        Raises:
            VariableNotFoundError: if ``name`` is not stored.
            CorruptCheckpointError: if the data fails its checksum or lies outside the file.

        Example:
            >>> from ckpt_tools import open_checkpoint
            >>> with open_checkpoint("fixtures/linear_v2") as ckpt:
            ...     ckpt.tensor("W/ExponentialMovingAverage").shape
            (1,)
        """
        if name not in self._reader.entries:
            raise self._missing(name)
        with errors_in(self.path):
            return self._reader.read(name)

    def plan_reads(self, names: list[str]) -> None:
        """Announces the tensors about to be read, in the order they will be: a checkpoint
        behind a URL then fetches the next ones ahead of each read, in a few large range
        requests instead of one per tensor. A no-op for local files and other formats.

        Raises:
            CheckpointNotFoundError: a data shard of a remote checkpoint is missing.
        """
        plan_reads = getattr(self._reader, "plan_reads", None)
        if plan_reads is not None and is_url(self.location.prefix):
            with errors_in(self.path):
                plan_reads(list(names))

    def chunks(self, name: str, max_bytes: int = CHUNK_BYTES, *, verify: bool | None = None,
               release: bool = False) -> Iterator[np.ndarray]:
        """Yields the flat values of ``name`` in chunks of at most ``max_bytes`` (one element
        at least), for one streaming pass over a tensor of any size.

        For TensorFlow bundles the chunks are read-only views of the mapped data file, each
        CRC-checked just before it is yielded (the consumer then reads it from cache) and the
        checksum verdict comes with the last one; other formats read the tensor whole and
        slice it. Do not act on what was computed from the chunks until the iterator is done.
        ``verify=False`` skips the CRC (for a second pass over bytes already checked);
        ``None`` follows ``open_checkpoint(verify=...)``. ``release=True`` unmaps each chunk
        of a TensorFlow bundle once the next is asked for, so resident memory stays at one
        chunk (for writers that stream a whole checkpoint).

        Raises:
            VariableNotFoundError: if ``name`` is not stored.
            CorruptCheckpointError: if the data fails its checksum (at the end) or lies outside
                the file.
        """
        if name not in self._reader.entries:
            raise self._missing(name)
        with errors_in(self.path):
            iter_chunks = getattr(self._reader, "iter_chunks", None)
            stream = (iter_chunks(name, max_bytes, verify, release) if iter_chunks is not None
                      else None)
            if stream is None:
                flat = self._reader.read(name).reshape(-1)
                step = max(1, max_bytes // max(flat.dtype.itemsize, 1))
                stream = (flat[i : i + step] for i in range(0, flat.size, step))
            yield from stream
