"""A TF1 checkpoint saved without its own ``.meta``, served over ``http://`` (no listing):
``candidates()`` took "cannot be listed" for "no siblings", so a swapping run's
``model.ckpt-3`` exported its raw weights as the averages, exit 0, though
``model.ckpt-1.meta`` lay beside it (review-27-attack-r95 F4). The graphs that can be named
without a listing are probed now (those of the checkpoints the run's ``checkpoint`` state file
lists, the stem's), and where none records the keys the pairing by names is refused (exit 6,
``--no-meta``). Truth: ``sess.run`` of ``ema.average(v)`` and ``v`` at each save."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from _sibling_runs import NOMETA_SCRIPT, SCRIPT
from helpers import run_cli
from helpers_tf1 import run_tf1_script
from http_server import FileServer

NAMES = ("model/W", "model/V")

# max_to_keep=None lists only the latest in the state file; the default max_to_keep=5 lists
# each of the three saves, as TensorFlow records them here
STATE = r'''
for name in ("swap", "plain"):
    tf1.train.update_checkpoint_state(
        f"{out}/{name}", f"{out}/{name}/model.ckpt-3",
        [f"{out}/{name}/model.ckpt-{i}" for i in (1, 2, 3)])
'''


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    out = tmp_path_factory.mktemp("meta_sibling_http")
    truth = run_tf1_script(SCRIPT + STATE, out)
    truth.update(run_tf1_script(NOMETA_SCRIPT, out))
    # the swapping run without its state file: only its stem's graph can be probed
    shutil.copytree(out / "swap", out / "swapnostate")
    (out / "swapnostate" / "checkpoint").unlink()
    shutil.copytree(out / "swap", out / "swaplatest")
    run_tf1_script(r'''
tf1.train.update_checkpoint_state(f"{out}/swaplatest", f"{out}/swaplatest/model.ckpt-3")
''', out)
    server = FileServer(out)
    yield out, truth, server.url
    server.close()


def _export(url: str, out, *flags: str) -> tuple[int, str]:
    code, _, err = run_cli(["export", url, "--out", str(out), *flags])
    return code, err


def _check(npz, truth, run: str, step: int, kind: str) -> None:
    with np.load(npz) as z:
        for key in NAMES:
            np.testing.assert_array_equal(z[key], truth[f"{run}:{step}:{kind}:{key}"])


def test_a_swapping_run_over_http_is_doubted_by_its_state_files_graph(served, tmp_path):
    """model.ckpt-1.meta, probed through the state file's list: refused as locally (it gave
    the raw weights as the averages, exit 0); --raw --no-meta: TF's averages, as stored."""
    out, truth, base = served
    assert _export(str(out / "swap" / "model.ckpt-3"), tmp_path / "l.npz")[0] == 6
    code, err = _export(f"{base}/swap/model.ckpt-3", tmp_path / "s.npz")
    assert code == 6 and "model.ckpt-1.meta" in err and "--not-swapped" in err, err
    assert not (tmp_path / "s.npz").exists()
    code, err = _export(f"{base}/swap/model.ckpt-3", tmp_path / "k.npz", "--raw", "--no-meta")
    assert code == 0, err
    _check(tmp_path / "k.npz", truth, "swap", 3, "avg")


def test_the_plain_runs_graph_over_http_agrees_but_proves_nothing(served, tmp_path):
    """A probed graph agreeing with the names proves nothing over http: a graph no probe
    can name may swap (review-27-attack-r100 F2); refused naming --no-meta, which states it."""
    out, truth, base = served
    code, err = _export(f"{base}/plain/model.ckpt-3", tmp_path / "p.npz")
    assert code == 6 and "--no-meta" in err and "agreement proves nothing" in err, err
    assert not (tmp_path / "p.npz").exists()
    code, err = _export(f"{base}/plain/model.ckpt-3", tmp_path / "p.npz", "--no-meta")
    assert code == 0, err
    _check(tmp_path / "p.npz", truth, "plain", 3, "avg")


def test_nothing_probed_tells_is_refused_over_http(served, tmp_path):
    """No state file (the swapping run's model.ckpt-1.meta cannot be named), one listing the
    latest only (max_to_keep=None), or a run with no graph at all: refused naming --no-meta,
    never paired by names."""
    out, truth, base = served
    code, err = _export(f"{base}/swapnostate/model.ckpt-3", tmp_path / "s.npz")
    assert code == 6 and "--no-meta" in err and "cannot be listed" in err, err
    assert not (tmp_path / "s.npz").exists()
    code, err = _export(f"{base}/swaplatest/model.ckpt-3", tmp_path / "s.npz")
    assert code == 6 and "--no-meta" in err, err
    code, err = _export(f"{base}/plainnm/model.ckpt-2", tmp_path / "n.npz")
    assert code == 6 and "--no-meta" in err, err
    code, err = _export(f"{base}/plainnm/model.ckpt-2", tmp_path / "n.npz", "--no-meta")
    assert code == 0, err  # the statement decides
    _check(tmp_path / "n.npz", truth, "plainnm", 2, "avg")


