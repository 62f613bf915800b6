"""Writing an average: which keys are averaged, and the streamed, staged output.

:func:`plan_average` decides what each output key holds (an average over the inputs, or the
newest input's value); :func:`write_average` writes it tensor by tensor
(:mod:`~ckpt_tools.average_tensors`) under the writer discipline of ``formats/_write.py``. The
entry points are in :mod:`ckpt_tools.average`; what they return in
:mod:`~ckpt_tools.average_result`.
"""

from __future__ import annotations

import os

from . import roles as R
from .average_carried import record_name, removable, write_record
from .average_doubt import carry_doubt, doubt_to_carry
from .average_held import refuse_keys_held_otherwise
from .average_layouts import refuse_resumed_layouts
from .average_own_bake import graphs_disagree, own_bake_sources
from .average_renamed_doubt import refuse_renamed_doubt
from .average_result import AverageResult
from .average_shadows import ema_shadows
from .average_tensors import accumulate, add_tensor, read_released
from .average_unknown import check_unknown_carried, unknown_to_carry
from .average_weights import output_weights, refuse_mixed_weights
from .checkpoint import Checkpoint
from .emamap import ema_map, proven_pairs
from .errors import EmaError, UnsupportedFormatError
from .formats import dtypes
from .formats._io import is_url, map_file
from .formats._write import Inputs, check_file_name, copy_file, os_errors
from .formats.bundle_writer import BundleWriter, write_state_file
from .formats.savedmodel import VARIABLES_PREFIX
from .formats.staged_dir import StagedDir
from .no_meta_mark import recorded, silenced, written_warning
from .no_meta_own import refuse_own_graph_swap, refuse_strict_mark
from .output_graphs import refuse_held_graph
from .own_graph_mark import rewrites_misleading
from .wording import counted
from .written_roles import written_shadows, written_variables

# Floating dtypes that are averaged (accumulated in float64); complex ones are averaged too
# (in complex128). Everything else is copied from the newest input: copying a float type left
# out here would hand back the newest raw value as "the average" with exit 0.
_FLOATS = {"float16", "bfloat16", "float32", "float64", "float8_e5m2", "float8_e4m3fn",
           "float8_e4m3fnuz", "float8_e4m3b11fnuz", "float8_e5m2fnuz"}
_COMPLEX = {"complex64", "complex128"}
_AVERAGED = _FLOATS | _COMPLEX
# Floats that are copied, not averaged: only step-dependent training state the file proves
# (roles.proven_training_state: the global step, an optimizer's own variables such as its
# learning rate, iterations, beta powers, loss scale; a root's save_counter), so the output is
# one state training actually had. Names alone prove nothing: a trained weight named
# learning_rate, decay or step is averaged (averaging a learning rate is harmless, copying a
# weight is a silently wrong average).


def bytes_to_count(ckpts: list[Checkpoint], upload: bool) -> int:
    """Returns the bytes an average of ``ckpts`` reports to its ``progress``: each input's
    tensors, and with ``upload`` (a URL output) the output's (about one input's)."""
    one = sum(e.nbytes for e in ckpts[-1].entries().values())
    return one * (len(ckpts) + upload)


def check_compatible(ckpts: list[Checkpoint]) -> None:
    newest = ckpts[-1]
    want = newest.entries()
    refuse_resumed_layouts(ckpts)  # before "saved before the averages were kept?" (r113 F3)
    for ckpt in ckpts[:-1]:
        have = ckpt.entries()
        _refuse_without_averages(ckpt, newest, sorted(set(want) - set(have)))
        _refuse_without_averages(newest, ckpt, sorted(set(have) - set(want)))
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


