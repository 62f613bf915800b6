"""``ckpt average``: the element-wise average of several checkpoints of one run.

Examples::

    ckpt average runs/v1 --last 5 --out avg/             # the 5 newest the state file lists
    ckpt average run/model.ckpt-800 run/model.ckpt-1000 --out avg/
    ckpt average runs/v1 --last 5 --ema --bake --out avg_ema/   # average the EMA shadows
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from ..restored_record import stated_record_said
from ..wording import agreeing, counted, noun
from ._common import (
    JsonOpt,
    NotSwappedOpt,
    QuietOpt,
    SaverDefWroteOpt,
    StrictOpt,
    check_output_parent,
)
from ._output import Output, human_bytes
from ._run import note_recorded
from .ema import (
    ApplyOrderOpt,
    EmaNameOpt,
    MissingOpt,
    NoMetaOpt,
    NumberedListsOpt,
    check_apply_order,
    note_assumed,
    note_stated_order,
)


def average_command(
    paths: Annotated[list[str], typer.Argument(
        help="Two or more checkpoints of one run (any order: the newest is the one with the "
        "largest global_step / save_counter), or one run directory with --last N; local "
        "paths or s3://, gs:// URLs.",
        show_default=False, metavar="CKPT...")],
    out_dir: Annotated[str, typer.Option(
        "--out", "-o", metavar="DIR",
        help="Output directory, or an s3://bucket/dir/ URL (created if missing; never an "
        "input's directory; an existing output checkpoint there needs --force, which also "
        "breaks a remote writer lock left by a process of this host that no longer runs).",
        show_default=False)],
    last: Annotated[int | None, typer.Option(
        "--last", min=2, help="Average the N newest checkpoints that the run directory's "
        "'checkpoint' state file lists: the N listed up to its latest (after a rollback, "
        "those listed after it are left out); a list whose steps do not rise is refused.")] = None,
    ema: Annotated[bool, typer.Option(
        "--ema", help="Average the EMA shadows instead of the raw weights.")] = False,
    bake: Annotated[bool, typer.Option(
        "--bake", help="With --ema: also write the averaged shadows under the plain names.")
    ] = False,
    name: Annotated[str | None, typer.Option(
        "--name", metavar="NAME",
        help="Output checkpoint name (default: the newest input's).")] = None,
    newest: Annotated[str | None, typer.Option(
        "--newest", help="The input to copy integers, strings, the step and the graph from "
        "(default: the largest recorded global_step / save_counter; with --last, the state "
        "file's latest).", show_default=False, metavar="CKPT")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace an existing output checkpoint (never an input).")] = False,
    ema_name: EmaNameOpt = None,
    apply_order: ApplyOrderOpt = None,
    numbered_lists: NumberedListsOpt = False,
    no_meta: NoMetaOpt = False,
    allow_missing: MissingOpt = False,
    strict: StrictOpt = False,
    not_swapped: NotSwappedOpt = False,
    saver_def_wrote: SaverDefWroteOpt = False,
    drop_unproven: Annotated[bool, typer.Option(
        "--drop-unproven-averages",
        help="Without --ema: leave out of the output the TF2 EMA averages that nothing proves "
        "to hold the same variable's average in every input (named after a name several "
        "variables share, numbered in each process's ema.apply() order), which are refused "
        "otherwise; every other variable (the weights) is averaged.")] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Average the float variables of several checkpoints (integers, strings and the step
    come from the newest); EMA-aware, partitioned and sharded checkpoints supported.

    Averaged: every float variable (weights, EMA shadows, batch-norm statistics, optimizer
    slots). Copied from the newest, like the step: only state the file proves step-dependent:
    counters (global_step, save_counter, an optimizer's iterations, TF1 beta1_power/beta2_power
    the .meta lists as non-trainable) and an optimizer's own hyperparameters
    (optimizer/learning_rate, momentum, decay). A trainable variable named learning_rate,
    decay or step is a weight, and averaged.

    With --ema --bake each plain name gets the averaged shadow 'ckpt map' pairs it with in the
    newest input (--ema-name, --apply-order, --no-meta decide as there; --allow-missing keeps
    the newest input's raw value where a weight has no shadow). Where the newest input's weights
    differ from its Keras 3 optimizer's copies (or average slots), whether it was saved
    swapped decides which are the averages: refused (exit 6) unless --not-swapped states it.
    """
    from ..average import average_checkpoints, average_run, checkpoints_of_run
    from ..average_inputs import merged_note
    from ..bake_outputs import check_out_format
    from ..checkpoint import open_checkpoint
    from ..errors import CheckpointError, OutputError
    from ..formats._io import one_remote_session

    if bake and not ema:
        raise typer.BadParameter("--bake needs --ema", param_hint="--bake")
    if drop_unproven and ema:
        raise typer.BadParameter("it leaves averages out of a plain average (of the weights); "
                                 "leave out --ema", param_hint="--drop-unproven-averages")
    apply_order = check_apply_order(apply_order, numbered_lists)
    for given, option in ((ema_name is not None, "--ema-name"),
                          (apply_order is not None, "--apply-order"), (no_meta, "--no-meta"),
                          (allow_missing, "--allow-missing"), (strict, "--strict"),
                          (not_swapped, "--not-swapped"),
                          (saver_def_wrote, "--saver-def-wrote")):
        if given and not bake:
            raise typer.BadParameter("it decides which averaged shadow --bake writes under each "
                                     "plain name; it needs --ema --bake", param_hint=option)
    if last is not None and len(paths) != 1:
        raise typer.BadParameter("--last takes exactly one run directory", param_hint="--last")
    if last is None and len(paths) < 2:
        raise typer.BadParameter("give two or more checkpoints, or one run directory with "
                                 "--last N", param_hint="CKPT...")
    # One remote session for the whole command: each small object is fetched once.
    with one_remote_session([*paths, out_dir]):
        try:  # average writes a checkpoint directory: an --out named like a file is a mistake
            check_out_format(out_dir, "v2", "average")
        except OutputError as exc:  # the options disagree: a usage error (exit 2)
            raise typer.BadParameter(str(exc), param_hint="--out") from None
        out = Output(json_mode=json_out, quiet=quiet)
        stated: dict = {}
        if bake:  # what --apply-order / --ema-name state about the file: a usage error (exit
            # 2) there comes before the library's refusals (a checkpoint given twice: exit 6)
            last_given = checkpoints_of_run(paths[0], last)[-1] if last is not None \
                else paths[-1]
            with open_checkpoint(last_given, not_swapped=not_swapped, meta=not no_meta,
                                 saver_def_wrote=saver_def_wrote,
                                 defer_unknown=True) as one:  # (what pairs it: refused there)
                note_recorded(out, one)  # --saver-def-wrote, restore-ema's record
                stated = note_stated_order(out, one, apply_order, ema_name)
        check_output_parent(out_dir, "creating the output directory")
        with out.progress("averaging") as bar:
            try:
                # The library groups the inputs (a shell glob's files of one checkpoint are
                # that checkpoint, once: result.merged) and says the bytes the bar counts.
                options = dict(ema=ema, bake=bake, name=name, newest=newest, overwrite=force,
                               progress=bar.advance,
                               progress_total=lambda total: bar.update(0, total),
                               ema_name=ema_name, apply_order=apply_order,
                               use_meta=not no_meta, allow_missing=allow_missing,
                               strict=strict, not_swapped=not_swapped,
                               saver_def_wrote=saver_def_wrote,
                               drop_unproven_averages=drop_unproven)
                # With --last the state file (save order) says which is newest.
                result = average_run(paths[0], last, out_dir, **options) if last is not None \
                    else average_checkpoints(paths, out_dir, **options)
            except ValueError as exc:  # --newest names none of the inputs
                if newest is None or isinstance(exc, CheckpointError):
                    raise  # not about --newest (an OptionError has its own exit code)
                raise typer.BadParameter(str(exc), param_hint="--newest") from None
        if result.assumed:  # the library warned (AssumptionWarning): the CLI's notes say it
            with open_checkpoint(result.newest, not_swapped=not_swapped,
                                 saver_def_wrote=saver_def_wrote) as newest_ckpt:
                note_assumed(out, newest_ckpt)
    if result.merged:  # said once the checkpoints were averaged (not before a refusal)
        out.note(merged_note(len(paths), len(result.inputs), result.merged))
    out.wrote(result.prefix)
    if result.doubt_removed:  # an earlier average's copies, replaced (review-26-attack-r90 F4)
        names = ", ".join(os.path.basename(p) for p in result.doubt_removed)
        out.note(f"note: --force removed {names} from --out: the "
                 f"{noun(len(result.doubt_removed), 'graph')} an earlier average "
                 "of this output carried beside it (named in its record, "
                 f"{os.path.basename(result.prefix)}.carried.json)", always=True)
    if result.doubt_carried:  # the inputs' doubt, beside the output (review-25-attack-r87 F3)
        names = ", ".join(os.path.basename(p) for p in result.doubt_carried)
        record = os.path.basename(result.prefix) + ".carried.json"
        out.note(f"note: copied {names} beside the output: the inputs have no .meta of their "
                 "own and that graph of their prefix records a save op of these keys that "
                 "contradicts their names, so the output is doubted the same way (export "
                 "refuses the pairing by names and --raw: --not-swapped, or --raw --no-meta for "
                 f"the keys as stored); its record {record} names the copy, so that the output "
                 "moved without it is refused too and --force removes it", always=True)
    if result.dropped:  # --drop-unproven-averages: which keys, said (never written)
        from ..formats.objgraph import readable_name

        shown = ", ".join(readable_name(k) for k in result.dropped[:5]) + (
            " ..." if len(result.dropped) > 5 else "")
        out.note(f"note: left out {counted(len(result.dropped), 'EMA average')} nothing "
                 "proves to hold the same variable's average in every input (named after a "
                 f"name several variables share): {shown}; the output's object graph still "
                 "lists them, so restoring their holders from it fails", always=True)
    for w in result.warnings:  # --no-meta over a graph doubting the names (r107 F3)
        out.warning(w)
    if result.nonfinite:
        shown = ", ".join(result.nonfinite[:5]) + (" ..." if len(result.nonfinite) > 5 else "")
        out.warning(f"{counted(len(result.nonfinite), 'averaged tensor')} "
                    f"{agreeing(len(result.nonfinite), 'holds', 'hold')} NaN or Inf (an input "
                    f"held them, or inf + -inf, which averages to NaN as in NumPy): {shown}")
    unproven = _unproven(result.newest) if ema and not bake else None
    option = getattr(unproven, "option", None)
    refused = f"export refuses its pairing{f' ({option} decides there)' if option else ''}"
    if unproven is not None and result.read_otherwise:  # the save op's word, key by key
        out.note(f"note: {_read_otherwise_said(result.read_otherwise)}; {refused}", always=True)
    elif unproven is not None:  # what the shadow keys hold is unproven (s28d "Left"): said
        out.note("note: the file does not prove what the keys named as EMA shadows hold "
                 f"(they may hold the raw weights): {refused}; each key was "
                 "averaged under its own name, whichever it holds ('ckpt export' says why)",
                 always=True)
    if json_out:
        out.json({**result.to_dict(), "warnings": list(out.warned), **stated})
        return
    if quiet:
        return
    by_names = unproven is not None and not result.read_otherwise
    what = ("key named as an EMA shadow" if by_names else "EMA shadow") if ema \
        else "float variable"
    plural = "keys named as EMA shadows" if by_names else None
    baked = f", {len(result.baked)} plain names hold them" if result.baked else ""
    copied = len(result.copied)
    # `averaged` lists the baked plain names too (their values are averages): count each
    # shadow once.
    count = len(result.averaged) - len(result.baked)
    out.prose(f"wrote {result.saved_model or result.prefix} ({human_bytes(result.nbytes)}): "
              f"{counted(count, what, plural)} averaged over {len(result.inputs)} checkpoints"
              f"{baked}, {copied} tensor{'s' if copied != 1 else ''} copied from the newest "
              f"({result.newest}, by {result.newest_by})" + stated_record_said(
                  [r for r in result.records if r.endswith(".restored.json")]))


