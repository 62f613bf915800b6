"""The EMA update ops of a TF1 SavedModel's ``saved_model.pb`` prove pairings as a ``.meta``'s
do. ``ema.apply([model/dense/kernel, dense/kernel])`` inside ``variable_scope("model")``: by
name either shadow may average either variable (review-12-attack-r19 F5), and only the update
ops say whose each is; they were read from a ``.meta`` only, so the same model saved with
``tf.compat.v1.saved_model.Builder`` (two meta graphs, ``train`` and ``serve``) or
``simple_save`` was refused. Truth: ``sess.run(ema.average(v))`` at save time, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
for case in ("builder", "simple", "swap"):
    with tf.Graph().as_default():
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        k1 = tf1.get_variable("model/dense/kernel", [4, 4], initializer=tf1.ones_initializer())
        k2 = tf1.get_variable("dense/kernel", [4, 4], initializer=tf1.zeros_initializer())
        y = tf.matmul(tf.matmul(x, k1), k2)
        ema = tf1.train.ExponentialMovingAverage(0.5)
        step = tf.group(tf1.assign_add(k1, tf.ones([4, 4])),
                        tf1.assign_add(k2, 2 * tf.ones([4, 4])))
        with tf.control_dependencies([step]), tf1.variable_scope("model"):
            update = ema.apply([k1, k2])
        with trained(tf, update) as s:
            for k in (k1, k2):
                truth[f"{case}:{k.op.name}"] = s.run(ema.average(k))
                truth[f"{case}:raw:{k.op.name}"] = s.run(k)
                truth[f"{case}:shadow:{k.op.name}"] = np.array(ema.average(k).op.name)
            d = f"{out}/{case}"
            if case == "simple":
                tf1.saved_model.simple_save(s, d, {"x": x}, {"y": y})
                continue
            # "swap": a swapping Saver (MovingAverageOptimizer.swapping_saver()'s keys); key
            # dense/kernel holds model/dense/kernel/ExponentialMovingAverage, which by name is
            # model/dense/kernel's average: only the update ops say it is dense/kernel's
            saver = tf1.train.Saver({**{k.op.name: ema.average(k) for k in (k1, k2)},
                                     **{ema.average_name(k): k for k in (k1, k2)}}) \
                if case == "swap" else None
            b = tf1.saved_model.Builder(d)
            b.add_meta_graph_and_variables(s, ["train"], saver=saver)
            b.add_meta_graph(["serve"])
            b.save()
'''
VARS = ("model/dense/kernel", "dense/kernel")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_sm_updates")
    return out, run_tf1_script(SCRIPT, out)


@pytest.mark.parametrize("case", ["builder", "simple"])
def test_update_ops_of_a_savedmodel_prove_scoped_shadows(made, tmp_path, case, tf):
    out, truth = made
    code, stdout, err = run_cli(["map", str(out / case), "--non-averaged", "drop", "--json"])
    assert code == 0, err
    import json

    assert json.loads(stdout) == {str(truth[f"{case}:shadow:{v}"]): v for v in VARS}
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / case), "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        for var in VARS:
            assert z[var].tobytes() == truth[f"{case}:{var}"].tobytes(), var
    baked = tmp_path / "baked"
    code, _, err = run_cli(["restore-ema", str(out / case), "--out", str(baked)])
    assert code == 0, err
    reader = tf.train.load_checkpoint(str(baked / "variables" / "variables"))
    for var in VARS:
        assert reader.get_tensor(var).tobytes() == truth[f"{case}:{var}"].tobytes(), var


def test_without_the_graph_it_stays_refused(made, tmp_path):
    out, _ = made
    code, _, err = run_cli(["export", str(out / "builder"), "--no-meta", "--out",
                            str(tmp_path / "w.npz")])
    assert code == 6 and not (tmp_path / "w.npz").exists(), err


@pytest.mark.parametrize("raw", [False, True], ids=["ema", "raw"])
def test_a_swapping_saver_beside_a_plain_one_never_exports_raw_as_averages(made, tmp_path, raw):
    """Builder(saver=swapping Saver) for the ``train`` graph and a plain Saver for ``serve``:
    the two save ops of saved_model.pb store the same keys from different variables (key
    model/dense/kernel/ExponentialMovingAverage holds dense/kernel raw in the one that wrote
    the variables), and nothing in the file records which wrote them: refused (exit 6, naming
    the option that decides), never the other save op's reading (it exported the raw values
    as the averages, exit 0, and --raw the averages: s14e)."""
    out, _ = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / "swap"), *(["--raw"] if raw else []),
                            "--out", str(target)])
    assert code == 6 and not target.exists(), err
    assert "save ops that wrote these keys from different variables" in err
    assert ("--no-meta" if raw else "--not-swapped") in err


@pytest.mark.parametrize("command", ["map", "restore-ema"])
def test_crossed_save_ops_refuse_every_pairing(made, tmp_path, command):
    out, _ = made
    code, _, err = run_cli([command, str(out / "swap"),
                            *(["--out", str(tmp_path / "b")] if command != "map" else [])])
    assert code == 6 and "--not-swapped" in err, err


def test_the_refusals_way_out_for_a_swapping_saver(made, tmp_path):
    """The Builder wrote the variables with add_meta_graph_and_variables' swapping Saver:
    what the refusal offers for it (the keys as stored: export --raw --no-meta) gives each
    variable its average, bit for bit; the key model/model/dense/kernel/ExponentialMovingAverage
    (model/dense/kernel's raw value, stored by the swapping Saver) reads without the graph as
    an average made inside variable_scope('model') or a variable: written as stored with a
    warning naming the --exclude that leaves it out (f2b04b5), which the user follows here;
    --not-swapped is the user's statement, said in a note."""
    out, truth = made
    twin = "model/model/dense/kernel/ExponentialMovingAverage"
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / "swap"), "--raw", "--no-meta", "--out",
                            str(target)])
    assert code == 0 and twin in err and "--exclude 'model/*/ExponentialMovingAverage'" in err, \
        err
    with np.load(target) as z:
        assert sorted(z.files) == sorted((*VARS, twin))
        for var in VARS:
            assert z[var].tobytes() == truth[f"swap:{var}"].tobytes(), var
        assert z[twin].tobytes() == truth["swap:raw:model/dense/kernel"].tobytes()
    code, _, err = run_cli(["export", str(out / "swap"), "--raw", "--no-meta", "--exclude",
                            "model/*/ExponentialMovingAverage", "--out", str(tmp_path / "x.npz")])
    assert code == 0, err
    with np.load(tmp_path / "x.npz") as z:
        assert sorted(z.files) == sorted(VARS)
        for var in VARS:
            assert z[var].tobytes() == truth[f"swap:{var}"].tobytes(), var
    code, _, err = run_cli(["export", str(out / "swap"), "--not-swapped", "--out",
                            str(tmp_path / "s.npz")])
    assert code == 0 and "save ops disagree" in err and "--not-swapped" in err, err
