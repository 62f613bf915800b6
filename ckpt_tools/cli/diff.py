"""``ckpt diff``: compare two checkpoints, or each variable with its EMA shadow.

Examples::

    ckpt diff train/model.ckpt-20 train/model.ckpt-30       # what changed between two steps
    ckpt diff model.ckpt-30 --ema                           # how far shadows lag raw weights
    ckpt diff a b --grep 'conv*' --changed-only --json
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ..diff import SAME, DiffReport, diff_checkpoints, diff_ema
from ._common import JsonOpt, PathArg, QuietOpt
from ._output import Output
from .inspect import matcher


def diff_command(
    a: PathArg,
    b: Annotated[str | None, typer.Argument(
        help="Second checkpoint (omit with --ema).", show_default=False)] = None,
    ema: Annotated[bool, typer.Option(
        "--ema", help="Compare each variable of A with its EMA shadow instead.")] = False,
    grep: Annotated[str | None, typer.Option(
        "--grep", "-g", help="Only keys matching this glob or regular expression.")] = None,
    changed_only: Annotated[bool, typer.Option(
        "--changed-only", help="Hide tensors that are bit-identical.")] = False,
    no_values: Annotated[bool, typer.Option(
        "--no-values", help="Compare names, shapes and dtypes only; read no tensor data.")
    ] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Show keys only in A or B, shape/dtype changes, and max-abs / relative L2 differences.

    The relative difference is ||B - A|| / ||A|| (for --ema: ||ema - raw|| / ||raw||).
    Exits 0 whether or not the checkpoints differ.
    """
    if ema == (b is not None):
        raise typer.BadParameter("give a second checkpoint B, or --ema to compare A with its "
                                 "own EMA shadows (not both)", param_hint="B")
    out = Output(json_mode=json_out, quiet=quiet)
    match = matcher(grep) if grep else None
    if ema:
        report = diff_ema(a, match=match, values=not no_values)
    else:
        report = diff_checkpoints(a, b, match=match, values=not no_values)
    if changed_only:
        report.tensors = [t for t in report.tensors if t.changed]
    if json_out:
        out.json(report.to_dict())
        return
    _print(out, report)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _print(out: Output, report: DiffReport) -> None:
    ema = report.mode == "ema"
    title = f"{report.a}: raw vs EMA" if ema else f"A = {report.a}\nB = {report.b}"
    table = Table(title=title, title_justify="left", box=None, header_style="bold",
                  pad_edge=False)
    for col in ("name", "status", "shape", "dtype", "max |Δ|", "rel L2"):
        table.add_column(col, overflow="fold" if col == "name" else "ellipsis",
                         justify="right" if col in ("max |Δ|", "rel L2") else "left")
    style = {SAME: "dim", "changed": "yellow", "shape": "red", "dtype": "red",
             "unreadable": "red"}
    for t in report.tensors:
        shape = str(list(t.shape_a)) if t.shape_a == t.shape_b else \
            f"{list(t.shape_a)} → {list(t.shape_b)}"
        dtype = t.dtype_a if t.dtype_a == t.dtype_b else f"{t.dtype_a} → {t.dtype_b}"
        name = f"{t.name} [dim]vs {escape(t.other)}[/]" if ema else escape(t.name)
        table.add_row(name, f"[{style.get(t.status, 'white')}]{t.status}[/]", shape, dtype,
                      _fmt(t.max_abs), _fmt(t.rel_l2))
        if t.error:
            out.warning(t.error)
    out.print(table)
    label_a, label_b = ("weights without a shadow", "shadows of unsaved variables") if ema \
        else ("only in A", "only in B")
    for label, names in ((label_a, report.only_a), (label_b, report.only_b)):
        if names:
            out.print(f"\n[bold]{label}[/] ({len(names)}):")
            for name in names:
                out.print(f"  {escape(name)}")
    if not out.quiet:
        changed = sum(1 for t in report.tensors if t.changed)
        out.print(f"\n{len(report.tensors)} compared, {changed} differ, "
                  f"{len(report.only_a)} {label_a}, {len(report.only_b)} {label_b}")