def _read_otherwise_said(read: dict[str, bool]) -> str:
    """What ``average --ema`` did with the keys the ``.meta``'s save op reads against their
    names (``read``: key -> averaged as an EMA average not named as one, or copied, named as
    one but holding none), naming each (the output is no mean where they are not said)."""
    def shown(keys: list[str]) -> str:
        return ", ".join(repr(k) for k in keys[:5]) + (" ..." if len(keys) > 5 else "")

    averaged = [k for k, v in read.items() if v]
    copied = [k for k, v in read.items() if not v]
    said = []
    if averaged:
        n = len(averaged)
        said.append(f"{shown(averaged)}, not named as "
                    f"{agreeing(n, 'an EMA shadow', 'EMA shadows')}, "
                    f"{agreeing(n, 'holds an EMA average and was', 'hold EMA averages and were')} "
                    "averaged")
    if copied:
        n = len(copied)
        said.append(f"{shown(copied)}, named as {agreeing(n, 'an EMA shadow', 'EMA shadows')}, "
                    f"{agreeing(n, 'holds no average and was', 'hold no averages and were')} "
                    "copied from the newest")
    n = len(read)
    return (f"the .meta's save op and EMA update ops show what {counted(n, 'key')} "
            f"{agreeing(n, 'holds', 'hold')}, whatever {agreeing(n, 'its name', 'their names')} "
            f"{agreeing(n, 'says', 'say')}: "
            + "; ".join(said) + "; every other key was averaged or copied as its name says")


def _unproven(newest: str):
    """The refusal (:class:`~ckpt_tools.errors.UnprovenPairingError`) of the newest input's
    EMA pairing, or ``None`` where it is proven (or nothing pairs)."""
    from ..checkpoint import open_checkpoint
    from ..emamap import ema_map
    from ..errors import CheckpointError, UnprovenPairingError

    try:
        with open_checkpoint(newest) as ckpt:
            ema_map(ckpt)
    except UnprovenPairingError as exc:
        return exc
    except CheckpointError:  # missing shadows and the like: the names still say it
        return None
    return None
