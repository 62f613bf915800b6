"""Table layout for the one printer (:mod:`._output`): columns, and fitting a table to the
terminal's width by shortening names at ``/`` boundaries, then hiding low-priority columns,
and a table's tab-separated lines for a pipe."""

from __future__ import annotations

from collections.abc import Sequence

from ..formats._record import Frozen, replace
from ._shorten import shorten_counted
from ._text import cell_len, clean, shorten_end


class Column(Frozen):
    """One table column.

    Attributes:
        name: header text.
        justify: ``"left"`` or ``"right"``.
        shrink: ``"middle"`` (names: middle ellipsis at ``/``), ``"end"`` (lists), or ``None``
            (numbers, dtypes: never shortened).
        min_width: narrowest a shrinking column may become.
        hide: priority for hiding the column when the table cannot fit (0: never; the highest
            goes first).
        floor: narrowest a shrinking column may become when nothing else can give way.
        prefix_from: index of a column whose cell, when this cell starts with it and ``/``, is
            the first part left out when this cell must be shortened (``diff --ema`` shows a
            shadow ``conv1/w/ExponentialMovingAverage`` beside ``conv1/w`` as
            ``…/ExponentialMovingAverage``); with ``lead``, a cell ``of X`` whose X that cell
            ``…/ExponentialMovingAverage``); when that column has a ``lead``, the cell there is
            read without it (``list`` shows a shadow beside ``of conv1/w`` as
            ``…/ExponentialMovingAverage``, so the width goes to the variable it averages).
        lead: a word a cell may start with that shortening keeps whole (``of ``); the rest is
            shortened like a name, by whole ``/`` segments.
        data: whether the column is data; a decorative one (``map``'s arrow) is left out when
            stdout is not a terminal.
        terminal: whether the column is shown on a terminal. A column with nothing to show for
            this input (``list``'s collections without a ``.meta``) is still a field, all ``-``,
            when stdout is not a terminal, so a command's field numbers are the same for every
            checkpoint (``cut -f7`` is always the EMA column).
    """

    name: str
    justify: str = "left"
    shrink: str | None = None
    min_width: int = 12
    hide: int = 0
    floor: int = 6
    prefix_from: int | None = None
    lead: str = ""
    data: bool = True
    terminal: bool = True
    _fields = ("name", "justify", "shrink", "min_width", "hide", "floor", "prefix_from", "lead",
               "data", "terminal")

    def __init__(self, name: str, justify: str = "left", shrink: str | None = None,
                 min_width: int = 12, hide: int = 0, floor: int = 6,
                 prefix_from: int | None = None, lead: str = "", data: bool = True,
                 terminal: bool = True) -> None:
        self.__dict__.update(name=name, justify=justify, shrink=shrink, min_width=min_width,
                             hide=hide, floor=floor, prefix_from=prefix_from, lead=lead,
                             data=data, terminal=terminal)


