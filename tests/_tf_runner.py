"""Runs the tests' TensorFlow generator scripts as ``python *argv`` would, through one fork
server per test process (``_tf_forkserver.py``) that has imported TensorFlow already.

Each script still runs in its own process with real TensorFlow; only the 6 s import is
shared. ``CKPT_TESTS_FORKSERVER=0`` runs every script in a plain ``python`` process instead.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

_SERVER = Path(__file__).with_name("_tf_forkserver.py")
_lock = threading.Lock()
_proc: subprocess.Popen | None = None


def _server() -> subprocess.Popen:
    global _proc
    if _proc is None or _proc.poll() is not None:
        # The server sets TF_CPP_MIN_LOG_LEVEL/KERAS_BACKEND itself before importing TensorFlow.
        _proc = subprocess.Popen([sys.executable, str(_SERVER)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        atexit.register(_stop, _proc)
    return _proc


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _forkable(env: dict[str, str]) -> bool:
    """Whether a script with ``env`` may run in the server's child: what TensorFlow reads at
    its import must be what the server had."""
    if os.environ.get("CKPT_TESTS_FORKSERVER", "1") == "0":
        return False
    # TF_USE_LEGACY_KERAS is read when tf.keras is first used, which the server never does.
    return env.get("KERAS_BACKEND", "tensorflow") == "tensorflow"


def run_python(argv: list, *, env: dict[str, str] | None = None, cwd=None,
               timeout: float = 600, check: bool = False) -> subprocess.CompletedProcess:
    """Returns what ``subprocess.run([sys.executable, *argv], capture_output=True,
    text=True, env=env, cwd=cwd, timeout=timeout, check=check)`` would, its stdin empty.

    Raises:
        subprocess.TimeoutExpired: when the script ran past ``timeout``.
        subprocess.CalledProcessError: when ``check`` and the script exited non-zero.
    """
    env = dict(os.environ if env is None else env)
    if not _forkable(env):
        return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env,
                              cwd=cwd, timeout=timeout, stdin=subprocess.DEVNULL, check=check)
    with tempfile.TemporaryDirectory(prefix="tfrun") as tmp, _lock:
        out, err = Path(tmp, "out"), Path(tmp, "err")
        request = {"argv": [str(a) for a in argv], "env": env, "cwd": str(cwd or os.getcwd()),
                   "out": str(out), "err": str(err), "timeout": timeout}
        proc = _server()
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        reply = proc.stdout.readline()
        if not reply:
            raise RuntimeError(f"the TensorFlow fork server died (exit {proc.wait()})")
        answer = json.loads(reply)
        stdout = out.read_text(errors="replace") if out.exists() else ""
        stderr = err.read_text(errors="replace") if err.exists() else ""
    if answer["timed_out"]:
        raise subprocess.TimeoutExpired([sys.executable, *argv], timeout, stdout, stderr)
    done = subprocess.CompletedProcess([sys.executable, *argv], answer["rc"], stdout, stderr)
    if check:
        done.check_returncode()
    return done
