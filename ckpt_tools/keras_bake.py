"""Keras in, Keras out: a Keras weight file whose model weights hold their EMA values.

``ckpt restore-ema`` on a ``.keras``, ``.weights.h5`` or legacy Keras ``.h5`` writes a file of the
same kind that ``model.load_weights`` (or ``keras.models.load_model`` for a ``.keras``) reads
(an unzipped model directory, ``model.save(dir, zipped=False)``, gives the ``.keras`` archive of
the same members, which ``load_model`` reads as it reads the directory):
the HDF5 weights are copied byte for byte, then each trainable weight's dataset is overwritten
with its average (same shape and dtype, so the stored bytes of the average are written as they
are). Everything else (optimizer variables, BatchNormalization statistics, a ``.keras``
archive's ``config.json``, ``metadata.json`` and assets) is kept, so evaluating the output with
its *raw* weights gives the input's EMA accuracy.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from dataclasses import dataclass

import numpy as np

from .checkpoint import Checkpoint
from .errors import CorruptCheckpointError, EmaError, OptionError, OutputError
from .formats._io import remove_quietly
from .formats._write import (
    Inputs,
    atomic_file,
    check_file_name,
    check_file_output,
    check_out_value,
    copy_file,
    os_errors,
)
from .formats.keras.h5_files import ZIP_READ_ERRORS
from .formats.write_locks import hold, release
from .keras_assumed import keras_assumptions, refuse_assumed
from .keras_ema import require_keras_pairing
from .restored_mark import keras_statements, mark_averages, mark_stated, refuse_restored

KERAS_SUFFIXES = (".keras", ".weights.h5", ".h5", ".hdf5")
_WEIGHTS_MEMBER = "model.weights.h5"


@dataclass(frozen=True)
class KerasBakeResult:
    """What :func:`bake_keras_ema` wrote.

    Attributes:
        path: the output file.
        replaced: model weight key -> the EMA copy key whose value it now holds.
        nbytes: bytes of averaged values written.
    """

    path: str
    replaced: dict[str, str]
    nbytes: int


def _model_dir(ckpt: Checkpoint) -> str | None:
    """The unzipped Keras model directory ``ckpt`` was read from, else ``None``."""
    return getattr(ckpt.reader, "model_dir", None)


def _dir_name(directory: str) -> tuple[str, str]:
    """``(parent, name)`` of a directory as typed (``run/m`` -> ``("run", "m")``; ``.`` is
    resolved, so that nothing defaults into the directory itself)."""
    norm = os.path.normpath(directory)
    if os.path.basename(norm) in (".", "..", ""):
        norm = os.path.abspath(norm)
    return os.path.dirname(norm), os.path.basename(norm)


def keras_output_name(ckpt: Checkpoint) -> str:
    """The default output file name: the input's name (same kind of Keras file; an HDF5 file
    named ``x.keras``: ``x.weights.h5`` or ``x.h5``); for an unzipped model directory
    ``run/m``, the archive ``m.keras``."""
    directory = _model_dir(ckpt)
    if directory is not None:
        return _dir_name(directory)[1] + ".keras"
    base = os.path.basename(ckpt.path)
    if _hdf5_named_keras(ckpt):  # named as what it is: Keras cannot load it as a .keras
        return base[: -len(".keras")] + _hdf5_suffixes(ckpt)[0]
    return base


def _hdf5_named_keras(ckpt: Checkpoint) -> bool:
    """Whether the input is an HDF5 file named ``.keras`` (a ``model.weights.h5`` renamed):
    Keras' ``load_model`` cannot read it, nor a copy of it so named (review-21-attack-r54 F4)."""
    return ckpt.reader.format == "h5" and _suffix(os.path.basename(ckpt.path)) == ".keras"


def _hdf5_suffixes(ckpt: Checkpoint) -> tuple[str, ...]:
    """The names Keras reads an HDF5 input's kind of weights file by: ``.weights.h5`` (Keras 3
    ``vars`` groups), else ``.h5`` (legacy ``layer_names``)."""
    return (".weights.h5",) if ckpt.reader.kind == "keras3" else (".h5", ".hdf5")


def keras_default_out(ckpt: Checkpoint) -> str:
    """Where ``restore-ema`` writes a local Keras input's averages without ``--out``: a new
    directory ``<stem>_ema/`` beside the input (``run/model.keras`` ->
    ``run/model_ema/model.keras``). Not a file beside the input: a run directory resolves to
    its newest ``.keras``, which the output must never become, so no output goes into the
    input's own directory.

    Raises:
        OutputError: the input is a URL (no local directory to default to: give ``--out``).
    """
    from .formats._io import is_url

    if is_url(ckpt.path):
        raise OutputError(f"{ckpt.path}: a remote input has no default output; give --out")
    directory = _model_dir(ckpt)
    if directory is not None:  # run/m/ (model.save(dir, zipped=False)) -> run/m_ema/m.keras
        parent, name = _dir_name(directory)
        return os.path.join(parent, f"{name}_ema")
    base = os.path.basename(ckpt.path)
    stem = next((base[:-len(s)] for s in KERAS_SUFFIXES if base.endswith(s) and base != s),
                base)
    return os.path.join(os.path.dirname(ckpt.path), f"{stem}_ema")


