"""Remote checkpoints under hostile or failing conditions, against a real S3 API on localhost
(moto's server, see conftest.py) and local sockets that misbehave on purpose: a stalled
endpoint, refused credentials, objects replaced while read, huge or redirecting state files,
interrupted and concurrent writers. Never the network beyond 127.0.0.1.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import BUCKET
from helpers import FIXTURES, one_line_error
from typer.testing import CliRunner

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from ckpt_tools import open_checkpoint  # noqa: E402
from ckpt_tools.cli import app  # noqa: E402
from ckpt_tools.errors import CheckpointError  # noqa: E402
from ckpt_tools.formats import remote_s3  # noqa: E402

runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, list(args))



def _copy_case(s3, case: str, prefix: str) -> None:
    for f in sorted((FIXTURES / case).iterdir()):
        if not f.name.startswith("expected"):
            s3["client"].upload_file(str(f), BUCKET, f"{prefix}/{f.name}")


def _keys(s3, prefix: str) -> dict[str, str]:
    listed = s3["client"].list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return {o["Key"]: o["ETag"] for o in listed.get("Contents", [])}


# ---- 2. a stalled endpoint: bounded time, "network failure" --------------------------------

def test_stalled_endpoint_fails_in_bounded_time(monkeypatch):
    """A server that accepts connections and never answers: the command ends within seconds
    (CKPT_REMOTE_TIMEOUT=1: 3 attempts of a 1 s read), naming the URL and the wait."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])  # and never answer
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{listener.getsockname()[1]}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("CKPT_REMOTE_TIMEOUT", "1")
    try:
        start = time.monotonic()
        result = _run("list", "s3://ckpts/run/")
        took = time.monotonic() - start
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()
    one_line_error(result, 1, "s3://ckpts/run", "network failure", "no answer within")
    assert accepted, "the client never connected"
    assert took < 20, took


# ---- 4. error classification ---------------------------------------------------------------

def test_unknown_protocol_is_unsupported_not_network():
    result = _run("list", "foo://x/run/")
    one_line_error(result, 5, "foo://x/run", "unknown URL protocol 'foo://'")


def test_without_fsspec_the_error_names_the_output_url(monkeypatch, tmp_path):
    """review-16-final m5: without fsspec, `--out s3://…` said 'reading URLs needs fsspec'
    naming no URL (and the command writes there)."""
    monkeypatch.setitem(sys.modules, "fsspec", None)  # import fsspec: ImportError
    result = _run("export", str(FIXTURES / "linear_v2"), "--out", "s3://bucket/zz/w.npz")
    one_line_error(result, 5, "s3://bucket/zz", "need fsspec")


def test_gs_without_gcsfs_names_the_package(monkeypatch):
    """gcsfs is in the test extra: its absence is made by hiding it from the import system
    (and from fsspec's registry of classes already loaded)."""
    import importlib

    loaded = importlib.import_module("fsspec.registry")._registry  # fsspec.registry: a view
    monkeypatch.setitem(sys.modules, "gcsfs", None)  # import gcsfs: ImportError
    for protocol in ("gs", "gcs"):
        monkeypatch.delitem(loaded, protocol, raising=False)
    result = _run("list", "gs://bucket/run/")
    one_line_error(result, 5, "gs://bucket/run", "pip install gcsfs")


def test_missing_credentials_say_so(s3, monkeypatch, tmp_path):
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never ask 169.254.169.254
    result = _run("list", f"s3://{BUCKET}/towers_bn/")
    one_line_error(result, 1, f"s3://{BUCKET}/towers_bn", "no usable credentials")
    assert "network failure" not in result.stderr


class _S3Error(BaseHTTPRequestHandler):
    """Answers every request with one S3 XML error (what AWS sends for bad credentials)."""

    status, code = 403, "InvalidAccessKeyId"

    def _answer(self):
        body = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{self.code}</Code>"
                "<Message>refused by the test server</Message></Error>").encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_HEAD = do_PUT = _answer  # noqa: N815 (http.server's names)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("status,code,words", [
    (403, "InvalidAccessKeyId", ["credentials rejected", "InvalidAccessKeyId"]),
    (400, "ExpiredToken", ["credentials rejected", "ExpiredToken"]),
    (403, "AccessDenied", ["forbidden (access denied"]),
])
def test_rejected_credentials_and_denied_access_say_so(monkeypatch, status, code, words):
    handler = type("H", (_S3Error,), {"status": status, "code": code})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    try:
        result = _run("list", "s3://ckpts/run/")
    finally:
        server.shutdown()
        server.server_close()
    one_line_error(result, 1, "s3://ckpts/run", *words)
    assert "network failure" not in result.stderr


