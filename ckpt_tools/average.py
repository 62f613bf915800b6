"""Average several checkpoints of one run (tensor2tensor/fairseq-style), EMA-aware.

Every floating-point variable is averaged element-wise over the inputs (accumulated in float64,
written in its stored dtype); integer, boolean and string tensors and step counters are copied
from the newest input. With ``ema=True`` only the EMA shadows are averaged (raw weights come from
the newest input), and ``bake=True`` also writes those averages under the plain variable names,
so an unchanged evaluation script restores them.

Memory stays at one float64 accumulator plus one memory-mapped view per input for the tensor
being averaged; the output is staged in a hidden directory and renamed into place, like
``restore-ema``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from . import roles as R
from .checkpoint import Checkpoint, open_checkpoint, read_state_file
from .emamap import ema_map
from .errors import CheckpointNotFoundError, EmaError, UnsupportedFormatError
from .formats import dtypes
from .formats._io import is_url, map_file
from .formats._write import Inputs, StagedDir, check_file_name, copy_file, os_errors
from .formats.bundle_writer import BundleWriter, write_state_file

ProgressFn = Callable[[int], None]

# Floating dtypes that are averaged; everything else is copied from the newest input.
_FLOATS = {"float16", "bfloat16", "float32", "float64"}


@dataclass(frozen=True)
class AverageResult:
    """What :func:`average_checkpoints` wrote.

    Attributes:
        prefix: the output checkpoint prefix.
        inputs: the input checkpoint prefixes, oldest first.
        averaged: keys whose values are averages over the inputs.
        baked: plain variable key -> the shadow key whose average it holds (``bake=True``).
        copied: keys copied from the newest input unchanged.
        nbytes: tensor bytes written.
    """

    prefix: str
    inputs: list[str]
    averaged: list[str]
    copied: list[str]
    nbytes: int
    baked: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"output": self.prefix, "inputs": self.inputs, "averaged": self.averaged,
                "baked": self.baked, "copied": self.copied, "bytes": self.nbytes}


def checkpoints_of_run(run_dir: str | os.PathLike, last: int) -> list[str]:
    """Returns the ``last`` newest checkpoint prefixes of a run directory, oldest first.

    They come from the directory's ``checkpoint`` state file (``all_model_checkpoint_paths``),
    which lists what the Saver or CheckpointManager kept, in save order.

    Raises:
        CheckpointNotFoundError: no state file, or it lists fewer than ``last`` checkpoints.

    Example:
        >>> checkpoints_of_run("fixtures/trainer_v1", 1)  # doctest: +SKIP
        ['fixtures/trainer_v1/model.ckpt-60']
    """
    run_dir = os.fspath(run_dir)
    if last < 1:
        raise ValueError("last must be at least 1")
    listed = read_state_file(run_dir)
    if len(listed) < last:
        raise CheckpointNotFoundError(
            f"{run_dir}: the state file lists {len(listed)} checkpoint(s), fewer than the "
            f"{last} asked for (--last)")
    return listed[-last:]


def average_checkpoints(
    checkpoints: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    *,
    ema: bool = False,
    bake: bool = False,
    name: str | None = None,
    overwrite: bool = False,
    progress: ProgressFn | None = None,
) -> AverageResult:
    """Writes the element-wise average of ``checkpoints`` (oldest first) into ``out_dir``.

    Args:
        checkpoints (`list`): two or more checkpoints of one run (any path ``open_checkpoint``
            takes); the last one is the newest and provides every non-averaged tensor, the
            ``.meta`` graph and the output's name.
        out_dir (`str`): a new directory (or an empty existing one); never an input's directory.
        ema (`bool`, *optional*, defaults to `False`): average only the EMA shadows.
        bake (`bool`, *optional*, defaults to `False`): with ``ema``, also write each averaged
            shadow under its variable's plain name (needs every weight to have a shadow).
        name (`str`, *optional*): output prefix name; default: the newest input's.
        overwrite (`bool`, *optional*, defaults to `False`): replace an existing output checkpoint.
        progress (`callable`, *optional*): called with the number of input bytes consumed.

    Returns:
        `AverageResult`.

    Raises:
        EmaError: the inputs differ in keys, shapes or dtypes (names the variable), or ``ema``
            was asked for and the checkpoints have no shadows.
        UnsupportedFormatError: an input is a Keras file.
        OutputError: the output location is unsafe or exists.

    Example:
        >>> runs = ["run/model.ckpt-800", "run/model.ckpt-1000"]
        >>> average_checkpoints(runs, "avg/")  # doctest: +SKIP
        AverageResult(prefix='avg/model.ckpt-1000', ...)
    """
    if len(checkpoints) < 2:
        raise ValueError("averaging needs at least two checkpoints")
    if bake and not ema:
        raise ValueError("bake=True needs ema=True")
    opened: list[Checkpoint] = []
    try:
        for path in checkpoints:
            opened.append(open_checkpoint(path))
        if is_url(os.fspath(out_dir)):
            return _average_to_url(opened, os.fspath(out_dir), ema, bake, name, overwrite,
                                   progress)
        return _average(opened, os.fspath(out_dir), ema, bake, name, overwrite, progress)
    finally:
        for ckpt in opened:
            ckpt.close()


def _average_to_url(ckpts: list[Checkpoint], url: str, ema, bake, name, overwrite,
                    progress) -> AverageResult:
    """Averages into a local temporary directory, then uploads data shards first and the
    ``.index``, ``.meta`` and ``checkpoint`` state file last (a reader of ``url`` never sees an
    index without its data); the temporary copy is removed either way."""
    import dataclasses
    import tempfile

    from .formats import remote

    url = url.rstrip("/")
    base = name or os.path.basename(ckpts[-1].path)
    remote.check_new(url, [base + ".index"], overwrite=overwrite)
    with tempfile.TemporaryDirectory(prefix="ckpt-average-") as tmp:
        local = os.path.join(tmp, "out")
        result = _average(ckpts, local, ema, bake, name, False, progress)
        remote.upload([os.path.join(local, f) for f in sorted(os.listdir(local))], url,
                      overwrite=overwrite)
    return dataclasses.replace(result, prefix=remote.url_join(url, os.path.basename(
        result.prefix)))


def _check_compatible(ckpts: list[Checkpoint]) -> None:
    newest = ckpts[-1]
    for ckpt in ckpts:
        if ckpt.format not in ("v1", "v2", "object"):
            raise UnsupportedFormatError(
                f"{ckpt.path}: averaging reads TensorFlow checkpoints; this is a {ckpt.format} "
                "Keras file")
    want = newest.entries()
    for ckpt in ckpts[:-1]:
        have = ckpt.entries()
        for key in sorted(set(want) ^ set(have)):
            where = ckpt.path if key in want else newest.path
            raise EmaError(f"{where}: has no variable {key!r}, which "
                           f"{newest.path if key in want else ckpt.path} has; checkpoints of "
                           "different models cannot be averaged")
        for key, entry in want.items():
            other = have[key]
            if (other.dtype, other.shape) != (entry.dtype, entry.shape):
                raise EmaError(
                    f"{ckpt.path}: variable {key!r} is {other.dtype_name}{list(other.shape)} "
                    f"but {entry.dtype_name}{list(entry.shape)} in {newest.path}")


def _plan(newest: Checkpoint, ema: bool, bake: bool) -> tuple[dict[str, str], set[str]]:
    """Returns (output key -> the key whose average it holds, keys to average)."""
    variables = {v.name: v for v in newest.variables()}
    floats = {k for k, v in variables.items() if v.dtype in _FLOATS and v.role != R.STEP}
    if not ema:
        return {}, floats
    shadows = {k for k in floats if variables[k].role == R.EMA}
    if not shadows:
        raise EmaError(f"{newest.path}: has no EMA shadows to average (--ema); average the raw "
                       "weights instead (leave out --ema)")
    if not bake:
        return {}, shadows
    m = ema_map(newest, non_averaged="keep").require_complete()
    source_of = {tgt: src for src, tgt in m.pairs if src != tgt}
    return source_of, shadows


def _average(ckpts, out_dir, ema, bake, name, overwrite, progress) -> AverageResult:
    import numpy as np

    _check_compatible(ckpts)
    newest = ckpts[-1]
    source_of, to_average = _plan(newest, ema, bake)
    name = check_file_name(os.path.basename(newest.path) if name is None else name)
    final = os.path.join(out_dir, name)
    averaged, copied, nbytes = [], [], 0
    # The writer discipline of formats/_write.py, as restore-ema: staged whole beside --out,
    # published with one rename; inputs (state files included) are never replaced.
    from .bake import checkpoint_names

    inputs = Inputs([f for c in ckpts for f in c.input_files()])
    with StagedDir(out_dir, inputs, checkpoint_names(name), overwrite=overwrite) as stage:
        work = stage.path
        prefix = os.path.join(work, name)
        with BundleWriter(prefix, stage.shown) as writer:
            for key, entry in newest.entries().items():
                src = source_of.get(key, key)
                if src in to_average:
                    acc = np.zeros(entry.shape, np.float64)
                    for ckpt in ckpts:
                        _accumulate(acc, ckpt, src)
                        if progress:
                            progress(entry.nbytes)
                    acc /= len(ckpts)
                    value = acc.astype(dtypes.numpy_dtype(entry.dtype, False))
                    del acc
                    averaged.append(key)
                else:
                    value = _read_released(newest, key, entry)
                    if progress:
                        progress(entry.nbytes)
                    copied.append(key)
                nbytes += _add(writer, key, entry, value)
        meta = newest.location.meta_path
        if meta:
            shown_meta = stage.shown(prefix + ".meta")
            if is_url(meta):  # a remote .meta: fetched whole (graphs are small)
                data = map_file(meta)
                with os_errors(shown_meta, "writing"), open(prefix + ".meta", "wb") as f:
                    f.write(data)
            else:  # read errors name the input; write errors (disk full) the output
                copy_file(meta, prefix + ".meta", shown_meta)
        write_state_file(work, name, stage.shown)
        stage.publish()
    return AverageResult(prefix=final, inputs=[c.path for c in ckpts], averaged=averaged,
                         copied=copied, nbytes=nbytes,
                         baked={k: v for k, v in source_of.items() if k in averaged})


# Pieces read per input at a time: the mapped pages of each piece are released as soon as it
# has been added, so resident memory is one float64 accumulator (the tensor being averaged)
# plus one piece per input, whatever the total size of the inputs.
_PIECE = 4 << 20


def _accumulate(acc, ckpt: Checkpoint, key: str) -> None:
    """Adds ``ckpt``'s ``key`` to the float64 ``acc`` piece by piece, unmapping each piece
    once added (a memory-mapped input otherwise stays resident: 3 x 200 MB -> 734 MB)."""
    flat = acc.reshape(-1)
    start = 0
    for piece in ckpt.chunks(key, _PIECE, release=True):
        flat[start:start + piece.size] += piece
        start += piece.size


def _read_released(ckpt: Checkpoint, key: str, entry):
    """``ckpt.tensor(key)`` as an owned copy, its mapped pages released piece by piece."""
    import numpy as np

    if entry.dtype == dtypes.STRING or entry.slices:
        return ckpt.tensor(key)  # strings and partitioned tensors are read whole anyway
    out = None
    start = 0
    for piece in ckpt.chunks(key, _PIECE, release=True):
        if out is None:
            out = np.empty(entry.num_elements, piece.dtype)
        out[start:start + piece.size] = piece
        start += piece.size
    if out is None:
        return ckpt.tensor(key)
    return out.reshape(entry.shape)


def _add(writer: BundleWriter, key: str, entry, value) -> int:
    """Writes ``value`` under ``key``, keeping the newest input's partitioning."""
    if len(entry.slices) > 1 or (entry.slices and not entry.slices[0].is_full(entry.shape)):
        writer.add_partitioned(key, entry.dtype, entry.shape, list(entry.slices))
        for s in entry.slices:
            writer.add_array(key, value[s.index(entry.shape)], slice_of=s)
    else:
        writer.add_array(key, value)
    return int(value.nbytes) if value.dtype != object else entry.nbytes