def keras_output_path(ckpt: Checkpoint, out: str, name: str | None = None) -> str:
    """Where ``restore-ema`` of a Keras file writes: ``out`` itself when it names a Keras
    file, else ``<out>/<name>`` (default: the input's file name).

    Raises:
        OutputError: ``--out`` is empty, or ``name`` is not a plain file name (no ``/``,
            ``..``, NUL, control characters).
        OptionError: ``out`` (or ``name``) names a Keras file of another kind than the
            input (the output is the input's kind, or a ``.keras`` archive's or model
            directory's ``.weights.h5``: a ``.keras`` archive named ``.h5`` opens nowhere; an
            HDF5 file named ``.keras`` is the ``.weights.h5`` or ``.h5`` it holds),
            ``name`` has no Keras suffix, or ``out`` names a file of another format (``.npz``:
            ``ckpt export`` writes those).
    """
    check_out_value(out, directory=True)
    base = os.path.basename(ckpt.path)
    fits = {".keras": (".keras",), ".weights.h5": (".weights.h5",)}.get(
        _suffix(base), (".h5", ".hdf5"))  # a legacy .h5 (or named otherwise: HDF5 either way)
    if ckpt.reader.format == "keras" or _model_dir(ckpt) is not None:
        fits = (".keras", ".weights.h5")  # the archive, or its model.weights.h5 alone
    elif _hdf5_named_keras(ckpt):  # an HDF5 file, whatever its name says
        fits = _hdf5_suffixes(ckpt)
    if name is not None and out.endswith(KERAS_SUFFIXES):
        raise OptionError(f"--name {name} names the file inside the --out directory, but "
                          f"--out {out} already names the file: give one of them")
    if name is None and out.endswith(_OTHER_FILES):
        raise OptionError(f"--out {out}: restore-ema writes a Keras file (or a directory for "
                          "it); ckpt export writes .npz and .safetensors files")
    if name is not None:
        check_file_name(name)
    given = ("--name", name) if name is not None else ("--out", out)
    if given[1].endswith(KERAS_SUFFIXES) or name is not None:
        if _suffix(given[1]) not in fits:
            # the content follows the input's kind: a .keras archive named .h5 is a file no
            # Keras loader opens
            kind = ("a .keras archive, or its weights alone as a .weights.h5"
                    if fits[0] == ".keras" else f"a {fits[0]} HDF5 file")
            raise OptionError(
                f"{given[0]} {given[1]}: the averages of {base} are written as the same kind "
                f"of file ({kind}), so name it *{' or *'.join(fits)}; for an HDF5 file Keras' "
                "load_weights reads from any input: --format h5")
        if name is None:
            return out
    return os.path.join(out, check_file_name(name or keras_output_name(ckpt)))


_OTHER_FILES = (".npz", ".safetensors", ".index", ".meta", ".pb", ".json")


def _suffix(name: str) -> str | None:
    """The Keras suffix ``name`` ends with, the longest first (``.weights.h5``, not ``.h5``)."""
    return next((s for s in KERAS_SUFFIXES if name.endswith(s)), None)


def check_keras_output(ckpt: Checkpoint, target: str, overwrite: bool) -> Inputs:
    """Checks a Keras output file without writing anything; returns the command's inputs.

    Like every ``restore-ema`` output, it never goes into a directory holding the input.

    Raises:
        OutputError: see :func:`~ckpt_tools.formats._write.check_file_output`, or the
            target's directory holds the input.
    """
    inputs = Inputs(ckpt.input_files())
    inputs.refuse_beside(target, "restored file")
    check_file_output(target, inputs, overwrite, create_parents=True)
    return inputs


