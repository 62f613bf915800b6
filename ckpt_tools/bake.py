"""Write an "EMA-baked" checkpoint: plain variable names hold the averaged values.

An unmodified evaluation script (plain ``Saver().restore`` or ``tf.train.load_checkpoint``) then
evaluates with EMA weights. Tensors are copied as stored bytes, one at a time in bounded chunks,
with their CRC32C verified on the way, so the output is bit-identical to the shadows and peak
memory stays at one chunk no matter how large the checkpoint is.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

from . import roles as R
from .checkpoint import Checkpoint, open_checkpoint
from .emamap import EmaMap, ema_map, rescope
from .errors import EmaError, OutputError
from .formats import dtypes
from .formats._io import temp_name
from .formats.bundle import data_path
from .formats.bundle_writer import BundleWriter, write_state_file


@dataclass(frozen=True)
class BakeResult:
    """What :func:`bake_ema` wrote.

    Attributes:
        prefix: the output checkpoint prefix.
        files: every file written.
        replaced: output key -> the shadow key whose value it now holds.
        copied: number of tensors copied unchanged.
        dropped: input keys not written.
        nbytes: tensor bytes written.
        ema_map: the map used.
    """

    prefix: str
    files: list[str]
    replaced: dict[str, str]
    copied: int
    dropped: list[str]
    nbytes: int
    ema_map: EmaMap
    warnings: list[str] = field(default_factory=list)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def plan_outputs(ckpt: Checkpoint, out_dir: str, name: str | None, overwrite: bool) -> str:
    """Checks the output location and returns the output prefix.

    Raises:
        OutputError: if the output would overwrite an input file or an existing checkpoint.
    """
    name = name or ckpt.name
    if not name or "/" in name:
        raise OutputError(f"invalid output checkpoint name {name!r}")
    prefix = os.path.join(out_dir, name)
    in_dir = os.path.dirname(os.path.abspath(ckpt.path))
    if os.path.isdir(out_dir) and _same_file(out_dir, in_dir):
        raise OutputError(
            f"{out_dir}: is the input checkpoint's directory; refusing to write there (its "
            "'checkpoint' state file and checkpoint would be replaced); choose another --out")
    outputs = [prefix + ".index", data_path(prefix, 0, 1), prefix + ".meta",
               os.path.join(out_dir, "checkpoint")]
    for out in outputs:
        for src in ckpt.files():
            if _same_file(out, src):
                raise OutputError(f"{out}: is an input file; refusing to overwrite it")
        if os.path.exists(out) and not overwrite:
            raise OutputError(f"{out}: already exists (pass --force / overwrite=True to replace)")
    return prefix


def bake_ema(
    checkpoint: str | os.PathLike | Checkpoint,
    out_dir: str | os.PathLike,
    *,
    name: str | None = None,
    overwrite: bool = False,
    verify: bool = True,
    drop_slots: bool = False,
    progress: Callable[[int], None] | None = None,
    **map_options,
) -> BakeResult:
    """Writes a copy of ``checkpoint`` in which every averaged variable holds its EMA value.

    Everything else (shadows included, so EMA-aware scripts keep working) is copied unchanged,
    together with the ``.meta`` graph and a ``checkpoint`` state file.

    Args:
        checkpoint: input checkpoint (path or open :class:`Checkpoint`).
        out_dir: output directory (created if missing; must not be the input's directory).
        name: output prefix name; default: the input's (``model.ckpt-1000``).
        overwrite: replace existing output files (never input files).
        verify: check each tensor's CRC32C while copying.
        drop_slots: leave optimizer slots out of the output.
        progress: called with the number of bytes copied, as copying proceeds.
        **map_options: passed to :func:`ckpt_tools.ema_map` (``ema_name``, ``include``,
            ``exclude``, ``strip_scope``, ``add_scope``, ``allow_missing``, ``use_meta``).

    Returns:
        `BakeResult`.

    Raises:
        EmaError: if shadows are missing (unless ``allow_missing``) or do not match their
            variable's shape/dtype.
        OutputError: if the output location is unsafe or unwritable.

    Example:
        >>> bake_ema("train/", "train_ema/")  # doctest: +SKIP
        BakeResult(prefix='train_ema/model.ckpt-1000', ...)
    """
    out_dir = os.fspath(out_dir)
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else open_checkpoint(checkpoint)
    try:
        return _bake(ckpt, out_dir, name, overwrite, verify, drop_slots, progress, map_options)
    finally:
        if not isinstance(checkpoint, Checkpoint):
            ckpt.close()


def _bake(ckpt, out_dir, name, overwrite, verify, drop_slots, progress, map_options):
    m = ema_map(ckpt, slots="keep", non_averaged="keep", **map_options).require_complete()
    strip, add = map_options.get("strip_scope"), map_options.get("add_scope")
    source_of = {tgt: src for src, tgt in m.pairs}
    if not any(src != tgt for tgt, src in source_of.items()):
        raise EmaError(f"{ckpt.path}: nothing to bake: no variable has an EMA shadow")
    entries = ckpt.entries()
    for tgt, src in source_of.items():
        if src == tgt or tgt not in entries:
            continue
        a, b = entries[src], entries[tgt]
        if a.dtype != b.dtype or a.shape != b.shape:
            raise EmaError(
                f"{ckpt.path}: shadow {src!r} ({a.dtype_name}{list(a.shape)}) does not match "
                f"variable {tgt!r} ({b.dtype_name}{list(b.shape)})")
    prefix = plan_outputs(ckpt, out_dir, name, overwrite)
    staged = not os.path.exists(out_dir)
    if staged:
        # A new output directory is filled under a hidden temporary name and renamed into place
        # at the end, so an interruption (even SIGKILL) never leaves a partial checkpoint there.
        parent = os.path.dirname(os.path.abspath(out_dir))
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"{parent}: cannot create the output's parent directory "
                              f"({exc.strerror or exc})") from None
        if not os.access(parent, os.W_OK):
            raise OutputError(f"{parent}: output directory is not writable")
        try:
            work = tempfile.mkdtemp(
                prefix=f".{os.path.basename(os.path.abspath(out_dir))}.tmp-", dir=parent)
        except OSError as exc:
            raise OutputError(f"{out_dir}: cannot create the output directory there "
                              f"({exc.strerror or exc})") from None
    else:
        if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK):
            raise OutputError(f"{out_dir}: not a writable directory")
        work = out_dir
    try:
        result = _write(ckpt, m, work, os.path.basename(prefix), source_of, verify, drop_slots,
                        progress, strip, add)
        if staged:
            os.rename(work, out_dir)
    except BaseException:
        if staged:
            shutil.rmtree(work, ignore_errors=True)
        raise
    files = [os.path.join(out_dir, os.path.basename(f)) for f in result.files]
    return BakeResult(prefix=prefix, files=files, replaced=result.replaced,
                      copied=result.copied, dropped=result.dropped, nbytes=result.nbytes,
                      ema_map=m, warnings=result.warnings)


def _write(ckpt, m, work, name, source_of, verify, drop_slots, progress, strip, add):
    """Writes the baked checkpoint into directory ``work``; the index is published last."""
    prefix = os.path.join(work, name)
    entries = ckpt.entries()
    variables = {v.name: v for v in ckpt.variables()}
    replaced, dropped, warnings = {}, [], []
    copied = nbytes = 0
    renamed = bool(strip or add)
    meta_src = ckpt.location.meta_path
    if meta_src and renamed:
        warnings.append("keys were re-scoped, so the .meta graph (which uses the old names) "
                        "was not copied")
    with BundleWriter(prefix) as writer:
        for key in entries:
            if drop_slots and variables[key].role == R.OPTIMIZER_SLOT:
                dropped.append(key)
                continue
            src = source_of.get(key, key)
            out_key = rescope(key, strip, add) if renamed else key
            nbytes += _copy_tensor(ckpt, writer, src, out_key, verify, progress)
            if src != key:
                replaced[out_key] = src
            else:
                copied += 1
        files = []
        if meta_src and not renamed:  # before the index: a present .index means "complete"
            files.append(_copy_atomic(meta_src, prefix + ".meta"))
        files += writer.finish()
    files.append(write_state_file(work, name))
    return BakeResult(prefix=prefix, files=files, replaced=replaced, copied=copied,
                      dropped=dropped, nbytes=nbytes, ema_map=m, warnings=warnings)


def _copy_tensor(ckpt: Checkpoint, writer: BundleWriter, src: str, out_key: str, verify: bool,
                 progress) -> int:
    entry = ckpt.entry(src)
    reader = ckpt.reader
    if reader.format == "v2":  # stored bytes can be copied as they are
        if entry.dtype == dtypes.STRING and verify:
            # A string entry's CRC covers its decoded lengths, not its stored bytes: let the
            # reader check it, then copy the bytes as they are.
            ckpt.tensor(src)
            verify = False
        parts = [(entry, None)]
        if entry.slices:
            parts = [(sub, s) for s, sub in reader.slice_entries(src)]
            writer.add_partitioned(out_key, entry.dtype, entry.shape, list(entry.slices))
        total = 0
        for sub, tslice in parts:
            path = data_path(reader.prefix, sub.shard_id, reader.num_shards)
            writer.add_stream(out_key, sub.dtype, sub.shape, path, sub.offset, sub.stored_bytes,
                              sub.crc32c, slice_of=tslice, verify=verify, progress=progress)
            total += sub.stored_bytes
        return total
    array = ckpt.tensor(src)
    writer.add_array(out_key, array)
    if progress:
        progress(array.nbytes)
    return array.nbytes


def _copy_atomic(src: str, dst: str) -> str:
    tmp = temp_name(dst)
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return dst
