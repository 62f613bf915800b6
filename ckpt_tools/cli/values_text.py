"""How ``ckpt show`` and ``ckpt stats`` write a tensor's values and statistics: NumPy-style
text that fits the terminal, JSON-ready values (NaN/Inf as strings, strings decoded), and
histograms as unicode bars.
"""

from __future__ import annotations

import base64
import math
import sys

import numpy as np

from ..tensor_stats import TensorStats, json_float

_SPARK = "▁▂▃▄▅▆▇█"


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


def num_text(value: float | int | None, precision: int = 4) -> str:
    """Returns ``value`` for a table: ``-`` for none, integers with thousands separators,
    floats with ``precision`` significant digits."""
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.{precision}g}"


def stats_lines(s: TensorStats, precision: int) -> list[str]:
    """Returns the lines ``ckpt show`` prints under a tensor: count, range, mean, std, L2,
    NaN/Inf counts and the histogram when there is one."""
    if s.kind == "string":
        return [f"count {s.count:,}  byte length min {num_text(s.min)}  max {num_text(s.max)}  "
                f"mean {num_text(s.mean, precision)}"]
    lines = [f"count {s.count:,}  min {num_text(s.min, precision)}  "
             f"max {num_text(s.max, precision)}  mean {num_text(s.mean, precision)}  "
             f"std {num_text(s.std, precision)}  "
             f"L2 {num_text(s.l2, precision)}",
             f"NaN {s.nan:,}  Inf {s.inf:,}  zero fraction "
             f"{'-' if s.zero_fraction is None else f'{s.zero_fraction:.3f}'}"]
    if s.histogram:
        lines.append(f"histogram [{num_text(s.min, 3)}, {num_text(s.max, 3)}] "
                     f"{sparkline(s.histogram)}")
    return lines


def format_values(array: np.ndarray, *, full: bool, precision: int, width: int = 100) -> str:
    """Returns NumPy-style text for ``array``, summarised with ``...`` unless ``full``.

    Args:
        array (`np.ndarray`): any tensor (bfloat16/float8 print as float32).
        full (`bool`): print every element.
        precision (`int`): digits after the decimal point.
        width (`int`): the longest line (a terminal's width: rows never wrap into each other).

    Returns:
        `str`: the text, without a trailing newline.

    Example:
        >>> format_values(np.arange(3.0), full=False, precision=2)
        '[0., 1., 2.]'
    """
    if array.dtype.kind == "V":  # ml_dtypes (bfloat16, float8): print as float32
        array = array.astype(np.float32)
    # Strings are summarised too: a long one shows its first bytes and its length.
    formatter = None if full or array.dtype.kind != "O" else {"object": _short_string}
    return np.array2string(array, precision=precision, separator=", ",
                           threshold=sys.maxsize if full else 200, edgeitems=3,
                           max_line_width=width, formatter=formatter)


#: Longer string values are shortened (unless ``--full``) to this many bytes and their length.
STRING_HEAD = 64


def _short_string(value) -> str:
    if isinstance(value, (bytes, str)) and len(value) > STRING_HEAD:
        unit = "bytes" if isinstance(value, bytes) else "characters"
        return f"{value[:STRING_HEAD]!r}...({len(value)} {unit})"
    return repr(value)


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
    data = json_ready(flat)
    if truncated:
        return {"values": None, "truncated": True, "head": data}
    return {"values": data, "truncated": False}


def json_ready(array: np.ndarray):
    """The values of ``array`` as JSON holds them, element by element (so a part of an array
    converts as the whole does): nested lists, strings decoded, NaN/Inf as strings, complex
    values as ``[real, imag]`` pairs, bfloat16 as float32; a string whose bytes are not UTF-8 as
    ``{"base64": ...}``.

    Returns:
        nested lists, or one value for a 0-d array.
    """
    if array.dtype.kind in "OSU":
        return (np.vectorize(_text, otypes=[object])(array).tolist() if array.size
                else array.tolist())
    if array.dtype.kind == "V":
        array = array.astype(np.float32)
    if array.dtype.kind == "c":
        array = np.stack([array.real, array.imag], axis=-1)
    if array.dtype.kind in "biu" or (array.dtype.kind == "f" and np.isfinite(array).all()):
        return array.tolist()  # nothing JSON cannot hold: no walk over every value
    return _clean(array.tolist())


def _text(value) -> str | dict[str, str]:
    """One string element as JSON holds it: its text where its bytes are UTF-8, else
    ``{"base64": ...}`` of its bytes, so that no text stands for two values (review-30-user-u32
    F7: ``b"\\xff"`` was written as the text ``\\xff``, which a stored backslash spells too).

    Returns:
        `str` or ``{"base64": str}``.
    """
    if not isinstance(value, bytes):
        return str(value)
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode("ascii")}


def _clean(data):
    if isinstance(data, list):
        return [_clean(x) for x in data]
    return json_float(data)