def bake_keras_ema(ckpt: Checkpoint, out_path: str, *, overwrite: bool = False,
                   strict: bool = False) -> KerasBakeResult:
    """Writes ``out_path``: a copy of the Keras file ``ckpt`` whose weights are the averages.

    The write follows the writer discipline of ``formats/_write.py``: the input (and its
    directory) is never written, devices/FIFOs/symlinks are never replaced, the file appears
    whole with one rename, concurrent writers: exactly one wins.

    Args:
        ckpt: an open Keras checkpoint (``.keras``, ``.weights.h5`` or Keras ``.h5``).
        out_path: output file; it keeps the input's kind (a ``.keras`` archive stays one, or
            gives its ``model.weights.h5`` alone where ``out_path`` ends in ``.weights.h5``;
            an unzipped model directory's is a ``.keras`` archive of its members when
            ``out_path`` ends in ``.keras``, else its ``model.weights.h5``).
            Missing parent directories are created (and removed again if the write fails).
        overwrite: replace an existing output file (never an input file).
        strict: refuse a pairing that rests on an assumption the file cannot prove
            (:mod:`~ckpt_tools.keras_assumed`), as ``--strict``.

    Returns:
        `KerasBakeResult`.

    Raises:
        EmaError: the file holds no EMA copies, or their pairing is not proven (or, with
            ``strict``, rests on an assumption).
        OutputError: the output exists, is the input or in its directory, is not a regular
            file, or cannot be written there.
        CorruptCheckpointError: a ``.keras`` archive's member fails its CRC-32 (or cannot be
            read); nothing is left behind.
        WriteError: an OS error while writing (disk full…); nothing is left behind.
    """
    layout = getattr(ckpt.reader, "keras", None)
    if layout is None:
        raise EmaError(f"{ckpt.path}: not a Keras weight file")
    ckpt.reader.check_member()  # a damaged archive is exit 4 before any question on pairing
    refuse_restored(ckpt)  # restore-ema's own output: its weights are the averages (r40 F5)
    require_keras_pairing(ckpt)
    assumed = keras_assumptions(ckpt)
    refuse_assumed(ckpt, assumed, strict=strict)  # not_swapped: always
    # the mark carries what the pairing assumed unstated, so the output's readers repeat the
    # note and --strict refuses it as it refuses the input (review-18-attack-r40 F1)
    mark = [a.name for a in assumed]
    inputs = check_keras_output(ckpt, out_path, overwrite)
    replaced = {weight: avg for avg, weight in layout.averages.items() if weight is not None}
    with atomic_file(out_path, inputs, overwrite=overwrite, create_parents=True) as tmp:
        if ckpt.format == "keras":
            try:
                nbytes = (_write_member if out_path.endswith(".weights.h5") else
                          _write_archive)(ckpt, replaced, tmp, out_path, mark)
            except ZIP_READ_ERRORS as exc:  # another member (an asset) fails its CRC-32
                raise CorruptCheckpointError(f"cannot read the archive: {exc}",
                                             path=ckpt.path) from None
        elif _model_dir(ckpt) is not None and out_path.endswith(".keras"):
            nbytes = _write_dir_archive(ckpt, replaced, tmp, out_path, mark)
        else:
            copy_file(ckpt.path, tmp, out_path)
            nbytes = _overwrite(ckpt, replaced, tmp, mark)
    return KerasBakeResult(out_path, replaced, nbytes)


def bake_keras_file(ckpt: Checkpoint, out_dir: str, name: str | None, overwrite: bool,
                    map_options: dict):
    """:func:`ckpt_tools.bake_ema` of a Keras file: Keras in, Keras out (issue 11 item 6), as
    ``ckpt restore-ema`` writes it (never a TF bundle named ``model.keras.index``); what the
    pairing assumes is issued as an :class:`~ckpt_tools.errors.AssumptionWarning`.

    Args:
        ckpt: an open Keras checkpoint.
        out_dir, name: the output, as ``restore-ema``'s ``--out`` and ``--name``
            (:func:`keras_output_path`).
        map_options: ``bake_ema``'s; only ``strict`` and ``not_swapped`` apply to a Keras
            file.

    Returns:
        `BakeResult`: ``prefix`` and ``files`` name the Keras file written; ``assumed``.

    Raises:
        OptionError: a map option other than ``strict`` (a Keras file's weights are replaced
            by their EMA copies as a whole).
        EmaError, OutputError, WriteError: as :func:`bake_keras_ema`.
    """
    from .bake import BakeResult
    from .emamap import ema_map
    from .keras_assumed import warn_assumed

    given = [k for k, v in map_options.items() if v and k not in ("strict", "not_swapped")]
    if map_options.get("not_swapped"):
        ckpt.not_swapped = True  # the statement (ema_map's not_swapped=)
    if given:
        raise OptionError(f"{ckpt.path}: {given[0]}= does not apply to a Keras file: every "
                          "weight with an EMA copy gets it, as ckpt restore-ema writes it")
    strict = bool(map_options.get("strict"))
    refuse_restored(ckpt)  # restore-ema's own output (r40 F5)
    require_keras_pairing(ckpt)
    assumed = keras_assumptions(ckpt)
    refuse_assumed(ckpt, assumed, strict=strict)  # not_swapped: always
    warn_assumed(ckpt, assumed, stacklevel=4)  # warn_assumed, here, bake_ema, its caller
    m = ema_map(ckpt, slots="keep", non_averaged="keep")
    target = keras_output_path(ckpt, out_dir, name)
    result = bake_keras_ema(ckpt, target, overwrite=overwrite, strict=strict)
    return BakeResult(prefix=result.path, files=[result.path], replaced=dict(result.replaced),
                      copied=0, dropped=[], nbytes=result.nbytes, ema_map=m,
                      assumed=[a.name for a in assumed])


