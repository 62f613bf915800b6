"""TF1 Savers of the averages alone whose keys are prefixed or swapped (review r20 F5):
``{"ema/" + ema.average_name(v): ema.average(v)}``, ``{"ema/" + v.op.name: ema.average(v)}``,
``{ema.average_name(V): ema.average(W), ema.average_name(W): ema.average(V)}``. Every command
refused them (no option decided) although the ``.meta``'s save op proves which shadow each key
holds and its update ops whose average that shadow is; ``export --raw`` of the second wrote
the averages as raw weights, exit 0. Now paired through them, bit for bit against
``ema.average(v)`` read by TensorFlow at save time; ``--raw`` finds no raw weight (exit 7)."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import run_cli
from helpers_tf1 import restored_by_model_saver, tf1_ema_run

import ckpt_tools

VARS = ("W", "V", "b")
E = "ExponentialMovingAverage"
SAVERS = {
    "prefixed": lambda ema, vs, gs: {**{"ema/" + ema.average_name(v): ema.average(v)
                                        for v in vs.values()}, "global_step": gs},
    "varnames": lambda ema, vs, gs: {**{"ema/" + n: ema.average(v) for n, v in vs.items()},
                                     "global_step": gs},
    "swapped": lambda ema, vs, gs: {
        ema.average_name(vs["V"]): ema.average(vs["W"]),
        ema.average_name(vs["W"]): ema.average(vs["V"]),
        ema.average_name(vs["b"]): ema.average(vs["b"]), "global_step": gs},
}
# key holding each variable's average
AVERAGE_KEY = {"prefixed": {n: f"ema/{n}/{E}" for n in VARS},
               "varnames": {n: f"ema/{n}" for n in VARS},
               "swapped": {"W": f"V/{E}", "V": f"W/{E}", "b": f"b/{E}"}}


@pytest.fixture(scope="module")
def made(tmp_path_factory, tf):
    out = tmp_path_factory.mktemp("tf1_avg_only_saved")
    return out, {c: tf1_ema_run(tf, out / c, keys) for c, keys in SAVERS.items()}


@pytest.mark.parametrize("case", sorted(SAVERS))
def test_map_and_list(made, case):
    out, _ = made
    want = {k: n for n, k in AVERAGE_KEY[case].items()}
    code, text, err = run_cli(["map", str(out / case), "--json"])
    assert code == 0, err
    assert json.loads(text) == {**want, "global_step": "global_step"}
    assert ckpt_tools.ema_map(str(out / case)).mapping == json.loads(text)
    code, text, err = run_cli(["list", str(out / case), "--json"])
    assert code == 0, err
    doc = json.loads(text)
    assert doc["ema_unproven"] is None, doc["ema_unproven"]
    rows = {v["key"]: v for v in doc["variables"]}
    for k, n in want.items():
        assert rows[k]["role"] == "ema" and rows[k]["ema_of"] == n, rows[k]


@pytest.mark.parametrize("case", sorted(SAVERS))
def test_export_writes_each_variables_average(made, tmp_path, case):
    out, runs = made
    truth = runs[case][1]
    code, _, err = run_cli(["export", str(out / case), "--out", str(tmp_path / "e.npz")])
    assert code == 0, err
    res = ckpt_tools.export_weights(str(out / case), tmp_path / "p.npz")
    assert sorted(res.averaged) == sorted(VARS), res.averaged
    import numpy as np

    for f in ("e.npz", "p.npz"):
        with np.load(tmp_path / f) as z:
            assert sorted(z.files) == sorted(VARS), z.files
            for n in VARS:
                assert z[n].tobytes() == truth[f"ema:{n}"].tobytes(), (f, n)
                assert z[n].tobytes() != truth[f"raw:{n}"].tobytes(), (f, n)


@pytest.mark.parametrize("case", sorted(SAVERS))
def test_raw_export_finds_no_raw_weight(made, tmp_path, case):
    """The keys hold averages only: ``--raw`` writes nothing (exit 7), saying so."""
    out, _ = made
    code, _, err = run_cli(["export", str(out / case), "--raw", "--out",
                            str(tmp_path / "r.npz")])
    assert code == 7, err
    assert "hold averages only" in err and "save op" in err, err
    assert not (tmp_path / "r.npz").exists()


@pytest.mark.parametrize("case", sorted(SAVERS))
@pytest.mark.parametrize("how", ["restore-ema", "bake"])
def test_baked_under_the_variables_names(made, tmp_path, tf, case, how):
    """The output holds each average under its variable's name: a plain Saver() of the model
    graph restores ``ema.average(v)`` into each ``v``."""
    out, runs = made
    args = ["restore-ema", str(out / case)]
    if how == "bake":  # the average of two copies of the run: its own values
        for copy in "xy":
            shutil.copytree(out / case, tmp_path / copy)
        args = ["average", str(tmp_path / "x"), str(tmp_path / "y"), "--ema", "--bake",
                "--newest", str(tmp_path / "y")]
    code, _, err = run_cli([*args, "--out", str(tmp_path / "b")])
    assert code == 0, err
    got = restored_by_model_saver(tf, str(tmp_path / "b" / runs[case][0].rpartition("/")[2]))
    for n in VARS:
        assert got[n].tobytes() == runs[case][1][f"ema:{n}"].tobytes(), n


def _parts_alone(ema, vs, gs):  # W's two parts' averages, each whole under its own key
    return {**{ema.average_name(v): ema.average(v) for v in vs.values()}, "global_step": gs}


@pytest.fixture(scope="module")
def parted(tmp_path_factory, tf):
    out = tmp_path_factory.mktemp("tf1_avg_only_parts")
    return out, tf1_ema_run(tf, out / "parts", _parts_alone, partitioned=True)


@pytest.mark.parametrize("stated", [[], ["--averages-only"]], ids=["plain", "stated"])
@pytest.mark.parametrize("args", [["map"], ["export", "--out", "OUT.npz"],
                                  ["restore-ema", "--out", "OUT"]], ids=lambda a: a[0])
def test_partitioned_parts_saved_whole_are_refused_saying_so(parted, tmp_path, args, stated):
    """review r20 F3: W partitioned in two, its parts' averages saved whole under one key
    each. ckpt does not assemble them into W: refused (exit 6) saying so (not 'a Saver whose
    keys are not its variables' names', nor pointing at restore_ema, which refuses too),
    --averages-only or not; nothing written."""
    out, _ = parted
    args = [a.replace("OUT", str(tmp_path / "o")) for a in args]
    code, _, err = run_cli([args[0], str(out / "parts"), *args[1:], *stated])
    assert code == 6, err
    assert len(err.strip().splitlines()) == 1, err
    for word in ("partitioned", "W/part_0/ExponentialMovingAverage", "not assemble",
                 "--averages-only", "import_meta_graph"):
        assert word in err, (word, err)
    assert not list(tmp_path.iterdir())


def test_partitioned_parts_restored_by_the_meta_saver_as_the_refusal_says(parted, tf):
    """What the refusal offers is true: the .meta's own Saver restores each part's average
    into its shadow, bit for bit."""
    out, (prefix, truth) = parted
    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        saver = tf1.train.import_meta_graph(prefix + ".meta")
        with tf1.Session() as sess:
            saver.restore(sess, prefix)
            got = {v.op.name: sess.run(v.read_value()) for v in tf1.global_variables()
                   if v.op.name.endswith(E)}  # the model variables are not saved
    for part in ("W/part_0", "W/part_1", "V", "b"):
        assert got[f"{part}/{E}"].tobytes() == truth[f"ema:{part}"].tobytes(), part
