"""Checkpoints on plain HTTP(S) servers: every read command on ``http://`` URLs, against a
real HTTP server started by the tests (tests/http_server.py: Range, HEAD, ETag, If-Match).

Each command's output is compared with the same command on the local files (outputs bit for
bit); requests are counted from the server's own log.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import CASES
from helpers import FIXTURES, decide_args, digests, expected
from http_server import FileServer, touch_later
from typer.testing import CliRunner

pytest.importorskip("aiohttp")
pytest.importorskip("fsspec")

from ckpt_tools import open_checkpoint  # noqa: E402
from ckpt_tools.cli import app  # noqa: E402
from ckpt_tools.errors import RemoteAccessError  # noqa: E402

runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, list(args))


def _same(http, command: list[str], case: str, form: str = "{}/") -> None:
    url = f"{http.url}/{case}"
    local = _run(command[0], str(FIXTURES / case), *command[1:])
    remote = _run(command[0], form.format(url), *command[1:])
    assert local.exit_code == 0, local.output
    assert remote.exit_code == 0, remote.output
    assert remote.stdout.replace(url, str(FIXTURES / case)) == local.stdout


@pytest.mark.parametrize("case", CASES)
def test_list_and_map_match_local_in_four_requests(http, case):
    forms = ["{}/", "{}", "{}/" + expected(case)["prefix"]]
    for command in (["list", "--json"], ["list"], ["map", "--json", *decide_args(case)]):
        for form in forms:
            start = len(http.log)
            if form.endswith(expected(case)["prefix"]):  # a prefix: paths are the same
                url = form.format(f"{http.url}/{case}")
                got = _run(command[0], url, *command[1:])
                assert got.exit_code == 0, got.output
            else:
                _same(http, command, case, form)
            made = http.since(start)
            assert 1 <= len(made) <= 4, made
            assert all(line.startswith("GET ") for line in made), made  # no HEAD either
            data = [line for line in made if ".data-" in line]
            if case == "tf2_object":  # its object graph (what .meta is to TF1): one range
                assert len(data) == 1 and data[0].endswith(" 206"), made
            else:
                assert not data, made


@pytest.mark.parametrize("case", CASES)
def test_show_verify_export_match_local(http, case, tmp_path):
    with open_checkpoint(FIXTURES / case) as ckpt:
        name = next(v.path or v.name for v in ckpt.variables() if v.role == "weight")
    _same(http, ["show", name, "--json"], case)
    _same(http, ["verify", "--json"], case)
    decide = decide_args(case)
    local_out, remote_out = tmp_path / "local.npz", tmp_path / "remote.npz"
    assert _run("export", str(FIXTURES / case), "--out", str(local_out), *decide).exit_code == 0
    result = _run("export", f"{http.url}/{case}/", "--out", str(remote_out), *decide)
    assert result.exit_code == 0, result.output
    with np.load(local_out) as a, np.load(remote_out) as b:
        assert sorted(a.files) == sorted(b.files) and a.files
        for k in a.files:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


@pytest.mark.parametrize("case", ["towers_bn", "sharded", "partitioned"])
def test_restore_ema_from_http_is_bit_identical(http, case, tmp_path):
    local, remote = tmp_path / "local", tmp_path / "remote"
    assert _run("restore-ema", str(FIXTURES / case), "--out", str(local)).exit_code == 0
    result = _run("restore-ema", f"{http.url}/{case}/", "--out", str(remote))
    assert result.exit_code == 0, result.output
    assert digests(remote) == digests(local)


def test_average_from_http_is_bit_identical(http, tmp_path):
    local, remote = tmp_path / "local", tmp_path / "remote"
    result = _run("average", str(FIXTURES / "towers_bn"), "--last", "2", "--out", str(local))
    assert result.exit_code == 0, result.output
    result = _run("average", f"{http.url}/towers_bn/", "--last", "2", "--out", str(remote))
    assert result.exit_code == 0, result.output
    assert digests(remote) == digests(local)
    # and given as two prefix URLs
    urls = [f"{http.url}/towers_bn/model.ckpt-{n}" for n in (20, 30)]
    again = tmp_path / "again"
    assert _run("average", *urls, "--out", str(again)).exit_code == 0
    assert digests(again) == digests(local)


def test_http_output_is_refused_before_anything_is_read(http, tmp_path):
    out = f"{http.url}/out/"
    for args in (("restore-ema", f"{http.url}/towers_bn/", "--out", out),
                 ("export", f"{http.url}/towers_bn/", "--out", out + "w.npz"),
                 ("average", f"{http.url}/towers_bn/", "--last", "2", "--out", out),
                 ("restore-ema", str(FIXTURES / "towers_bn"), "--out", out)):
        start = len(http.log)
        result = _run(*args)
        assert result.exit_code == 7, result.output
        assert "read-only" in result.stderr and f"{http.url}/out" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert not [line for line in http.since(start) if not line.startswith("GET ")]


@pytest.fixture
def served(tmp_path):
    """A private copy of two fixtures, served (tests below change files under the server)."""
    for case in ("towers_bn", "tf2_object"):
        shutil.copytree(FIXTURES / case, tmp_path / case)
    server = FileServer(tmp_path)
    yield server, tmp_path
    server.close()


@pytest.mark.parametrize("conditional", [True, False])
def test_an_object_changed_mid_read_is_an_error_not_a_mix(tmp_path, conditional):
    from ckpt_tools.formats import remote

    shutil.copytree(FIXTURES / "towers_bn", tmp_path / "run")
    server = FileServer(tmp_path, conditional=conditional)
    try:
        url = f"{server.url}/run/model.ckpt-30.data-00000-of-00001"
        store = remote.begin()
        first = store.ranges(url, [(0, 16)])[0]
        touch_later(tmp_path / "run" / "model.ckpt-30.data-00000-of-00001")  # new ETag
        with pytest.raises(RemoteAccessError, match="changed while it was being read") as e:
            store.ranges(url, [(16, 32)])
        assert url in str(e.value)
        assert first == (tmp_path / "run" / url.rsplit("/", 1)[1]).read_bytes()[:16]
        # 412 from a server honouring If-Match; a compared ETag from one ignoring it
        assert server.log[-1].endswith(" 412" if conditional else " 206")
    finally:
        server.close()


def test_a_server_without_range_support_is_one_line_exit_5(tmp_path, monkeypatch):
    from ckpt_tools.formats import remote_readahead

    # A shard under 1 MiB is read whole, which such a server answers correctly (200 with the
    # whole object): this small shard stands for a big one.
    monkeypatch.setattr(remote_readahead, "_SMALL_SHARD", 0)
    shutil.copytree(FIXTURES / "towers_bn", tmp_path / "run")
    server = FileServer(tmp_path, ranges=False)
    try:
        url = f"{server.url}/run/"
        listed = _run("list", url)  # small files are read whole: a 200 is fine for them
        assert listed.exit_code == 0, listed.output
        result = _run("show", url, "global_step")
        assert result.exit_code == 5, result.output
        assert "Range" in result.stderr and f"{server.url}/run/model.ckpt-30.data" in \
            result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in \
            result.output
    finally:
        server.close()


def test_errors_name_the_url_and_say_what_failed(served, tmp_path):
    server, root = served
    missing = f"{server.url}/nothing/"
    result = _run("list", missing)
    assert result.exit_code == 3 and missing.rstrip("/") in result.stderr, result.output
    assert "state file" in result.stderr  # says why a directory needs one over HTTP
    server.forbidden.add("/towers_bn/checkpoint")
    result = _run("list", f"{server.url}/towers_bn/")
    assert result.exit_code == 1 and "forbidden" in result.stderr, result.output
    assert f"{server.url}/towers_bn/checkpoint" in result.stderr
    (root / "towers_bn" / "model.ckpt-30.data-00000-of-00001").unlink()
    result = _run("show", f"{server.url}/towers_bn/model.ckpt-30", "global_step")
    assert result.exit_code == 3 and "data-00000-of-00001" in result.stderr, result.output
    server.close()
    result = _run("list", f"{server.url}/towers_bn/model.ckpt-30")
    assert result.exit_code == 1 and "network failure" in result.stderr, result.output
    assert server.url in result.stderr and "Traceback" not in result.output


def test_a_truncated_shard_is_exit_4_as_locally(served):
    server, root = served
    shard = root / "towers_bn" / "model.ckpt-30.data-00000-of-00001"
    shard.write_bytes(shard.read_bytes()[:100])
    local = _run("show", str(root / "towers_bn"), "global_step")
    result = _run("show", f"{server.url}/towers_bn/", "global_step")
    assert local.exit_code == result.exit_code == 4, result.output
    assert "truncated" in result.stderr and server.url in result.stderr


def test_query_strings_are_refused(http):
    result = _run("list", f"{http.url}/towers_bn/model.ckpt-30?sig=abc")
    assert result.exit_code == 5 and "query string" in result.stderr, result.output


def test_http_list_imports_no_tensorflow(http):
    code = ("import sys; from ckpt_tools.cli import main; sys.argv=['ckpt','list',"
            f"{http.url + '/towers_bn/'!r}]\ntry: main()\nexcept SystemExit as e: "
            "print('EXIT', e.code)\nprint('TF', 'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert "TF False" in out.stdout and "EXIT" not in out.stdout.replace("EXIT 0", ""), \
        out.stdout + out.stderr


def test_a_server_answering_html_for_missing_paths(tmp_path):
    """Single-page-app and static hosts answer every missing path with an HTML page (200
    text/html): the run-directory probe of a prefix URL took it as a state file (exit 4 'no
    model_checkpoint_path'), and a TF2 run's missing .meta as a MetaGraphDef. The page means
    absent; a text/plain page that does not parse as a state file leaves the prefix too."""
    server = FileServer(FIXTURES, html_fallback=True)
    try:
        for url in (f"{server.url}/towers_bn/model.ckpt-30", f"{server.url}/towers_bn",
                    f"{server.url}/towers_bn/", f"{server.url}/tf2_object/",
                    f"{server.url}/tf2_object/ckpt-3"):
            start = len(server.log)
            got = _run("list", "--json", url)
            assert got.exit_code == 0, (url, got.output)
            assert len(server.since(start)) <= 4, server.since(start)
        got = _run("verify", f"{server.url}/towers_bn/model.ckpt-30")
        assert got.exit_code == 0, got.output
        got = _run("list", f"{server.url}/nope/")
        assert got.exit_code == 3, got.output
        assert "not found" in got.output
        server.fallback_type = "text/plain"
        got = _run("list", "--json", f"{server.url}/towers_bn/model.ckpt-30")
        assert got.exit_code == 0, got.output
        got = _run("list", f"{server.url}/towers_bn/model.ckpt-30/")  # a run directory
        assert got.exit_code == 4, got.output
    finally:
        server.close()


def test_a_missing_data_shard_on_an_html_fallback_host_is_not_found(tmp_path):
    """An SPA host answers a missing data shard with its HTML page (200 or 206 text/html):
    read as a 74-byte truncated shard (show: exit 4; verify: exit 1) where a plain server
    says exit 3 'not found'. The page is the shard's absence, whichever range was asked."""
    from fsspec.implementations.http import HTTPFileSystem

    from ckpt_tools.formats import remote_http

    run = tmp_path / "runs" / "nodata"
    shutil.copytree(FIXTURES / "towers_bn", run)
    for shard in run.glob("*.data-*"):
        shard.unlink()
    server = FileServer(tmp_path, html_fallback=True)
    try:
        url = f"{server.url}/runs/nodata/"
        for args in (["show", url, "global_step"], ["verify", url],
                     ["restore-ema", url, "--out", str(tmp_path / "ema")]):
            got = _run(*args)
            assert got.exit_code == 3, (args, got.output)
            assert got.stderr.count("\n") == 1 and "data-00000-of-00001: not found" in \
                got.stderr, got.output
        assert not (tmp_path / "ema").exists()
        shard = f"{url}model.ckpt-30.data-00000-of-00001"
        fs = HTTPFileSystem(skip_instance_cache=True)
        for span in ((0, 16), (64, 80), (500, 600)):  # a range of the page, inside, past it
            with pytest.raises(remote_http.StatusError) as caught:
                remote_http.ranges(fs, shard, [span], None, 30)
            assert caught.value.status == 404, span
        assert remote_http.head(fs, shard, 30) is None
    finally:
        server.close()
