"""Other checkpoints' ``.meta`` files beside a TF1 checkpoint read from ``s3://``: the usual
loop writes the graph at the first save only (``write_meta_graph=(i == 1)``), and a swapping
Saver's ``model.ckpt-3`` is refused locally (its keys' names are doubted by
``model.ckpt-1.meta``), but ``meta_sibling.candidates()`` returned ``[]`` for every URL: the
same run on S3 exported the raw weights as the averages, exit 0; ``average`` to an ``s3://``
--out said the output was "doubted the same way" and uploaded the graph beside it, yet its
export gave the mean of the raw weights as the averages, exit 0; and a local average of the
S3 inputs carried no doubt at all (review-26-attack-r90 F1). Truth: ``sess.run`` of
``ema.average(v)`` and ``v`` at each save."""

from __future__ import annotations

import os

import numpy as np
import pytest
from _sibling_runs import SCRIPT
from conftest import BUCKET
from helpers import run_cli, upload_dir
from helpers_tf1 import run_tf1_script

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")


NAMES = ("model/W", "model/V")


@pytest.fixture(scope="module")
def made(s3, tmp_path_factory):
    out = tmp_path_factory.mktemp("meta_sibling_url")
    truth = run_tf1_script(SCRIPT, out)
    for name in ("swap", "plain"):
        upload_dir(s3["client"], out / name, BUCKET, f"sib/{name}")
    return out, truth


def _mean(truth, name: str, kind: str, key: str) -> np.ndarray:
    return np.mean([truth[f"{name}:{i}:{kind}:{key}"].astype(np.float64) for i in (2, 3)],
                   axis=0)


def _export(path: str, out, *flags: str) -> tuple[int, str]:
    code, _, err = run_cli(["export", path, "--out", str(out), *flags])
    return code, err


def test_an_s3_run_is_doubted_by_its_first_save_graph(made, s3, tmp_path):
    """The swapping run on S3: refused by names, as locally (it gave the raw weights as the
    averages, exit 0); --raw --no-meta writes the keys as stored (TF's averages, bit for
    bit). The plain run's graph agrees with the names: its averages, bit for bit, reading
    the directory's listing once."""
    out, truth = made
    code, err = _export(str(out / "swap" / "model.ckpt-3"), tmp_path / "local.npz")
    assert code == 6, err  # the local control
    url = f"s3://{BUCKET}/sib/swap/model.ckpt-3"
    code, err = _export(url, tmp_path / "s.npz")
    assert code == 6 and "model.ckpt-1.meta" in err and "--not-swapped" in err, err
    assert not (tmp_path / "s.npz").exists()
    code, err = _export(url, tmp_path / "k.npz", "--raw", "--no-meta")
    assert code == 0, err
    with np.load(tmp_path / "k.npz") as z:
        for key in NAMES:
            np.testing.assert_array_equal(z[key], truth[f"swap:3:avg:{key}"])
    start = len(s3["requests"].lines)
    code, err = _export(f"s3://{BUCKET}/sib/plain/model.ckpt-3", tmp_path / "p.npz")
    assert code == 0, err
    listings = [x for x in s3["requests"].since(start) if "list-type=2" in x]
    assert len(listings) == 1, listings  # the sibling .meta found in the locating listing
    with np.load(tmp_path / "p.npz") as z:
        for key in NAMES:
            np.testing.assert_array_equal(z[key], truth[f"plain:3:avg:{key}"])


def test_an_average_written_to_s3_is_doubted_when_read_back(made, tmp_path):
    """average to s3:// copies model.ckpt-1.meta beside the output: exporting it from S3 is
    now refused (it gave the mean of the raw weights as the averages, exit 0); --raw
    --no-meta writes the mean of TF's averages."""
    out, truth = made
    swap = out / "swap"
    dest = f"s3://{BUCKET}/sib/avg/"
    code, _, err = run_cli(["average", str(swap / "model.ckpt-3"), str(swap / "model.ckpt-2"),
                            "--out", dest])
    assert code == 0 and "model.ckpt-1.meta" in err, err
    url = dest + "model.ckpt-3"
    code, err = _export(url, tmp_path / "a.npz")
    assert code == 6 and "model.ckpt-1.meta" in err, err
    code, err = _export(url, tmp_path / "k.npz", "--raw", "--no-meta")
    assert code == 0, err
    with np.load(tmp_path / "k.npz") as z:
        for key in NAMES:
            np.testing.assert_allclose(z[key], _mean(truth, "swap", "avg", key), rtol=1e-6)
            assert not np.allclose(z[key], _mean(truth, "swap", "raw", key), rtol=1e-6)


