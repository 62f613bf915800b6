"""TF1 checkpoints and SavedModels re-saved from an EVALUATION graph (review-13-attack-r22 F1,
F11): the model graph is built again without ``ema.apply()``, ``Saver(ema.variables_to_restore())``
restores the training checkpoint's averages into the model variables, then

* ``eval_resave``: the same Saver saves again: keys ``fc/w/ExponentialMovingAverage`` hold the
  averages, written (says the .meta's save op) from ``fc/w`` itself;
* ``sm_eval``: ``SavedModelBuilder.add_meta_graph_and_variables(..., saver=that Saver)``: same keys;
* ``sm_inc`` (inception_saved_model.py): the default Saver: keys ``fc/w`` hold the averages.

The training graph's ``Saver(ema.variables_to_restore())`` (``sm_vtr_train``) writes the RAW
weights under the same names: it has the shadow variables and ``ema.apply()``. So an evaluation
graph's keys are refused (exit 6) naming ``--averages-only`` (what decides), and paired with it
bit for bit; the training graph's stay refused even with it. Made here by TensorFlow (a
subprocess), the truth read from the sessions at save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli, run_script

SCRIPT = r'''
import os
import sys

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()
out = sys.argv[1]
truth = {}


def model():
    x = tf1.placeholder_with_default(tf.ones([2, 3]), [None, 3], name="x")
    w = tf1.get_variable("fc/w", [3, 3], initializer=tf1.random_normal_initializer())
    b = tf1.get_variable("fc/b", [3], initializer=tf1.random_normal_initializer())
    return x, w, b, tf.identity(tf.matmul(x, w) + b, name="y")


with tf.Graph().as_default():  # training
    gs = tf1.train.get_or_create_global_step()
    x, w, b, y = model()
    step = tf1.train.GradientDescentOptimizer(0.05).minimize(tf.reduce_sum(tf.square(y)),
                                                             global_step=gs)
    ema = tf1.train.ExponentialMovingAverage(0.5, num_updates=gs)
    with tf.control_dependencies([step]):
        train_op = ema.apply([w, b])
    with tf1.Session() as s:
        s.run(tf1.global_variables_initializer())
        for _ in range(3):
            s.run(train_op)
        tf1.train.Saver().save(s, f"{out}/train/model.ckpt", global_step=gs)
        for v in (w, b):
            truth[f"ema:{v.op.name}"] = s.run(ema.average(v).read_value())
            truth[f"raw:{v.op.name}"] = s.run(v.read_value())
        bld = tf1.saved_model.Builder(f"{out}/sm_vtr_train")  # raw weights under average names
        bld.add_meta_graph_and_variables(s, ["serve"],
                                         saver=tf1.train.Saver(ema.variables_to_restore()))
        bld.save()
for kind in ("eval_resave", "sm_eval", "sm_inc"):
    with tf.Graph().as_default():  # evaluation graph: no ema.apply()
        gs = tf1.train.get_or_create_global_step()
        x, w, b, y = model()
        saver = tf1.train.Saver(tf1.train.ExponentialMovingAverage(0.5).variables_to_restore())
        with tf1.Session() as s:
            saver.restore(s, tf.train.latest_checkpoint(f"{out}/train"))
            for v in (w, b):
                assert np.array_equal(s.run(v), truth[f"ema:{v.op.name}"])
            if kind == "eval_resave":
                saver.save(s, f"{out}/{kind}/model.ckpt", global_step=gs)
            else:
                bld = tf1.saved_model.Builder(f"{out}/{kind}")
                sig = tf1.saved_model.predict_signature_def({"x": x}, {"y": y})
                bld.add_meta_graph_and_variables(
                    s, ["serve"], signature_def_map={"serving_default": sig},
                    saver=saver if kind == "sm_eval" else None)
                bld.save()
np.savez(f"{out}/truth.npz", **truth)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_eval_resave")
    return out, run_script(SCRIPT, out)


def _bits(a) -> bytes:
    return np.ascontiguousarray(a).tobytes()


@pytest.mark.parametrize("case", ["eval_resave", "sm_eval"])
def test_evaluation_resave_refused_naming_averages_only(made, case, tmp_path):
    out, _ = made
    code, _, err = run_cli(["export", str(out / case), "--out", str(tmp_path / "e.npz")])
    assert code == 6, err
    assert "--averages-only" in err and "evaluation graph" in err, err
    assert "hold their variables' raw values" not in err, err  # r22 F1: not proven raw
    assert not list(tmp_path.iterdir())
    code, text, err = run_cli(["list", "--json", str(out / case)])
    assert code == 0, err
    assert json.loads(text)["ema_unproven"]["option"] == "--averages-only"


@pytest.mark.parametrize("case", ["eval_resave", "sm_eval"])
def test_evaluation_resave_with_averages_only(made, case, tmp_path):
    out, truth = made
    code, _, err = run_cli(["export", "--averages-only", str(out / case),
                            "--out", str(tmp_path / "e.npz")])
    assert code == 0, err
    assert "evaluation graph" in err and "you stated --averages-only" in err, err
    baked = tmp_path / "baked"
    code, _, err = run_cli(["restore-ema", "--averages-only", str(out / case),
                            "--out", str(baked)])
    assert code == 0, err
    import ckpt_tools
    with np.load(tmp_path / "e.npz") as z:
        assert sorted(z.files) == ["fc/b", "fc/w"]
        for n in ("fc/w", "fc/b"):
            assert _bits(z[n]) == _bits(truth[f"ema:{n}"]), n
    with ckpt_tools.open_checkpoint(str(baked)) as ckpt:
        for n in ("fc/w", "fc/b"):
            assert _bits(ckpt.tensor(n)) == _bits(truth[f"ema:{n}"]), n
    code, text, err = run_cli(["list", "--json", "--averages-only", str(out / case)])
    assert code == 0, err
    assert json.loads(text)["stated_averages_only"]["pairs"] == {
        "fc/b/ExponentialMovingAverage": "fc/b", "fc/w/ExponentialMovingAverage": "fc/w"}


def test_training_graph_vtr_stays_refused(made, tmp_path):
    out, _ = made
    for extra in ([], ["--averages-only"]):
        code, _, err = run_cli(["export", *extra, str(out / "sm_vtr_train"),
                                "--out", str(tmp_path / "e.npz")])
        assert code == 6, err
        assert "hold their variables' raw values" in err, err
    code, text, err = run_cli(["list", "--json", str(out / "sm_vtr_train")])
    assert code == 0, err
    assert json.loads(text)["ema_unproven"]["option"] is None


def test_serving_savedmodel_may_hold_the_averages(made, tmp_path):
    """r22 F11: the refusal of a SavedModel with no shadow says a serving export may have
    baked the averages in, rather than blaming the training Saver; --raw gives them."""
    out, truth = made
    code, _, err = run_cli(["export", str(out / "sm_inc"), "--out", str(tmp_path / "e.npz")])
    assert code == 6, err
    assert "may already be the averages" in err and "ckpt export --raw" in err, err
    assert "probably saved only" not in err, err
    code, _, err = run_cli(["export", "--raw", str(out / "sm_inc"),
                            "--out", str(tmp_path / "e.npz")])
    assert code == 0, err
    with np.load(tmp_path / "e.npz") as z:
        for n in ("fc/w", "fc/b"):
            assert _bits(z[n]) == _bits(truth[f"ema:{n}"]), n
