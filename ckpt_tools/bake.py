"""Write an "EMA-baked" checkpoint: plain variable names hold the averaged values.

An unmodified evaluation script (plain ``Saver().restore`` or ``tf.train.load_checkpoint``) then
evaluates with EMA weights. Tensors are copied as stored bytes, one at a time in bounded chunks,
with their CRC32C verified on the way, so the output is bit-identical to the shadows and peak
memory stays at one chunk no matter how large the checkpoint is (those writes:
:mod:`~ckpt_tools.bake_tensors`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from dataclasses import replace as with_fields

from . import roles as R
from .bake_marks import left_raw, own_doubt, read_keys, written_mark
from .bake_outputs import (
    check_h5_output,
    check_saved_model_options,
    copy_atomic,
    copy_saved_model_files,
    restore_output_path,
    saved_model_source,
    stage_output,
)
from .bake_tensors import baked_bytes, raw_left_out, write_baked
from .checkpoint import Checkpoint
from .emamap import EmaMap, ema_map, rescope
from .errors import EmaError
from .formats._write import (
    make_parents,
    os_errors,
    physical,
    remove_parents,
)
from .formats.bundle_writer import BundleWriter, write_state_file
from .formats.savedmodel import VARIABLES_PREFIX
from .no_meta_mark import recorded, silenced, written_warning
from .raw_shadows import raw_named_keys, raw_named_warning
from .rescope_clash import refuse_rescope_clash
from .restored_record import recorded_statements, write_record
from .save_op import graph_named
from .saved_swaps import plain_keys_of
from .stated_open import opened_stated, refuse_raw_statement, take_statements
from .tools_mark import add_mark
from .wording import agreeing, counted


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
        assumed: what the pairing takes for granted that the file cannot prove (a Keras
            file's ``fit_order``, ``not_swapped``: :mod:`~ckpt_tools.keras_assumed`).
    """

    prefix: str
    files: list[str]
    replaced: dict[str, str]
    copied: int
    dropped: list[str]
    nbytes: int
    ema_map: EmaMap
    warnings: list[str] = field(default_factory=list)
    saved_model: str | None = None  # the output SavedModel directory, for a SavedModel input
    assumed: list[str] = field(default_factory=list)


#: Why ``--slots drop`` writes no ``.meta`` (review-13-attack-r22 F9): the graph's Saver
#: restores every variable it saved, the dropped slots too, so ``import_meta_graph(...)``
#: then ``restore()`` of the output would fail on the first missing slot.
DROPPED_META = ("optimizer slots were dropped, so the .meta graph was not copied: its Saver "
                "restores the slots too and would fail on the output (keep them with --slots "
                "keep, or restore the output with a Saver of the model's variables)")


def dropped_any(ckpt: Checkpoint, drop_slots: bool) -> bool:
    """Whether ``write_baked(..., drop_slots)`` leaves any key out (an optimizer slot)."""
    return drop_slots and any(v.role == R.OPTIMIZER_SLOT for v in ckpt.variables_unwarned())


def bake_ema_h5(ckpt: Checkpoint, out: str, *, name: str | None = None,
                overwrite: bool = False, progress: Callable[[int], None] | None = None,
                progress_total: Callable[[int], None] | None = None, **map_options):
    """``restore-ema --format h5``: the EMA weights as one Keras-style HDF5 file.

    Returns:
        the :class:`~ckpt_tools.export.ExportResult`.

    Raises:
        OutputError, WriteError, EmaError: see :func:`check_h5_output` and
            :func:`~ckpt_tools.export.export_weights`.
    """
    from .export import export_weights
    from .restored_mark import refuse_restored

    refuse_restored(ckpt)  # restore-ema's own Keras output (review-18-attack-r40 F5)
    target = restore_output_path(ckpt, out, name, "h5")
    check_h5_output(ckpt, target, overwrite)
    created = make_parents(os.path.dirname(physical(target)))  # umask modes
    try:
        return export_weights(ckpt, target, fmt="h5", ema=True, overwrite=overwrite,
                              progress=progress, progress_total=progress_total,
                              mark_averages=True, member_hint=(
                                  "; leave it out with --exclude, or write --format v2 "
                                  "(which keeps every name)"), **map_options)
    except BaseException:
        remove_parents(created)  # a failed run leaves no directory it made
        raise