def _refuse_without_averages(ckpt: Checkpoint, other: Checkpoint, missing: list[str]) -> None:
    """An input that lacks only averages another holds (a run's first checkpoints, saved
    before the EMA was kept) is said to be that, not another model (review-16-attack-r32
    F12): leaving it out is the remedy, never averaging raw weights in for its averages."""
    if not missing:
        return
    averages = {v.name for v in other.variables_unwarned() if v.role == "ema"}
    if not all(k in averages for k in missing):
        return
    held = sum(1 for k in averages if k in ckpt.entries())
    raise EmaError(f"{ckpt.path}: holds {'none' if not held else f'only {held}'} of the "
                   f"{counted(len(averages), 'EMA average')} {other.path} holds (no {missing[0]!r}"
                   f"{f' and {len(missing) - 1} more' if len(missing) > 1 else ''}): saved "
                   "before the averages were kept? leave it out of the checkpoints to average")


def plan_average(newest: Checkpoint, ema: bool, bake: bool,
          pairing: dict | None = None) -> tuple[dict, set[str], list[str], dict]:
    """Returns (output key -> the key whose average it holds, keys to average, what the
    ``bake`` pairing assumes: :attr:`ckpt_tools.emamap.EmaMap.assumed`, the keys read against
    their names: :func:`~ckpt_tools.average_shadows.ema_shadows`).

    Floating-point tensors are averaged unless :func:`ckpt_tools.roles.proven_training_state`
    proves them step-dependent state, which is copied even when stored as floats: counters
    (``global_step``, ``save_counter``, an optimizer's ``iterations``, TF1 Adam's beta powers
    the ``.meta`` lists as non-trainable), the zero-debias ``biased``/``local_step`` pair of a
    ``zero_debias`` average, which must stay consistent with each other, an optimizer's own
    hyperparameters and loss scale (``optimizer/learning_rate``). A variable the ``.meta``
    lists as trainable, or one only its name calls state, is averaged. With ``bake`` each
    plain name gets the shadow ``ckpt map`` pairs it with (``pairing``: ``ema_name``,
    ``apply_order``, ``use_meta``), only where the newest input proves it; with
    ``allow_missing`` a weight without a shadow keeps the newest input's raw value.

    Raises:
        EmaError: no shadows; with ``bake``, a weight without a shadow (unless
            ``allow_missing``), or a pairing the file
            does not prove (``UnprovenPairingError``, naming the deciding option).
    """
    newest = newest.with_meta((pairing or {}).get("use_meta", True))  # False: as if none
    variables = {v.name: v for v in newest.variables_unwarned()}
    powers = R.tf1_adam_powers(variables.values()) if newest.meta is None else frozenset()
    # a renaming Saver's key (beta1_power/var) is asked about as the graph variable its save
    # op wrote into it, as a plain Saver's key is (review-25-attack-r84 F1)
    written = written_variables(newest)
    floats = {k for k, v in variables.items()
              if v.dtype in _AVERAGED and not R.proven_training_state(
                  written.get(k, k), v.role, newest.meta, newest.objects, powers)}
    if not ema:
        # A Keras 3 model.export()'s second copy of a weight (variables/N beside
        # _all_variables/M, listed once) is a variable of its own, the one its serving
        # functions read: averaged as the first is, never copied from the newest
        # (review-17-user-u19 F0).
        return {}, floats | {a for a, k in newest.aliases().items() if k in floats}, [], {}
    shadows, read_otherwise = ema_shadows(newest, variables, floats)
    if not shadows:  # an evaluation graph's re-save holds no raw weights (r126 N3)
        from .resaved_named import resaved_no_shadow

        said = resaved_no_shadow(newest)
        raise EmaError(f"{newest.path}: has no EMA shadows to average (--ema); " + (
            said or "average the raw weights instead (leave out --ema)"))
    # a key the save op wrote from a shadow but not read as one (a renaming Saver's key whose
    # owner no key holds raw) would be copied from the newest as if no average: refused
    # rather than hand back part of the model's averages from one checkpoint (r84 F2)
    unread = sorted(k for k in written_shadows(newest) if k in variables and k not in shadows)
    if unread:
        raise EmaError(f"{newest.path}: {unread[0]!r} holds the EMA average "
                       f"{written_shadows(newest)[unread[0]]!r} (the .meta's save op wrote it) "
                       "but is not read as an average, so --ema would copy it from the newest "
                       "checkpoint unaveraged; average the raw weights instead (leave out --ema)")
    if not bake:
        return {}, shadows, [], read_otherwise
    pairing = pairing or {}
    # Refuses what the file does not prove (strict: what it assumes), then requires a shadow
    # for every weight; the pairing itself is the one every command uses.
    with recorded():  # its output's mark records --no-meta over a doubt (s32l)
        m = ema_map(newest, non_averaged="keep", **pairing)
        m.require_complete()
        source_of = proven_pairs(newest, **{k: v for k, v in pairing.items()
                                            if k not in ("allow_missing", "strict")})
    unaveraged = sorted(k for k, s in source_of.items() if s not in shadows)
    if unaveraged:  # a pairing onto something that is not an averaged float shadow
        # (not "leave out --bake": --ema-name then needs it, and --ema copies such a key
        # from the newest, unaveraged: review-32-attack-r119 N2)
        raise EmaError(f"{newest.path}: the average of {unaveraged[0]!r} is "
                       f"{source_of[unaveraged[0]]!r}, which is not a floating-point EMA "
                       "shadow that can be averaged; average without --ema --bake (each key "
                       "under its own name, its .meta beside it) and read that output with "
                       "ckpt export or restore-ema and the same options")
    return source_of, shadows, list(m.assumed), read_otherwise


