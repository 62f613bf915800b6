"""The training progress bar: step, loss, examples/sec and step time, on stderr.

On stderr so stdout stays clean for the one-line summary (and ``--json`` output of eval).
"""

from __future__ import annotations

import math
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


class TrainProgress:
    """A context manager around a rich Progress; a no-op when disabled.

    Args:
        total: the final global step (``--max-steps``).
        start: the global step the run starts from (non-zero when resuming).
        enabled: show the bar at all.
        description: text left of the bar.
    """

    def __init__(self, total: int, start: int, enabled: bool, description: str = "train") -> None:
        self._enabled = enabled
        self._progress: Progress | None = None
        self._task = None
        self._total, self._start, self._description = total, start, description

    def __enter__(self) -> TrainProgress:
        if self._enabled:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"),
                TextColumn("{task.fields[rate]} ex/s"),
                TextColumn("{task.fields[step_time]} s/step"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self._progress.__enter__()
            self._task = self._progress.add_task(
                self._description,
                total=self._total,
                completed=self._start,
                loss="-",
                rate="-",
                step_time="-",
            )
        return self

    def update(self, step: int, loss: float, examples_per_sec: float, step_time: float) -> None:
        """Show global step ``step`` with the latest loss and throughput."""
        if self._progress is None:
            return
        self._progress.update(
            self._task,
            completed=step,
            loss=f"{loss:.4f}" if math.isfinite(loss) else "nan",
            rate=f"{examples_per_sec:,.0f}",
            step_time=f"{step_time:.3f}",
        )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.__exit__(exc_type, exc, tb)