def bake_ema(
    checkpoint: str | os.PathLike | Checkpoint,
    out_dir: str | os.PathLike,
    *,
    name: str | None = None,
    overwrite: bool = False,
    verify: bool = True,
    drop_slots: bool = False,
    progress: Callable[[int], None] | None = None,
    progress_total: Callable[[int], None] | None = None,
    **map_options,
) -> BakeResult:
    """Writes a copy of ``checkpoint`` in which every averaged variable holds its EMA value.

    Everything else (shadows included, so EMA-aware scripts keep working) is copied unchanged,
    together with the ``.meta`` graph and a ``checkpoint`` state file. A SavedModel input gives
    a SavedModel: ``out_dir`` gets a copy of its ``saved_model.pb`` (and ``fingerprint.pb``,
    ``assets/``, ``assets.extra/``) and the baked weights in ``variables/variables.*``, so
    ``tf.saved_model.load(out_dir)`` (or TF1's loader) gives the EMA values.

    Args:
        checkpoint: input checkpoint (path or open :class:`Checkpoint`).
        out_dir: output directory: new (created), or existing and holding no input file nor
            subdirectory (it is then replaced as a whole, keeping its other files).
        name: output prefix name; default: the input's (``model.ckpt-1000``).
        overwrite: replace existing output files (never input files).
        verify: check each tensor's CRC32C while copying.
        drop_slots: leave optimizer slots out of the output.
        progress: called with the number of bytes copied, as copying proceeds.
        progress_total: called once, before ``progress`` is, with the bytes ``progress`` will
            count in all (the tensors written: dropped slots not counted).
        **map_options: passed to :func:`ckpt_tools.ema_map` (``ema_name``, ``include``,
            ``exclude``, ``strip_scope``, ``add_scope``, ``allow_missing``, ``use_meta``;
            the file statements ``use_ema``, ``optimizer``, ``trainable``...).

    Returns:
        `BakeResult`. A Keras file (``.keras``, ``.weights.h5``, ``.h5``) gives a Keras file
        of its kind whose weights are the averages, as ``ckpt restore-ema`` writes it
        (``out_dir`` is a directory or the file's name); what its pairing assumes is in
        ``assumed`` and an :class:`~ckpt_tools.errors.AssumptionWarning`.

    Raises:
        EmaError: if shadows are missing (unless ``allow_missing``) or do not match their
            variable's shape/dtype.
        OutputError: if the output location is unsafe or unwritable, or another process
            writes it first.
        WriteError: an OS error while writing (disk full…); nothing is left behind.
        CorruptCheckpointError: a slice out of range, a checksum mismatch.
        UnsupportedFormatError: for a SavedModel input, with ``name``, ``strip_scope``,
            ``add_scope`` or ``drop_slots`` (its graph needs every variable under its name).

    Example:
        >>> bake_ema("train/", "train_ema/")  # doctest: +SKIP
        BakeResult(prefix='train_ema/model.ckpt-1000', ...)
    """
    out_dir = os.fspath(out_dir)
    # the file statements (use_ema=, optimizer=, trainable=...): the checkpoint opened with them
    refuse_raw_statement("bake_ema", map_options, checkpoint)  # only --raw reads it (r77 F3)
    with opened_stated(checkpoint, take_statements(map_options)) as ckpt:
        if getattr(ckpt.reader, "keras", None) is not None:  # Keras in, Keras out
            from .keras_bake import bake_keras_file

            return bake_keras_file(ckpt, out_dir, name, overwrite, map_options)
        return _bake(ckpt, out_dir, name, overwrite, verify, drop_slots, progress, map_options,
                     progress_total)