def write_average(ckpts, why, out_dir, ema, bake, name, overwrite, progress,
             pairing=None, extra=(), taken=frozenset(), drop=False) -> AverageResult:
    from .bake_outputs import checkpoint_names, saved_model_stage

    check_compatible(ckpts)
    refuse_mixed_weights(ckpts, ema)  # a restore-ema output's averages with raw weights (r128)
    newest = ckpts[-1]
    for c in ckpts:  # no whole tensor to average or copy (review-15-attack-r29 F3)
        k, what = next(iter(getattr(c.reader, "partial", {}).items()), (None, ""))
        if k is not None:
            raise UnsupportedFormatError(
                f"{c.path}: {k} holds {what}, an average of only some parts of a partitioned "
                "variable (ema.apply() over a var_list that left the others out): there is no "
                "whole tensor to average or copy, and leaving it out would break the .meta's "
                "Saver; average cannot write it (restore-ema and export read this checkpoint "
                "with --allow-missing or --raw)")
    # a dict Saver shown by another save's graph only: nothing decides (r121 F4), so before
    # the doubt's refusals, whose --not-swapped would let the mix through
    refuse_renamed_doubt(ckpts, [k for k, e in newest.entries().items()
                                 if e.dtype_name in _AVERAGED])
    carry = doubt_to_carry(ckpts, ema, bake,  # refused where it cannot be carried
                           no_meta=not (pairing or {}).get("use_meta", True))
    unknown = unknown_to_carry(ckpts, ema, bake, pairing)  # ... and where nothing can be
    # own graphs saying a key holds different things (r110 F5): refused, but for --ema --bake,
    # which reads each input's averages through its own graph (r128 M1)
    disagree = graphs_disagree(ckpts, ema and bake)
    # (before the pairing's refusals: an option offered there would be refused here, r118 F4)
    # (a TF1 key's differing sources are what own_bake_sources reads per input)
    dropped = [] if disagree is not None and newest.objects is None else \
        refuse_keys_held_otherwise(ckpts, [k for k, e in newest.entries().items()
                                           if e.dtype_name in _AVERAGED], pairing, bake,
                                   plain=not ema, drop=drop)
    if not (pairing or {}).get("use_meta", True):  # --no-meta: nor an input whose own graph
        for c in reversed(ckpts):  # shows its names mislead (r110 F6): the newest first
            refuse_strict_mark(c)  # nor a bake's over another object's keys (r117 F10)
            refuse_own_graph_swap(c.with_meta(False))
    source_of, to_average, assumed, read_otherwise = plan_average(newest, ema, bake, pairing)
    if bake:  # each input's copies read: the swap question of each (review-33-attack-r132 C2)
        from .average_swapped import refuse_older_unswapped

        refuse_older_unswapped(ckpts[:-1], pairing)
    per_input = None if disagree is None else own_bake_sources(
        ckpts, source_of, to_average, pairing, {*newest.entries(), *source_of}, disagree)
    use_meta = (pairing or {}).get("use_meta", True)
    # --ema --bake --no-meta over an input's graph (or mark) deciding or doubting its names:
    # a statement its mark records and every read repeats (review-29-attack-r107 F3)
    unread = None if use_meta or not bake else next(
        filter(None, (silenced(c.with_meta(False)) for c in reversed(ckpts))), None)
    inputs = Inputs([f for c in ckpts for f in c.input_files()] + list(extra))
    saved_model = newest.location.saved_model
    stale: list[str] = []
    # The writer discipline of formats/_write.py, as restore-ema: staged whole beside --out,
    # published with one rename; inputs (state files included) are never replaced.
    if saved_model:  # a SavedModel in, a SavedModel out (its graph names variables/variables)
        if name not in (None, os.path.basename(VARIABLES_PREFIX)):
            raise UnsupportedFormatError(
                f"{saved_model}: --name (name=) cannot apply to a SavedModel output, whose "
                "graph loads its variables from variables/variables; leave it out")
        name = os.path.basename(VARIABLES_PREFIX)
        final = os.path.join(out_dir, VARIABLES_PREFIX)
        stage_of = saved_model_stage(out_dir, inputs, overwrite)
    else:
        name = check_file_name(newest.name if name is None else name)
        final = os.path.join(out_dir, name)
        refuse_held_graph(out_dir, name)  # another's graph as its .meta (r102 F3)
        # --force also replaces the graphs an earlier average of this output carried
        # beside it (review-26-attack-r90 F4): only those its record names, still of the
        # recorded bytes and read by no other checkpoint there; never a file this tool
        # cannot prove it wrote (review-27-attack-r95 F1, F2, F5)
        own = checkpoint_names(name)
        stale = removable(out_dir, name, own) if overwrite else []
        record = record_name(name)
        stage_of = StagedDir(out_dir, inputs, lambda f: own(f) or f == record or f in stale,
                             overwrite=overwrite)
    with stage_of as stage:
        work = stage.path
        if saved_model:
            work = os.path.join(work, os.path.dirname(VARIABLES_PREFIX))
            with os_errors(stage.shown(work), "creating it"):
                os.mkdir(work)
        prefix = os.path.join(work, name)
        averaged, copied, nbytes, nonfinite = _write_average(
            ckpts, prefix, source_of, to_average, progress, stage.shown,
            output_weights(average_mark(
                ckpts, carry, unknown, bake, newest.with_meta(use_meta), unread,
                bake and rewrites_misleading(newest.with_meta(use_meta), source_of, to_average),
                source_of, to_average), ckpts, ema, bake, source_of,
                (pairing or {}).get("ema_name")),
            dropped, per_input)
        carried: list[str] = []
        records: list[str | None] = []
        if saved_model:
            from .bake_outputs import copy_saved_model_files

            copy_saved_model_files(saved_model, stage.path, stage.shown)
        else:
            # --no-meta (pairing use_meta=False): the .meta not read is not copied either
            _copy_meta(newest.with_meta(use_meta), prefix, stage.shown)
            write_state_file(work, name, stage.shown)  # names the output's own prefix, relative
            # the graphs doubting the inputs' names, beside the output: doubted the same way
            # (review-25-attack-r87 F3); checked in the stage, never published otherwise
            carried = carry_doubt(carry, prefix, stage.shown, taken)
            records.append(write_record(work, name, [os.path.basename(c) for c in carried],
                                        stage.shown, unknown))
            if unknown:  # the inputs' other graphs unknown: the output refused as they are
                check_unknown_carried(prefix, stage.shown)
            if bake and newest.saver_def_wrote and os.path.isfile(prefix + ".meta"):
                # its copied .meta builds the crossed Savers again: the output states it
                from .restored_record import write_record as write_stated

                records.append(write_stated(prefix, {"saver_def_wrote": True}, stage.shown,
                                            "ckpt average"))
        stage.publish()
    return AverageResult(prefix=final, inputs=[c.path for c in ckpts], averaged=averaged,
                         copied=copied, nbytes=nbytes, newest=newest.path, newest_by=why,
                         baked={k: v for k, v in source_of.items() if k in averaged},
                         saved_model=out_dir if saved_model else None, nonfinite=nonfinite,
                         assumed=assumed, doubt_carried=carried,
                         doubt_removed=[os.path.join(out_dir, f) for f in stale],
                         records=[os.path.basename(r) for r in records if r],
                         warnings=[written_warning(unread)] if unread else [],
                         dropped=dropped if drop else None,
                         read_otherwise={} if bake else read_otherwise)


