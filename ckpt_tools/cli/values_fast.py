"""Fast cells and layout for ``ckpt show --full`` (task s31h: NumPy's ``array2string`` laid out
1M float32 values in ~51 s, a Python call per element and per line; ``--json`` took 6.8 s).

The text is NumPy's, byte for byte, for real-number arrays (floats, signed and unsigned
integers) whose elements NumPy pads to one width:

* :func:`cell_formatter` reads the widths NumPy chose for the *witnesses* (the elements that
  decide the whole array's widths, see :mod:`.values_stream`) from their own text, and formats
  any element with ``np.format_float_positional`` / ``np.format_float_scientific`` at those
  widths (what NumPy's float formatter calls), or ``str`` right-justified for integers. It
  proves itself first: the witnesses formatted by it must read as NumPy printed them, else it
  returns ``None`` and the caller keeps NumPy's own (slow) path.
* :func:`layout` places equal-width cells as NumPy's ``_formatArray`` does (no summary): a
  row holds as many cells as fit ``width`` less its hanging indent and one column for ``,`` or
  ``]``, wrapped lines end with ``,`` and start at the hanging indent, and nested rows are
  joined by ``,`` and one newline per axis below.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np

#: A formatter: the flat elements to their cells (each of one width).
Cells = Callable[[np.ndarray], list[str]]


def cell_formatter(witnesses: np.ndarray, precision: int) -> Cells | None:
    """The formatter of elements padded as among ``witnesses`` (a float or integer array).

    Returns:
        a function from a flat array of ``witnesses``' dtype to its cells, or ``None`` where
        the witnesses' text is not one this module reproduces (the caller uses NumPy's).
    """
    if witnesses.size == 0 or witnesses.dtype.kind not in "fiu":
        return None
    text = np.array2string(witnesses, precision=precision, separator="\x00",
                           threshold=sys.maxsize, max_line_width=sys.maxsize)
    want = text[1:-1].split("\x00")
    if len(want) != witnesses.size or len({len(c) for c in want}) != 1:
        return None
    width = len(want[0])
    if witnesses.dtype.kind in "iu":
        def ints(flat: np.ndarray) -> list[str]:
            return [str(v).rjust(width) for v in flat.tolist()]
        cells: Cells = ints
    else:
        one = _float_cell(want, witnesses, precision)
        if one is None:
            return None
        cells = _float_cells(one, width)
    try:
        return cells if cells(witnesses) == want else None
    except (ValueError, TypeError):
        return None


def _float_cell(want: list[str], witnesses: np.ndarray,
                precision: int) -> Callable[[np.floating], str] | None:
    """The finite-element formatter whose widths NumPy's text ``want`` of ``witnesses``
    shows, or ``None`` (no finite witness, or a text without a ``.``)."""
    finite = [c for c, v in zip(want, witnesses, strict=True) if np.isfinite(v)]
    if not finite or "." not in finite[0]:
        return None
    cell = finite[0]
    left = cell.index(".")
    if "e" in cell:  # scientific: every cell has `digits` fraction digits and one exponent
        digits = cell.index("e") - left - 1
        exp = len(cell) - cell.index("e") - 2
        sci = np.format_float_scientific

        def scientific(x: np.floating) -> str:
            return sci(x, precision=digits, min_digits=digits, unique=True, trim="k",
                       pad_left=left, exp_digits=exp)
        return scientific
    right = len(cell) - left - 1
    pos = np.format_float_positional

    def positional(x: np.floating) -> str:
        return pos(x, precision=precision, unique=True, fractional=True, trim=".",
                   pad_left=left, pad_right=right)
    return positional


def _float_cells(one: Callable[[np.floating], str], width: int) -> Cells:
    """Cells of a flat float array: ``one`` for finite elements, NaN and ±Inf spelled as
    NumPy does, right-justified to ``width``."""
    def cells(flat: np.ndarray) -> list[str]:
        finite = np.isfinite(flat)
        if finite.all():
            return [one(x) for x in flat]
        return [one(x) if f else ("nan" if np.isnan(x) else "-inf" if x < 0 else "inf")
                .rjust(width) for x, f in zip(flat, finite.tolist(), strict=True)]
    return cells


def layout(shape: tuple[int, ...], cells: list[str], width: int, depth: int) -> str:
    """``cells`` (C order, one width) in ``shape`` as ``np.array2string(a, separator=", ",
    max_line_width=width - depth, prefix=" " * depth)`` lays them out.

    Returns:
        `str`: the text (no trailing newline)."""
    return _nest(shape, cells, 0, depth + 1, width - depth)


def _nest(shape: tuple[int, ...], cells: list[str], start: int, hang: int, room: int) -> str:
    if len(shape) == 1:
        n = shape[0]
        w = len(cells[start]) if n else 0
        per = 1 + max(0, (room - 1 - hang - w) // (w + 2))
        lines = [", ".join(cells[i:min(i + per, start + n)])
                 for i in range(start, start + n, per)]
        return "[" + (",\n" + " " * hang).join(lines) + "]"
    size = 1
    for d in shape[1:]:
        size *= d
    sep = "," + "\n" * (len(shape) - 1) + " " * hang
    return "[" + sep.join(_nest(shape[1:], cells, start + i * size, hang + 1, room - 1)
                          for i in range(shape[0])) + "]"
