"""The only printer of the ``ckpt`` command: tables, lines, messages, progress bars and JSON.

Rules every command gets from here, so no command has to remember them:

* Data goes to stdout, messages (notes, warnings, errors, progress) to stderr, so
  ``ckpt … --json | jq`` always gets clean JSON.
* Text is never parsed as markup, and control characters in it (names, paths, messages, on
  stdout and stderr alike) are shown escaped (``\\x1b``, ``\\n``): a checkpoint cannot drive the
  terminal or forge a row.
* Tables fit the terminal without breaking a cell mid-word: long names are shortened with a
  middle ellipsis at ``/`` boundaries, lists with an ellipsis at the end, and low-priority columns
  are hidden (with a note) when even that is not enough; ``wide`` shows everything whole. When
  stdout is not a terminal every row is one line of aligned columns, so ``grep``/``awk``/``cut``
  work.

Tables and messages are plain text with ANSI colours (when the stream is a terminal and
``NO_COLOR`` is unset); only the progress bar imports rich, and only when it is shown.
``TTY_COMPATIBLE=1``/``0`` forces terminal/pipe behaviour, ``COLUMNS`` sets the width.
"""

from __future__ import annotations

import json
import os
import re
import sys
import unicodedata
from collections.abc import Sequence

from ..errors import CheckpointError, ExitCode, redact
from ..formats._record import Frozen, replace
from ._shorten import ELLIPSIS, shorten_counted

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    from typing import Any, TextIO

# C0/C1 controls, DEL, and invisible format characters that reorder or hide text (bidi
# overrides and isolates, zero-width spaces and joiners, the soft hyphen, word joiners,
# interlinear annotations, tag characters).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u2028-\u202e"
                      "\u2060-\u206f\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]")
_DATA = re.compile(_CONTROL.pattern + "|\\\\")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def clean(text: object) -> str:
    """Returns ``text`` (a name, a cell, a line of data) as a string with control characters
    escaped (``\\x1b``, ``\\n``) and a backslash doubled, so the escaping is one-to-one: a name
    holding ESC shows as ``t\\x1bx``, one spelling it out (backslash, ``x1b``) as ``t\\\\x1bx``.

    Example:
        >>> clean("a\\nb\\x1b[2J")
        'a\\\\nb\\\\x1b[2J'
    """
    s = text if isinstance(text, str) else str(text)
    if not _DATA.search(s):
        return s
    return _DATA.sub(_escape_char, s)


def clean_message(text: object) -> str:
    """Returns a message (notes, errors, titles, sentences) with control characters escaped;
    backslashes stay as they are, since messages quote names with ``repr`` (which doubles
    them) and may hold text to type back (``$'t\\x1bx'``)."""
    s = text if isinstance(text, str) else str(text)
    if not _CONTROL.search(s):
        return s
    return _CONTROL.sub(_escape_char, s)


def _json_escape(m: re.Match) -> str:
    c = m.group(0)
    if ord(c) > 0xFFFF:  # JSON spells astral characters as a surrogate pair
        v = ord(c) - 0x10000
        return f"\\u{0xD800 + (v >> 10):04x}\\u{0xDC00 + (v & 0x3FF):04x}"
    return f"\\u{ord(c):04x}"


def _escape_char(m: re.Match) -> str:
    c = m.group(0)
    if c in _NAMED:
        return _NAMED[c]
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def cell_len(text: str) -> int:
    """Returns how many terminal columns ``text`` takes (wide CJK characters count 2)."""
    if text.isascii():
        return len(text)
    n = 0
    for c in text:
        if unicodedata.combining(c):
            continue
        n += 2 if unicodedata.east_asian_width(c) in "WF" else 1
    return n


def shorten_end(text: str, width: int) -> str:
    """Shortens a list (``a,b,c``, raw or shown) to ``width`` columns with ``…`` at the end,
    after a comma when one fits; an escape (``\\x1b``) is never cut.

    Example:
        >>> shorten_end("trainable,global,model", 18)
        'trainable,global,…'
    """
    shown = clean(text)
    if cell_len(shown) <= width:
        return shown
    if width <= 1:
        return ELLIPSIS[:width]
    tokens = [clean(c) for c in text] if shown != text else list(text)
    head, n = [], 0
    for t in tokens:
        if n + cell_len(t) > width - 1:
            break
        head.append(t)
        n += cell_len(t)
    cut = max((k for k, t in enumerate(head) if t == ","), default=-1)
    if cut > 0:
        head = head[: cut + 1]
    return "".join(head) + ELLIPSIS


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