def test_object_replaced_or_shrunk_while_read_is_refused(s3):
    """Reads are pinned to the ETags the listing gave: a shard replaced (same size, other
    bytes) or truncated after the checkpoint was opened is refused, never mixed in."""
    client = s3["client"]
    for n, cut in enumerate((None, 100)):
        prefix = f"mutate{n}"
        _copy_case(s3, "towers_bn", prefix)
        shard = f"{prefix}/model.ckpt-30.data-00000-of-00001"
        data = (FIXTURES / "towers_bn" / "model.ckpt-30.data-00000-of-00001").read_bytes()
        with open_checkpoint(f"s3://{BUCKET}/{prefix}/") as ckpt:
            name = sorted(ckpt.keys())[0]
            client.put_object(Bucket=BUCKET, Key=shard,
                              Body=bytes(255 - b for b in data) if cut is None else data[:cut])
            with pytest.raises(CheckpointError) as err:
                ckpt.tensor(name)
        assert err.value.exit_code == 1
        assert "changed while it was being read" in str(err.value), err.value
        assert f"s3://{BUCKET}/{shard}" in str(err.value)


# ---- 3. size caps and state-file redirects ---------------------------------------------------

def test_huge_state_file_and_index_are_refused_before_download(s3, monkeypatch):
    client = s3["client"]
    _copy_case(s3, "towers_bn", "hugestate")
    client.put_object(Bucket=BUCKET, Key="hugestate/checkpoint", Body=b"#" * ((16 << 20) + 1))
    start = len(s3["requests"].lines)
    result = _run("list", f"s3://{BUCKET}/hugestate/")
    one_line_error(result, 4, f"s3://{BUCKET}/hugestate/checkpoint", "larger than 16777216")
    assert not [line for line in s3["requests"].since(start) if "/checkpoint " in line]
    index_size = (FIXTURES / "towers_bn" / "model.ckpt-30.index").stat().st_size
    monkeypatch.setenv("CKPT_REMOTE_MAX_BYTES", str(index_size - 1))
    start = len(s3["requests"].lines)
    result = _run("list", f"s3://{BUCKET}/towers_bn/")
    one_line_error(result, 5, f"s3://{BUCKET}/towers_bn/model.ckpt-30.index", "larger than",
                    "CKPT_REMOTE_MAX_BYTES")
    assert not [line for line in s3["requests"].since(start) if ".index " in line]


@pytest.mark.parametrize("target", [
    "file://{local}/model.ckpt-30",
    "{local}/../towers_bn/model.ckpt-30x",
    "s3://other-bucket/run/model.ckpt-30",
])
def test_remote_state_file_never_redirects_outside_its_bucket(s3, target):
    local = str(FIXTURES / "towers_bn")
    body = f'model_checkpoint_path: "{target.format(local=local)}"\n'.encode()
    s3["client"].put_object(Bucket=BUCKET, Key="redirect/checkpoint", Body=body)
    result = _run("list", f"s3://{BUCKET}/redirect/")
    one_line_error(result, 5, f"s3://{BUCKET}/redirect/checkpoint", "own bucket")


@pytest.mark.parametrize("target", ["../towers_bn/model.ckpt-30",
                                    "../../../other-bucket/model.ckpt-30"])
def test_remote_state_file_with_dotdot_is_refused(s3, target):
    """An object store keeps '..' as part of a key (TensorFlow's file systems join the
    strings), so a state file naming '../towers_bn/…' was read from a checkpoint another reader
    would not read (review-16-final m7): refused, as URLs with '..' are, even inside the bucket."""
    _copy_case(s3, "towers_bn", "towers_bn")
    body = f'model_checkpoint_path: "{target}"\n'.encode()
    s3["client"].put_object(Bucket=BUCKET, Key="dotdot/checkpoint", Body=body)
    result = _run("list", f"s3://{BUCKET}/dotdot/")
    one_line_error(result, 5, f"s3://{BUCKET}/dotdot/checkpoint", "'..'")


