"""Whether a remote writer lock's owner still runs is proven, never guessed from the host name
and pid (moto's S3 server, conftest.py): a writer in another pid namespace with the same host
name (containers with host networking, Kubernetes hostNetwork pods) is never broken while it
renews its lease; a lock whose lease expired, or whose pid is proven gone or reused here, is
broken with --force, with a ``note:`` naming its owner, and the multipart uploads its writer
left in the directory are aborted; a writer whose lock was broken stops before publishing."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest
from conftest import BUCKET
from helpers import error_line, proven_identity, run_cli, s3_keys, s3_lock, start_paused_writer

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from ckpt_tools.formats import remote_s3  # noqa: E402

RUN = f"s3://{BUCKET}/towers_bn/"


def _lock_body(s3, prefix: str) -> dict:
    got = s3["client"].get_object(Bucket=BUCKET, Key=f"{prefix}/{remote_s3.LOCK_NAME}")
    return json.loads(got["Body"].read())


def _uploads(s3, prefix: str) -> list[str]:
    listed = s3["client"].list_multipart_uploads(Bucket=BUCKET, Prefix=prefix)
    return sorted(u["Key"] for u in listed.get("Uploads", []))


def _notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("note:")]


def _unused_pid() -> int:
    pid = 4_000_000
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except OSError:
            pass
        pid -= 1


def _average(out: str, *extra: str) -> list[str]:
    return ["average", RUN, "--last", "2", "--out", out, *extra]


def test_a_live_writer_in_another_pid_namespace_is_never_broken(s3):
    """The reported case: same host name, a pid that does not run here (it runs in the
    writer's own namespace), a fresh lease: --force must not break it."""
    me = proven_identity(os.getpid())
    s3_lock(s3, "otherns", {"host": socket.gethostname(), "pid": _unused_pid(), "time": "t",
                          "token": "t", "lease_s": 120, "beat": 3, "boot": me["boot"],
                          "pidns": "pid:[4026500001]", "start": 12345})
    code, _, err = run_cli(_average(f"s3://{BUCKET}/otherns/", "--force"))
    assert code == 7, err
    line = error_line(err)
    assert "cannot be proven alive or dead" in line and "renewed its lease" in line, line
    assert _notes(err) == []
    assert s3_keys(s3, "otherns/") == [f"otherns/{remote_s3.LOCK_NAME}"]


@pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare")
def test_a_real_writer_in_another_pid_namespace_keeps_its_lock(s3, tmp_path):
    """A real writer started with ``unshare --pid`` (same host name, its own pid namespace),
    paused while it holds the lock: --force from here is refused and the writer then
    completes (exit 0, its output verifies)."""
    probe = subprocess.run(["unshare", "-U", "-r", "-p", "-f", "--mount-proc", "true"],
                           capture_output=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip("unprivileged pid namespaces are not available here")
    flag = tmp_path / "flag"
    out = f"s3://{BUCKET}/nsw/"
    proc = start_paused_writer(_average(out, "-q"), flag, tmp_path, CKPT_TOOLS_LOCK_LEASE="4",
                               wrap=("unshare", "-U", "-r", "-p", "-f", "--mount-proc"))
    try:
        owner = _lock_body(s3, "nsw")
        assert owner["host"] == socket.gethostname()
        assert owner["pidns"] != os.readlink("/proc/self/ns/pid")
        time.sleep(5)  # longer than its lease: only its renewals keep it valid
        assert _lock_body(s3, "nsw")["beat"] > owner["beat"]
        code, _, err = run_cli(_average(out, "--force"))
        assert code == 7, err
        assert "renewed its lease" in error_line(err), err
        assert _notes(err) == []
    finally:
        flag.unlink()
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    proc.stderr.close()
    code, _, err = run_cli(["verify", out])
    assert code == 0, err
    assert remote_s3.LOCK_NAME not in " ".join(s3_keys(s3, "nsw/"))


@pytest.mark.parametrize("pid", [1, -1])
def test_a_lock_whose_liveness_is_unproven_says_how_to_remove_it(s3, pid):
    """A container's pid 1 (OOM-killed, the pod restarted with the same host name), or a pid
    <= 0, recording no lease: never 'still running', never broken."""
    prefix = f"unproven{pid}"
    s3_lock(s3, prefix, {"host": socket.gethostname(), "pid": pid,
                       "time": "2026-01-01T00:00:00Z", "token": "t"})
    for force in ([], ["--force"]):
        code, _, err = run_cli(_average(f"s3://{BUCKET}/{prefix}/", *force))
        assert code == 7, err
        line = error_line(err)
        assert "still running" not in line and "delete that object once no writer runs" \
            in line, line
    assert s3_keys(s3, prefix + "/") == [f"{prefix}/{remote_s3.LOCK_NAME}"]


def test_an_expired_lease_is_broken_with_force_and_said(s3):
    prefix = "expired"
    s3_lock(s3, prefix, {"host": socket.gethostname(), "pid": 1, "time": "2026-01-01T00:00:00Z",
                       "token": "t", "lease_s": 1, "beat": 0, "boot": "b", "pidns": "p",
                       "start": 1})
    time.sleep(2.5)
    out = f"s3://{BUCKET}/{prefix}/"
    code, _, err = run_cli(_average(out))
    assert code == 7, err
    line = error_line(err)
    assert "lease expired" in line and "pass --force" in line and "still running" not in line
    code, _, err = run_cli(_average(out, "--force", "-q"))
    assert code == 0, err
    notes = _notes(err)
    assert len(notes) == 1 and "broke lock" in notes[0] and "pid 1 " in notes[0], err
    assert "lease expired" in notes[0], notes
    code, _, err = run_cli(["verify", out])
    assert code == 0, err


def test_a_reused_pid_is_proven_dead_and_its_uploads_are_aborted(s3):
    """Same boot and namespace, but the pid now runs another process (another start time):
    the writer is dead. --force breaks the lock, says so, and aborts the multipart upload
    the dead writer left in that directory (not one of a subdirectory)."""
    prefix = "reused"
    me = proven_identity(os.getppid())
    s3_lock(s3, prefix, {"host": socket.gethostname(), "pid": os.getppid(), "time": "t",
                       "token": "t", "lease_s": 120, "beat": 0,
                       **me, "start": me["start"] + 1})
    client = s3["client"]
    left = client.create_multipart_upload(Bucket=BUCKET,
                                          Key=f"{prefix}/model.ckpt-7.data-00000-of-00001")
    client.upload_part(Bucket=BUCKET, Key=left["Key"], UploadId=left["UploadId"],
                       PartNumber=1, Body=b"x" * 1024)
    other = client.create_multipart_upload(Bucket=BUCKET, Key=f"{prefix}/sub/other.bin")
    out = f"s3://{BUCKET}/{prefix}/"
    code, _, err = run_cli(_average(out))
    assert code == 7, err
    line = error_line(err)
    assert "no longer running" in line and "--force" in line, line
    assert _uploads(s3, prefix + "/") == [f"{prefix}/model.ckpt-7.data-00000-of-00001",
                                          f"{prefix}/sub/other.bin"]
    code, _, err = run_cli(_average(out, "--force"))
    assert code == 0, err
    notes = _notes(err)
    assert len(notes) == 1 and f"pid {os.getppid()}" in notes[0], err
    assert "no longer runs" in notes[0] and "model.ckpt-7.data-00000-of-00001" in notes[0]
    assert _uploads(s3, prefix + "/") == [f"{prefix}/sub/other.bin"]
    client.abort_multipart_upload(Bucket=BUCKET, Key=other["Key"], UploadId=other["UploadId"])
    assert remote_s3.LOCK_NAME not in " ".join(s3_keys(s3, prefix + "/"))


def test_a_writer_renews_its_lease_and_stops_when_its_lock_is_broken(s3, tmp_path):
    """A writer paused with its lock held renews it (the lock's ``beat`` grows); when the
    lock is deleted meanwhile (broken by someone else), the writer refuses to upload
    anything (exit 7) instead of publishing over the new owner."""
    flag = tmp_path / "flag"
    out = f"s3://{BUCKET}/lost/"
    proc = start_paused_writer(_average(out, "-q"), flag, tmp_path, CKPT_TOOLS_LOCK_LEASE="2")
    first = _lock_body(s3, "lost")
    assert first["pid"] == proc.pid and first["lease_s"] == 2
    time.sleep(2)
    assert _lock_body(s3, "lost")["beat"] > first["beat"]
    s3["client"].delete_object(Bucket=BUCKET, Key=f"lost/{remote_s3.LOCK_NAME}")
    time.sleep(1.5)  # the next renewal finds it gone
    flag.unlink()
    assert proc.wait(timeout=120) == 7
    err = proc.stderr.read()
    proc.stderr.close()
    assert "lock" in error_line(err) and "lost" in error_line(err), err
    assert s3_keys(s3, "lost/") == []


def test_sigterm_of_a_renewing_writer_removes_its_lock(s3, tmp_path):
    flag = tmp_path / "flag"
    out = f"s3://{BUCKET}/termed/"
    proc = start_paused_writer(_average(out, "-q"), flag, tmp_path)
    assert s3_keys(s3, "termed/") == [f"termed/{remote_s3.LOCK_NAME}"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130
    proc.stderr.close()
    assert s3_keys(s3, "termed/") == []