def average_mark(ckpts, carry: list[str], unknown: str | None, bake: bool,
                 copied: Checkpoint | None = None, unread: str | None = None,
                 rewritten: bool = False,
                 source_of: dict[str, str] | None = None, averaged=None) -> dict | None:
    """The mark (:mod:`~ckpt_tools.tools_mark`) the average of ``ckpts`` carries inside its
    bundle: the doubting graphs ``carry`` (or the inputs whose graphs are ``unknown``) beside
    its inputs, which the sidecar record and carried copies lose with any rename or copy of
    the output (review-28-attack-r105 F1-F3); the inputs whose own graph shows their keys'
    names mislead (a swapping Saver's run saved with a ``.meta`` each time: the output's
    ``.meta`` is lost by a copy of its ``.index`` + ``.data``, review-29-attack-r107 F1), with
    the SHA-256 of the graph copied as the output's own from ``copied`` (the newest input as
    read: its ``.meta``, or a SavedModel's ``saved_model.pb``, which a SavedModel output
    always gets; none where ``--no-meta`` left it unread); the statements ``--ema --bake``
    wrote it under (``--no-meta`` where it left ``unread`` a graph or mark deciding or
    doubting the inputs' names: :func:`~ckpt_tools.no_meta_mark.silenced`); and every
    input's own mark. ``rewritten``: ``--bake`` wrote a proven average's mean under every
    key the inputs' own graph shows misleading (:func:`~ckpt_tools.own_graph_mark.
    rewrites_misleading`), so their own-graph doubt no longer holds (review-30-attack-r110 F2);
    the inputs' carried ``names_doubted`` neither, where each was read through the graph its
    mark records and every key of the output (``source_of``: key -> the key averaged into
    it) holds by it what its name says (:func:`~ckpt_tools.doubt_lifted.carried_disproved`:
    review-31-attack-r114 F1). ``averaged``: the keys the output averages (the others are
    the newest input's), for :func:`~ckpt_tools.own_graph_doubt.bake_proved`.

    Returns:
        `dict`, or ``None`` where there is nothing to say.
    """
    from .own_graph_doubt import own_graph_doubt
    from .own_graph_mark import graph_digest
    from .stated_python import not_swapped_decided
    from .tools_mark import graph_written, mark_doc, merged, names_doubted, output_mark

    carried = None
    if carry or unknown:
        carried = {"graphs": [p.rstrip("/").rsplit("/", 1)[-1] for p in carry],
                   "inputs": [c.path for c in ckpts if getattr(c, "meta_doubt", ())
                              or getattr(c, "meta_unknown", None) is not None]}
    # the carried doubt and the inputs' own graphs' joined as every mark is (tools_mark)
    doubted = names_doubted(merged(mark_doc(carried), mark_doc(
        None if rewritten else own_graph_doubt(ckpts))))
    stated = {}
    if bake and ckpts[-1].saver_def_wrote:
        stated["saver_def_wrote"] = True
    if bake and any(not_swapped_decided(c) for c in ckpts):  # TF1, Keras copies (r128 F3)
        stated["not_swapped"] = True
    if bake and unread:
        stated["no_meta"] = True
    mark = output_mark(ckpts, stated, doubted, "ckpt average")
    if rewritten and carried is None and source_of is not None and copied is not None:
        from .doubt_lifted import carried_disproved, drop_carried

        if carried_disproved(ckpts, copied, source_of):
            mark = drop_carried(mark)
    # the graph written beside it (_copy_meta; a SavedModel's saved_model.pb, copied whole),
    # by bytes, where it was read for the pairing; none: no input's digest is kept
    graph = None if copied is None or copied.meta_unread else (
        copied.location.meta_path or copied.location.saved_model)
    from .own_graph_doubt import bake_proved

    read = bake and copied is not None and not copied.meta_unread  # r119 F3

    return graph_written(mark, graph_digest(graph) if graph and names_doubted(mark) else None,
                         carried=bool(carry),  # copies of the doubting graphs (carry_doubt)
                         proved=bake_proved(copied, source_of or {}, averaged or ())
                         if read else frozenset())  # graph copied or not


