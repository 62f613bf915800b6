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

import os
import sys
from collections.abc import Iterable, Sequence

from ..errors import CheckpointError, ExitCode, redact
from ._json_text import json_default, json_document, json_escaped, json_text
from ._layout import Column, fit_table, tsv_lines
from ._text import cell_len, clean, clean_message, is_tty

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    from typing import Any, TextIO

    from ._progress import ByteProgress, StepProgress

Cell = str | tuple[str, str | None]
_SGR = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "blue": "34",
        "magenta": "35", "cyan": "36"}


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
        self.noted: list[str] = []  # each note printed, without its "note: " (--json "notes")
        # each warning printed, without its "warning: ": a command's --json "warnings" carries
        # every one stderr showed (review-26-attack-r94 F5)
        self.warned: list[str] = []

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
        return is_tty(self.stdout)

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
        if not style or os.environ.get("NO_COLOR") or not is_tty(stream) \
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
        scripts (:func:`~._json_text.json_document`)."""
        self._json_lines(json_document(data, self.is_terminal))

    def json_of(self, result: Any) -> None:
        """Prints ``result.to_dict()`` as :meth:`json` does; piped, the compact line comes from
        ``result.to_json(default)`` (the same bytes, built faster: see
        :meth:`ckpt_tools.listing.Listing.to_json`)."""
        if self.is_terminal:
            self.json(result.to_dict())
        else:
            self._json_lines([result.to_json(json_default)])

    def _json_lines(self, lines: list[str]) -> None:
        """Writes a JSON document's lines, escaping what json.dumps leaves as it is."""
        self._write(self.stdout, "\n".join(json_escaped(t) for t in lines) + "\n")

    json_text = staticmethod(json_text)  # a piece for json_stream: the compact text, not escaped

    def json_stream(self, pieces: Iterable[str]) -> None:
        """Prints one JSON document given as pieces of its text (each whole tokens: a string
        never cut), escaped as :meth:`json` escapes it, in writes of about 1 MiB as the pieces
        come: a large document is never held whole (``show --full --json``), and a reader
        that goes away (``| head -c``) ends it as for any output. Compact on a terminal
        too: indented, a million values would be a million lines."""
        held: list[str] = []
        size = 0
        for piece in pieces:
            held.append(piece)
            size += len(piece)
            if size >= 1 << 20:
                self._write(self.stdout, json_escaped("".join(held)))
                held, size = [], 0
        self._write(self.stdout, json_escaped("".join(held)) + "\n")

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
        if not is_tty(stream) or self.wide:
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
        if self.json_mode:
            return
        # one write for all its lines (``show --full`` writes 1M values' text in parts: a
        # flush a line cost seconds, task s31h); the same bytes as a line() each
        self._write(self.stdout, "".join(self._paint(clean_message(part), style, self.stdout)
                                         + "\n" for part in text.split("\n")))

    def table(self, title: str | Sequence[str] | None, columns: Sequence[Column],
              rows: Sequence[Sequence[Cell]]) -> None:
        """Prints a table; see the module docstring for how it fits the terminal.

        ``title`` lines and the header row are left out with ``quiet`` (every command's
        ``-q`` table is its rows only); cells are ``text`` or ``(text, style)``.
        When stdout is not a terminal the header and rows are tab-separated fields (see
        :func:`~._layout.tsv_lines`).
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
            table = tsv_lines(columns, raw)[1 if self.quiet else 0:]
            if lines or table:
                self._write(self.stdout, "\n".join(lines + table) + "\n")
            return
        fitted = fit_table(columns, raw, self.width, len(self.GAP), self.wide)
        columns, raw, shown, widths, shown_text = (
            fitted.columns, fitted.raw, fitted.shown, fitted.widths, fitted.text)
        hidden_note = fitted.hidden_note
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

    # -- messages on stderr -----------------------------------------------------------------
    def note(self, message: str, always: bool = False) -> None:
        """An informational line on stderr (left out with ``quiet`` unless ``always``: which
        file a directory led to is said even then); on a terminal it wraps at spaces to the
        terminal's width, never inside a word."""
        if always or not self.quiet:
            self.noted.append(message.removeprefix("note: "))
            parts = self._wrap_for(clean_message(message), self.stderr)
            self.write_err("".join(self._paint(p, "dim", self.stderr) + "\n" for p in parts))

    info = note

    def warning(self, message: str) -> None:
        """``warning: message`` on stderr, wrapped like :meth:`error`; kept in ``warned``."""
        self.warned.append(message)
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
        from ._progress import ByteProgress

        return ByteProgress(self, label, total)

    def steps(self, label: str, total: int, start: int = 0) -> StepProgress:
        """A training-step progress bar on stderr (``ckpt train``); see :class:`StepProgress`."""
        from ._progress import StepProgress

        return StepProgress(self, label, total, start)

    def relay(self, lines: Sequence[str], source: str | None = None) -> None:
        """Lines another program printed (a cluster task's stderr, TensorFlow's start-up
        lines), on stderr as ``[source] line``: escaped like every message, so they cannot
        drive the terminal."""
        tag = f"[{clean(source)}] " if source is not None else ""
        self.write_err("".join(f"{tag}{clean_message(line)}\n" for line in lines))


def _discard_stdout() -> None:
    """Points stdout's file descriptor at /dev/null, so the interpreter's final flush of what
    is still buffered does not fail again (and change the exit code)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no stdout at all, or not a real file
        pass


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