def bake_plan(ckpt: Checkpoint, name: str | None, drop_slots: bool,
              map_options: dict) -> tuple[EmaMap, dict[str, str]]:
    """Returns the EMA map a bake uses and ``{output key: key whose value it gets}``.

    Raises:
        EmaError, UnsupportedFormatError: as :func:`bake_ema`.
    """
    strip, add = map_options.get("strip_scope"), map_options.get("add_scope")
    ckpt = ckpt.with_meta(map_options.get("use_meta", True))  # use_meta=False: as if none
    check_saved_model_options(ckpt, name, drop_slots, strip, add)
    if strip:  # every tensor is written, shadows and slots too, under its rescoped name
        kinds = {v.name: v.role for v in ckpt.variables_unwarned()} if drop_slots else {}
        refuse_rescope_clash(ckpt.path, ((k, k, rescope(k, strip, add)) for k in ckpt.entries()
                                         if kinds.get(k) != R.OPTIMIZER_SLOT), strip,
                             "the output holds every tensor of the checkpoint, so strip a "
                             "scope that only one of them has")
    with recorded():  # its output's mark records --no-meta over a doubt (s32l)
        m = ema_map(ckpt, slots="keep", non_averaged="keep", **map_options).require_complete()
    source_of = {tgt: src for src, tgt in m.pairs}
    # A swapping Saver's key named as the variable holds an average too: the variable's own
    # (nothing to do) or, crossed, another's; either way it is written with this one's.
    variables = {v.name: v for v in ckpt.variables_unwarned()}
    for tgt, own in plain_keys_of(ckpt, variables, map_options.get("ema_name")).items():
        src = source_of.get(tgt)
        if src not in (None, own) and own in ckpt.entries() and own not in source_of:
            source_of[own] = src
    from .user_ema_swap import refuse_stored_unasked

    refuse_stored_unasked(ckpt, source_of, map_options)  # --exclude'd weights: written (r132 C1)
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
    return m, source_of


def _bake(ckpt, out_dir, name, overwrite, verify, drop_slots, progress, map_options,
          progress_total=None):
    ckpt = ckpt.with_meta(map_options.get("use_meta", True))  # use_meta=False: as if none
    strip, add = map_options.get("strip_scope"), map_options.get("add_scope")
    sm_dir = saved_model_source(ckpt)
    m, source_of = bake_plan(ckpt, name, drop_slots, map_options)
    raw = raw_left_out(ckpt, source_of, m.filtered_averages) if sm_dir else {}
    if raw:  # left out, saved_model.pb's Saver would fail to restore them; kept, launder them
        k, t = next(iter(raw.items()))
        raise EmaError(f"{ckpt.path}: {counted(len(raw), 'key')} named as averages "
                       f"{agreeing(len(raw), 'holds', 'hold')} their "
                       f"variables' raw values, e.g. {k} (written from {t} by the "
                       "saved_model.pb's saver), and a SavedModel output must keep every key "
                       "its Saver restores: restore the averages into a checkpoint instead "
                       "(the checkpoint's prefix as input is refused the same way; export them "
                       "with ckpt export)")
    # The whole checkpoint is staged in a hidden sibling directory and published with one
    # rename (see formats/_write.py): readers see the old complete --out or the new one.
    with stage_output(ckpt, out_dir, name, overwrite) as stage:
        if sm_dir:
            prefix = os.path.join(out_dir, VARIABLES_PREFIX)
            result = _write_saved_model(ckpt, m, stage.path, source_of, verify, progress,
                                        stage.shown, progress_total)
        else:
            prefix = restore_output_path(ckpt, out_dir, name, "v2")
            result = _write(ckpt, m, stage.path, os.path.basename(prefix), source_of, verify,
                            drop_slots, progress, strip, add, stage.shown,
                            progress_total=progress_total)
        files = [os.path.join(out_dir, os.path.relpath(f, stage.path)) for f in result.files]
        stage.publish()
    return BakeResult(prefix=prefix, files=files, replaced=result.replaced,
                      copied=result.copied, dropped=result.dropped, nbytes=result.nbytes,
                      ema_map=m, warnings=result.warnings,
                      saved_model=out_dir if sm_dir else None)


def _write_saved_model(ckpt, m, work, source_of, verify, progress, shown,
                       progress_total=None) -> BakeResult:
    """Writes a SavedModel into the staging directory ``work``: the baked
    ``variables/variables.*``, the unchanged extras, then ``saved_model.pb``."""
    variables = os.path.join(work, os.path.dirname(VARIABLES_PREFIX))
    with os_errors(shown(variables), "creating it"):
        os.mkdir(variables)
    result = _write(ckpt, m, variables, os.path.basename(VARIABLES_PREFIX), source_of, verify,
                    False, progress, None, None, shown, state_file=False,
                    progress_total=progress_total)
    files = list(result.files) + copy_saved_model_files(ckpt.location.saved_model, work, shown)
    return with_fields(result, files=files)