def _json(args: list[str]) -> dict:
    code, out, err = run_cli(args)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("run", ["swap", "plain", "swapnostate", "plainnm"])
def test_stats_diff_show_verify_read_tensors_over_http_without_no_meta(served, run):
    """stats, diff A B, show and verify read the file's own values, which no pairing decides:
    they were refused at open (exit 6, --no-meta) wherever a pairing by names would be. Only
    what the pairing decides stays refused: a shadow's drift ('?', ema_unproven), show of an
    average, diff --ema, stats --strict."""
    out, truth, base = served
    step = 2 if run == "plainnm" else 3
    url, before = f"{base}/{run}/model.ckpt-{step}", f"{base}/{run}/model.ckpt-{step - 1}"
    src = "swap" if run == "swapnostate" else run
    # what TF saved under each key: a swapping Saver's model/W holds the average
    held = {k: truth[f"{src}:{step}:{'avg' if src == 'swap' else 'raw'}:{k}"] for k in NAMES}
    held.update({f"{k}/ExponentialMovingAverage":
                 truth[f"{src}:{step}:{'raw' if src == 'swap' else 'avg'}:{k}"] for k in NAMES})
    doc = _json(["stats", url, "--json", "-q"])
    records = {r["name"]: r for r in doc["tensors"]}
    for key, value in held.items():
        assert records[key]["stats"]["min"] == pytest.approx(float(value.min()))
        assert records[key]["stats"]["max"] == pytest.approx(float(value.max()))
        if key.endswith("Average"):  # drift would show a pairing: none (?)
            assert records[key]["drift"] is None and records[key]["ema_of"] is None, key
    if run != "swap":  # (swap: model.ckpt-1.meta doubts it: --not-swapped, as locally)
        assert doc["ema_unproven"]["option"] == "--no-meta", doc.get("ema_unproven")
    code, _, err = run_cli(["stats", url, "--strict"])
    assert code == 6, err
    earlier = {k: truth[f"{src}:{step - 1}:{'avg' if src == 'swap' else 'raw'}:{k}"]
               for k in NAMES}
    diff = {t["name"]: t for t in _json(["diff", url, before, "--json"])["tensors"]}
    for key in NAMES:
        assert diff[key]["max_abs"] == pytest.approx(
            float(np.abs(held[key] - earlier[key]).max()))
    code, _, err = run_cli(["diff", url, "--ema"])
    assert code == 6 and ("--no-meta" in err or "--not-swapped" in err), err
    shown = _json(["show", url, "model/W", "--json", "--full"])["tensors"][0]
    np.testing.assert_allclose(np.array(shown["values"], dtype=np.float32), held["model/W"])
    code, _, err = run_cli(["show", url, "model/W/ExponentialMovingAverage"])
    assert code == 6 and ("--no-meta" in err or "--not-swapped" in err), err
    code, _, err = run_cli(["verify", url])
    assert code == 0, err


