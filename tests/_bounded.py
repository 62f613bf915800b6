"""Run ``ckpt`` commands with their time and peak memory measured, one forked child per command.

One helper process imports the CLI once, then forks a child per command line: the child points
its stdout/stderr at files and runs ``ckpt_tools.cli.main``; the parent reaps it with
``os.wait4``, which reports that child's own peak resident memory (``ru_maxrss``: what it
touches after the fork, which is what a hostile file can make it allocate), and kills it
when it runs past the time limit (a hang). An address-space limit in each child turns a runaway
allocation into a failed case instead of a swapping machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass

from _corpus import ROOT

TIME_LIMIT_S = 10.0
MEMORY_LIMIT_MB = 300
_ADDRESS_SPACE = 3 << 30  # safety net only; the assertion is on resident memory

_RUNNER = textwrap.dedent("""
    import json, os, resource, sys, tempfile, time
    from ckpt_tools import cli
    import numpy
    try:  # imported once here, not in every child: children then cost milliseconds
        import h5py
    except ImportError:
        pass

    cases, limit_s, address_space = json.loads(sys.stdin.read())
    results = []
    for argv in cases:
        out = tempfile.TemporaryFile()
        err = tempfile.TemporaryFile()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:  # child: run one command
            code = 1
            try:
                resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                sys.stdout = os.fdopen(1, "w", closefd=False)
                sys.stderr = os.fdopen(2, "w", closefd=False)
                try:
                    cli.main(argv)
                    code = 0
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else (exc.code is not None)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        killed = False
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() - start > limit_s:
                os.kill(pid, 9)
                killed = True
                done, status, usage = os.wait4(pid, 0)
                break
            time.sleep(0.005)
        seconds = time.monotonic() - start
        texts = []
        for f in (out, err):
            f.seek(0)
            texts.append(f.read().decode("utf-8", "replace"))
            f.close()
        results.append({"code": os.waitstatus_to_exitcode(status), "out": texts[0],
                        "err": texts[1], "seconds": seconds, "rss_mb": usage.ru_maxrss / 1024,
                        "killed": killed})
    print(json.dumps(results))
""")


@dataclass(frozen=True)
class Run:
    """What one command did: exit code, output, wall time and peak resident memory."""

    argv: tuple[str, ...]
    code: int
    out: str
    err: str
    seconds: float
    rss_mb: float
    killed: bool


def run_bounded(argvs: list[list[str]], limit_s: float = TIME_LIMIT_S) -> list[Run]:
    """Runs each ``ckpt ARGV`` in its own forked child; returns one :class:`Run` per command."""
    cases = [[str(a) for a in argv] for argv in argvs]
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER], input=json.dumps([cases, limit_s, _ADDRESS_SPACE]),
        capture_output=True, text=True, cwd=ROOT, timeout=60 + len(cases) * (limit_s + 5),
        env={**__import__("os").environ, "COLUMNS": "200", "CKPT_DEBUG": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [Run(tuple(a), r["code"], r["out"], r["err"], r["seconds"], r["rss_mb"], r["killed"])
            for a, r in zip(cases, json.loads(proc.stdout.splitlines()[-1]), strict=True)]


def assert_refused(run: Run, code: int, *says: str, memory_mb: float = MEMORY_LIMIT_MB) -> None:
    """Asserts a clean refusal: ``code``, one ``error:`` line containing every ``says``, no
    traceback, within the time and memory bounds."""
    assert not run.killed, f"{run.argv}: still running after {TIME_LIMIT_S} s (a hang)"
    assert run.seconds < TIME_LIMIT_S, (run.argv, run.seconds)
    assert run.rss_mb < memory_mb, f"{run.argv}: peak memory {run.rss_mb:.0f} MB"
    assert "Traceback" not in run.err, run.err
    lines = [line for line in run.err.splitlines() if line.startswith("error: ")]
    assert run.code == code, (run.argv, run.code, run.err)
    assert len(lines) == 1, f"{run.argv}: expected one error line, got:\n{run.err}"
    if run.argv[0] not in ("verify", "stats"):  # these report on stdout first
        assert len(run.err.strip().splitlines()) == 1, run.err
    # verify prints each problem on stdout and ends with one summary error line
    text = lines[0] + ("\n" + run.out if run.argv[0] == "verify" else "")
    for part in says:
        assert part in text, f"{part!r} not in {text!r}"
