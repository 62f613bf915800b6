"""``ckpt show`` (values and statistics of chosen tensors) and ``ckpt stats`` (all tensors).

Examples::

    ckpt show model.ckpt-1000 W b                  # values (truncated) + statistics
    ckpt show model.ckpt-1000 'conv*/weights' --full --precision 8
    ckpt stats model.ckpt-1000                     # one line per tensor
    ckpt stats model.ckpt-1000 --histogram         # ... with a histogram (a second pass)
    ckpt stats model.ckpt-1000 --drift 0.1 --json  # flag EMA shadows >10% away from raw
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

import numpy as np
import typer

from ..checkpoint import Checkpoint, open_checkpoint
from ..errors import CorruptCheckpointError, UnprovenPairingError, VariableNotFoundError
from ..keras_assumed import refuse_assumed
from ..order_marks import marked_paths
from ..stats import NO_DRIFT, StatsRecord, checkpoint_stats, select_keys
from ..wording import agreeing, counted
from ._common import (
    FitOrderOpt,
    GrepOpt,
    JsonOpt,
    LoopOrderOpt,
    NameFilter,
    NotSwappedOpt,
    OptimizerOpt,
    PathArg,
    QuietOpt,
    RegexOpt,
    SaverDefWroteOpt,
    StrictOpt,
    TrainableOpt,
    UseEmaOpt,
    WideOpt,
    display_names,
    require_selection,
    resolve,
    trainable_names,
)
from ._output import Column, Output, shape_text
from ._run import note_recorded
from .ema import (
    ApplyOrderOpt,
    EmaNameOpt,
    NoMetaOpt,
    NumberedListsOpt,
    check_apply_order,
    note_assumed,
    note_stated_order,
    open_averages,
    proven_variables,
)
from .values_json_stream import show_document
from .values_stream import stream_values
from .values_text import format_values, num_text, sparkline, stats_lines, values_json

FullOpt = Annotated[bool, typer.Option(
    "--full", help="Print every value, as NumPy formats them (about 10 bytes of text a value "
    "or more, written part by part as formatted; --json: all in the document, compact, "
    "written as formatted too), not a summary (over 200 values, the first and last three "
    "along each axis).")]
PrecisionOpt = Annotated[int, typer.Option("--precision", "-p", min=0, max=20,
                                           help="Digits after the decimal point.")]


def show_command(
    path: PathArg,
    names: Annotated[list[str] | None, typer.Argument(
        help="Tensor keys, TF2 object paths, or globs ('conv*/weights').", show_default=False,
        metavar="NAME...")] = None,
    regex: RegexOpt = None,
    full: FullOpt = False,
    precision: PrecisionOpt = 4,
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
    saver_def_wrote: SaverDefWroteOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Print values (NumPy style, truncated) and statistics of one or more tensors.

    NAMEs are keys, object paths or globs (like --grep); --regex selects by regular expression.
    An EMA average's drift is from the variable 'ckpt map' pairs it with (--ema-name,
    --apply-order, --no-meta decide as there); exits 6 when a shown average's variable is not
    proven by the file.
    """
    apply_order = check_apply_order(apply_order, numbered_lists)
    out = Output(json_mode=json_out, quiet=quiet)
    if not names and not regex:
        raise typer.BadParameter("name at least one tensor (NAME or --regex RE)",
                                 param_hint="NAME")
    # (a meta-less http(s) checkpoint opens: only the drift shown asks what its names pair)
    with open_checkpoint(resolve(out, path), use_ema=use_ema, optimizer=optimizer, meta=not no_meta,
                         trainable=trainable_names(trainable, loop_order, fit_order),
                         not_swapped=not_swapped, fit_order=fit_order,
                         defer_unknown=True, saver_def_wrote=saver_def_wrote) as ckpt:
        note_recorded(out, ckpt)  # --saver-def-wrote, restore-ema's record (its output)
        keys = _selected(ckpt, names) if names else []
        if regex:
            picked = NameFilter(None, regex).keys(ckpt)
            if not picked:
                raise VariableNotFoundError(f"{ckpt.path}: no variable matches --regex "
                                            f"{' / '.join(regex)!r}")
            keys += [k for k in picked if k not in keys]
        variables = proven_variables(ckpt, keys, ema_name, no_meta, apply_order)
        # the drift of an EMA copy shown is from the weight paired with it: not_swapped
        # always refused, fit_order under --strict
        refuse_assumed(ckpt, keys=keys, strict=strict)
        note_stated_order(out, ckpt, apply_order, ema_name)
        assumed = note_assumed(out, ckpt, keys)  # the drift shown is from an assumed weight
        shown = display_names(ckpt)
        marked = marked_paths(ckpt)
        if json_out and full:  # written as formatted: never the whole document (s29g)
            out.json_stream(show_document(
                {"checkpoint": ckpt.path}, _full_tensors(ckpt, keys, variables, shown),
                lambda: {**assumed, **({"warnings": list(out.warned)} if out.warned else {})},
                out.json_text))
            return
        docs = []
        for key in keys:
            record = next(checkpoint_stats(ckpt, [key], strict=True, variables=variables,
                                           histogram=True))
            value = ckpt.tensor(key)
            if json_out:
                docs.append({**_doc(record, shown, marked),
                             **values_json(value, full=full)})
                continue
            _print_one(out, ckpt, record, value, full, precision, shown)
        if json_out:
            out.json({"checkpoint": ckpt.path, "tensors": docs, **assumed,
                      **({"warnings": list(out.warned)} if out.warned else {})})  # r94 F5


