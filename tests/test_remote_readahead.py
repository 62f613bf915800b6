"""Remote read-ahead stays bounded (review-16-attack-r2: a remote average kept a 32 MiB window
per shard ever read, 998 MB for 3 inputs x 8 shards), and URL protocols that name a host are
refused up front. No server: the session's range reads are replaced by a local byte source."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

pytest.importorskip("fsspec")

from ckpt_tools.cli import app  # noqa: E402
from ckpt_tools.formats import remote  # noqa: E402


@pytest.fixture
def store(monkeypatch):
    monkeypatch.setattr(remote, "WINDOW", 1000)
    monkeypatch.setattr(remote, "READ_AHEAD_BUDGET", 4000)
    session = remote.Session()
    fetched = []

    def ranges(url, spans):
        fetched.append((url, spans))
        return [bytes(e - s) for s, e in spans]

    monkeypatch.setattr(session, "ranges", ranges)
    session.fetched = fetched
    return session


def _read_in_chunks(f, start, end, chunk=100):
    return b"".join(f.read_range(s, min(end, s + chunk)) for s in range(start, end, chunk))


def test_a_shard_read_to_its_end_holds_no_read_ahead(store):
    f = remote.RemoteFile("s3://b/run/x.data-00000-of-00001", 2500, None, store)
    assert len(_read_in_chunks(f, 0, 2500)) == 2500
    assert f.held == 0
    assert len(store.fetched) == 4  # the first chunk, then one request per window


def test_read_ahead_of_many_shards_stays_within_the_budget(store):
    files = [remote.RemoteFile(f"s3://b/run/m.data-{i:05d}-of-00040", 5000, None, store)
             for i in range(40)]
    for f in files:  # every shard partly read: each took a window
        _read_in_chunks(f, 0, 300)
    assert sum(f.held for f in files) <= remote.READ_AHEAD_BUDGET
    assert files[-1].held == 1000  # the one in use keeps its window
    # A file whose window was dropped still reads correctly (fetched again).
    assert len(_read_in_chunks(files[0], 300, 5000)) == 4700


def test_extents_read_ahead_is_bounded_too(store):
    extents = [(i * 100, i * 100 + 100) for i in range(50)]
    files = [remote.RemoteFile(f"s3://b/r/e.data-{i:05d}-of-00020", 5000, extents, store)
             for i in range(20)]
    for f in files:
        f.read_range(0, 100)
        f.read_range(100, 200)  # sequential: fetches the following tensors ahead
    assert sum(f.held for f in files) <= remote.READ_AHEAD_BUDGET


@pytest.mark.parametrize("url", ["ftp://127.0.0.1:1/x", "FTP://user@127.0.0.1/run/"])
def test_host_protocols_are_refused_without_a_traceback(url):
    result = CliRunner().invoke(app, ["list", url])
    assert result.exit_code == 5, result.output
    assert "Traceback" not in result.output and "Exception ignored" not in result.output
    # the host is named; userinfo (a token may stand there alone) is shown as ***
    host = url.split("/")[2].rsplit("@", 1)[-1]
    assert "not supported" in result.stderr and host in result.stderr
    assert "user" not in result.stderr