class NameColumns:
    """The name columns (``shrink="middle"``) of one table: their shortened cells, and a
    rebalancing of width between them so that none has to cut inside a ``/`` segment while
    another has columns to spare."""

    #: Above this many rows the widths from :func:`fit_columns` are kept as they are.
    MAX_ROWS = 2000

    def __init__(self, columns: Sequence[Column], shown: list[int], widths: list[int],
                 raw: list[list[tuple[str, str | None]]]):
        self.columns, self.widths, self.raw = columns, widths, raw
        self.ids = [i for i in shown if columns[i].shrink == "middle"]
        self._memo: dict[tuple[int, int], tuple[list[str], int]] = {}

    def shorten(self, i: int, width: int) -> tuple[list[str], int]:
        """Column ``i``'s cells at ``width``, and how many were cut inside a segment."""
        if (i, width) not in self._memo:
            col = self.columns[i]
            prefixes = None
            if col.prefix_from is not None:
                lead = self.columns[col.prefix_from].lead
                prefixes = [r[col.prefix_from][0] for r in self.raw]
                if lead:
                    prefixes = [p[len(lead):] if p.startswith(lead) else None
                                for p in prefixes]
            self._memo[i, width] = shorten_counted(
                [r[i][0] for r in self.raw], width, clean, cell_len, prefixes=prefixes,
                lead=col.lead)
        return self._memo[i, width]

    def loss(self) -> int:
        """How much the name columns lose at their widths (see :func:`shorten_counted`)."""
        if len(self.raw) > self.MAX_ROWS:
            return 0
        return sum(self.shorten(i, self.widths[i])[1] for i in self.ids)

    def balance(self) -> None:
        """Moves columns, one at a time, from a name column that can spare them (it still
        cuts no segment) to one that cuts segments, while that helps."""
        if len(self.ids) < 2 or len(self.raw) > self.MAX_ROWS:
            return
        w = self.widths
        for _ in range(64):
            needy = [i for i in self.ids if self.shorten(i, w[i])[1]]
            if not needy:
                return
            i = needy[0]
            donors = [j for j in self.ids if j != i and w[j] - 1 >= max(
                self.columns[j].floor, cell_len(self.columns[j].name))
                and self.shorten(j, w[j] - 1)[1] <= self.shorten(j, w[j])[1]]
            if not donors:
                return
            j = max(donors, key=lambda k: w[k])
            w[j] -= 1
            w[i] += 1


def terminal_columns(columns: Sequence[Column], raw: list[list[tuple[str, str | None]]]
                      ) -> tuple[list[Column], list[list[tuple[str, str | None]]]]:
    """The columns shown on a terminal (``Column.terminal``) and the rows' cells in them, with
    ``prefix_from`` renumbered."""
    keep = [i for i, col in enumerate(columns) if col.terminal]
    new = {old: k for k, old in enumerate(keep)}
    cols = [replace(columns[i], prefix_from=new.get(columns[i].prefix_from))
            for i in keep]
    return cols, [[row[i] for i in keep] for row in raw]


def fit_columns(columns: Sequence[Column], natural: list[int], width: int, gap: int,
         empty: frozenset[int] = frozenset(), extra: int = 0) -> tuple[list[int], list[int]]:
    """Chooses the shown columns and their widths so that a row fits ``width``: shrinking
    columns first give way down to their ``min_width``, then columns with no value in any row
    (``empty``) go, then hideable columns, then shrinking columns give way down to their
    header's width. ``extra`` more hideable columns go once the table must shrink (so that
    names keep what tells them apart)."""
    shown = list(range(len(columns)))

    def shrink(floor) -> tuple[list[int], int]:
        widths = list(natural)
        excess = sum(widths[i] for i in shown) + gap * (len(shown) - 1) - width
        shrinkable = [i for i in shown if columns[i].shrink]
        while excess > 0:  # take from the column with the most room until the row fits
            room = [(widths[i] - floor(i), i) for i in shrinkable]
            best, i = max(room, default=(0, -1))
            if best <= 0:
                break
            # never below its floor: another column's negative room (already narrower than
            # its own floor) is no reason to take more from this one
            step = min(excess, best,
                       max(1, best - max((r for r, j in room if j != i and r > 0), default=0)))
            widths[i] -= step
            excess -= step
        return widths, excess

    def soft(i: int) -> int:
        return max(columns[i].min_width, cell_len(columns[i].name))

    def hard(i: int) -> int:
        return max(columns[i].floor, cell_len(columns[i].name))

    while True:
        widths, excess = shrink(soft)
        if excess <= 0 and (extra <= 0 or widths == natural):
            return shown, widths
        if excess <= 0:
            hideable = [i for i in shown if columns[i].hide]
            if not hideable:
                return shown, widths
            shown.remove(max(hideable, key=lambda i: columns[i].hide))
            extra -= 1
            continue
        blank = [i for i in shown if i in empty]
        if blank:
            shown.remove(blank[-1])
            continue
        hideable = [i for i in shown if columns[i].hide]
        if not hideable:
            return shown, shrink(hard)[0]
        shown.remove(max(hideable, key=lambda i: columns[i].hide))


