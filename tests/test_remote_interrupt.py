"""Ctrl-C or SIGTERM while a remote write replaces an existing checkpoint (``--force``, moto's
S3 server, conftest.py): the old ``.index`` was already deleted, so the error says so (the
name reads as missing until a rerun), not just ``interrupted``; the streamed path (restore-ema
between S3 locations) and the staged one (average) alike. The writers' test hook
(``CKPT_TOOLS_PAUSE_AT``) stops them right after the old index was deleted."""

from __future__ import annotations

import os
import signal

import pytest
from conftest import BUCKET
from helpers import run_cli, s3_keys, start_paused

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from ckpt_tools.formats import remote_s3  # noqa: E402

RUN = f"s3://{BUCKET}/towers_bn/"


def _upload_pause(argv: list[str]) -> int:
    """Runs ``ckpt argv`` in-process, counting the writers' test hook's calls
    (``_write.pause_point``, wherever it was imported); returns the 1-based number of the call
    where the upload or stream starts, which ``CKPT_TOOLS_PAUSE_AT`` takes."""
    from ckpt_tools.formats import _write, remote_stream, remote_write, staged_dir

    calls: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        for module in (_write, remote_stream, remote_write, staged_dir):
            patch.setattr(module, "pause_point", calls.append)
        code, _, err = run_cli(argv)
    assert code == 0, err
    return next(i for i, what in enumerate(calls, 1)
                if what.startswith(("stream ", "upload into ")))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("cmd", [["restore-ema", RUN], ["average", RUN, "--last", "2"]],
                         ids=["streamed", "staged"])
def test_an_interruption_says_the_old_index_was_deleted(s3, tmp_path, cmd, sig):
    prefix = f"intr-{cmd[0]}-{sig.name}"
    out = f"s3://{BUCKET}/{prefix}/"
    code, _, err = run_cli([*cmd, "--out", out])
    assert code == 0, err
    index = next(k for k in s3_keys(s3, prefix + "/") if k.endswith(".index"))
    name = os.path.basename(index)
    os.environ["TMPDIR"] = str(tmp_path)  # the staged copy, removed on the way out
    try:
        # the hook's call where the upload starts (after renames), counted by the same
        # forced run in-process (one child then, not one per call before it)
        n = _upload_pause([*cmd, "--out", out, "--force", "-q"])
        proc, what = start_paused([*cmd, "--out", out, "--force", "-q"], n,
                                  tmp_path / "flag")
        assert what is not None, proc.communicate()
        assert what.startswith(("stream ", "upload into ")), what
    finally:
        del os.environ["TMPDIR"]
    assert index not in s3_keys(s3, prefix + "/")  # deleted first: reads as missing
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == 130
    err = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: interrupted; the old "), lines[0]
    assert f"{name} had been deleted first" in lines[0], lines[0]
    assert f"{out}{name[:-len('.index')]} reads as missing" in lines[0], lines[0]
    assert f"{prefix}/{remote_s3.LOCK_NAME}" not in s3_keys(s3, prefix + "/")
    listed = s3["client"].list_multipart_uploads(Bucket=BUCKET, Prefix=prefix + "/")
    assert not listed.get("Uploads")
    code, _, err = run_cli(["list", out])
    assert code == 3, err
    code, _, err = run_cli([*cmd, "--out", out, "--force"])  # a rerun completes it
    assert code == 0, err
    assert run_cli(["verify", out])[0] == 0