def _overwrite(ckpt: Checkpoint, replaced: dict[str, str], h5_path, assumed: list[str]) -> int:
    """Writes each average's stored bytes into its weight's dataset of the HDF5 copy, and
    marks it as restore-ema's, with what the pairing ``assumed`` (:mod:`.restored_mark`)."""
    import h5py

    total = 0
    with h5py.File(h5_path, "r+") as f:
        for weight, avg in replaced.items():
            ds = f[ckpt.entry(weight).extra["h5path"]]
            value = np.ascontiguousarray(ckpt.tensor(avg))
            if tuple(ds.shape) != value.shape or ds.dtype.itemsize != value.dtype.itemsize:
                raise EmaError(f"{ckpt.path}: {avg} {list(value.shape)} does not fit {weight} "
                               f"{list(ds.shape)}")
            ds[...] = np.frombuffer(value.tobytes(), dtype=ds.dtype).reshape(ds.shape)
            total += value.nbytes
        mark_averages(f, assumed)  # ckpt eval reads it without a statement (r32 F4)
        mark_stated(f, keras_statements(ckpt))  # and what it rested on (r128 F3)
    return total


def _write_archive(ckpt: Checkpoint, replaced: dict[str, str], tmp: str, shown: str,
                   mark: list[str]) -> int:
    """A ``.keras`` zip: every member copied, ``model.weights.h5`` with the averages."""
    weights_tmp = tmp + ".weights.h5"  # beside the temporary: removed with it
    held = None
    try:
        with zipfile.ZipFile(ckpt.path) as zin:
            with zin.open(_WEIGHTS_MEMBER) as src, os_errors(shown, "writing"), \
                    open(weights_tmp, "wb") as dst:
                held = hold(weights_tmp)  # a concurrent writer's sweep leaves it alone
                shutil.copyfileobj(src, dst, 1 << 20)
            nbytes = _overwrite(ckpt, replaced, weights_tmp, mark)
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as zout:
                for info in zin.infolist():
                    if info.filename == _WEIGHTS_MEMBER:
                        zout.write(weights_tmp, _WEIGHTS_MEMBER)
                    else:
                        with zin.open(info) as src, zout.open(info, "w") as dst:
                            shutil.copyfileobj(src, dst, 1 << 20)
    finally:
        release(held)
        remove_quietly(weights_tmp)
    return nbytes


def _write_member(ckpt: Checkpoint, replaced: dict[str, str], tmp: str, shown: str,
                  mark: list[str]) -> int:
    """A ``.keras`` archive's ``model.weights.h5`` alone, with the averages: the file
    ``model.save_weights()`` writes, which ``model.load_weights()`` reads."""
    with zipfile.ZipFile(ckpt.path) as zin, zin.open(_WEIGHTS_MEMBER) as src, \
            os_errors(shown, "writing"), open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return _overwrite(ckpt, replaced, tmp, mark)


def _write_dir_archive(ckpt: Checkpoint, replaced: dict[str, str], tmp: str, shown: str,
                       mark: list[str]) -> int:
    """A ``.keras`` zip of an unzipped model directory, as Keras zips a model: its
    ``metadata.json``, ``config.json``, ``model.weights.h5`` with the averages, and every file
    under ``assets/``."""
    directory = _model_dir(ckpt)
    weights_tmp = tmp + ".weights.h5"  # beside the temporary: removed with it
    held = None
    try:
        with os_errors(shown, "writing"):
            copy_file(ckpt.path, weights_tmp, shown)
            held = hold(weights_tmp)  # a concurrent writer's sweep leaves it alone
            nbytes = _overwrite(ckpt, replaced, weights_tmp, mark)
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as zout:
                for name in ("metadata.json", "config.json"):
                    if os.path.isfile(os.path.join(directory, name)):
                        zout.write(os.path.join(directory, name), name)
                zout.write(weights_tmp, _WEIGHTS_MEMBER)
                assets = os.path.join(directory, "assets")
                for root, dirs, files in os.walk(assets):
                    dirs.sort()
                    for f in sorted(files):
                        full = os.path.join(root, f)
                        zout.write(full, os.path.relpath(full, directory).replace(os.sep, "/"))
    finally:
        release(held)
        remove_quietly(weights_tmp)
    return nbytes
