"""``ckpt diff``: compare two checkpoints, or each variable with its EMA shadow.

Examples::

    ckpt diff train/model.ckpt-20 train/model.ckpt-30       # what changed between two steps
    ckpt diff model.ckpt-30 --ema                           # how far shadows lag raw weights
    ckpt diff a b --grep 'conv*' --changed-only --json
"""

from __future__ import annotations

from typing import Annotated

import typer

from ..checkpoint import open_checkpoint
from ..diff import NOT_COMPARED, SAME, DiffReport, diff_checkpoints, diff_ema
from ..errors import CorruptCheckpointError
from ..order_marks import marked_paths
from ..wording import counted
from ._common import (
    PATH_HELP,
    AveragesOnlyOpt,
    FitOrderOpt,
    GrepOpt,
    JsonOpt,
    LoopOrderOpt,
    NameFilter,
    NotSwappedOpt,
    OptimizerOpt,
    QuietOpt,
    RegexOpt,
    SaverDefWroteOpt,
    StrictOpt,
    TrainableOpt,
    UseEmaOpt,
    WideOpt,
    complete_path,
    display_names,
    require_selection,
    resolve,
    trainable_names,
)
from ._output import Column, Output, shape_text
from ._run import note_recorded, warn_read_by_names
from .ema import (
    ApplyOrderOpt,
    EmaNameOpt,
    NoMetaOpt,
    NumberedListsOpt,
    check_apply_order,
    note_assumed,
    note_stated_order,
)


