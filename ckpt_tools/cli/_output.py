"""All CLI printing goes through :class:`Output`: data to stdout, messages to stderr.

Keeping errors, warnings and progress on stderr means ``ckpt … --json | jq`` always gets clean
JSON on stdout.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich is imported on first use: `--json` output never needs it
    from rich.console import Console
    from rich.progress import Progress


class Output:
    """Printer with human, JSON and quiet modes.

    Args:
        json_mode: print machine-readable JSON on stdout instead of tables.
        quiet: suppress everything but the data itself (and errors).
    """

    def __init__(self, *, json_mode: bool = False, quiet: bool = False):
        self.json_mode = json_mode
        self.quiet = quiet
        self._out: Console | None = None
        self._err: Console | None = None

    # Consoles are made on first use: JSON output never needs one.
    @property
    def out(self) -> Console:
        if self._out is None:
            from rich.console import Console

            self._out = Console(soft_wrap=False, highlight=False)
            if not self._out.is_terminal:  # piped to a file or pager: not 80 columns
                self._out = Console(soft_wrap=False, highlight=False, width=160)
        return self._out

    @out.setter
    def out(self, console: Console) -> None:
        self._out = console

    @property
    def err(self) -> Console:
        if self._err is None:
            from rich.console import Console

            self._err = Console(stderr=True, highlight=False)
        return self._err

    @err.setter
    def err(self, console: Console) -> None:
        self._err = console

    def json(self, data: Any) -> None:
        sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=_default) + "\n")
        sys.stdout.flush()

    def print(self, *objects: Any, **kwargs: Any) -> None:
        if not self.json_mode:
            self.out.print(*objects, **kwargs)

    # Above this many rows, or when stdout is not a terminal, tables are printed as plain
    # aligned text: rich's layout costs ~1 ms a row (1,000 variables: over a second).
    RICH_TABLE_MAX_ROWS = 500

    def table(self, title: str, columns: list[tuple[str, str]],
              rows: list[list[tuple[str, str | None]]]) -> None:
        """Prints a table of ``(text, style)`` cells; ``columns`` are ``(name, justify)``.

        Cell text is never parsed as markup, so names with ``[...]`` print as they are.
        """
        if self.json_mode:
            return
        if self.out.is_terminal and len(rows) <= self.RICH_TABLE_MAX_ROWS:
            from rich.table import Table
            from rich.text import Text

            t = Table(title=title, title_justify="left", box=None, header_style="bold",
                      pad_edge=False)
            for name, justify in columns:
                t.add_column(name, justify=justify, overflow="fold")
            for row in rows:
                t.add_row(*(Text(text, style=style or "") for text, style in row))
            self.out.print(t)
            return
        widths = [max([len(name)] + [len(row[i][0]) for row in rows])
                  for i, (name, _) in enumerate(columns)]

        def line(cells: list[str]) -> str:
            parts = [c.rjust(w) if j == "right" else c.ljust(w)
                     for c, w, (_, j) in zip(cells, widths, columns, strict=True)]
            return "  ".join(parts).rstrip()

        lines = [title, line([name for name, _ in columns])]
        lines += [line([text for text, _ in row]) for row in rows]
        sys.stdout.write("\n".join(lines) + "\n")

    def info(self, message: str) -> None:
        if not self.quiet:
            self.err.print(message)

    def warning(self, message: str) -> None:
        from rich.markup import escape  # messages quote code ("[ema.average(v) ...]")

        self.err.print(f"[yellow]warning:[/] {escape(message)}", soft_wrap=True, emoji=False)

    def error(self, message: str) -> None:
        from rich.markup import escape

        self.err.print(f"[red]error:[/] {escape(message)}", soft_wrap=True, markup=True,
                       emoji=False)


def _default(obj: Any) -> Any:
    if isinstance(obj, tuple):
        return list(obj)
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"cannot serialize {type(obj).__name__}")


def human_bytes(n: int) -> str:
    """Formats a byte count with a binary unit (``1.5 MiB``)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


class ByteProgress:
    """A byte progress bar on stderr, shown only for work worth waiting for.

    Use as a context manager; it yields a callback taking a byte count, or ``None`` when the
    bar is off (small totals, ``--quiet``, ``--json``).
    """

    THRESHOLD = 256 * 1024 * 1024

    def __init__(self, out: Output, total: int, label: str):
        self.enabled = total >= self.THRESHOLD and not out.quiet and not out.json_mode
        self.total = total
        self.label = label
        self.out = out
        self.bar: Progress | None = None

    def __enter__(self):
        if not self.enabled:
            return None
        from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

        self.bar = Progress("[progress.description]{task.description}", BarColumn(),
                            DownloadColumn(), TimeRemainingColumn(), console=self.out.err,
                            transient=True)
        self.bar.start()
        task = self.bar.add_task(self.label, total=self.total)
        return lambda n: self.bar.advance(task, n)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