def _full_tensors(ckpt: Checkpoint, keys: list[str], variables, shown: dict[str, str]
                  ) -> Iterator[tuple[dict, np.ndarray]]:
    """Each tensor's ``--json`` fields (statistics, drift) and its values, one tensor read at a
    time as the document is written.

    Returns:
        `Iterator`: ``(fields, array)`` per key.
    """
    for key in keys:
        record = next(checkpoint_stats(ckpt, [key], strict=True, variables=variables,
                                       histogram=True))
        yield _doc(record, shown, marked_paths(ckpt)), ckpt.tensor(key)


def _doc(record: StatsRecord, shown: dict[str, str], marked: dict[str, str]) -> dict:
    """``record``'s ``--json`` fields, ``path`` the name without the ``?`` the text shows,
    said by ``"path_by_order": true`` as in ``list --json`` (review-33-user-u33 F2)."""
    if record.name in marked:
        return {**record.to_dict(marked[record.name]), "path_by_order": True}
    path = shown.get(record.name)
    return record.to_dict(path if path and path != record.name else None)


def _print_one(out: Output, ckpt: Checkpoint, record: StatsRecord, value: np.ndarray,
               full: bool, precision: int, shown: dict[str, str]) -> None:
    entry = ckpt.entry(record.name)
    out.line((shown.get(record.name, record.name), "bold"),
             f"  {entry.dtype_name} {shape_text(entry.shape)}  ", (record.role, "dim"))
    if not out.quiet:
        for line in stats_lines(record.stats, precision):
            out.line("  " + line)
        if record.drift is not None:
            of = record.ema_of or ""
            out.line(f"  EMA drift from {shown.get(of, of)}: {record.drift:.4g}")
        elif NO_DRIFT in record.flags:  # its own bytes read, its variable's not (u24 F6)
            of = record.ema_of or ""
            out.line(f"  EMA drift from {shown.get(of, of)}: - (the variable could not be read)")
    width = out.width if out.is_terminal and not out.wide else 100  # fits the terminal
    if not full:
        out.block(format_values(value, full=False, precision=precision, width=width))
    else:  # written as formatted, whole lines at a time: bounded memory, `| head` ends it
        # (review-29-user-u31 F2)
        rest = ""
        for piece in stream_values(value, precision=precision, width=width):
            done, _, rest = (rest + piece).rpartition("\n")
            if done:
                out.block(done)
        out.block(rest)
    out.line("")


