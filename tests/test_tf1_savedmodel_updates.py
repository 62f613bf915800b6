"""The EMA update ops of a TF1 SavedModel's ``saved_model.pb`` prove pairings as a ``.meta``'s
do. ``ema.apply([model/dense/kernel, dense/kernel])`` inside ``variable_scope("model")``: by
name either shadow may average either variable (review-12-attack-r19 F5), and only the update
ops say whose each is; they were read from a ``.meta`` only, so the same model saved with
``tf.compat.v1.saved_model.Builder`` (two meta graphs, ``train`` and ``serve``) or
``simple_save`` was refused. Truth: ``sess.run(ema.average(v))`` at save time, bit for bit."""

from __future__ import annotations

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
for case in ("builder", "simple"):
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
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(update)
            for k in (k1, k2):
                truth[f"{case}:{k.op.name}"] = s.run(ema.average(k))
                truth[f"{case}:shadow:{k.op.name}"] = np.array(ema.average(k).op.name)
            d = f"{out}/{case}"
            if case == "simple":
                tf1.saved_model.simple_save(s, d, {"x": x}, {"y": y})
                continue
            b = tf1.saved_model.Builder(d)
            b.add_meta_graph_and_variables(s, ["train"])
            b.add_meta_graph(["serve"])
            b.save()
np.savez(f"{out}/truth.npz", **truth)
'''
VARS = ("model/dense/kernel", "dense/kernel")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_sm_updates")
    return out, run_script(SCRIPT, out)


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
