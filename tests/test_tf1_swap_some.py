"""TF1 Savers storing averages under keys not named as averages (review r20 F1): a swapping
Saver for SOME variables only (``{"W": ema.average(W), ema.average_name(W): W}``, the others
saved plainly), one for all (``MovingAverageOptimizer.swapping_saver()``), and averages under
other keys (``{"W": W, "avgW": ema.average(W)}``). ``export --raw`` exported W's average
labelled as the raw weights beside raw V and b ("0 with EMA values"), exit 0. The ``.meta``'s
save op proves what every key holds (and its update ops whose shadow each average is): every
command pairs through it, bit for bit against ``ema.average(v)`` / ``v`` read by TensorFlow
at save time; ``--raw`` gives the raw weights."""

from __future__ import annotations

import json
import shutil
import warnings

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import restored_by_meta, tf1_ema_run

import ckpt_tools

VARS = ("W", "V", "b")
E = "ExponentialMovingAverage"


def _some(ema, vs, gs, plain=("V", "b"), swapped=("W",)):
    d = {"global_step": gs}
    for n in plain:
        d[n] = vs[n]
        d[ema.average_name(vs[n])] = ema.average(vs[n])
    for n in swapped:
        d[n] = ema.average(vs[n])
        d[ema.average_name(vs[n])] = vs[n]
    return d


SAVERS = {
    "some": _some,
    "all": lambda ema, vs, gs: _some(ema, vs, gs, plain=(), swapped=VARS),
    "odd": lambda ema, vs, gs: {**vs, **{"avg" + n: ema.average(v) for n, v in vs.items()},
                                "global_step": gs},
}
# variable -> (key holding its average, key holding it raw), as the Saver above wrote them
KEYS = {
    "some": {"W": ("W", f"W/{E}"), "V": (f"V/{E}", "V"), "b": (f"b/{E}", "b")},
    "all": {n: (n, f"{n}/{E}") for n in VARS},
    "odd": {n: ("avg" + n, n) for n in VARS},
}


@pytest.fixture(scope="module")
def made(tmp_path_factory, tf):
    out = tmp_path_factory.mktemp("tf1_swap_some")
    runs = {}
    for case, keys in {**SAVERS, "some_noavg": None}.items():
        if keys is None:  # W swapped, V plain with its average, b saved without one
            def keys(ema, vs, gs):
                d = _some(ema, vs, gs, plain=("V",))
                d["b"] = vs["b"]
                return d
        runs[case] = tf1_ema_run(tf, out / case, keys)
    return out, runs


@pytest.mark.parametrize("case", sorted(KEYS))
def test_map_and_list_pair_through_the_save_op(made, case):
    out, _ = made
    want = {a: r for a, r in KEYS[case].values()}
    code, text, err = run_cli(["map", str(out / case), "--json"])
    assert code == 0, err
    assert json.loads(text) == {**want, "global_step": "global_step"}
    assert ckpt_tools.ema_map(str(out / case)).mapping == json.loads(text)
    code, text, err = run_cli(["list", str(out / case), "--json"])
    assert code == 0, err
    doc = json.loads(text)
    assert doc["ema_unproven"] is None, doc["ema_unproven"]
    rows = {v["key"]: v for v in doc["variables"]}
    for a, r in want.items():
        assert rows[r]["ema"] == a and rows[a]["ema_of"] == r, (rows[r], rows[a])
        assert rows[r]["role"] == "weight" and rows[a]["role"] == "ema", (rows[r], rows[a])


