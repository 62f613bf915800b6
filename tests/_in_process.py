"""``ckpt`` run in the test's own process, its result shaped as ``subprocess.run``'s.

For the tests whose subject is what a command refuses or writes, not the process running it:
each ``python -m ckpt_tools`` child costs about half a second of CPU to start, and a few
hundred of them weighed on CI's 30-minute budget. The commands run through the same typer app
``python -m ckpt_tools`` runs (its error handling turns every failure into the exit code and
``error:`` line a child prints). Tests about the process itself (signals, kill -9, two
writers racing, a child's pid in a lock) keep starting one.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def ckpt(*argv: str, env: dict[str, str | None] | None = None,
         cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """Runs ``ckpt *argv`` in-process (in ``cwd`` when given, ``env`` added to the
    environment meanwhile, a ``None`` value removing that variable).

    Returns:
        ``CompletedProcess(["ckpt", *argv], exit code, stdout, stderr)``.

    Raises:
        BaseException: what escaped the app's own error handling (a child would have printed
            it as a traceback): the test fails with it rather than reading an exit code.
    """
    from typer.testing import CliRunner

    from ckpt_tools.cli import app

    previous = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        result = CliRunner().invoke(app, list(argv), env=env)
    finally:
        os.chdir(previous)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(["ckpt", *argv], result.exit_code, result.stdout,
                                       result.stderr)


def run_in_process(argv: list[str]) -> subprocess.CompletedProcess:
    """:func:`_corpus.run_subprocess`'s in-process twin: ``ckpt argv`` with ``COLUMNS=200``
    and without ``CKPT_DEBUG``, as that one runs its child."""
    return ckpt(*argv, env={"COLUMNS": "200", "CKPT_DEBUG": None})