Cell = str | tuple[str, str | None]
_SGR = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34",
        "magenta": "35", "cyan": "36"}


def _forced_tty() -> bool | None:
    value = os.environ.get("TTY_COMPATIBLE", "")
    return {"1": True, "0": False}.get(value)


def _is_tty(stream: TextIO) -> bool:
    forced = _forced_tty()
    if forced is not None:
        return forced
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class StdoutError(CheckpointError):
    """stdout cannot be written (closed with ``>&-``, a full disk behind ``>file``): the
    command's data is lost, so it fails with exit 1 naming stdout. (A reader that went away,
    ``| head``, is a BrokenPipeError instead: not an error.)"""

    exit_code = ExitCode.ERROR


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return "closed"


class Output:
    """Printer with human, JSON and quiet modes.

    Args:
        json_mode: print machine-readable JSON on stdout instead of tables.
        quiet: print only the data itself: no titles, summaries or notes (warnings and errors
            still go to stderr).
        wide: never shorten names or hide columns, whatever the terminal width.
    """

    #: Show a progress bar only for work over this many bytes (and only on a terminal).
    PROGRESS_MIN_BYTES = 64 << 20
    GAP = "  "

    def __init__(self, *, json_mode: bool = False, quiet: bool = False, wide: bool = False):
        self.json_mode = json_mode
        self.quiet = quiet
        self.wide = wide
        self._written: str | None = None
        self._stdout_lost = False

    # -- streams ----------------------------------------------------------------------------
    @property
    def stdout(self) -> TextIO:
        return sys.stdout  # looked up on each use: tests and pagers replace sys.stdout

    @property
    def stderr(self) -> TextIO:
        return sys.stderr

    @property
    def is_terminal(self) -> bool:
        """Whether stdout is a terminal (tables then fit its width)."""
        return _is_tty(self.stdout)

    @property
    def width(self) -> int:
        """Columns available on stdout's terminal (``COLUMNS`` wins; at least 40)."""
        try:
            columns = int(os.environ.get("COLUMNS", ""))
        except ValueError:
            import shutil  # tables only: --json and -q never ask for a width

            columns = shutil.get_terminal_size((100, 24)).columns
        return max(40, columns)

    def _paint(self, text: str, style: str | None, stream: TextIO) -> str:
        if not style or os.environ.get("NO_COLOR") or not _is_tty(stream) \
                or os.environ.get("TERM") == "dumb":
            return text
        codes = ";".join(_SGR[s] for s in style.split() if s in _SGR)
        return f"\x1b[{codes}m{text}\x1b[0m" if codes else text

    def wrote(self, path: str) -> None:
        """Records that the command's output ``path`` is complete: from now on stdout that
        cannot be written (closed, disk full) is a warning, not a failure, since what the user
        asked for exists (the summary is only a report on it)."""
        self._written = path

    def write_err(self, text: str) -> None:
        """Writes to stderr; a message that cannot be shown (stderr closed or full) changes
        nothing, least of all the exit code."""
        try:
            self.stderr.write(redact(text))  # a URL's password never reaches a log
            self.stderr.flush()
        except (OSError, ValueError, AttributeError):
            pass

    def raw(self, text: str) -> None:
        """Writes ``text`` to stdout as it is (a completion script: our own text, not a name)."""
        self._write(self.stdout, text)

    def _write(self, stream: TextIO | None, text: str) -> None:
        """Writes data to stdout (``stream``); see :class:`StdoutError` and :meth:`wrote`."""
        if self._stdout_lost:
            return
        try:
            if stream is None:  # started with stdout closed (`>&-`)
                raise ValueError("stdout is closed")
            stream.write(redact(text))  # summaries and --json name URLs without their secrets
            stream.flush()
        except BrokenPipeError:
            raise  # `| head`: the reader went away (not an error; see cli.commands)
        except (OSError, ValueError) as exc:
            self._stdout_lost = True
            _discard_stdout()
            if self._written is None:
                raise StdoutError(f"stdout: {_reason(exc)} while printing the output") from None
            self.warning(f"stdout: {_reason(exc)}, the summary was not printed; "
                         f"{self._written} was written completely")

    # -- data on stdout ---------------------------------------------------------------------
    def json(self, data: Any) -> None:
        """Prints ``data`` as one JSON document (control characters come out as ``\\u001b``):
        indented on a terminal, for reading; one compact line when piped, for ``jq`` and
        scripts."""
        if self.is_terminal:
            # json escapes newlines inside strings, so each "\n" left is the indentation's.
            lines = json.dumps(data, indent=2, ensure_ascii=False, default=_default).split("\n")
        else:
            # Compact separators and no indent keep json.dumps on its C encoder
            # (c_make_encoder); indent=... falls back to the pure-Python one, ~10x slower on a
            # large listing.
            lines = [json.dumps(data, separators=(",", ":"), ensure_ascii=False,
                                default=_default)]
        self._json_lines(lines)

    def json_of(self, result: Any) -> None:
        """Prints ``result.to_dict()`` as :meth:`json` does; piped, the compact line comes from
        ``result.to_json(default)`` (the same bytes, built faster: see
        :meth:`ckpt_tools.listing.Listing.to_json`)."""
        if self.is_terminal:
            self.json(result.to_dict())
        else:
            self._json_lines([result.to_json(_default)])

    def _json_lines(self, lines: list[str]) -> None:
        """Writes a JSON document's lines, escaping what json.dumps leaves as it is."""
        # json escapes C0 controls itself, not DEL, C1 or the invisible format characters
        # (U+202E reorders what a terminal shows): escape those too, as \uXXXX.
        # Of _CONTROL only C0 (which json.dumps has escaped already) and DEL are ASCII, so
        # an ASCII document (a flag CPython keeps) needs one memchr for DEL, not the regex
        # scan (4 ms on a 3,000-variable listing).
        lines = [_CONTROL.sub(_json_escape, t)
                 if (not t.isascii() or "\x7f" in t) and _CONTROL.search(t) else t
                 for t in lines]
        self._write(self.stdout, "\n".join(lines) + "\n")

    def lines(self, texts: Sequence[str]) -> None:
        """Prints plain lines (each escaped like :meth:`line`) in one write: ``-q`` listings of
        100,000 names would otherwise pay a write and a flush per name."""
        if self.json_mode or not texts:
            return
        self._write(self.stdout, "\n".join(clean(t) for t in texts) + "\n")

    def line(self, *segments: Cell, message: bool = False) -> None:
        """Prints one line of ``text`` or ``(text, style)`` segments (not in JSON mode): data
        escaped by :func:`clean`, or with ``message`` a sentence escaped by
        :func:`clean_message` (its names already quoted with ``repr``)."""
        if self.json_mode:
            return
        escape = clean_message if message else clean
        parts = []
        for seg in segments:
            text, style = (seg, None) if isinstance(seg, str) else seg
            parts.append(self._paint(escape(text), style, self.stdout))
        self._write(self.stdout, "".join(parts) + "\n")

    def tsv(self, *cells: str) -> None:
        """Prints one row of tab-separated cells (each escaped, so a tab in a name cannot
        shift a column)."""
        if not self.json_mode:
            self._write(self.stdout, "\t".join(clean(c) for c in cells) + "\n")

    def prose(self, text: str, style: str | None = None) -> None:
        """Prints a sentence; on a terminal it wraps at spaces (never inside a word) to fit."""
        if self.json_mode:
            return
        for part in self._wrap(clean_message(text)):
            self._write(self.stdout, self._paint(part, style, self.stdout) + "\n")

    def summary(self, text: str = "", style: str | None = None) -> None:
        """A summary sentence after a table (``text`` empty: the blank line before it): on
        stdout under the table on a terminal, on stderr when stdout is piped, so that
        ``ckpt list x | cut -f1`` and ``awk`` see the table's rows only."""
        if self.json_mode:
            return
        if self.is_terminal:
            if text:
                self.prose(text, style)
            else:
                self.line("")
            return
        if text:
            parts = self._wrap_for(clean_message(text), self.stderr)
            self.write_err("".join(self._paint(p, style, self.stderr) + "\n" for p in parts))

    def _wrap(self, text: str) -> list[str]:
        return self._wrap_for(text, self.stdout)

    def _width_of(self, stream: TextIO) -> int:
        """Columns of the terminal ``stream`` is on: stderr's own when stdout is piped
        (``ckpt list x | less`` still wraps its errors to the terminal), ``COLUMNS`` first."""
        if stream is self.stdout or os.environ.get("COLUMNS", "").isdigit():
            return self.width
        try:
            return max(40, os.get_terminal_size(stream.fileno()).columns)
        except (OSError, ValueError, AttributeError):  # not a terminal, or no file (tests)
            return self.width

    def _wrap_for(self, text: str, stream: TextIO) -> list[str]:
        if not _is_tty(stream) or self.wide:
            return [text]
        width = self._width_of(stream)
        if cell_len(text) <= width:
            return [text]
        import textwrap

        return textwrap.wrap(text, width, break_long_words=False,
                             break_on_hyphens=False) or [text]

    def block(self, text: str, style: str | None = None) -> None:
        """Prints multi-line text (``np.array2string`` output, whose strings are ``repr``
        literals), each line escaped as a message."""
        for part in text.split("\n"):
            self.line((part, style), message=True)

    def table(self, title: str | Sequence[str] | None, columns: Sequence[Column],
              rows: Sequence[Sequence[Cell]]) -> None:
        """Prints a table; see the module docstring for how it fits the terminal.

        ``title`` lines and the header row are left out with ``quiet`` (every command's
        ``-q`` table is its rows only); cells are ``text`` or ``(text, style)``.
        When stdout is not a terminal the header and rows are tab-separated fields (see
        :meth:`_tsv_table`).
        """
        if self.json_mode:
            return
        raw = [[(c, None) if isinstance(c, str) else (c[0], c[1]) for c in row] for row in rows]
        lines = []
        if title is not None and not self.quiet:
            for t in [title] if isinstance(title, str) else title:
                lines += [self._paint(part, "bold", self.stdout)
                          for part in self._wrap(clean_message(t))]
        if not self.is_terminal:
            table = self._tsv_table(columns, raw)[1 if self.quiet else 0:]
            if lines or table:
                self._write(self.stdout, "\n".join(lines + table) + "\n")
            return
        if not all(col.terminal for col in columns):
            columns, raw = _terminal_columns(columns, raw)
        hidden_note = None
        shown_text = [[clean(text) for text, _ in row] for row in raw]
        widths = [max([cell_len(col.name)] + [cell_len(r[i]) for r in shown_text])
                  for i, col in enumerate(columns)]
        shown = list(range(len(columns)))
        if not self.wide:
            empty = frozenset(i for i in range(len(columns))
                              if rows and all(not r[i] for r in shown_text))
            natural = widths
            for extra in range(len(columns)):  # hide low-priority columns before losing names
                shown, widths = _fit(columns, natural, self.width, len(self.GAP), empty, extra)
                names = _NameColumns(columns, shown, widths, raw)
                names.balance()
                if not names.loss() or len(shown) == len(_fit(
                        columns, natural, self.width, len(self.GAP), empty, extra + 1)[0]):
                    break
            hidden = [columns[i].name for i in range(len(columns))
                      if i not in shown and i not in empty]
            blank = [columns[i].name for i in range(len(columns)) if i not in shown and i in empty]
            if hidden or blank:  # said after the table, below what it is about
                hidden_note = (f"hidden at {self.width} columns: "
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
        header = [(columns[i].name, "bold") for i in shown]
        for n_row, row in enumerate([None, *shown_text]):
            parts = []
            for n, i in enumerate(shown):
                if row is None:
                    text, style = header[n]
                else:
                    text, style = row[i], raw[n_row - 1][i][1]
                col, w = columns[i], widths[i]
                pad = " " * max(0, w - cell_len(text))
                if n == len(shown) - 1 and col.justify != "right":
                    pad = ""  # no trailing blanks
                painted = self._paint(text, style, self.stdout)
                parts.append(pad + painted if col.justify == "right" else painted + pad)
            if row is not None or not self.quiet:
                lines.append(self.GAP.join(parts).rstrip())
        if lines:
            self._write(self.stdout, "\n".join(lines) + "\n")
        if hidden_note:
            self.note(hidden_note)

    @staticmethod
    def _tsv_table(columns: Sequence[Column], raw: list[list[tuple[str, str | None]]]
                   ) -> list[str]:
        """The header and rows as tab-separated fields, one row per line, names whole: fields
        never hold a tab (escaped as ``\\t``), an empty field is ``-``, and headers hold no
        blanks, so ``awk -F'\\t'`` and ``cut -f`` see the same number of fields on every
        line."""
        keep = [i for i, col in enumerate(columns) if col.data]
        out = ["\t".join(columns[i].name.replace(" ", "_") or "-" for i in keep)]
        out += ["\t".join(clean(row[i][0]) or "-" for i in keep) for row in raw]
        return out

    # -- messages on stderr -----------------------------------------------------------------
    def note(self, message: str, always: bool = False) -> None:
        """An informational line on stderr (left out with ``quiet`` unless ``always``: which
        file a directory led to is said even then); on a terminal it wraps at spaces to the
        terminal's width, never inside a word."""
        if always or not self.quiet:
            parts = self._wrap_for(clean_message(message), self.stderr)
            self.write_err("".join(self._paint(p, "dim", self.stderr) + "\n" for p in parts))

    info = note

    def warning(self, message: str) -> None:
        """``warning: message`` on stderr, wrapped like :meth:`error`."""
        self._labelled("warning:", "yellow", message)

    def error(self, message: str) -> None:
        """``error: message`` on stderr: one line when stderr is not a terminal (logs, grep);
        on a terminal wrapped at spaces to its width, never inside a word or an option."""
        self._labelled("error:", "red", message)

    def _labelled(self, label: str, style: str, message: str) -> None:
        # The label is glued to the first word with NUL (which clean() never leaves in a
        # message), so a first word longer than the line (a long path) does not leave
        # "error:" alone on a line of its own.
        parts = self._wrap_for(label + "\x00" + clean_message(message), self.stderr)
        parts = [p.replace("\x00", " ") for p in parts]
        parts[0] = self._paint(label, style, self.stderr) + parts[0][len(label):]
        self.write_err("".join(p + "\n" for p in parts))

    def progress(self, label: str, total: int | None = None) -> ByteProgress:
        """A byte progress bar on stderr; see :class:`ByteProgress`."""
        return ByteProgress(self, label, total)

    def steps(self, label: str, total: int, start: int = 0) -> StepProgress:
        """A training-step progress bar on stderr (``ckpt train``); see :class:`StepProgress`."""
        return StepProgress(self, label, total, start)

    def relay(self, lines: Sequence[str], source: str | None = None) -> None:
        """Lines another program printed (a cluster task's stderr, TensorFlow's start-up
        lines), on stderr as ``[source] line``: escaped like every message, so they cannot
        drive the terminal."""
        tag = f"[{clean(source)}] " if source is not None else ""
        self.write_err("".join(f"{tag}{clean_message(line)}\n" for line in lines))


class _NameColumns:
    """The name columns (``shrink="middle"``) of one table: their shortened cells, and a
    rebalancing of width between them so that none has to cut inside a ``/`` segment while
    another has columns to spare."""

    #: Above this many rows the widths from :func:`_fit` are kept as they are.
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


def _terminal_columns(columns: Sequence[Column], raw: list[list[tuple[str, str | None]]]
                      ) -> tuple[list[Column], list[list[tuple[str, str | None]]]]:
    """The columns shown on a terminal (``Column.terminal``) and the rows' cells in them, with
    ``prefix_from`` renumbered."""
    keep = [i for i, col in enumerate(columns) if col.terminal]
    new = {old: k for k, old in enumerate(keep)}
    cols = [replace(columns[i], prefix_from=new.get(columns[i].prefix_from))
            for i in keep]
    return cols, [[row[i] for i in keep] for row in raw]


def _fit(columns: Sequence[Column], natural: list[int], width: int, gap: int,
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
            step = min(excess, max(1, best - max((r for r, j in room if j != i), default=0)))
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


class ByteProgress:
    """The one progress bar of the ``ckpt`` command: bytes done of a total, on stderr.

    Shown only when stderr is a terminal, not in ``quiet``/``json`` mode, and when the total is
    at least :attr:`Output.PROGRESS_MIN_BYTES` (small jobs finish before a bar would help).
    Use as a context manager; call :meth:`advance` with bytes just done, or :meth:`update` with
    bytes done so far and the total (when the total is known only once work starts).
    """

    def __init__(self, out: Output, label: str, total: int | None = None):
        self.out, self.label = out, redact(label)
        self.enabled = not out.quiet and not out.json_mode and _is_tty(out.stderr)
        self.total = total
        self.done = 0
        self._bar = None
        self._task = None

    def __enter__(self) -> ByteProgress:
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def _start(self) -> bool:
        if self._bar is not None:
            return True
        if not self.enabled or self.total is None or self.total < Output.PROGRESS_MIN_BYTES:
            self.enabled = False
            return False
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

        # Binary units, as every summary line (human_bytes: "wrote … (299.6 MiB)").
        self._bar = Progress("{task.description}", BarColumn(), DownloadColumn(binary_units=True),
                             TimeRemainingColumn(), transient=True,
                             console=Console(file=self.out.stderr, markup=False))
        self._bar.start()
        self._task = self._bar.add_task(clean_message(self.label), total=self.total)
        return True

    def advance(self, nbytes: int) -> None:
        """Records ``nbytes`` more bytes done."""
        self.done += nbytes
        if self._start():
            self._bar.update(self._task, completed=self.done)

    def update(self, done: int, total: int | None = None) -> None:
        """Records ``done`` bytes done so far (of ``total``, when given)."""
        if total is not None:
            self.total = total
        self.done = done
        if self._start():
            self._bar.update(self._task, completed=done, total=self.total)

    __call__ = advance


def _discard_stdout() -> None:
    """Points stdout's file descriptor at /dev/null, so the interpreter's final flush of what
    is still buffered does not fail again (and change the exit code)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no stdout at all, or not a real file
        pass


class StepProgress:
    """The training bar of ``ckpt train``: global step of a total, with the latest loss,
    examples/sec and step time, on stderr.

    Shown, like :class:`ByteProgress`, only when stderr is a terminal and not in
    ``quiet``/``json`` mode; the label and fields are escaped text, never markup. Use as a
    context manager; call :meth:`update` after each logged step.
    """

    FIELDS = ("loss", "rate", "step_time")

    def __init__(self, out: Output, label: str, total: int, start: int = 0):
        self.out, self.label, self.total, self.start = out, label, total, start
        self.enabled = not out.quiet and not out.json_mode and _is_tty(out.stderr)
        self._bar = None
        self._task = None

    def __enter__(self) -> StepProgress:
        if not self.enabled:
            return self
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self._bar = Progress(
            TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}", markup=False),
            TextColumn("{task.fields[rate]} ex/s", markup=False),
            TextColumn("{task.fields[step_time]} s/step", markup=False), TimeRemainingColumn(),
            console=Console(file=self.out.stderr, markup=False, highlight=False))
        self._bar.start()
        self._task = self._bar.add_task(clean(self.label), total=self.total,
                                        completed=self.start, **dict.fromkeys(self.FIELDS, "-"))
        return self

    def update(self, step: int, **fields: str) -> None:
        """Shows global step ``step`` with ``fields`` (``loss``, ``rate``, ``step_time``)."""
        if self._bar is not None:
            self._bar.update(self._task, completed=step,
                             **{k: clean(v) for k, v in fields.items() if k in self.FIELDS})

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def _default(obj: Any) -> Any:
    if isinstance(obj, tuple):
        return list(obj)
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"cannot serialize {type(obj).__name__}")


def shape_text(shape: Sequence[int]) -> str:
    """``[3,3,3,4]``: a shape without blanks, so a piped row splits into the same fields on
    every line."""
    return "[" + ",".join(str(d) for d in shape) + "]"


def human_bytes(n: int) -> str:
    """Formats a byte count with a binary unit (``1.5 MiB``)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"