def stats_command(
    path: PathArg,
    grep: GrepOpt = None,
    regex: RegexOpt = None,
    drift: Annotated[float, typer.Option(
        "--drift", min=0.0, help="Flag EMA shadows whose relative L2 distance from their raw "
        "variable exceeds this.")] = 0.5,
    flagged: Annotated[bool, typer.Option(
        "--flagged", help="Show only tensors with NaN/Inf, drift, or read errors.")] = False,
    histogram: Annotated[bool, typer.Option(
        "--histogram", help="Also count a 16-bin histogram of each tensor over [min, max] "
        "(a second pass over the data, ~3x the time of the rest).")] = False,
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
    saver_def_wrote: SaverDefWroteOpt = False,
    wide: WideOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Statistics of every tensor, one at a time; flags NaN/Inf and drifting EMA shadows.

    A shadow's drift is from the variable 'ckpt map' pairs it with (--ema-name, --apply-order,
    --no-meta decide as there). Exits 3 when --grep/--regex select nothing; 4 if a tensor
    cannot be read (checksum mismatch, truncated data). A shadow whose variable the file does
    not prove has no drift ('?', as list marks it; a note names the option that decides).
    NaN/Inf and drift are reported but do not change the exit code.
    The histogram column is counted only with --histogram (piped, the column is '-' without
    it, so field numbers do not move).
    """
    apply_order = check_apply_order(apply_order, numbered_lists)
    if drift != drift:  # NaN passes min=0.0 (every comparison with it is false)
        raise typer.BadParameter(f"{drift} is not a number >= 0", param_hint="--drift")
    out = Output(json_mode=json_out, quiet=quiet, wide=wide)
    match = NameFilter(grep, regex)
    # (a meta-less http(s) checkpoint opens: only the drift shown asks what its names pair)
    with open_checkpoint(resolve(out, path), use_ema=use_ema, optimizer=optimizer, meta=not no_meta,
                         trainable=trainable_names(trainable, loop_order, fit_order),
                         not_swapped=not_swapped, fit_order=fit_order,
                         defer_unknown=True, saver_def_wrote=saver_def_wrote) as ckpt:
        note_recorded(out, ckpt)  # --saver-def-wrote, restore-ema's record (its output)
        require_selection(ckpt, match, None)
        shown = display_names(ckpt)
        names = match.keys(ckpt)  # (a name shown with '?' selected without it too: u33 F6)
        # Statistics are the file's own values: an average the file does not pair is shown
        # without a variable or drift ('?'), as list marks it, never refused whole (r23 F6).
        try:
            variables, unpaired, unproven = open_averages(ckpt, names, ema_name, no_meta,
                                                          apply_order, strict)
            # the drift of an EMA copy shown is from the weight paired with it: not_swapped
            # always refused, fit_order under --strict
            paired = [k for k in names if k not in unpaired]
            refuse_assumed(ckpt, keys=paired, strict=strict)
        except UnprovenPairingError as exc:
            if strict or exc.option != "--not-swapped":
                raise
            # only the drift depends on whether SwapEMAWeights swapped the file: every
            # tensor's statistics are shown, the copies without drift (review-24-user-u26 F1)
            variables, unpaired = _swap_open(ckpt, names, ema_name, no_meta, apply_order)
            paired = [k for k in names if k not in unpaired]
            unproven = {"option": "--not-swapped", "reason": str(exc)}
            # a user EMA's averages too: their drift is from the weights a swap replaces
            out.note(f"note: {counted(len(unpaired), 'average')} shown "
                     f"{agreeing(len(unpaired), 'has', 'have')} no drift ('?'): drift "
                     "is "
                     "measured from the weights, and the file does not show whether it was "
                     "saved after SwapEMAWeights swapped the optimizer's EMA copies into them; "
                     "pass --not-swapped if it was not (--strict refuses instead)")
        note_stated_order(out, ckpt, apply_order, ema_name)
        assumed = note_assumed(out, ckpt, paired)  # each copy's drift: from an assumed weight
        if unproven and unproven["option"] != "--not-swapped":  # that one noted above
            option = unproven["option"]
            # opened past its graphs' doubt (defer_unknown): no candidates, map refuses
            # with this reason (s28c "Left")
            unknown = getattr(ckpt, "meta_unknown", None) is not None
            out.note(f"note: {counted(len(unpaired), 'average')} shown "
                     f"{agreeing(len(unpaired), 'has', 'have')} no drift ('?'): the "
                     "file "
                     "does not prove which variable each averages; "
                     f"{f'pass {option} to decide' if option else 'no option decides'} "
                     + ("('ckpt map' says why)" if unknown else
                        "('ckpt map' lists the candidates)"))
        if unproven:
            unproven = {**unproven, "averages": sorted(unpaired)}
        entries = ckpt.entries()
        records, rows, errors = [], [], []
        total = sum(entries[k].nbytes for k in names)
        with out.progress("statistics", total) as bar:
            for record in checkpoint_stats(ckpt, names, drift_threshold=drift,
                                           progress=bar.update,  # bytes, from the threads
                                           variables=variables, histogram=histogram):
                if record.error:
                    errors.append(record.error)
                    out.warning(record.error)
                if flagged and not record.flags:
                    continue
                if json_out:
                    records.append(_doc(record, shown, marked_paths(ckpt)))
                else:
                    rows.append(_row(record, shown, out.is_terminal,
                                     compact=out.is_terminal and not out.wide,
                                     unpaired=record.name in unpaired))
        if json_out:
            out.json({"checkpoint": ckpt.path, "drift_threshold": drift, "tensors": records,
                      **assumed, **({"ema_unproven": unproven} if unproven else {}),
                      **({"warnings": list(out.warned)} if out.warned else {})})  # r94 F5
        else:
            out.table(f"{ckpt.path} ({ckpt.format})", _stats_columns(histogram), rows)
            if flagged and not rows:  # "all clean", never a bare header that reads as nothing read
                out.note(f"no tensor flagged ({len(names)} checked: no NaN/Inf, no drift above "
                         f"{drift:g}, no read error)")
    if errors:
        raise CorruptCheckpointError(f"{counted(len(errors), 'tensor')} could not be read; first: "
                                     f"{errors[0]}")


def _swap_open(ckpt: Checkpoint, names: list[str], ema_name, no_meta: bool, apply_order
               ) -> tuple[list, set[str]]:
    """The pairing ``stats`` shows where only the SwapEMAWeights question is open: every
    variable as :func:`~ckpt_tools.ema_decide.decide_pairing` gives it, the EMA copies among
    ``names`` without their weight (no drift). Returns ``(variables, those copies' keys)``."""
    from ..ema_decide import decide_pairing
    from ..formats._record import replace

    variables, _ = decide_pairing(ckpt, ema_name=ema_name, use_meta=not no_meta,
                                  apply_order=apply_order)
    wanted = set(names)
    copies = {v.name for v in variables if v.role == "ema" and v.name in wanted}
    return [replace(v, ema_of=None) if v.name in copies else v for v in variables], copies


def _stats_columns(histogram: bool) -> list[Column]:
    """The stats table; without ``--histogram`` its column is a field of ``-`` when piped
    (field numbers never move) and left out on a terminal."""
    return [
        Column("name", shrink="middle", min_width=24, floor=20), Column("dtype", hide=2),
        Column("shape"),
        Column("min", "right"), Column("max", "right"), Column("mean", "right", hide=3),
        Column("std", "right", hide=4), Column("nan/inf"),
        # Asked for by --histogram: never the column that gives way at 80 columns.
        Column("histogram", terminal=histogram),
        # The flags column says "drift" too, so the value may go before a name is cut.
        Column("drift", "right", hide=1), Column("flags", shrink="end", min_width=8)]


def _histogram(counts, terminal: bool) -> str:
    """The sparkline; piped, empty bins are ``_`` so the field holds no blank (``awk``)."""
    if counts is None:  # not counted (no --histogram)
        return ""
    bars = sparkline(counts)
    return bars if terminal else bars.replace(" ", "_")


def _compact(value: float | int | None) -> str:
    """A number in at most 11 columns, for a terminal table: integers beyond 9 digits as
    ``9.223e+18`` (piped output and ``--wide`` keep them exact)."""
    if isinstance(value, int) and abs(value) >= 10**9:
        return f"{value:.4g}"
    return num_text(value)


def _row(r: StatsRecord, shown: dict[str, str], terminal: bool = True,
         compact: bool = False, unpaired: bool = False) -> list:
    flags = ",".join(r.flags)
    style = "red" if r.error or "nan" in r.flags or "inf" in r.flags else "yellow"
    name = shown.get(r.name, r.name)
    if r.stats is None:
        return [name, r.dtype, shape_text(r.shape), "-", "-", "-", "-", "-", "", "",
                (flags, style)]
    s = r.stats
    if s.kind == "string":  # byte lengths, not values: never under min/max/mean (u24 F1)
        return [name, r.dtype, shape_text(r.shape), "-", "-", "-", "-", "", "", "",
                (flags, style)]
    bad = f"{s.nan}/{s.inf}" if s.nan or s.inf else ""
    num = _compact if compact else num_text
    return [name, r.dtype, shape_text(r.shape), num(s.min), num(s.max), num_text(s.mean),
            num_text(s.std), bad, _histogram(s.histogram, terminal),
            "?" if unpaired else "-" if NO_DRIFT in r.flags else "" if r.drift is None
            else f"{r.drift:.3g}",
            (flags, style)]


def _selected(ckpt, names: list[str]) -> list[str]:
    """:func:`select_keys`, saying so when a name not found is one ``ckpt list`` showed
    escaped (a control character as ``\\x1b``, a backslash doubled) and pasted back."""
    from ..variable import shell_word
    from ._text import unclean

    try:
        return select_keys(ckpt, names)
    except VariableNotFoundError:
        known = set(ckpt.keys()) | {v.path for v in ckpt.variables_unwarned() if v.path}
        meant = [(n, unclean(n)) for n in names if n not in known and unclean(n) in known]
        if not meant:
            raise
        typed, name = meant[0]
        raise VariableNotFoundError(
            f"{ckpt.path}: no variable named {typed!r} ('ckpt list' shows control characters "
            f"and backslashes escaped); did you mean {shell_word(name)}?"
        ) from None

