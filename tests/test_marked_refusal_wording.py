"""What the refusals of ckpt's marked TF1 outputs and of their filters say (session 32's
MINOR findings): each names the Saver its input's graph showed, offers only what decides, and
says what a filter left out. Real TF1 Savers (graph mode), truth from ``sess.run`` at each
save."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script
from test_marked_outputs import _copy

SCRIPT = '''
def run(name, keys_of):
    # one default-named EMA object over model/W, model/V; keys_of(w, v, ema): the Saver's keys
    E = "ExponentialMovingAverage"
    for s, i, held, objects in wv_ema_saves(tf, f"{out}/{name}/model.ckpt", {E: (0.5, "WV")},
                                            lambda w, v, o: keys_of(w, v, o[E])):
        for k, x in held.items():
            truth[f"{name}:{i}:avg:model/{k}"] = s.run(objects[E].average(x))
            truth[f"{name}:{i}:raw:model/{k}"] = s.run(x)


def raw_holds_fast(name, keys_of=None):
    # review-32-attack-r117 F1: fast's average of W swapped with W; slow's plain (keys_of(w,
    # v, fast, slow): another Saver of these two objects)
    keys_of = keys_of or (lambda w, v, fast, slow: {
        "model/W": fast.average(w), "model/W/fast": w, "model/W/slow": slow.average(w),
        "model/V": v, "model/V/fast": fast.average(v), "model/V/slow": slow.average(v)})
    for s, i, held, objects in wv_ema_saves(
            tf, f"{out}/{name}/model.ckpt", {"slow": (0.9, "WV"), "fast": (0.5, "WV")},
            lambda w, v, o: keys_of(w, v, o["fast"], o["slow"])):
        for k, x in held.items():
            truth[f"{name}:{i}:raw:model/{k}"] = s.run(x)
            for o in ("fast", "slow"):
                truth[f"{name}:{i}:{o}:model/{k}"] = s.run(objects[o].average(x))

raw_holds_fast("raw_holds_fast")
# slow's average of W under model/W, W itself not saved (note/s33k)
raw_holds_fast("raw_holds_slow", lambda w, v, fast, slow: {
    "model/W": slow.average(w), "model/W/fast": fast.average(w), "model/V": v,
    "model/V/fast": fast.average(v), "model/V/slow": slow.average(v)})
E = "ExponentialMovingAverage"
# crossing, not swapping: each variable under its own name, the averages crossed
run("crossed", lambda w, v, ema: {"model/W": w, "model/V": v,
                                  f"model/W/{E}": ema.average(v), f"model/V/{E}": ema.average(w)})
# the raw weights crossed, the averages under their own names (review-32-attack-r122 N1)
run("rawswap", lambda w, v, ema: {"model/W": v, "model/V": w,
                                  f"model/W/{E}": ema.average(w), f"model/V/{E}": ema.average(v)})
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("marked_refusal_wording")
    return out, run_tf1_script(SCRIPT, out)


def test_a_crossing_savers_mark_is_not_called_a_swap(made, tmp_path):
    """review-32-attack-r122 N2: the refusal of a crossing Saver's marked output said "a
    swapping Saver's graph", though that Saver writes each variable under its own name and
    swaps nothing."""
    out, _ = made
    code, _, err = run_cli(["restore-ema", str(out / "crossed/model.ckpt-2"),
                            "--out", str(tmp_path / "r")])
    assert code == 0, err
    copy = _copy(tmp_path / "r", "model.ckpt-2", tmp_path / "c", only=(".index", ".data"))
    code, _, err = run_cli(["export", str(copy), "--out", str(tmp_path / "o.npz")])
    said = " ".join(err.split())
    assert code == 6 and "a crossing Saver's graph (model.ckpt-2.meta)" in said, err
    assert "swapping Saver's graph" not in said and not (tmp_path / "o.npz").exists()


def test_an_average_of_marked_copies_points_at_the_inputs_it_names(made, tmp_path):
    """review-32-attack-r124 N1: the average of a crossing Saver's restore-ema copies (no
    graph ever written with it) said "Read the averages from the checkpoints it was written
    from": those are the copies, refused the same way. It now points at the inputs its mark
    names, and reading one of them with its graph gives TF's averages."""
    out, truth = made
    copies = []
    for i in (1, 2):
        code, _, err = run_cli(["restore-ema", str(out / f"crossed/model.ckpt-{i}"),
                                "--out", str(tmp_path / f"r{i}")])
        assert code == 0, err
        copies.append(str(_copy(tmp_path / f"r{i}", f"model.ckpt-{i}", tmp_path / f"c{i}",
                                only=(".index", ".data"))))
    code, _, err = run_cli(["average", *copies, "--out", str(tmp_path / "a")])
    assert code == 0, err
    code, _, err = run_cli(["export", str(tmp_path / "a/model.ckpt-2"),
                            "--out", str(tmp_path / "o.npz")])
    said = " ".join(err.split())
    assert code == 6 and "Read the averages from those inputs, with their graphs" in said, err
    assert "checkpoints it was written from" not in said
    assert str(out / "crossed/model.ckpt-2") in said, err
    code, _, err = run_cli(["export", str(out / "crossed/model.ckpt-2"),
                            "--out", str(tmp_path / "in.npz")])  # the offer, followed
    assert code == 0, err
    with np.load(tmp_path / "in.npz") as got:
        for k in ("model/W", "model/V"):
            np.testing.assert_array_equal(got[k], truth[f"crossed:2:avg:{k}"])


