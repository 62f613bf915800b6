"""``ckpt average`` of an http(s):// run asks for each object once (review-16-attack-r3: 53
requests for three 1 KB checkpoints: the state file twice, each ``.index`` 3x, each ``.meta``
4x, repeated 404s, 11 range GETs per 738-byte shard; every input opened started a session of
its own, and small shards were read a few tensors at a time). Counted on the server's side
(tests/http_server.py logs every request)."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers import FIXTURES, digests
from typer.testing import CliRunner

pytest.importorskip("aiohttp")
pytest.importorskip("fsspec")

from ckpt_tools.cli import app  # noqa: E402

# tf2_object's averages are named after names two variables share (averaged by key since its
# dict keys name their weights); baked under the order its run's ema.apply() got them (stated)
_ORDER = {"tf2_object": ["--ema", "--bake", "--apply-order", "trainable"], "towers_bn": []}


@pytest.mark.parametrize("case, last", [("tf2_object", 3), ("towers_bn", 2)])
def test_average_of_an_http_run_fetches_each_object_once(http, tmp_path, case, last):
    start = len(http.log)
    remote = tmp_path / "remote"
    result = CliRunner().invoke(app, ["average", f"{http.url}/{case}/", "--last", str(last),
                                      *_ORDER[case], "--out", str(remote)])
    assert result.exit_code == 0, result.output
    log = http.log[start:]
    paths = Counter(line.split()[1] for line in log)
    assert max(paths.values()) == 1, [p for p, n in paths.items() if n > 1]
    shards = [p for p in paths if ".data-" in p]
    assert len(shards) == last  # each small shard read whole, in one request
    # The state file, then per input its .index (and .meta where there is one), one probe
    # whether the prefix is a run directory (404), and its shard.
    assert len(log) <= 1 + 4 * last, log
    local = tmp_path / "local"
    assert CliRunner().invoke(app, ["average", str(FIXTURES / case), "--last", str(last),
                                    *_ORDER[case], "--out", str(local)]).exit_code == 0
    assert digests(remote) == digests(local)