@pytest.mark.parametrize("case", sorted(KEYS))
@pytest.mark.parametrize("raw", [False, True], ids=["ema", "raw"])
def test_export_bit_for_bit(made, tmp_path, case, raw):
    """Each variable under its own name: its average (``--raw``: its raw value), whichever
    key holds it."""
    out, runs = made
    code, _, err = run_cli(["export", str(out / case), *(["--raw"] if raw else []),
                            "--out", str(tmp_path / "e.npz")])
    assert code == 0, err
    assert "hold their averages" not in err, err
    with np.load(tmp_path / "e.npz") as z:
        assert sorted(z.files) == sorted(VARS), z.files
        for n in VARS:
            want = runs[case][1][f"{'raw' if raw else 'ema'}:{n}"]
            assert z[n].tobytes() == want.tobytes(), n
    res = ckpt_tools.export_weights(str(out / case), tmp_path / "p.npz", ema=not raw)
    assert sorted(res.averaged) == ([] if raw else sorted(VARS)), res.averaged
    with np.load(tmp_path / "p.npz") as z, np.load(tmp_path / "e.npz") as e:
        assert all(z[n].tobytes() == e[n].tobytes() for n in VARS)


@pytest.mark.parametrize("case", sorted(KEYS))
@pytest.mark.parametrize("how", ["restore-ema", "bake"])
def test_baked_checkpoint_restored_by_its_meta_gives_the_averages(made, tmp_path, tf, case,
                                                                  how):
    """The output, restored by the Saver of its own copied ``.meta`` (the README's way), gives
    every variable its own ``ema.average(v)``."""
    out, runs = made
    args = ["restore-ema", str(out / case)]
    if how == "bake":  # the average of two copies of the run: its own values
        for copy in "xy":
            shutil.copytree(out / case, tmp_path / copy)
        args = ["average", str(tmp_path / "x"), str(tmp_path / "y"), "--ema", "--bake",
                "--newest", str(tmp_path / "y")]
    code, _, err = run_cli([*args, "--out", str(tmp_path / "b")])
    assert code == 0, err
    prefix = str(tmp_path / "b" / runs[case][0].rpartition("/")[2])
    got = restored_by_meta(tf, prefix)
    for n in VARS:
        want = runs[case][1][f"ema:{n}"]
        assert got[n].tobytes() == want.tobytes(), n
        assert want.tobytes() != runs[case][1][f"raw:{n}"].tobytes()


def test_some_swapped_with_a_weight_saved_without_average(made, tmp_path):
    """b saved without its average: missing, refused (exit 6) naming --allow-missing, which
    keeps b raw beside W's and V's averages, each from the key holding it."""
    out, runs = made
    code, _, err = run_cli(["export", str(out / "some_noavg"), "--out", str(tmp_path / "x.npz")])
    assert code == 6 and "--allow-missing" in err and "b" in err, err
    code, _, err = run_cli(["export", str(out / "some_noavg"), "--allow-missing",
                            "--out", str(tmp_path / "e.npz")])
    assert code == 0, err
    truth = runs["some_noavg"][1]
    with np.load(tmp_path / "e.npz") as z:
        assert sorted(z.files) == sorted(VARS), z.files
        for n, kind in (("W", "ema"), ("V", "ema"), ("b", "raw")):
            assert z[n].tobytes() == truth[f"{kind}:{n}"].tobytes(), n


@pytest.mark.parametrize("how", ["restore_ema", "ema_saver"])
@pytest.mark.parametrize("case", ["some", "all", "odd"])
def test_python_api_in_the_imported_graph_pairs_through_the_save_op(made, tf, case, how):
    """In the graph imported from the .meta a key named as W's average holds W itself: the
    save op says so, and each variable takes the key holding its own average, as every command
    pairs them (review-13-attack-r24 F1; this was refused), never the raw weight."""
    out, runs = made
    prefix, truth = runs[case]
    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        tf1.train.import_meta_graph(prefix + ".meta")
        with tf1.Session() as sess, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if how == "restore_ema":
                ckpt_tools.restore_ema(sess, str(out / case))
            else:
                ckpt_tools.ema_saver(checkpoint=str(out / case)).restore(sess, prefix)
            got = {v.op.name: sess.run(v.read_value()) for v in tf1.global_variables()
                   if v.op.name in VARS}  # ema_saver leaves the shadows, as TF's vtr()
    for n in VARS:
        assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), n
        assert got[n].tobytes() != truth[f"raw:{n}"].tobytes(), n
