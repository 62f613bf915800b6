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


def bn_model():  # inception slim-style batch norm: its statistics in MOVING_AVERAGE_VARIABLES
    x, w, b, y = model()
    mm = tf1.get_variable("bn/moving_mean", [3], initializer=tf.zeros_initializer(),
                          trainable=False)
    tf1.add_to_collection(tf1.GraphKeys.MOVING_AVERAGE_VARIABLES, mm)
    return w, b, mm, tf1.assign(mm, 0.5 * mm + 0.5 * tf.reduce_mean(y, 0))


with tf.Graph().as_default():  # training, the statistic averaged too (inception_train.py)
    gs = tf1.train.get_or_create_global_step()
    w, b, mm, update = bn_model()
    loss = tf.reduce_sum(tf.square(tf1.get_default_graph().get_tensor_by_name("y:0")))
    with tf.control_dependencies([update]):
        step = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=gs)
    ema = tf1.train.ExponentialMovingAverage(0.5, num_updates=gs)
    with tf.control_dependencies([step]):
        train_op = ema.apply(tf1.trainable_variables() + tf1.moving_average_variables())
    with tf1.Session() as s:
        s.run(tf1.global_variables_initializer())
        for _ in range(3):
            s.run(train_op)
        tf1.train.Saver().save(s, f"{out}/train_bn/model.ckpt", global_step=gs)
        tf1.train.Saver(ema.variables_to_restore()).save(s, f"{out}/vtr_bn/model.ckpt")
        for v in (w, b, mm):
            truth[f"bn_ema:{v.op.name}"] = s.run(ema.average(v).read_value())
            truth[f"bn_raw:{v.op.name}"] = s.run(v.read_value())
with tf.Graph().as_default():  # its evaluation graph (inception_eval.py): no ema.apply()
    gs = tf1.train.get_or_create_global_step()
    w, b, mm, _ = bn_model()
    saver = tf1.train.Saver(tf1.train.ExponentialMovingAverage(0.5).variables_to_restore())
    with tf1.Session() as s:
        saver.restore(s, tf.train.latest_checkpoint(f"{out}/train_bn"))
        saver.save(s, f"{out}/eval_bn/model.ckpt", global_step=gs)
np.savez(f"{out}/truth.npz", **truth)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_eval_resave")
    return out, run_script(SCRIPT, out)


def _bits(a) -> bytes:
    return np.ascontiguousarray(a).tobytes()


@pytest.mark.parametrize("case", ["eval_resave", "sm_eval", "eval_bn"])
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


# the variables each re-save holds, and the truth key prefix of their averages
HELD = {"eval_resave": (("fc/b", "fc/w"), "ema"), "sm_eval": (("fc/b", "fc/w"), "ema"),
        "eval_bn": (("bn/moving_mean", "fc/b", "fc/w"), "bn_ema")}


@pytest.mark.parametrize("case", ["eval_resave", "sm_eval", "eval_bn"])
def test_evaluation_resave_with_averages_only(made, case, tmp_path):
    """eval_bn: an evaluation graph whose batch norm lists its statistics in
    moving_average_variables (inception's slim batch_norm) ran no ema.apply() all the same:
    it was refused as a training graph's raw values, no option named (review-21-attack-r54
    F5)."""
    out, truth = made
    names, ema = HELD[case]
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
        assert sorted(z.files) == list(names)
        for n in names:
            assert _bits(z[n]) == _bits(truth[f"{ema}:{n}"]), n
    with ckpt_tools.open_checkpoint(str(baked)) as ckpt:
        for n in names:
            assert _bits(ckpt.tensor(n)) == _bits(truth[f"{ema}:{n}"]), n
    code, text, err = run_cli(["list", "--json", "--averages-only", str(out / case)])
    assert code == 0, err
    stated = json.loads(text)["stated_averages_only"]["pairs"]
    # eval_bn: the statistic's key reads as "other" beside the weights' and is paired by the
    # .meta's moving_average_variables, so the statement's note counts the weights' alone
    assert stated == {f"{n}/ExponentialMovingAverage": n for n in names if n.startswith("fc/")}


@pytest.mark.parametrize("case", ["sm_vtr_train", "vtr_bn"])
def test_training_graph_vtr_stays_refused(made, case, tmp_path):
    out, _ = made
    for extra in ([], ["--averages-only"]):
        code, _, err = run_cli(["export", *extra, str(out / case),
                                "--out", str(tmp_path / "e.npz")])
        assert code == 6, err
        assert "hold their variables' raw values" in err, err
    code, text, err = run_cli(["list", "--json", str(out / case)])
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