def test_averaging_marked_outputs_in_place_offers_what_decides(made, tmp_path):
    """review-32-attack-r119 N1: ``average`` of two restore-ema outputs that baked one EMA
    object over keys their input's graph says hold another's, read in place (each beside the
    input's graph it was written with), joined that refusal with "Copy the inputs with their
    directory locally (or to s3://) to have their graphs read": they are local, and their
    graphs were read. The refusal is now the outputs' own, which offers their inputs; the
    input, read as offered, gives TF's averages."""
    out, truth = made
    run = out / "raw_holds_fast"
    outs = []
    for i in (1, 2):
        code, _, err = run_cli(["restore-ema", str(run / f"model.ckpt-{i}"), "--ema-name",
                                "slow", "--out", str(tmp_path / f"r{i}")])
        assert code == 0, err
        outs.append(str(tmp_path / f"r{i}/model.ckpt-{i}"))
    code, _, err = run_cli(["average", *outs, "--out", str(tmp_path / "a")])
    said = " ".join(err.split())
    assert code == 6 and not (tmp_path / "a").exists(), err
    assert "to have their graphs read" not in said and "s3://" not in said, err
    assert "Read the averages from the checkpoint it was written from" in said, err
    code, _, err = run_cli(["export", str(run / "model.ckpt-1"), "--ema-name", "slow",
                            "--out", str(tmp_path / "in.npz")])
    assert code == 0, err
    with np.load(tmp_path / "in.npz") as got:
        for k in ("model/W", "model/V"):
            np.testing.assert_array_equal(got[k], truth[f"raw_holds_fast:1:slow:{k}"])


def test_an_exclude_leaving_out_two_variables_says_so(made, tmp_path):
    """review-32-attack-r122 N1: ``restore-ema --exclude model/W`` of a Saver ``{"model/W": V,
    "model/V": W}`` left out both variables (W by the key its save op wrote it under, V by
    its key's name), and the refusal said only that the filters select no variable with an
    EMA shadow. It now says which variables the glob left out, and how."""
    out, _ = made
    code, _, err = run_cli(["restore-ema", str(out / "rawswap/model.ckpt-2"), "--exclude",
                            "model/W", "--out", str(tmp_path / "r")])
    said = " ".join(err.split())
    assert code == 3 and not (tmp_path / "r").exists(), err
    assert "they leave out 'model/V' (the key the .meta's save op wrote variable 'model/W' " \
           "under) and 'model/W' (its name)" in said, err


