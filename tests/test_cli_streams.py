"""stdout and stderr that cannot be written (closed with ``>&-``/``2>&-``, a full disk behind
``>/dev/full``): one line naming stdout and exit 1 when the data is lost, exit 0 with a warning
when a writer's output was complete, and the documented exit code whatever happens to stderr."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FIXTURES

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _sh(command: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Runs ``ckpt …`` redirections in bash (``ckpt`` is this checkout's)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    env.pop("CKPT_DEBUG", None)
    env.pop("TTY_COMPATIBLE", None)
    script = f'ckpt() {{ "{sys.executable}" -m ckpt_tools "$@"; }}\n{command}'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env,
                          timeout=300, cwd=tmp_path)


BN = str(FIXTURES / "towers_bn")


@pytest.mark.parametrize("args", ["list '{bn}'", "list '{bn}' --json", "stats '{bn}'",
                                  "--version"])
def test_closed_stdout_is_one_line_naming_stdout_and_exit_1(args, tmp_path):
    proc = _sh(f"ckpt {args.format(bn=BN)} >&-", tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == "error: stdout: closed while printing the output\n"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_full_stdout_names_stdout(tmp_path):
    proc = _sh(f"ckpt list '{BN}' >/dev/full", tmp_path)
    assert proc.returncode == 1
    assert proc.stderr == ("error: stdout: No space left on device while printing the "
                           "output\n")


def test_a_writer_whose_output_is_complete_succeeds_without_stdout(tmp_path):
    """restore-ema and export wrote everything: a summary that cannot be printed is a
    warning, not a failure (the user would otherwise delete a good checkpoint)."""
    redirect = ">/dev/full" if os.path.exists("/dev/full") else ">&-"
    proc = _sh(f"ckpt restore-ema '{BN}' --out ema >&- && "
               f"ckpt export '{BN}' --out w.npz {redirect}", tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 2 and all(w.startswith("warning: stdout: ") for w in lines), lines
    assert "ema/model.ckpt-30 was written completely" in lines[0]
    assert lines[1].endswith("w.npz was written completely")
    assert (tmp_path / "ema" / "checkpoint").is_file()
    import numpy as np

    with np.load(tmp_path / "w.npz") as npz:
        assert len(npz.files) > 0


@pytest.mark.parametrize("args", ["list nonexist", "list nonexist --json", "stats nonexist",
                                  "list '{bn}' --role nope"])
def test_closed_stderr_keeps_the_exit_code(args, tmp_path):
    open_ = _sh(f"ckpt {args.format(bn=BN)}", tmp_path)
    closed = _sh(f"ckpt {args.format(bn=BN)} 2>&-", tmp_path)
    assert open_.returncode in (2, 3) and open_.stderr.count("Traceback") == 0
    assert closed.returncode == open_.returncode
