"""Shared pytest fixtures: TensorFlow itself and scratch copies of the committed fixtures."""

from __future__ import annotations

import logging
import os
import shutil
import socket
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from helpers import FIXTURES  # noqa: E402


@pytest.fixture(scope="session")
def tf():
    """TensorFlow, imported once per session (tests that cross-check against it)."""
    import tensorflow

    return tensorflow


@pytest.fixture()
def fixture_copy(tmp_path):
    """Returns a function copying a fixture case into tmp_path (for tests that modify files)."""

    def copy(case: str) -> Path:
        dst = tmp_path / case
        shutil.copytree(FIXTURES / case, dst)
        return dst

    return copy


# A local S3 API for the remote tests (tests/test_remote*.py): moto's server, never the network.
BUCKET = "ckpts"
CASES = ["towers_bn", "partitioned", "sharded", "tf2_object"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Requests(logging.Handler):
    """Counts the requests moto's server logs (werkzeug writes one line per request)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())

    def since(self, start: int) -> list[str]:
        return [line for line in self.lines[start:] if '"' in line]


@pytest.fixture(scope="session")
def s3():
    """A local S3 server holding the fixtures under s3://ckpts/<case>/; stopped at the end."""
    pytest.importorskip("s3fs")
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    saved = {k: os.environ.get(k) for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID",
                                            "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}", AWS_ACCESS_KEY_ID="testing",
                      AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    counter = _Requests()
    log = logging.getLogger("werkzeug")
    old_level = log.level
    log.setLevel(logging.INFO)
    log.addHandler(counter)
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
        log.removeHandler(counter)
        log.setLevel(old_level)
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
