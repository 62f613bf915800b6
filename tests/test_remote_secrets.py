"""A URL's secrets never show: the password of ``http://user:password@host/`` (and a bare
user name, which may be a token) and the values of a query string (presigned signatures) are
hidden in every error, note, summary and ``--json`` document, and in the API's exceptions,
while the host and path still name the object. Run against the tests' real HTTP server
(tests/http_server.py), which ignores the credentials.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("aiohttp")
pytest.importorskip("fsspec")

from ckpt_tools import open_checkpoint  # noqa: E402
from ckpt_tools.cli import app  # noqa: E402
from ckpt_tools.errors import CheckpointError, redact  # noqa: E402

runner = CliRunner()
SECRET = "s3cr3t"


def _with_password(http) -> str:
    return http.url.replace("http://", f"http://user:{SECRET}@")


def test_errors_hide_the_password_but_name_the_url(http):
    url = _with_password(http)
    for args in (["list", f"{url}/nope/"], ["list", "--json", f"{url}/nope/"],
                 ["show", f"{url}/towers_bn/model.ckpt-30", "no/such"],
                 ["list", f"{url}/towers_bn/model.ckpt-30?X-Amz-Signature={SECRET}"]):
        got = runner.invoke(app, args)
        assert got.exit_code in (3, 5), got.output
        assert SECRET not in got.output, got.output
        assert "http://user:***@127.0.0.1:" in got.output, got.output


def test_summaries_and_json_hide_the_password(http, tmp_path):
    url = _with_password(http) + "/towers_bn"
    listed = runner.invoke(app, ["list", "--json", f"{url}/"])
    assert listed.exit_code == 0, listed.output
    assert SECRET not in listed.output
    doc = json.loads(listed.stdout)
    assert doc["checkpoint"] == http.url.replace("http://", "http://user:***@") \
        + "/towers_bn/model.ckpt-30"
    for args in (["verify", f"{url}/"],
                 ["average", f"{url}/model.ckpt-20", f"{url}/model.ckpt-30", "--out",
                  str(tmp_path / "avg"), "--json"],
                 ["restore-ema", f"{url}/", "--out", str(tmp_path / "ema")]):
        got = runner.invoke(app, args)
        assert got.exit_code == 0, got.output
        assert SECRET not in got.output, got.output
        assert args[0] == "restore-ema" or "user:***@" in got.output, got.output


def test_api_exceptions_hide_the_password(http):
    with pytest.raises(CheckpointError) as caught:
        open_checkpoint(_with_password(http) + "/nope/")
    assert SECRET not in str(caught.value)
    assert "user:***@" in str(caught.value)


@pytest.mark.parametrize(("text", "shown"), [
    ("http://ann:pw@h/x: not found", "http://ann:***@h/x: not found"),
    ("https://TOKEN@github.example/x", "https://***@github.example/x"),
    ("http://a:p@ss@h/x (mail b@c)", "http://a:***@h/x (mail b@c)"),
    ("'https://h/k?X-Amz-Signature=abc&X-Amz-Credential=AK/us': no",
     "'https://h/k?X-Amz-Signature=***&X-Amz-Credential=***': no"),
    ("run/model.ckpt-5: user@host? no URL", "run/model.ckpt-5: user@host? no URL"),
    # A raw "#" or "?" in the password: a URL parser ends the host there, redaction must not.
    ("error: http://user:pw#frag@h:1/runs/checkpoint: no",
     "error: http://user:***@h:1/runs/checkpoint: no"),
    ("http://u:p?w=1@h/x", "http://u:***@h/x"),
    ("s3://k:a#b?c@bucket/x/: gone", "s3://k:***@bucket/x/: gone"),
])
def test_redact(text, shown):
    assert redact(text) == shown


@pytest.mark.parametrize("mark", ["#", "?"])
def test_a_password_with_a_raw_fragment_or_query_mark_is_hidden(http, mark):
    """``http://user:pw#frag@host/`` printed the password in clear: redaction parsed the URL
    first, which put the userinfo in the fragment."""
    url = http.url.replace("http://", f"http://user:{SECRET}{mark}frag@") + "/runs/nope/"
    for args in (["list", url], ["list", "--json", url], ["show", url, "x"]):
        got = runner.invoke(app, args)
        assert got.exit_code == 5, got.output
        assert SECRET not in got.output and "frag" not in got.output, got.output
        assert "http://user:***@127.0.0.1:" in got.output and "percent-encode" in got.output


def test_a_storage_library_quoting_the_credentials_is_hidden():
    """botocore quotes an S3 URL's userinfo as part of the bucket name (``Invalid bucket
    name "key:secret@bucket"``), out of reach of the ``://...@`` rule."""
    pytest.importorskip("s3fs")
    got = runner.invoke(app, ["list", f"s3://key:{SECRET}@bucket/run/"])
    assert got.exit_code == 1, got.output
    assert SECRET not in got.output and "s3://key:***@bucket/run/" in got.output, got.output
