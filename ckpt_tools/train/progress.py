"""The training progress bar: step, loss, examples/sec and step time, on stderr.

On stderr so stdout stays clean for the one-line summary (and ``--json`` output of eval). The
bar itself is :class:`ckpt_tools.cli._progress.StepProgress`: the ``ckpt`` command has one printer.
"""

from __future__ import annotations

import math
from types import TracebackType

from ..cli._output import Output
from ..cli._progress import StepProgress


class TrainProgress:
    """A context manager around the ``ckpt`` step bar; a no-op when disabled (and, like every
    bar of ``ckpt``, when stderr is not a terminal).

    Args:
        total: the final global step (``--max-steps``).
        start: the global step the run starts from (non-zero when resuming).
        enabled: show the bar at all.
        description: text left of the bar.
    """

    def __init__(self, total: int, start: int, enabled: bool, description: str = "train") -> None:
        self._enabled = enabled
        self._bar: StepProgress | None = None
        self._total, self._start, self._description = total, start, description

    def __enter__(self) -> TrainProgress:
        if self._enabled:
            self._bar = Output().steps(self._description, self._total, self._start).__enter__()
        return self

    def update(self, step: int, loss: float, examples_per_sec: float, step_time: float) -> None:
        """Show global step ``step`` with the latest loss and throughput."""
        if self._bar is None:
            return
        self._bar.update(step, loss=f"{loss:.4f}" if math.isfinite(loss) else "nan",
                         rate=f"{examples_per_sec:,.0f}", step_time=f"{step_time:.3f}")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)
            self._bar = None
