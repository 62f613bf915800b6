"""The writer lock of a remote output directory, against moto's S3 server (conftest.py): taken
before any tensor is read (a missing bucket or a busy directory fails at once), it records its
owner (host, pid, time, boot id, pid namespace, start time), which a later run names; a writer
killed with SIGKILL leaves the lock and its local stage behind, and a later run breaks a lock
whose owner is proven gone (``--force``) and removes the dead writer's stage from ``$TMPDIR``.
Liveness across namespaces, leases and the dead writer's multipart uploads:
test_remote_lock_liveness.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest
from conftest import BUCKET
from helpers import error_line, proven_identity, run_cli, s3_keys, s3_lock, start_paused_writer

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from ckpt_tools.formats import remote_s3  # noqa: E402
from ckpt_tools.formats.write_locks import STAGE_PREFIX  # noqa: E402

RUN = f"s3://{BUCKET}/towers_bn/"


def test_a_missing_bucket_fails_before_reading(s3, no_tensor_reads):
    code, _, err = run_cli(["average", RUN, "--last", "2", "--out", "s3://nosuchbucket/avg/"])
    assert code == 3, err
    assert "s3://nosuchbucket/" in error_line(err) and "bucket" in error_line(err)


@pytest.mark.parametrize("cmd", [["average", RUN, "--last", "2"], ["restore-ema", RUN],
                                 ["export", RUN]])
def test_a_live_writers_lock_is_named_and_never_broken(s3, cmd, no_tensor_reads):
    prefix = f"live-{cmd[0]}"
    owner = {"host": socket.gethostname(), "pid": os.getppid(), "time": "2026-01-01T00:00:00Z",
             "token": "t", **proven_identity(os.getppid())}
    s3_lock(s3, prefix, owner)
    out = f"s3://{BUCKET}/{prefix}/" + ("w.npz" if cmd[0] == "export" else "")
    for force in ([], ["--force"]):
        code, _, err = run_cli([*cmd, "--out", out, *force])
        assert code == 7, err
        line = error_line(err)
        assert f"pid {os.getppid()}" in line and "still running" in line, line
    assert s3_keys(s3, prefix + "/") == [f"{prefix}/{remote_s3.LOCK_NAME}"]


def test_another_hosts_lock_is_named_and_never_broken(s3, no_tensor_reads):
    s3_lock(s3, "elsewhere", {"host": "some-other-host", "pid": 1, "time": "t", "token": "t"})
    code, _, err = run_cli(["average", RUN, "--last", "2", "--out",
                            f"s3://{BUCKET}/elsewhere/", "--force"])
    assert code == 7, err
    line = error_line(err)
    assert "'some-other-host'" in line and "delete that object" in line, line


def test_sigkill_during_a_remote_write_then_a_later_run_proceeds(s3, tmp_path):
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    flag = tmp_path / "flag"
    out = f"s3://{BUCKET}/killed/"
    cmd = [sys.executable, "-m", "ckpt_tools", "average", RUN, "--last", "2", "--out", out]
    # paused while publishing its local stage, lock held
    proc = start_paused_writer(cmd[3:], flag, tmp)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stderr.close()
    assert s3_keys(s3, "killed/") == [f"killed/{remote_s3.LOCK_NAME}"]
    stages = [p.name for p in tmp.iterdir()]
    assert len(stages) == 1 and stages[0].startswith(f"{STAGE_PREFIX}{proc.pid}-average-")

    later = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": os.getcwd()}
    again = subprocess.run(cmd[:-2] + ["--out", out], env=later, capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 7, again.stderr
    line = error_line(again.stderr)
    assert f"pid {proc.pid}" in line and socket.gethostname() in line, line
    assert "no longer running" in line and "--force" in line, line

    forced = subprocess.run(cmd[:-2] + ["--out", out, "--force"], env=later,
                            capture_output=True, text=True, timeout=120)
    assert forced.returncode == 0, forced.stderr
    assert remote_s3.LOCK_NAME not in " ".join(s3_keys(s3, "killed/"))
    assert any(k.endswith(".index") for k in s3_keys(s3, "killed/"))
    assert list(tmp.iterdir()) == []  # the dead writer's stage was removed, and its own
    code, _, err = run_cli(["verify", out])
    assert code == 0, err
