"""``ckpt verify``: recompute every checksum and check the index, shards and slices.

Examples::

    ckpt verify train/                  # latest checkpoint; exit 0 when clean, 4 when not
    ckpt verify model.ckpt-1000 --json  # {"ok": false, "problems": [{"file": …}, …]}
"""

from __future__ import annotations

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from ..errors import CorruptCheckpointError
from ..verify import VerifyReport, verify
from ._common import JsonOpt, PathArg, QuietOpt
from ._output import Output, human_bytes

#: Show a progress bar only when there is this much data to checksum (and stderr is a TTY).
PROGRESS_MIN_BYTES = 64 << 20


class _Bar:
    """A rich progress bar on stderr that appears once the work is known to be large."""

    def __init__(self, out: Output, enabled: bool):
        self.out, self.enabled = out, enabled
        self.progress: Progress | None = None
        self.task = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.progress is None:
            if total < PROGRESS_MIN_BYTES:
                self.enabled = False
                return
            self.progress = Progress(TextColumn("verifying"), BarColumn(), DownloadColumn(),
                                     TimeRemainingColumn(), console=self.out.err, transient=True)
            self.progress.start()
            self.task = self.progress.add_task("verify", total=total)
        self.progress.update(self.task, completed=done)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def verify_command(path: PathArg, json_out: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Check every CRC32C, the index structure, data shards and partitioned-variable slices.

    Reports every problem found (file, byte offset, what is wrong), not just the first.
    Exits 0 when the checkpoint is intact and 4 when any problem is found.
    """
    out = Output(json_mode=json_out, quiet=quiet)
    bar = _Bar(out, enabled=not json_out and not quiet and out.err.is_terminal)
    try:
        report = verify(path, progress=bar)
    finally:
        bar.close()
    if json_out:
        out.json(report.to_dict())
    else:
        _print(out, report)
    if not report.ok:
        raise typer.Exit(CorruptCheckpointError.exit_code)


def _print(out: Output, report: VerifyReport) -> None:
    for problem in report.problems:
        out.print(f"[red]✗[/] {problem}", markup=True, soft_wrap=True, highlight=False)
    size = human_bytes(report.bytes) if report.format == "v2" else "values"
    if report.ok:
        if not out.quiet:
            files = len(report.files)
            out.print(f"[green]✓[/] {report.path} ({report.format}): {report.tensors} tensors, "
                      f"{size} in {files} file{'s' if files != 1 else ''} verified")
        return
    n = len(report.problems)
    out.error(f"{report.path}: {n} problem{'s' if n != 1 else ''} found "
              f"({report.tensors} tensors checked)")