class FittedTable(Frozen):
    """How a table fits the terminal: the columns shown (indices into ``columns``, which
    :func:`terminal_columns` may have replaced), their widths, each row's cell texts (escaped,
    shortened to fit) and the note naming hidden columns (``None``: none hidden)."""

    columns: Sequence[Column]
    raw: list[list[tuple[str, str | None]]]
    shown: list[int]
    widths: list[int]
    text: list[list[str]]
    hidden_note: str | None
    _fields = ("columns", "raw", "shown", "widths", "text", "hidden_note")

    def __init__(self, columns, raw, shown, widths, text, hidden_note) -> None:
        self.__dict__.update(columns=columns, raw=raw, shown=shown, widths=widths, text=text,
                             hidden_note=hidden_note)


def fit_table(columns: Sequence[Column], raw: list[list[tuple[str, str | None]]], width: int,
              gap: int, wide: bool) -> FittedTable:
    """Fits a table of ``raw`` cells (``(text, style)``) to ``width`` terminal columns with
    ``gap`` blanks between columns: low-priority columns are hidden before names lose
    characters, names are shortened in the middle at ``/`` boundaries, lists at the end;
    ``wide`` keeps every column and cell whole.

    Returns:
        A :class:`FittedTable`.
    """
    if not all(col.terminal for col in columns):
        columns, raw = terminal_columns(columns, raw)
    hidden_note = None
    shown_text = [[clean(text) for text, _ in row] for row in raw]
    widths = [max([cell_len(col.name)] + [cell_len(r[i]) for r in shown_text])
              for i, col in enumerate(columns)]
    shown = list(range(len(columns)))
    if not wide:
        empty = frozenset(i for i in range(len(columns))
                          if raw and all(not r[i] for r in shown_text))
        natural = widths
        for extra in range(len(columns)):  # hide low-priority columns before losing names
            shown, widths = fit_columns(columns, natural, width, gap, empty,
                                        extra)
            names = NameColumns(columns, shown, widths, raw)
            names.balance()
            if not names.loss() or len(shown) == len(fit_columns(
                    columns, natural, width, gap, empty, extra + 1)[0]):
                break
        hidden = [columns[i].name for i in range(len(columns))
                  if i not in shown and i not in empty]
        blank = [columns[i].name for i in range(len(columns)) if i not in shown and i in empty]
        if hidden or blank:  # said after the table, below what it is about
            hidden_note = (f"hidden at {width} columns: "
                      + "; ".join(([", ".join(hidden)] if hidden else [])
                                  + ([f"{', '.join(blank)} (empty)"] if blank else []))
                      + " (--wide shows them)")
        for i in shown:
            col, w = columns[i], widths[i]
            if not col.shrink or all(cell_len(r[i]) <= w for r in shown_text):
                continue
            if col.shrink == "middle":
                short = names.shorten(i, w)[0]
            else:
                short = [shorten_end(r[i][0], w) for r in raw]
            for r, text in zip(shown_text, short, strict=True):
                r[i] = text
    return FittedTable(columns, raw, shown, widths, shown_text, hidden_note)


def tsv_lines(columns: Sequence[Column], raw: list[list[tuple[str, str | None]]]) -> list[str]:
    """The header and rows as tab-separated fields, one row per line, names whole: fields
    never hold a tab (escaped as ``\\t``), an empty field is ``-``, and headers hold no
    blanks, so ``awk -F'\\t'`` and ``cut -f`` see the same number of fields on every
    line."""
    keep = [i for i, col in enumerate(columns) if col.data]
    out = ["\t".join(columns[i].name.replace(" ", "_") or "-" for i in keep)]
    out += ["\t".join(clean(row[i][0]) or "-" for i in keep) for row in raw]
    return out
