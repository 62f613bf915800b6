"""``ckpt verify``: recompute every checksum and check the index, shards and slices.

Examples::

    ckpt verify train/                  # latest checkpoint; exit 0 when clean, 4 when not
    ckpt verify model.ckpt-1000 --json  # {"ok": false, "problems": [{"file": …}, …]}
"""

from __future__ import annotations

import typer

from ..errors import CorruptCheckpointError
from ..verify import VerifyReport, verify
from ..wording import counted
from ._common import JsonOpt, PathArg, QuietOpt, resolve
from ._output import Output, human_bytes


def verify_command(path: PathArg, json_out: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """Check every CRC32C, the index structure, data shards and partitioned-variable slices.

    Reports every problem found (file, byte offset, what is wrong), not just the first.
    Exits 0 when the checkpoint is intact and 4 when any problem is found.
    """
    out = Output(json_mode=json_out, quiet=quiet)
    with out.progress("verifying") as bar:
        report = verify(resolve(out, path), progress=bar.update)
    if json_out:
        out.json(report.to_dict())
    else:
        _print(out, report)
    if not report.ok:
        raise typer.Exit(CorruptCheckpointError.exit_code)


def _print(out: Output, report: VerifyReport) -> None:
    for problem in report.problems:
        out.prose(f"✗ {problem}", "red")  # wrapped on a terminal; piped, one line each
    size = human_bytes(report.bytes) if report.format == "v2" else "values"
    if report.ok:
        if not out.quiet:
            files = len(report.files)
            out.prose(f"✓ {report.path} ({report.format}): "
                      f"{counted(report.tensors, 'tensor')}, {size} in "
                      f"{counted(files, 'file')} verified")
        return
    n = len(report.problems)
    out.error(f"{report.path}: {counted(n, 'problem')} found "
              f"({counted(report.tensors, 'tensor')} checked)")