def _write(ckpt, m, work, name, source_of, verify, drop_slots, progress, strip, add, shown, *,
           state_file: bool = True, progress_total=None):
    """Writes the baked checkpoint into directory ``work``; the index is published last."""
    prefix = os.path.join(work, name)
    warnings = []
    renamed = bool(strip or add)
    meta_src = ckpt.location.meta_path
    if ckpt.meta_unread:  # --no-meta: as if none were beside it (a graph not read, which may
        meta_src = None  # be another run's, is not vouched for by being copied)
    if meta_src and renamed:
        warnings.append("keys were re-scoped, so the .meta graph (which uses the old names) "
                        "was not copied")
    raw = raw_left_out(ckpt, source_of, m.filtered_averages)
    if progress_total:  # the bytes written, not the input's (s29g)
        progress_total(baked_bytes(ckpt, source_of, drop_slots, raw))
    with BundleWriter(prefix, shown) as writer:
        replaced, copied, dropped, nbytes = write_baked(ckpt, writer, source_of, verify,
                                                        drop_slots, progress, strip, add,
                                                        leave_out=raw)
        files = []
        if raw:
            warnings.append(raw_named_warning(raw, graph_named(ckpt),
                                              bool(meta_src and not renamed)))
        if meta_src and set(dropped) - set(raw) and not renamed:
            warnings.append(DROPPED_META)
        partial = getattr(ckpt.reader, "partial", {})  # no whole tensor to copy (r29 F3)
        if partial:
            k, what = next(iter(partial.items()))
            warnings.append(
                f"{k} ({what}: an average of only some parts) was not written"
                + (f", nor {len(partial) - 1} more so" if len(partial) > 1 else "")
                + (", so the .meta graph was not copied: its Saver restores it and would fail "
                   "on the output" if meta_src and not renamed and not dropped else ""))
            dropped = [*dropped, *partial]
        # keys its save op proves raw that now hold averages, their variable stored under no
        # key of its own (r56 F2; a swapping Saver's W is stored, and list reads its output
        # as the swap): copied beside them, it would have them read as raw values
        stored = ckpt.entries()
        over = sorted(k for k, t in raw_named_keys(ckpt).items()
                      if source_of.get(k, k) != k and t not in stored)
        if meta_src and not renamed and not dropped and over:
            warnings.append(
                f"{counted(len(over), 'key')} the {graph_named(ckpt)}'s saver wrote from their "
                "variables "
                f"themselves now hold averages (e.g. {over[0]}), so the .meta graph was not "
                "copied: read beside them, its save op says they hold raw values (its Saver "
                "restores the averages into the variables: copy it by hand to use it)")
        elif meta_src and not renamed and not dropped:  # before the index: a present .index
            files.append(copy_atomic(meta_src, prefix + ".meta", shown))  # means "complete"
        read = read_keys(source_of)
        unread = silenced(ckpt)  # --no-meta over a graph or mark doubting it (r107 F3)
        if unread:
            warnings.append(written_warning(unread))
        # in the bundle: no copy loses it (r105 F4); with the digest of the graph written
        # beside it: its .meta, or the saved_model.pb _write_saved_model copies as it was read
        graph = prefix + ".meta" if prefix + ".meta" in files else None
        if not state_file and not ckpt.meta_unread:
            graph = ckpt.location.saved_model
        own = own_doubt(ckpt, source_of, {*raw, *dropped})
        add_mark(writer, written_mark(ckpt, read, unread, graph, own, source_of,
                                      left_raw(ckpt, m, strip, add, source_of), m.ema_name))
        files += writer.finish()
    if state_file:  # a checkpoint (not a SavedModel's variables/): the statements it needs
        record = write_record(prefix, _stated_for(ckpt, prefix + ".meta" in files, read),
                              shown)
        files += [record] if record else []
    if state_file:  # a SavedModel's variables/ has none
        files.append(write_state_file(work, name, shown))
    return BakeResult(prefix=prefix, files=files, replaced=replaced, copied=copied,
                      dropped=dropped, nbytes=nbytes, ema_map=m, warnings=warnings)


def _stated_for(ckpt: Checkpoint, meta_copied: bool, read) -> dict:
    """The statements restore-ema's record keeps for its output (:mod:`.restored_record`):
    ``saver_def_wrote`` only beside the ``.meta`` copied, whose SaverDef it speaks of;
    ``--averages-only`` of the keys ``read`` (:func:`~ckpt_tools.bake_marks.read_keys`)
    only."""
    said = recorded_statements(ckpt, read)
    if not meta_copied:
        said.pop("saver_def_wrote", None)
    return said