def diff_command(
    a: Annotated[str, typer.Argument(
        autocompletion=complete_path, help="First checkpoint: " + PATH_HELP, show_default=False,
        metavar="A")],
    b: Annotated[str | None, typer.Argument(
        autocompletion=complete_path, help="Second checkpoint (omit with --ema).",
        show_default=False, metavar="[B]")] = None,
    ema: Annotated[bool, typer.Option(
        "--ema", help="Compare each variable of A with its EMA shadow instead.")] = False,
    grep: GrepOpt = None,
    regex: RegexOpt = None,
    changed_only: Annotated[bool, typer.Option(
        "--changed-only", help="List only tensors that differ (the counts still cover all).")
    ] = False,
    no_values: Annotated[bool, typer.Option(
        "--no-values", help="Compare names, shapes and dtypes only; read no tensor data "
        "(values are reported as 'not compared').")] = False,
    wide: WideOpt = False,
    ema_name: EmaNameOpt = None,
    apply_order: ApplyOrderOpt = None,
    numbered_lists: NumberedListsOpt = False,
    no_meta: NoMetaOpt = False,
    use_ema: UseEmaOpt = None,
    optimizer: OptimizerOpt = None,
    trainable: TrainableOpt = None,
    loop_order: LoopOrderOpt = False,
    fit_order: FitOrderOpt = False,
    strict: StrictOpt = False,
    not_swapped: NotSwappedOpt = False,
    averages_only: AveragesOnlyOpt = False,
    saver_def_wrote: SaverDefWroteOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Show keys only in A or B, shape/dtype changes, and max-abs / relative L2 differences.

    The relative difference is ||B - A|| / ||A|| (for --ema: ||ema - raw|| / ||raw||).
    With --ema each variable is paired with its average exactly as 'ckpt map' pairs them
    (--ema-name, --apply-order, --no-meta, --use-ema decide as there). Exits 0 whether or not
    the checkpoints differ; 3 when --grep/--regex select no variable; 4 when a tensor cannot be
    read; 6 for --ema on a checkpoint without EMA shadows, or whose pairing is not proven (or,
    with --strict, rests on an assumption).
    """
    if ema == (b is not None):
        raise typer.BadParameter("give a second checkpoint B, or --ema to compare A with its "
                                 "own EMA shadows (not both)", param_hint="B")
    out = Output(json_mode=json_out, quiet=quiet, wide=wide)
    names = NameFilter(grep, regex)
    apply_order = check_apply_order(apply_order, numbered_lists)
    if apply_order is not None and not ema:
        raise typer.BadParameter("--apply-order decides which average goes with which "
                                 "variable; it applies only with --ema", param_hint="--apply-order")
    if strict and not ema:
        raise typer.BadParameter("--strict refuses an assumed pairing of averages; it applies "
                                 "only with --ema", param_hint="--strict")
    if saver_def_wrote and not ema:
        raise typer.BadParameter("it decides which keys of A hold the averages; it applies "
                                 "only with --ema", param_hint="--saver-def-wrote")
    with open_checkpoint(resolve(out, a), use_ema=use_ema, optimizer=optimizer, meta=not no_meta,
                         trainable=trainable_names(trainable, loop_order, fit_order),
                         not_swapped=not_swapped, fit_order=fit_order,
                         averages_only=averages_only, defer_unknown=not ema,
                         saver_def_wrote=saver_def_wrote) as ca:
        paths = display_names(ca)
        bare = marked_paths(ca)  # a name shown with '?' selected without it too (u33 F6)
        match = (lambda key: names(key, paths.get(key)) or key in bare and names(
            key, bare[key])) if names.active else None
        assumed: dict = {}
        if ema:
            require_selection(ca, names, None)
            from ..restored_mark import marked_map_note

            marked = marked_map_note(ca)
            if marked:  # restore-ema's output: said before its copies' diff or refusal (u25 F3)
                out.note(f"note: {marked}", always=True)
            note_recorded(out, ca)  # --saver-def-wrote, restore-ema's record (its output)
            pairs = _pairs_of(ca, ema_name, not no_meta, apply_order)
            if pairs is not None:  # not_swapped: always; fit_order: --strict
                from ..keras_assumed import refuse_assumed

                refuse_assumed(ca, strict=strict)
            note_stated_order(out, ca, apply_order, ema_name)
            assumed = note_assumed(out, ca) if pairs is not None else {}
            warn_read_by_names(out, ca)  # paired by names past a graph doubting them (s33c)
        with out.progress("comparing") as bar:  # the total is known once pairs are
            if ema:
                # pairs None (no averages): diff_ema's own reading, with the same options
                report = diff_ema(ca, match=match, values=not no_values, progress=bar.update,
                                  pairs=pairs, ema_name=ema_name, use_meta=not no_meta,
                                  apply_order=apply_order, strict=strict)
            else:
                # --no-meta reaches B too: no graph of it, nor of its prefix, is read (r81 F8)
                # (a meta-less http(s) one opens: A and B are compared key by key, unpaired)
                with open_checkpoint(resolve(out, b), meta=not no_meta,
                                     defer_unknown=True) as cb:
                    if not names.keys(ca):
                        require_selection(cb, names, None)
                    paths = {**display_names(cb), **paths}
                    report = diff_checkpoints(ca, cb, match=match, values=not no_values,
                                              progress=bar.update)
    if json_out:
        doc = report.to_dict(changed_only=changed_only, paths={**paths, **bare})
        for t in doc["tensors"]:  # the name, not the '?' the table shows (u33 F2, as list)
            if t["key"] in bare:
                t["path_by_order"] = True
        out.json({**doc, **assumed,
                  **({"warnings": list(out.warned)} if out.warned else {})})  # r94 F5
    else:
        _print(out, report, paths, changed_only)
    bad = report.unreadable
    if bad:
        raise CorruptCheckpointError(f"{counted(len(bad), 'tensor')} could not be read; first: "
                                     f"{bad[0].error}")


def _pairs_of(ckpt, ema_name: str | None, use_meta: bool,
              apply_order: str | None) -> dict[str, str] | None:
    """The pairing ``ckpt map`` proves; ``None`` for a Keras file that holds no averages
    (then diff_ema explains there is nothing to compare).

    Raises:
        UnprovenPairingError: the file does not prove the pairing (exit 6, like ``map``).
    """
    from ..emamap import UnprovenPairingError, proven_pairs
    from ..errors import EmaError

    try:
        return proven_pairs(ckpt, ema_name=ema_name, use_meta=use_meta,
                            apply_order=apply_order)
    except UnprovenPairingError:
        raise
    except EmaError:
        return None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


_STYLE = {SAME: "dim", "changed": "yellow", "shape": "red", "dtype": "red", "unreadable": "red",
          NOT_COMPARED: "dim"}


def _print(out: Output, report: DiffReport, paths: dict[str, str], changed_only: bool) -> None:
    ema = report.mode == "ema"
    title = [f"{report.a}: raw vs EMA"] if ema else [f"A = {report.a}", f"B = {report.b}"]
    rows = []
    for t in report.tensors:
        if t.error:
            out.warning(t.error)
        if changed_only and not t.changed:
            continue
        shape = shape_text(t.shape_a) if t.shape_a == t.shape_b else \
            f"{shape_text(t.shape_a)}→{shape_text(t.shape_b)}"
        dtype = t.dtype_a if t.dtype_a == t.dtype_b else f"{t.dtype_a}→{t.dtype_b}"
        name = paths.get(t.name, t.name)
        row = [name] + ([paths.get(t.other, t.other)] if ema else [])
        status = "not compared" if t.status == NOT_COMPARED else t.status
        rows.append([*row, (status, _STYLE.get(t.status)), shape, dtype, _fmt(t.max_abs),
                     _fmt(t.rel_l2)])
    if not out.is_terminal:  # piped: one-sided names are rows too, so every line is a row
        sides = (("no shadow", report.only_a), ("no variable", report.only_b)) if ema else \
            (("only in A", report.only_a), ("only in B", report.only_b))
        for n_side, (status, names) in enumerate(sides):
            for name in names:
                shown = paths.get(name, name)
                cells = ([shown, "-"] if n_side == 0 else ["-", shown]) if ema else [shown]
                rows.append([*cells, status, "-", "-", "-", "-"])
    columns = [Column("raw" if ema else "name", shrink="middle", min_width=20, floor=16)]
    if ema:
        # Beside its variable, a shadow <raw>/ExponentialMovingAverage is shortened to
        # …/ExponentialMovingAverage first: the raw column already shows the rest.
        columns.append(Column("EMA shadow", shrink="middle", min_width=16, prefix_from=0))
    columns += [Column("status"), Column("shape", hide=2), Column("dtype", hide=1),
                Column("max |Δ|", "right"), Column("rel L2", "right")]
    out.table(title, columns, rows)
    # A shadow without a stored variable: the variable was not saved, or several same-named
    # variables fit and the file cannot tell which ('ckpt map' names the candidates).
    label_a, label_b = ("weights without a shadow",
                        "shadows not paired with a stored variable (see 'ckpt map')") if ema \
        else ("only in A", "only in B")
    for label, names in ((label_a, report.only_a), (label_b, report.only_b)):
        if names and out.is_terminal:
            out.line("")
            out.line((label, "bold"), f" ({len(names)}):")
            for name in names:
                out.line(f"  {paths.get(name, name)}")
    if not out.quiet:
        c = report.counts()
        values = (f"{c['compared']} compared, {c['same']} same, {c['differ']} differ"
                  if report.values else
                  f"{counted(c['not_compared'], 'value')} not compared (--no-values), "
                  f"{c['differ']} differ in shape or dtype")
        out.summary()
        out.summary(f"{c['paired']} paired: {values}"
                 + (f", {c['unreadable']} unreadable" if c["unreadable"] else "")
                 + f"; {c['only_a']} {label_a}, {c['only_b']} {label_b}")
