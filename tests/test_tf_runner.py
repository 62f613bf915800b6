"""The tests' fork server (``_tf_runner.run_python``) runs a script as ``python`` would: its
argv, exit status, stdout/stderr, environment, working directory and ``__main__``, each run in
a process of its own, and a timeout kills it. Generator scripts rely on each of these."""

from __future__ import annotations

import subprocess

import pytest
from _tf_runner import run_python

pytest.importorskip("tensorflow")

_SCRIPT = r'''
import os, sys
import tensorflow as tf
print("argv", sys.argv[1:], "main", __name__, "cwd", os.getcwd(), "env", os.environ.get("X_T"))
print("eager", tf.executing_eagerly(), "pid", os.getpid())
f = open(sys.argv[1], "w")
f.write("left open")  # python's shutdown flushes it: so must the child's
sys.stderr.write("to stderr\n")
sys.exit(int(sys.argv[2]))
'''


def test_a_script_runs_as_python_runs_it(tmp_path):
    left = tmp_path / "left.txt"
    env = {"X_T": "given", "PATH": "/usr/bin:/bin"}
    first = run_python(["-c", _SCRIPT, str(left), "3"], env=env, cwd=tmp_path)
    assert first.returncode == 3, first.stderr
    assert f"argv ['{left}', '3'] main __main__ cwd {tmp_path} env given" in first.stdout
    assert "eager True" in first.stdout
    assert first.stderr == "to stderr\n"
    assert left.read_text() == "left open"
    second = run_python(["-c", _SCRIPT, str(left), "0"], env=env, cwd=tmp_path)
    assert second.returncode == 0
    assert second.stdout.split("pid")[1] != first.stdout.split("pid")[1]  # a process each


def test_a_script_file_a_raise_and_check(tmp_path):
    script = tmp_path / "gen.py"
    script.write_text("import sys\nprint(__file__, sys.path[0])\nraise ValueError('boom')\n")
    done = run_python([str(script)])
    assert done.returncode == 1
    assert done.stdout.strip() == f"{script} {tmp_path}"
    assert "ValueError: boom" in done.stderr
    with pytest.raises(subprocess.CalledProcessError):
        run_python([str(script)], check=True)


def test_a_timeout_kills_the_script():
    with pytest.raises(subprocess.TimeoutExpired):
        run_python(["-c", "import time; time.sleep(30)"], timeout=1)
    assert run_python(["-c", "print('after')"]).stdout == "after\n"  # the server lives on