def test_raw_export_of_a_restore_ema_output_says_it_writes_the_averages(made, tmp_path):
    """note/s32j: ``export --raw`` of a restore-ema output writes the averages baked into its
    plain names, and warned that the averages usually evaluate better: "drop --raw to
    export them". It now says that each weight holds exactly what a key read as an average
    holds; a weight restore-ema left out keeps its raw value and is not named."""
    out, truth = made
    code, _, err = run_cli(["restore-ema", str(out / "crossed/model.ckpt-2"), "--exclude",
                            "model/V", "--out", str(tmp_path / "r")])
    assert code == 0, err
    code, _, err = run_cli(["export", str(tmp_path / "r"), "--raw",
                            "--out", str(tmp_path / "o.npz")])
    said = " ".join(err.split())
    assert code == 0, err
    assert "1 of the 2 weights with an EMA shadow holds exactly the value stored under a " \
           "key read as an EMA shadow (model/W)" in said and "drop --raw" not in said, err
    with np.load(tmp_path / "o.npz") as got:
        np.testing.assert_array_equal(got["model/W"], truth["crossed:2:avg:model/W"])
        np.testing.assert_array_equal(got["model/V"], truth["crossed:2:raw:model/V"])
    code, _, err = run_cli(["export", str(out / "crossed/model.ckpt-2"), "--raw",
                            "--out", str(tmp_path / "in.npz")])  # a training save: as before
    assert code == 0 and "drop --raw" in " ".join(err.split()), err


def _mean(truth, of: str) -> np.ndarray:
    """The mean of the two saves' ``of`` (``run:object:key``) as ``average`` computes it
    (float64, then the key's float32)."""
    run, rest = of.split(":", 1)
    return ((truth[f"{run}:1:{rest}"].astype(np.float64) + truth[f"{run}:2:{rest}"]) / 2
            ).astype(np.float32)


def test_a_bake_of_one_of_two_swapped_objects_bakes_its_averages(made, tmp_path):
    """review-32-attack-r119 F5: ``average --ema --bake --ema-name fast`` of a Saver keeping
    fast's average of W under model/W (W raw under model/W/fast, slow's average under
    model/W/slow) was refused "the average of 'model/W/fast' is 'model/W', which is not a
    floating-point EMA shadow" (with N2's offer, a plain average read with the same options):
    the save op and fast's update op prove model/W an average. It now bakes: the key the
    .meta's Saver restores W from holds the mean of fast's averages at each save, bit for bit,
    and model/W (read as an average with --ema-name slow too) is averaged, not copied from
    the newest (review-32-attack-r117 F2 read that copy in place as fast's mean)."""
    out, truth = made
    run = out / "raw_holds_fast"
    inputs = [str(run / f"model.ckpt-{i}") for i in (1, 2)]
    for name in ("fast", "slow"):
        code, _, err = run_cli(["average", *inputs, "--ema", "--bake", "--ema-name", name,
                                "--out", str(tmp_path / name), "--json"])
        assert code == 0, err
        code, _, err = run_cli(["export", str(tmp_path / name), "--raw",
                                "--out", str(tmp_path / f"{name}.npz")])
        assert code == 0, err
        with np.load(tmp_path / f"{name}.npz") as got:  # W from model/W/fast, V from model/V
            for k in ("model/W", "model/V"):
                np.testing.assert_array_equal(got[k], _mean(truth, f"raw_holds_fast:{name}:{k}"))
        code, _, err = run_cli(["export", str(tmp_path / name), "--ema-name", "fast",
                                "--out", str(tmp_path / f"{name}f.npz")])
        assert code == 0, err
        with np.load(tmp_path / f"{name}f.npz") as got:  # model/W: fast's, averaged
            for k in ("model/W", "model/V"):
                np.testing.assert_array_equal(got[k], _mean(truth, f"raw_holds_fast:fast:{k}"))
    # slow's bake left model/W/fast holding slow's mean: read by its names (no graph beside
    # a copy of its .index + .data), it would give slow's as fast's: refused
    copy = _copy(tmp_path / "slow", "model.ckpt-2", tmp_path / "c", only=(".index", ".data"))
    for stated in ([], ["--not-swapped"], ["--no-meta"]):
        code, _, err = run_cli(["export", str(copy), "--ema-name", "fast", *stated,
                                "--out", str(tmp_path / "c.npz")])
        assert code == 6 and not (tmp_path / "c.npz").exists(), (stated, err)


