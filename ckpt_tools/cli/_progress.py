"""Progress bars of the ``ckpt`` command, on stderr: bytes done (:class:`ByteProgress`) and
training steps (:class:`StepProgress`). Shown only on a terminal, never in ``--quiet`` or
``--json`` mode; rich is imported only when a bar is shown, and its text is never markup."""

from __future__ import annotations

from ..errors import redact
from ._output import Output
from ._text import clean, clean_message, is_tty


class ByteProgress:
    """The one progress bar of the ``ckpt`` command: bytes done of a total, on stderr.

    Shown only when stderr is a terminal, not in ``quiet``/``json`` mode, and when the total is
    at least :attr:`Output.PROGRESS_MIN_BYTES` (small jobs finish before a bar would help).
    Use as a context manager; call :meth:`advance` with bytes just done, or :meth:`update` with
    bytes done so far and the total (when the total is known only once work starts).
    """

    def __init__(self, out: Output, label: str, total: int | None = None):
        self.out, self.label = out, redact(label)
        self.enabled = not out.quiet and not out.json_mode and is_tty(out.stderr)
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
        self.enabled = not out.quiet and not out.json_mode and is_tty(out.stderr)
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
