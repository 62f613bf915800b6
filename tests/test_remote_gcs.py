"""``gs://`` through fsspec's gcsfs, against a real GCS JSON API on localhost started by the
tests: ``gcp-storage-emulator`` (pure Python, in the ``test`` extra), reached by gcsfs through
``STORAGE_EMULATOR_HOST``. Requests are counted from the emulator's own request log.

What is not tested here: gcsfs's ``ExtendedGcsFileSystem`` (its default since 2026; it asks
GCS's gRPC storage-control API for the bucket type, which the emulator lacks), so the tests
run gcsfs's core ``GCSFileSystem`` (``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``, set before
gcsfs is imported); and credentials (the emulator takes anonymous requests).
"""

from __future__ import annotations

import os
import sys

import pytest
from helpers import FIXTURES, digests, environ_restored, logged_requests
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()
BUCKET = "ckpts"


@pytest.fixture(scope="module")
def gcs():
    """A GCS emulator holding fixtures/towers_bn and tf2_object as gs://ckpts/<case>/."""
    env = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "NO_GCE_CHECK": "True"}
    with environ_restored([*env, "STORAGE_EMULATOR_HOST"]):
        if "gcsfs" not in sys.modules:
            os.environ.update(env)  # read when gcsfs is imported
        pytest.importorskip("gcsfs")
        emulator = pytest.importorskip("gcp_storage_emulator.server")
        server = emulator.create_server("127.0.0.1", 0, in_memory=True, default_bucket=BUCKET)
        server.start()
        port = server._api._httpd.server_address[1]  # the emulator's only way to say
        with logged_requests("gcp_storage_emulator.server", "HTTP/1") as counter:
            os.environ.update(env, STORAGE_EMULATOR_HOST=f"http://127.0.0.1:{port}")
            try:
                import gcsfs

                fs = gcsfs.GCSFileSystem(token="anon", skip_instance_cache=True)
                for case in ("towers_bn", "tf2_object"):
                    for f in sorted((FIXTURES / case).iterdir()):
                        if not f.name.startswith("expected"):
                            fs.put_file(str(f), f"{BUCKET}/{case}/{f.name}")
                yield {"fs": fs, "requests": counter}
            finally:
                server.stop()


@pytest.mark.parametrize("case", ["towers_bn", "tf2_object"])
def test_list_of_a_gs_run_directory_in_four_requests(gcs, case):
    local = runner.invoke(app, ["list", "--json", str(FIXTURES / case)])
    start = len(gcs["requests"].lines)
    remote = runner.invoke(app, ["list", "--json", f"gs://{BUCKET}/{case}/"])
    made = gcs["requests"].since(start)
    assert remote.exit_code == 0, remote.output
    assert remote.stdout.replace(f"gs://{BUCKET}/{case}", str(FIXTURES / case)) == local.stdout
    assert 1 <= len(made) <= 4, made
    assert not any(".data-" in line for line in made) or case == "tf2_object", made


def test_restore_ema_from_and_to_gs_is_bit_identical(gcs, tmp_path):
    local = tmp_path / "local"
    got = runner.invoke(app, ["restore-ema", str(FIXTURES / "towers_bn"), "--out", str(local)])
    assert got.exit_code == 0, got.output
    got = runner.invoke(app, ["restore-ema", f"gs://{BUCKET}/towers_bn/", "--out",
                              str(tmp_path / "from_gs")])
    assert got.exit_code == 0, got.output
    assert digests(tmp_path / "from_gs") == digests(local)
    got = runner.invoke(app, ["restore-ema", f"gs://{BUCKET}/towers_bn/", "--out",
                              f"gs://{BUCKET}/baked/"])
    assert got.exit_code == 0, got.output
    down = tmp_path / "down"
    down.mkdir()
    for name in digests(local):
        gcs["fs"].get_file(f"{BUCKET}/baked/{name}", str(down / name))
    assert digests(down) == digests(local)
    got = runner.invoke(app, ["verify", f"gs://{BUCKET}/baked/"])
    assert got.exit_code == 0, got.output
    # An existing output is refused, as on S3.
    got = runner.invoke(app, ["restore-ema", f"gs://{BUCKET}/towers_bn/", "--out",
                              f"gs://{BUCKET}/baked/"])
    assert got.exit_code == 7, got.output


def test_missing_gs_object_is_exit_3(gcs):
    got = runner.invoke(app, ["list", f"gs://{BUCKET}/nope/"])
    assert got.exit_code == 3, got.output
    assert f"gs://{BUCKET}/nope/: not found" in got.stderr


def test_a_gs_network_failure_is_one_line_on_stderr(tmp_path):
    """gcsfs logs its retries (with tracebacks) and 'Could not determine bucket type' through
    Python's last-resort handler; the command's failure is one ``error:`` line all the same.
    A closed port stands for the unreachable endpoint (a real one needs the network)."""
    import socket
    import subprocess

    pytest.importorskip("gcsfs")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: connections are refused
    env = {**os.environ, "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}",
           "CKPT_REMOTE_TIMEOUT": "2", "NO_GCE_CHECK": "True"}
    env.pop("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", None)  # gcsfs' default file system
    proc = subprocess.run([sys.executable, "-m", "ckpt_tools", "list", "gs://ckpts/run/"],
                          env=env, capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: gs://ckpts/run/"), \
        proc.stderr