def test_a_local_average_of_s3_inputs_carries_their_doubt(made, tmp_path):
    """The S3 inputs' doubt (fetched, not re-read) is copied beside a local output, whose
    export is refused (it gave the mean of the raw weights as the averages, exit 0)."""
    base = f"s3://{BUCKET}/sib/swap/"
    dest = tmp_path / "avg"
    code, _, err = run_cli(["average", base + "model.ckpt-3", base + "model.ckpt-2", "--out",
                            str(dest)])
    assert code == 0 and "model.ckpt-1.meta" in err, err
    assert (dest / "model.ckpt-1.meta").read_bytes() == \
        (made[0] / "swap" / "model.ckpt-1.meta").read_bytes()
    code, err = _export(str(dest / "model.ckpt-3"), tmp_path / "a.npz")
    assert code == 6 and "model.ckpt-1.meta" in err, err


def test_an_s3_out_holding_the_outputs_own_meta_name_is_refused(made, s3):
    """The output has no .meta of its own; a model.ckpt-3.meta already in the s3:// --out
    (here the plain run's graph) would be read as its own, vouching for the names the
    inputs' graph doubts: refused before anything is uploaded."""
    out, _ = made
    client = s3["client"]
    client.upload_file(str(out / "plain" / "model.ckpt-1.meta"), BUCKET,
                       "sib/stale/model.ckpt-3.meta")
    swap = out / "swap"
    for force in ([], ["--force"]):
        code, _, err = run_cli(["average", str(swap / "model.ckpt-3"),
                                str(swap / "model.ckpt-2"), "--out",
                                f"s3://{BUCKET}/sib/stale/", *force])
        assert code == 7 and "model.ckpt-3.meta" in err, err
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix="sib/stale/")["Contents"]
    assert [o["Key"] for o in listed] == ["sib/stale/model.ckpt-3.meta"]


def test_siblings_past_the_bound_are_refused_not_passed_over(made, monkeypatch, tmp_path):
    """Each sibling over a URL is a whole-object request: past MAX_URL_SIBLINGS the reading
    is refused (exit 6, naming --no-meta), never cut short."""
    from ckpt_tools import meta_sibling

    monkeypatch.setattr(meta_sibling, "MAX_URL_SIBLINGS", 0)
    url = f"s3://{BUCKET}/sib/plain/model.ckpt-3"
    code, err = _export(url, tmp_path / "p.npz")
    assert code == 6 and "--no-meta" in err and "model.ckpt-1.meta" in err, err
    code, err = _export(url, tmp_path / "p.npz", "--no-meta")
    assert code == 0, err


def test_a_sibling_over_the_fetch_bound_is_refused_not_passed_over(made, monkeypatch,
                                                                   tmp_path):
    """A sibling .meta over CKPT_REMOTE_MAX_BYTES is not fetched: refused (exit 6), not read
    as absent."""
    out, _ = made
    size = os.path.getsize(out / "swap" / "model.ckpt-1.meta")
    index = os.path.getsize(out / "swap" / "model.ckpt-3.index")
    assert index < size
    monkeypatch.setenv("CKPT_REMOTE_MAX_BYTES", str(size - 1))
    code, err = _export(f"s3://{BUCKET}/sib/swap/model.ckpt-3", tmp_path / "s.npz")
    assert code == 6 and "model.ckpt-1.meta" in err and "--no-meta" in err, err


def test_an_average_of_inputs_past_the_bound_says_why_its_output_is_refused(
        made, monkeypatch, tmp_path):
    """s28c "Left": a plain average of S3 inputs deferred for too many siblings records them
    as unknown, as http(s) inputs are; its output's refusal said "no listing over http(s)",
    which is not why here, and stats' note pointed to 'ckpt map' "lists the candidates",
    which refuses there."""
    from ckpt_tools import meta_sibling

    monkeypatch.setattr(meta_sibling, "MAX_URL_SIBLINGS", 0)
    base = f"s3://{BUCKET}/sib/plain"
    avg = tmp_path / "avg"
    code, _, err = run_cli(["average", f"{base}/model.ckpt-2", f"{base}/model.ckpt-3",
                            "--out", str(avg)])
    assert code == 0, err
    code, err = _export(str(avg / "model.ckpt-3"), tmp_path / "a.npz")
    said = " ".join(err.split())
    assert code == 6 and "--no-meta" in said, err
    assert "no listing over http(s)" not in said and "read over a URL" in said, said
    code, _, err = run_cli(["stats", f"{base}/model.ckpt-3"])
    said = " ".join(err.split())
    assert code == 0 and "--no-meta" in said, err
    assert "lists the candidates" not in said, said