def test_copied_run_state_file_resolves_inside_its_directory(s3):
    """A run copied from gs:// keeps absolute gs:// names in its state file: they resolve
    by base name inside the copy (as absolute local paths do), not in the other bucket."""
    _copy_case(s3, "towers_bn", "copied")
    body = (b'model_checkpoint_path: "gs://tpu-bucket/run/model.ckpt-30"\n'
            b'all_model_checkpoint_paths: "gs://tpu-bucket/run/model.ckpt-20"\n'
            b'all_model_checkpoint_paths: "gs://tpu-bucket/run/model.ckpt-30"\n')
    s3["client"].put_object(Bucket=BUCKET, Key="copied/checkpoint", Body=body)
    result = _run("list", f"s3://{BUCKET}/copied/", "--json")
    assert result.exit_code == 0, result.output
    assert f"s3://{BUCKET}/copied/model.ckpt-30" in result.stdout


# ---- 1. remote writes: never old index with new data, concurrent writers refused ------------

def test_interrupted_force_upload_leaves_no_mix(s3, monkeypatch):
    out = f"s3://{BUCKET}/forced/"
    assert _run("restore-ema", f"s3://{BUCKET}/towers_bn/", "--out", out).exit_code == 0
    real_put = remote_s3.put

    def failing_put(fs, local, path, **kw):
        if path.endswith(".index"):
            raise ConnectionResetError("connection reset by the test")
        return real_put(fs, local, path, **kw)

    monkeypatch.setattr(remote_s3, "put", failing_put)
    result = _run("average", f"s3://{BUCKET}/towers_bn/", "--last", "2", "--out", out,
                  "--force")
    one_line_error(result, 1, f"{out}model.ckpt-30.index", "network failure",
                    "reads as missing")
    monkeypatch.setattr(remote_s3, "put", real_put)
    # The old index went first: the name reads as missing (exit 3), never old index + new
    # data (which verify would call corrupt, exit 4).
    for cmd in (["list", out], ["verify", out]):
        assert _run(*cmd).exit_code == 3, cmd
    assert _run("average", f"s3://{BUCKET}/towers_bn/", "--last", "2", "--out", out,
                "--force").exit_code == 0
    assert _run("verify", out).exit_code == 0
    assert f"forced/{remote_s3.LOCK_NAME}" not in _keys(s3, "forced/")


def test_reader_of_the_old_checkpoint_is_refused_during_force(s3):
    """A reader that listed the old checkpoint before a --force replaced it is refused
    (changed while read), not served old index + new data."""
    out = f"s3://{BUCKET}/forced-read/"
    # the old checkpoint a plain average (no mark: a restore-ema output's mark, read on
    # opening, brings its small data shard into the read-ahead window whole)
    assert _run("average", f"s3://{BUCKET}/towers_bn/", "--last", "2", "--out",
                out).exit_code == 0
    with open_checkpoint(out) as ckpt:
        assert _run("restore-ema", f"s3://{BUCKET}/towers_bn/", "--out", out,
                    "--force").exit_code == 0
        with pytest.raises(CheckpointError) as err:
            for key in ckpt.keys():
                ckpt.tensor(key)
    assert "changed while it was being read" in str(err.value), err.value


def test_a_held_lock_refuses_a_second_writer(s3):
    s3["client"].put_object(Bucket=BUCKET, Key=f"locked/{remote_s3.LOCK_NAME}", Body=b"{}")
    result = _run("restore-ema", f"s3://{BUCKET}/towers_bn/", "--out", f"s3://{BUCKET}/locked/")
    one_line_error(result, 7, f"s3://{BUCKET}/locked/", "another ckpt command is writing")
    assert list(_keys(s3, "locked/")) == [f"locked/{remote_s3.LOCK_NAME}"]


def test_concurrent_writers_exactly_one_wins(s3):
    out = f"s3://{BUCKET}/race/"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    cmd = [sys.executable, "-m", "ckpt_tools", "restore-ema", f"s3://{BUCKET}/towers_bn/",
           "--out", out, "-q"]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    codes = sorted(code for code, _ in results)
    assert codes == [0, 7], results
    assert _run("verify", out).exit_code == 0