def test_an_ema_average_of_swapped_objects_averages_the_average_under_ws_name(made, tmp_path):
    """note/s33e.md MAJOR: ``average --ema`` of that Saver's run copied model/W (fast's
    average) from the newest checkpoint unaveraged and averaged model/W/fast (W raw) as a
    shadow by its name; ``export --ema-name fast`` of the output then gave ckpt-2's average
    as the mean, exit 0, under a note saying every key was averaged. The save op and the
    update ops now say which keys hold averages: model/W is averaged, model/W/fast copied,
    and the note names both."""
    out, truth = made
    run = out / "raw_holds_fast"
    code, _, err = run_cli(["average", *(str(run / f"model.ckpt-{i}") for i in (1, 2)),
                            "--ema", "--out", str(tmp_path / "a")])
    said = " ".join(err.split())
    assert code == 0, err
    assert "'model/W', not named as an EMA shadow, holds an EMA average and was averaged; " \
           "'model/W/fast', named as an EMA shadow, holds no average and was copied from " \
           "the newest" in said and "whichever it holds" not in said, err
    assert "--ema-name decides there" in said, err
    for name in ("fast", "slow"):
        code, _, err = run_cli(["export", str(tmp_path / "a"), "--ema-name", name,
                                "--out", str(tmp_path / f"{name}.npz")])
        assert code == 0, err
        with np.load(tmp_path / f"{name}.npz") as got:
            for k in ("model/W", "model/V"):
                np.testing.assert_array_equal(got[k], _mean(truth, f"raw_holds_fast:{name}:{k}"))
    code, _, err = run_cli(["export", str(tmp_path / "a"), "--raw",
                            "--out", str(tmp_path / "raw.npz")])
    assert code == 0, err
    with np.load(tmp_path / "raw.npz") as got:  # the raw weights: the newest's, as --ema says
        for k in ("model/W", "model/V"):
            np.testing.assert_array_equal(got[k], truth[f"raw_holds_fast:2:raw:{k}"])


def test_an_ema_average_averages_an_average_under_its_variables_name(made, tmp_path):
    """note/s33k: a Saver keeping slow's average of W under model/W (W not saved, fast's
    average under model/W/fast) pairs no object (export refuses it), and ``average --ema``
    read model/W by its name as a weight: copied from the newest checkpoint, exit 0, under a
    note saying each key was averaged. The save op and slow's update op prove it an
    average: it is averaged, and the note says so."""
    out, truth = made
    run = out / "raw_holds_slow"
    code, text, err = run_cli(["average", *(str(run / f"model.ckpt-{i}") for i in (1, 2)),
                               "--ema", "--out", str(tmp_path / "a"), "--json"])
    said = " ".join(err.split())
    assert code == 0, err
    assert "'model/W', not named as an EMA shadow, holds an EMA average and was averaged" \
        in said and "whichever it holds" not in said, err
    result = json.loads(text)
    assert "model/W" in result["averaged"] and "model/W" not in result["copied"], text
    code, _, err = run_cli(["export", str(tmp_path / "a"), "--raw", "--no-meta",
                            "--out", str(tmp_path / "a.npz")])  # the keys as stored
    assert code == 0, err
    with np.load(tmp_path / "a.npz") as got:
        np.testing.assert_array_equal(got["model/W"], _mean(truth, "raw_holds_slow:slow:model/W"))
