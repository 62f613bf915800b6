"""Shared pytest fixtures: TensorFlow itself and scratch copies of the committed fixtures."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from helpers import BUCKET, FIXTURES, environ_restored, logged_requests  # noqa: E402

# The slowest files (worker-seconds in a whole fresh-clone run, slowest first) are collected
# first: `--dist loadfile` hands files out in collection order, so in alphabetical order the
# training and remote files came last and one worker sat idle while the other ran them
# (~40 s of the 30-minute CI budget). Any file not listed keeps its place after these.
SLOW_FIRST = (
    "test_train_cluster.py", "test_train.py", "test_hostile_writes.py",
    "test_setups_examples.py", "test_write_safeguards.py", "test_matrix_keras.py",
    "test_bench.py", "test_hostile_reads.py", "test_readme_examples.py", "test_remote.py",
    "test_keras_early.py", "test_remote_stream.py", "test_cli_display.py",
    "test_remote_interrupt.py", "test_remote_commit_order.py", "test_keras_adafactor_lso.py",
    "test_remote_safety.py", "test_remote_lock_liveness.py", "test_keras_sublayers.py",
    "test_keras_trainable_shift.py", "test_keras_backbone.py", "test_keras_loop_order.py",
    "test_cwire_graph.py", "test_remote_http.py",
)


def pytest_collection_modifyitems(session, config, items):
    """Puts :data:`SLOW_FIRST`'s files first (a stable sort: each file's tests keep their
    order, and every xdist worker collects the same order)."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session")
def tf():
    """TensorFlow, imported once per session (tests that cross-check against it)."""
    import tensorflow

    return tensorflow


@pytest.fixture(scope="session")
def keras(tf):
    """Keras 3 on its TensorFlow backend (tests that build models in-process)."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    if keras.backend.backend() != "tensorflow":
        pytest.skip("needs the TensorFlow backend of Keras 3")
    return keras


@pytest.fixture(scope="session")
def cwire(tmp_path_factory):
    """``ckpt_tools/cwire*.c`` compiled as setup.py compiles them, imported from a temp dir
    (once for tests/test_cwire.py and tests/test_cwire_graph.py)."""
    from _corpus import ROOT
    from helpers import build_extension

    return build_extension("cwire", sorted((ROOT / "ckpt_tools").glob("cwire*.c")),
                           tmp_path_factory.mktemp("cwire"))


@pytest.fixture()
def fixture_copy(tmp_path):
    """Returns a function copying a fixture case into tmp_path (for tests that modify files)."""

    def copy(case: str) -> Path:
        dst = tmp_path / case
        shutil.copytree(FIXTURES / case, dst)
        return dst

    return copy


# A local S3 API for the remote tests (tests/test_remote*.py): moto's server, never the network.
CASES = ["towers_bn", "partitioned", "sharded", "tf2_object"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3():
    """A local S3 server holding the fixtures under s3://ckpts/<case>/; stopped at the end."""
    pytest.importorskip("s3fs")
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    with environ_restored(("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                           "AWS_DEFAULT_REGION")), \
            logged_requests("werkzeug", '"') as counter:  # one line per request
        os.environ.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
                          AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                          AWS_DEFAULT_REGION="us-east-1")
        try:
            import boto3

            client = boto3.client("s3")
            client.create_bucket(Bucket=BUCKET)
            for case in CASES:
                for f in sorted((FIXTURES / case).iterdir()):
                    if not f.name.startswith("expected"):
                        client.upload_file(str(f), BUCKET, f"{case}/{f.name}")
            yield {"client": client, "port": port, "requests": counter}
        finally:
            server.stop()


@pytest.fixture(scope="module")
def http():
    """A local HTTP server (tests/http_server.py) serving fixtures/; one per test module."""
    from http_server import FileServer

    server = FileServer(FIXTURES)
    yield server
    server.close()


@pytest.fixture()
def no_tensor_reads(monkeypatch):
    """Fails the test if any tensor is read (checks that must come before reading)."""
    from ckpt_tools.checkpoint import Checkpoint

    def refuse(self, *args, **kwargs):
        raise AssertionError("a tensor was read before --out was checked")

    for method in ("tensor", "chunks"):
        monkeypatch.setattr(Checkpoint, method, refuse)