def test_plain_average_over_http_runs_and_its_output_stays_refused(served, tmp_path):
    """average of meta-less http(s) inputs could not run at all (refused at open; --no-meta
    only with --bake). The plain average pairs nothing: it runs, TF's values averaged; its
    output records the unknown beside it (<name>.carried.json), so exporting it is refused
    as the inputs are (--no-meta), never paired by names. --ema and --ema --bake stay
    refused; --ema --bake --no-meta states the names."""
    out, truth, base = served
    for run in ("plain", "swapnostate"):
        src = "swap" if run == "swapnostate" else run
        avg = tmp_path / f"avg_{run}"
        code, _, err = run_cli(["average", f"{base}/{run}/model.ckpt-2",
                                f"{base}/{run}/model.ckpt-3", "--out", str(avg)])
        assert code == 0, err
        code, err = _export(str(avg / "model.ckpt-3"), tmp_path / f"{run}.npz")
        assert code == 6 and "--no-meta" in err and "carried.json" in err, err
        assert not (tmp_path / f"{run}.npz").exists()
        code, err = _export(str(avg / "model.ckpt-3"), tmp_path / f"{run}.npz", "--raw",
                            "--no-meta")  # the keys as stored: each averaged under its name
        assert code == 0, err
        with np.load(tmp_path / f"{run}.npz") as z:
            for key in NAMES:  # (a swapping Saver's model/W holds the average)
                kind = "avg" if src == "swap" else "raw"
                np.testing.assert_allclose(z[key], (truth[f"{src}:2:{kind}:{key}"].astype(
                    np.float64) + truth[f"{src}:3:{kind}:{key}"]) / 2, rtol=1e-6)
        code, _, err = run_cli(["stats", str(avg / "model.ckpt-3"), "--strict"])
        assert code == 6 and "--no-meta" in err, err
    inputs = [f"{base}/plain/model.ckpt-2", f"{base}/plain/model.ckpt-3"]
    for flags in (["--ema"], ["--ema", "--bake"]):
        code, _, err = run_cli(["average", *inputs, "--out", str(tmp_path / "e"), *flags])
        assert code == 6 and "--no-meta" in err, err
        assert not (tmp_path / "e").exists()
    code, _, err = run_cli(["average", *inputs, "--out", str(tmp_path / "b"), "--ema", "--bake",
                            "--no-meta"])
    assert code == 0, err
    code, err = _export(str(tmp_path / "b" / "model.ckpt-3"), tmp_path / "b.npz")
    assert code == 0, err  # the names stated: the averaged shadows under the plain names
    with np.load(tmp_path / "b.npz") as z:
        for key in NAMES:
            np.testing.assert_allclose(z[key], (truth[f"plain:2:avg:{key}"].astype(
                np.float64) + truth[f"plain:3:avg:{key}"]) / 2, rtol=1e-6)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_the_unknown_carried_is_read_on_s3_and_replaced_with_force(served, where, tmp_path,
                                                                  request):
    """The output's record is read where it lies (a local --out, s3://), and --force
    replacing that output with an average of inputs that are known removes it with the
    output (it belongs to it), so the new output is paired as its inputs are."""
    out, truth, base = served
    if where == "s3":
        pytest.importorskip("moto.server")
        request.getfixturevalue("s3")
        from conftest import BUCKET

        url = f"s3://{BUCKET}/unknown_http/avg"
    else:
        url = str(tmp_path / "avg")
    code, _, err = run_cli(["average", f"{base}/plain/model.ckpt-2",
                            f"{base}/plain/model.ckpt-3", "--out", url])
    assert code == 0, err
    code, err = _export(f"{url}/model.ckpt-3", tmp_path / "a.npz")
    assert code == 6 and "--no-meta" in err and "carried.json" in err, err
    # the same run read locally: its graph (model.ckpt-1.meta) is listed, and agrees
    code, _, err = run_cli(["average", str(out / "plain" / "model.ckpt-2"),
                            str(out / "plain" / "model.ckpt-3"), "--out", url, "--force"])
    assert code == 0, err
    code, err = _export(f"{url}/model.ckpt-3", tmp_path / "a.npz")
    assert code == 0, err
    with np.load(tmp_path / "a.npz") as z:
        for key in NAMES:
            np.testing.assert_allclose(z[key], (truth[f"plain:2:avg:{key}"].astype(
                np.float64) + truth[f"plain:3:avg:{key}"]) / 2, rtol=1e-6)


def test_a_server_answering_403_for_missing_files(served, tmp_path):
    """A public bucket without list permission answers 403 for a missing object: a probe of
    a file that may not exist (the prefix URL's state file, a checkpoint's own .meta, a
    sibling's graph) reads it as absent, as a 404 (a prefix URL failed "…/model.ckpt-1/
    checkpoint: forbidden", exit 1; review-27-attack-r100, outside the focus; task s28b item
    3); the refusals that rest on "cannot be listed" stay, and a file the read needs (the
    .index of the prefix named, a run directory's state file) is still forbidden."""
    out, truth, _base = served
    server = FileServer(out, missing=403)
    try:
        base = server.url
        for run in ("swap", "plain"):  # saved with their own graph
            code, err = _export(f"{base}/{run}/model.ckpt-1", tmp_path / f"{run}.npz")
            assert code == 0, err
            _check(tmp_path / f"{run}.npz", truth, run, 1, "avg")
        for url in (f"{base}/swap/model.ckpt-3", f"{base}/swap/"):  # no .meta of its own
            code, err = _export(url, tmp_path / "s.npz")
            assert code == 6 and "model.ckpt-1.meta" in err, err
            assert not (tmp_path / "s.npz").exists()
        code, err = _export(f"{base}/swapnostate/model.ckpt-3", tmp_path / "s.npz")
        assert code == 6 and "--no-meta" in err and "cannot be listed" in err, err
        code, err = _export(f"{base}/plain/model.ckpt-3", tmp_path / "p.npz")
        assert code == 6 and "--no-meta" in err and "agreement proves nothing" in err, err
        code, err = _export(f"{base}/plain/model.ckpt-3", tmp_path / "p.npz", "--no-meta")
        assert code == 0, err
        _check(tmp_path / "p.npz", truth, "plain", 3, "avg")
        code, err = _export(f"{base}/plain/model.ckpt-9", tmp_path / "n.npz")
        assert code == 1 and "model.ckpt-9.index: forbidden" in err, err
        for url in (f"{base}/nothere/", f"{base}/nothere"):  # the state file, the .index
            code, err = _export(url, tmp_path / "n.npz")
            assert code == 1 and "forbidden" in err, err
    finally:
        server.close()
