"""Where a bake or restore writes, checked before anything is written: the files a checkpoint
output owns in its directory (:func:`checkpoint_names`), its staging (:func:`stage_output`),
a SavedModel output's own files (:func:`saved_model_stage`, :func:`copy_saved_model_files`),
and the ``--out``/``--name``/``--format`` checks of ``restore-ema`` and ``average``. Used by
:mod:`ckpt_tools.bake` and the commands that write checkpoints."""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from .checkpoint import Checkpoint
from .errors import OutputError, UnsupportedFormatError
from .formats._io import is_url, map_file, remove_quietly, temp_name
from .formats._write import (
    Inputs,
    check_file_name,
    check_out_value,
    checkpoint_file_kind,
    copy_file,
    copy_tree,
    os_errors,
    physical,
    replace,
)
from .formats.savedmodel import SAVED_MODEL_EXTRAS, SAVED_MODEL_FILES, VARIABLES_PREFIX
from .formats.staged_dir import StagedDir
from .h5_out_name import refuse_keras3_weights_name
from .restored_record import RECORD_SUFFIX as RESTORED_RECORD


def checkpoint_names(name: str) -> Callable[[str], bool]:
    """Returns a predicate on file names: the files a checkpoint ``name`` written into a
    directory consists of (index, data shards, ``.meta``, the ``checkpoint`` state file, and
    restore-ema's record of its statements, :mod:`~ckpt_tools.restored_record`)."""
    data = re.compile(re.escape(name) + r"\.data-\d{5}-of-\d{5}")

    def owned(fname: str) -> bool:
        return (fname in (name + ".index", name + ".meta", "checkpoint",
                          name + RESTORED_RECORD)
                or data.fullmatch(fname) is not None)

    return owned


def saved_model_source(ckpt: Checkpoint) -> str | None:
    """Returns the SavedModel directory ``ckpt`` was opened from, or ``None``."""
    sm = ckpt.location.saved_model
    return os.path.dirname(sm) if sm else None


def check_saved_model_options(ckpt: Checkpoint, name, drop_slots, strip, add) -> None:
    """Refuses options a SavedModel output cannot honour (a no-op for other inputs).

    Raises:
        UnsupportedFormatError: naming the option.
    """
    if (strip or add) and ckpt.objects is not None and not saved_model_source(ckpt):
        # A TF2 checkpoint's object graph names every key it restores: re-scoped keys are read
        # by nothing, and tf.train.Checkpoint.read of the output fails (review-17-attack-r38 F7)
        raise UnsupportedFormatError(
            f"{ckpt.path}: --strip-scope/--add-scope (strip_scope/add_scope) cannot apply to a "
            "TF2 checkpoint output, whose object graph names every key under its stored "
            "name; leave it out (tf.train.Checkpoint restores by object, whatever the scope), "
            "or name the weights ckpt export writes with --rename (--format h5 keeps the "
            "object paths, so it is refused there too)")
    if not saved_model_source(ckpt):
        return
    # A SavedModel's graph restores every variable by its stored key from variables/variables:
    # a renamed prefix, re-scoped keys or dropped slots would make tf.saved_model.load fail.
    why = ("--name (name=)" if name not in (None, "variables") else
           "--strip-scope/--add-scope (strip_scope/add_scope)" if strip or add else
           "--slots drop (drop_slots=True)" if drop_slots else None)
    if why:
        raise UnsupportedFormatError(
            f"{ckpt.location.saved_model}: {why} cannot apply to a SavedModel output, whose "
            "graph loads every variable under its stored name from variables/variables; "
            "leave it out, or write weights with "
            + ("ckpt export --rename" if strip or add else "--format h5 or ckpt export"))


def _saved_model_names(fname: str) -> bool:
    """The names a SavedModel output owns in its directory (folders included)."""
    return (fname in SAVED_MODEL_FILES or fname in SAVED_MODEL_EXTRAS
            or fname == os.path.dirname(VARIABLES_PREFIX))


def saved_model_stage(out_dir: str, inputs: Inputs, overwrite: bool) -> StagedDir:
    """Returns the staging directory of a SavedModel output in ``out_dir`` (it owns
    ``saved_model.pb``, its extras and ``variables/``), refusing to replace ``inputs``."""
    return StagedDir(out_dir, inputs, _saved_model_names, overwrite=overwrite, owned_dirs=True)


def copy_saved_model_files(saved_model: str, work: str, shown) -> list[str]:
    """Copies what a SavedModel output keeps unchanged from the input's ``saved_model``
    file (its extras, then the graph itself) into directory ``work``.

    Returns:
        the files written.

    Raises:
        WriteError: an OS error, naming ``shown(path)``.
    """
    sm_dir = os.path.dirname(saved_model)
    files = []
    for extra in SAVED_MODEL_EXTRAS:
        src, dst = os.path.join(sm_dir, extra), os.path.join(work, extra)
        if os.path.isdir(src) and not os.path.islink(src):
            files += copy_tree(src, dst, shown)  # links stay links, never followed
        elif os.path.isfile(src):
            files.append(copy_atomic(src, dst, shown))
    files.append(copy_atomic(saved_model, os.path.join(work, os.path.basename(saved_model)),
                              shown))
    return files