def _write_average(ckpts, prefix, source_of, to_average, progress, shown, mark=None,
                   dropped=(), own=None):
    """Writes the averaged bundle at ``prefix`` (with ``mark`` inside it:
    :func:`average_mark`); ``own``: per input, the key its own graph pairs with each averaged
    output key (:func:`~ckpt_tools.average_own_bake.own_bake_sources`), else ``source_of``'s
    for every input; returns (averaged, copied, bytes written, averaged keys holding NaN or
    Inf)."""
    import numpy as np

    newest = ckpts[-1]
    averaged, copied, nbytes, nonfinite = [], [], 0, []
    # the averages drop_unproven_averages leaves out are neither averaged nor copied
    stored = {k: e for k, e in newest.entries().items() if k not in dropped}
    # a variable not stored whose proven average is (a TF1 Saver of the averages alone) gets
    # the averaged average under its own name, as restore-ema writes it
    lone = [(t, newest.entry(s)) for t, s in source_of.items()
            if t not in stored and s in to_average]
    with BundleWriter(prefix, shown) as writer:
        for key, entry in [*stored.items(), *lone]:
            src = source_of.get(key, key)
            if src in to_average:
                acc = np.zeros(entry.shape, np.complex128 if entry.dtype_name in _COMPLEX
                               else np.float64)
                # inf + -inf is NaN, as in NumPy's mean: the value is right, the warning noise
                with np.errstate(invalid="ignore", over="ignore"):
                    for i, ckpt in enumerate(ckpts):
                        accumulate(acc, ckpt, src if own is None else own[i][key])
                        if progress:
                            progress(entry.nbytes)
                    acc /= len(ckpts)
                    value = acc.astype(dtypes.numpy_dtype(entry.dtype, False))
                if not np.isfinite(acc).all():
                    nonfinite.append(key)
                del acc
                averaged.append(key)
            else:
                value = read_released(newest, key, entry)
                if progress:
                    progress(entry.nbytes * len(ckpts))
                copied.append(key)
            nbytes += add_tensor(writer, key, entry, value)
        from .tools_mark import add_mark

        add_mark(writer, mark)
    return averaged, copied, nbytes, nonfinite


def _copy_meta(newest: Checkpoint, prefix: str, shown) -> None:
    meta = newest.location.meta_path
    if not meta or newest.meta_unread:  # a graph not read is not vouched for by a copy
        return
    shown_meta = shown(prefix + ".meta")
    if is_url(meta):  # a remote .meta: fetched whole (graphs are small)
        data = map_file(meta)
        with os_errors(shown_meta, "writing"), open(prefix + ".meta", "wb") as f:
            f.write(data)
    else:  # read errors name the input; write errors (disk full) the output
        copy_file(meta, prefix + ".meta", shown_meta)
