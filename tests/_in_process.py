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


def in_terminal(argv: list[str], cwd: str | Path, columns: int = 80) -> tuple[int, str]:
    """Runs ``ckpt argv`` in this process with its stdout and stderr on one pseudo-terminal
    ``columns`` wide, as a reader's terminal (``test_readme._run_in_terminal``'s child) gets
    them: ``isatty()`` true, the width from the terminal (no ``COLUMNS``, ``LINES`` or
    ``TTY_COMPATIBLE``), ``NO_COLOR=1``, in ``cwd``.

    Returns:
        ``(exit code, the text the terminal got)`` with ``\\r\\n`` read as ``\\n``.
    """
    import fcntl
    import io
    import pty
    import struct
    import sys
    import termios
    import threading

    from ckpt_tools.cli import main

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    chunks: list[bytes] = []

    def drain() -> None:  # the terminal's reader: a full pty buffer would block the command
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: every copy of the slave is closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    environ = {k: os.environ.get(k) for k in ("COLUMNS", "LINES", "TTY_COMPATIBLE", "NO_COLOR")}
    streams, argv0, previous = (sys.stdout, sys.stderr), list(sys.argv), os.getcwd()
    for stream in streams:
        stream.flush()
    saved = (os.dup(1), os.dup(2))
    code = 1
    try:
        for k in ("COLUMNS", "LINES", "TTY_COMPATIBLE"):
            os.environ.pop(k, None)
        os.environ["NO_COLOR"] = "1"
        # fds 1 and 2 too: what sizes the terminal (shutil.get_terminal_size reads fd 1)
        os.dup2(slave, 1)
        os.dup2(slave, 2)
        sys.stdout, sys.stderr = (io.TextIOWrapper(io.FileIO(fd, "w", closefd=False),
                                                   line_buffering=True) for fd in (1, 2))
        os.chdir(cwd)
        try:
            main(list(argv))
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        sys.stdout, sys.stderr = streams
        sys.argv[:] = argv0
        os.chdir(previous)
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, slave):
            os.close(fd)
        for k, v in environ.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        reader.join(timeout=30)
        os.close(master)
    return code, b"".join(chunks).decode().replace("\r\n", "\n")
