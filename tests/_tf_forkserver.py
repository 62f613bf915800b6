"""A fork server for the tests' TensorFlow generator scripts (see :func:`helpers.run_python`).

Importing TensorFlow costs each generator process about 6 s of CPU, and the suite runs a few
hundred of them: CI went past its half hour on that import alone. This server imports
TensorFlow once (nothing else: no session, no eager context, no Keras model) and forks a
child per script, so each child starts with TensorFlow loaded. The child is a fresh process
for everything the script does: its own argv, environment, working directory, ``sys.path``,
``__main__`` and stdout/stderr files, and the real library computes and records the truth as
before.

Protocol, one JSON object a line on stdin: ``{"argv": [...], "env": {...}, "cwd": str,
"out": path, "err": path, "timeout": s}`` where ``argv`` is what would follow
``python`` (``["-c", code, *args]`` or ``[script, *args]``); the reply on stdout is
``{"rc": int, "timed_out": bool}``.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import signal
import sys
import time
import traceback
import types

# What every run of the helpers sets anyway; read at TensorFlow's import, so fixed here.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy  # noqa: E402,F401
import tensorflow  # noqa: E402,F401

_BASE_PATH = [p for p in sys.path[1:]]  # sys.path[0] is this file's folder


def _child(req: dict) -> int:
    """Runs one request as ``python *argv`` would; returns its exit status."""
    os.setpgid(0, 0)  # the parent's timeout kills the script and whatever it started
    fd_in = os.open(os.devnull, os.O_RDONLY)
    fd_out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    fd_err = os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd_in, 0)
    os.dup2(fd_out, 1)
    os.dup2(fd_err, 2)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    argv = req["argv"]
    extra = [p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    if argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        sys.path[:] = ["", *extra, *_BASE_PATH]
        code = compile(argv[1], "<string>", "exec")
    else:
        script = os.path.abspath(argv[0])
        sys.argv = list(argv)
        sys.path[:] = [os.path.dirname(script), *extra, *_BASE_PATH]
        main.__dict__["__file__"] = script
        with open(script, encoding="utf-8") as f:
            code = compile(f.read(), script, "exec")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
        status = 0
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the child reports what python would
        traceback.print_exc()
        status = 1
    # What python's shutdown would do: drop __main__'s objects (closing what the script left
    # open, so its buffered writes land) and run the exit handlers.
    main.__dict__.clear()
    gc.collect()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    return status


def _serve() -> None:
    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                status = _child(req)
            finally:
                os._exit(status & 0xFF)
        deadline = time.monotonic() + req.get("timeout", 600)
        rc, timed_out = None, False
        while rc is None:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                rc = os.waitstatus_to_exitcode(status)
            elif time.monotonic() > deadline:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                os.waitpid(pid, 0)
                rc, timed_out = -9, True
            else:
                time.sleep(0.02)
        sys.stdout.write(json.dumps({"rc": rc, "timed_out": timed_out}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve()
