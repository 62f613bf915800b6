"""``ckpt show`` (values and statistics of chosen tensors) and ``ckpt stats`` (all tensors).

Examples::

    ckpt show model.ckpt-1000 W b                  # values (truncated) + statistics
    ckpt show model.ckpt-1000 'conv*/weights' --full --precision 8
    ckpt stats model.ckpt-1000                     # one line per tensor, with a histogram
    ckpt stats model.ckpt-1000 --drift 0.1 --json  # flag EMA shadows >10% away from raw
"""

from __future__ import annotations

import math
import sys
from typing import Annotated

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

from ..checkpoint import Checkpoint, open_checkpoint
from ..errors import CorruptCheckpointError
from ..stats import StatsRecord, TensorStats, checkpoint_stats, json_float, select_keys
from ._common import JsonOpt, PathArg, QuietOpt
from ._output import Output

_SPARK = "▁▂▃▄▅▆▇█"
FullOpt = Annotated[bool, typer.Option("--full", help="Print every value, not a summary.")]
PrecisionOpt = Annotated[int, typer.Option("--precision", "-p", min=0, max=20,
                                           help="Digits after the decimal point.")]


def sparkline(counts: tuple[int, ...] | list[int]) -> str:
    """Renders histogram counts as unicode bars (``▁▃█▂``); empty bins print as spaces.

    Example:
        >>> sparkline([0, 1, 4, 2])
        ' ▂█▄'
    """
    top = max(counts, default=0)
    if top <= 0:
        return ""
    return "".join(" " if c == 0 else _SPARK[min(len(_SPARK) - 1, (c * len(_SPARK) - 1) // top)]
                   for c in counts)


def _num(value: float | int | None, precision: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.{precision}g}"


def _stats_lines(s: TensorStats, precision: int) -> list[str]:
    if s.kind == "string":
        return [f"count {s.count:,}  byte length min {_num(s.min)}  max {_num(s.max)}  "
                f"mean {_num(s.mean, precision)}"]
    lines = [f"count {s.count:,}  min {_num(s.min, precision)}  max {_num(s.max, precision)}  "
             f"mean {_num(s.mean, precision)}  std {_num(s.std, precision)}  "
             f"L2 {_num(s.l2, precision)}",
             f"NaN {s.nan:,}  Inf {s.inf:,}  zero fraction "
             f"{'-' if s.zero_fraction is None else f'{s.zero_fraction:.3f}'}"]
    if s.histogram:
        lines.append(f"histogram [{_num(s.min, 3)} … {_num(s.max, 3)}] "
                     f"{sparkline(s.histogram)}")
    return lines


def format_values(array: np.ndarray, *, full: bool, precision: int) -> str:
    """Returns NumPy-style text for ``array``, summarised with ``...`` unless ``full``.

    Args:
        array (`np.ndarray`): any tensor (bfloat16/float8 print as float32).
        full (`bool`): print every element.
        precision (`int`): digits after the decimal point.

    Returns:
        `str`: the text, without a trailing newline.

    Example:
        >>> format_values(np.arange(3.0), full=False, precision=2)
        '[0., 1., 2.]'
    """
    if array.dtype.kind == "V":  # ml_dtypes (bfloat16, float8): print as float32
        array = array.astype(np.float32)
    return np.array2string(array, precision=precision, separator=", ",
                           threshold=sys.maxsize if full else 200, edgeitems=3,
                           max_line_width=100)


#: Above this many elements ``--json`` gives only the first values, unless ``--full``.
JSON_MAX_VALUES = 1000


def values_json(array: np.ndarray, *, full: bool) -> dict:
    """Returns JSON-ready values: nested lists, strings decoded, NaN/Inf as strings.

    Args:
        array (`np.ndarray`): the tensor (complex values become ``[real, imag]`` pairs).
        full (`bool`): include every value even above :data:`JSON_MAX_VALUES`.

    Returns:
        `dict`: ``{"values": [...], "truncated": false}``, or for large tensors
        ``{"values": null, "truncated": true, "head": [first values, flattened]}``.

    Example:
        >>> values_json(np.array([1.0, np.nan]), full=False)
        {'values': [1.0, 'nan'], 'truncated': False}
    """
    truncated = not full and array.size > JSON_MAX_VALUES
    flat = array.reshape(-1)[:JSON_MAX_VALUES] if truncated else array
    if flat.dtype.kind in "OSU":
        data = np.vectorize(_text, otypes=[object])(flat).tolist() if flat.size else flat.tolist()
    else:
        if flat.dtype.kind == "V":
            flat = flat.astype(np.float32)
        if flat.dtype.kind == "c":
            flat = np.stack([flat.real, flat.imag], axis=-1)
        data = _clean(flat.tolist())
    if truncated:
        return {"values": None, "truncated": True, "head": data}
    return {"values": data, "truncated": False}


def _text(value) -> str:
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


def _clean(data):
    if isinstance(data, list):
        return [_clean(x) for x in data]
    return json_float(data)


def show_command(
    path: PathArg,
    names: Annotated[list[str], typer.Argument(
        help="Tensor keys, TF2 object paths, or globs ('conv*/weights').", show_default=False)],
    full: FullOpt = False,
    precision: PrecisionOpt = 4,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Print values (NumPy style, truncated) and statistics of one or more tensors."""
    out = Output(json_mode=json_out, quiet=quiet)
    with open_checkpoint(path) as ckpt:
        keys = select_keys(ckpt, names)
        docs = []
        for key in keys:
            record = next(checkpoint_stats(ckpt, [key], strict=True))
            value = ckpt.tensor(key)
            if json_out:
                docs.append({**_record_json(record), **values_json(value, full=full)})
                continue
            _print_one(out, ckpt, record, value, full, precision)
        if json_out:
            out.json({"checkpoint": ckpt.path, "tensors": docs})


def _print_one(out: Output, ckpt: Checkpoint, record: StatsRecord, value: np.ndarray,
               full: bool, precision: int) -> None:
    entry = ckpt.entry(record.name)
    out.print(f"[bold]{escape(record.name)}[/]  {entry.dtype_name} {list(entry.shape)}  "
              f"[dim]{record.role}[/]")
    if not out.quiet:
        for line in _stats_lines(record.stats, precision):
            out.print("  " + line, highlight=False)
        if record.drift is not None:
            out.print(f"  EMA drift from {escape(record.ema_of or '')}: {record.drift:.4g}")
    out.print(format_values(value, full=full, precision=precision), highlight=False,
              markup=False)
    out.print("")


def _record_json(record: StatsRecord) -> dict:
    return {"name": record.name, "role": record.role, "dtype": record.dtype,
            "shape": list(record.shape), "stats": record.stats.to_dict() if record.stats else None,
            "ema_of": record.ema_of, "drift": json_float(record.drift),
            "flags": list(record.flags), "error": record.error}


def stats_command(
    path: PathArg,
    grep: Annotated[str | None, typer.Option(
        "--grep", "-g", help="Only tensors whose name matches this glob or regex.")] = None,
    drift: Annotated[float, typer.Option(
        "--drift", min=0.0, help="Flag EMA shadows whose relative L2 distance from their raw "
        "variable exceeds this.")] = 0.5,
    flagged: Annotated[bool, typer.Option(
        "--flagged", help="Show only tensors with NaN/Inf, drift, or read errors.")] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Statistics of every tensor, one at a time; flags NaN/Inf and drifting EMA shadows.

    Exits 4 if a tensor cannot be read (checksum mismatch, truncated data); NaN/Inf and drift
    are reported but do not change the exit code.
    """
    from .inspect import matcher

    out = Output(json_mode=json_out, quiet=quiet)
    match = matcher(grep) if grep else None
    with open_checkpoint(path) as ckpt:
        names = [k for k in ckpt.keys() if match is None or match(k)]
        records, errors = [], []
        table = _stats_table(ckpt)
        for record in checkpoint_stats(ckpt, names, drift_threshold=drift):
            if record.error:
                errors.append(record.error)
                out.warning(record.error)
            if flagged and not record.flags:
                continue
            if json_out:
                records.append(_record_json(record))
            else:
                _add_row(table, record)
        if json_out:
            out.json({"checkpoint": ckpt.path, "drift_threshold": drift, "tensors": records})
        else:
            out.print(table)
    if errors:
        raise CorruptCheckpointError(f"{len(errors)} tensor(s) could not be read; first: "
                                     f"{errors[0]}")


def _stats_table(ckpt: Checkpoint) -> Table:
    table = Table(title=f"{ckpt.path} ({ckpt.format})", title_justify="left", box=None,
                        header_style="bold", pad_edge=False)
    numeric = ("min", "max", "mean", "std", "drift")
    for col in ("name", "dtype", "shape", *numeric[:4], "nan/inf", "histogram", "drift", "flags"):
        table.add_column(col, overflow="fold" if col == "name" else "ellipsis",
                         justify="right" if col in numeric else "left")
    return table


def _add_row(table: Table, r: StatsRecord) -> None:
    flags = ", ".join(r.flags)
    style = "red" if r.error or "nan" in r.flags or "inf" in r.flags else "yellow"
    flags_text = f"[{style}]{escape(flags)}[/]" if flags else ""
    if r.stats is None:
        table.add_row(escape(r.name), r.dtype, str(list(r.shape)), "-", "-", "-", "-", "-", "",
                      "", flags_text)
        return
    s = r.stats
    bad = f"{s.nan}/{s.inf}" if s.nan or s.inf else ""
    table.add_row(escape(r.name), r.dtype, str(list(r.shape)), _num(s.min), _num(s.max),
                  _num(s.mean), _num(s.std), bad, sparkline(s.histogram),
                  "" if r.drift is None else f"{r.drift:.3g}", flags_text)