def stage_output(ckpt: Checkpoint, out_dir: str, name: str | None, overwrite: bool) -> StagedDir:
    """The staging directory of the output ``bake_ema`` writes into ``out_dir``: a
    SavedModel's (:func:`saved_model_stage`) or checkpoint ``name``'s (default: the input's)."""
    inputs = Inputs(ckpt.input_files())
    if saved_model_source(ckpt):
        return saved_model_stage(out_dir, inputs, overwrite)
    name = check_file_name(ckpt.name if name is None else name)
    from .output_graphs import refuse_held_graph

    refuse_held_graph(out_dir, name)  # another checkpoint's graph as its .meta (r102 F3)
    return StagedDir(out_dir, inputs, checkpoint_names(name), overwrite=overwrite)


def plan_outputs(ckpt: Checkpoint, out_dir: str, name: str | None, overwrite: bool) -> str:
    """Checks the output location (writing nothing) and returns the output prefix (for a
    SavedModel input, ``<out_dir>/variables/variables`` of the SavedModel written there).

    Raises:
        OutputError: ``--name`` is not a plain file name; ``out_dir`` holds an input file (the
            state file that was read included), is not a directory, holds a subdirectory, or
            already holds this checkpoint and not ``overwrite``.
    """
    check_saved_model_options(ckpt, name, False, None, None)
    stage = stage_output(ckpt, out_dir, name, overwrite)
    stage.check()
    if saved_model_source(ckpt):
        return os.path.join(out_dir, VARIABLES_PREFIX)
    return restore_output_path(ckpt, out_dir, name, "v2")


def restore_output_path(ckpt: Checkpoint, out: str, name: str | None, fmt: str) -> str:
    """Where ``restore-ema`` writes: ``<out>/<name>`` (v2 prefix), ``<out>/<name>.h5``, or
    the ``--out`` file itself when it already ends in ``.h5``.

    Raises:
        OutputError: ``--name`` is not a plain file name.
    """
    check_out_value(out, directory=True)
    base = check_file_name(ckpt.name if name is None else name)
    if fmt == "h5":
        return out if out.endswith((".h5", ".hdf5")) else os.path.join(out, base + ".h5")
    return os.path.join(out, base)


_FILE_EXTENSIONS = (".npz", ".safetensors", ".h5", ".hdf5", ".keras")


def check_out_format(out: str, fmt: str, writer: str | None = None) -> None:
    """Checks that ``restore-ema --out`` fits ``--format``: ``v2`` writes a checkpoint
    directory and ``h5`` one ``.h5`` file (or a directory to put it in), so an ``--out`` named
    like a file of another kind (``x.h5`` for v2, ``x.npz`` for h5) is a mistake, not a
    directory name. An existing directory of that name is taken as it is.

    ``writer`` names what writes (``average``) where no ``--format`` option exists.

    Raises:
        OutputError: the extension of ``out`` contradicts ``fmt``, naming both; an ``h5``
            output named ``*.weights.h5`` (Keras reads that name as its own layout).
    """
    by = writer or f"--format {fmt}"

    lower = out.lower().rstrip("/")
    ext = next((e for e in _FILE_EXTENSIONS if lower.endswith(e)), None)
    part = checkpoint_file_kind(out)
    if part is not None and not os.path.isdir(out):  # s3://b/run/model.ckpt-5.index/
        hint = ("name a .h5 file or a directory" if fmt == "h5" else
                "name a directory (--name names the checkpoint in it)")
        raise OutputError(f"{out} is named like {part} but {by} writes "
                          f"{'an HDF5 file' if fmt == 'h5' else 'a checkpoint directory'}; "
                          f"{hint}")
    if fmt == "h5" and not os.path.isdir(out):
        refuse_keras3_weights_name(out, by)
    if ext is None or os.path.isdir(out) or (fmt == "h5" and ext in (".h5", ".hdf5")):
        return
    if fmt == "h5":
        hint = "name a .h5 file or a directory"
    elif ext in (".h5", ".hdf5") and writer is None:
        hint = "pass --format h5 for one HDF5 file, or name a directory"
    else:
        hint = "name a directory (ckpt export writes .npz/.safetensors files)"
    raise OutputError(f"{out} is named like a {ext} file but {by} writes "
                      f"{'an HDF5 file' if fmt == 'h5' else 'a checkpoint directory'}; {hint}")


def check_h5_output(ckpt: Checkpoint, target: str, overwrite: bool) -> None:
    """Checks a ``restore-ema --format h5`` output file without writing anything.

    A checkpoint output never goes into a directory holding an input (the checkpoint or the
    state file that was read), in any format.

    Raises:
        OutputError: as :func:`~ckpt_tools.formats._write.check_file_output`, or the target's
            directory holds an input.
    """
    from .formats._write import check_file_output

    inputs = Inputs(ckpt.input_files())
    inputs.refuse_beside(target, "restored checkpoint")
    directory = os.path.dirname(physical(target))
    if os.path.isdir(directory):
        check_file_output(target, inputs, overwrite)


def copy_atomic(src: str, dst: str, shown) -> str:
    """Copies ``src`` (a local file or a URL) to ``dst`` through a temporary file renamed into
    place; returns ``dst``. Errors name ``shown(dst)`` where writing fails."""
    tmp = temp_name(dst)
    try:
        if is_url(src):  # a remote .meta: fetched whole (graphs are small)
            data = map_file(src)
            with os_errors(shown(dst), "writing"), open(tmp, "wb") as f:
                f.write(data)
        else:  # read errors name the input; write errors (disk full) the output
            copy_file(src, tmp, shown(dst))
        with os_errors(shown(dst), "renaming into place"):
            replace(tmp, dst)
    except BaseException:
        remove_quietly(tmp)
        raise
    return dst
