"""A TF1 EMA named with a slash and nothing else under the weight's name
(``ExponentialMovingAverage(name="ema/slow")``, review-13-attack-r22 F8): the shadows
``W/ema/slow`` read by name as nothing (``W/ema`` is not stored), and every command said "no EMA
shadow is stored at all ... ckpt export --raw" (which exported the raw weights, exit 0). The
``.meta``'s update ops prove them ``ema.apply()``'s: they are paired (one object), or, with two
such objects (``ema/fast`` + ``ema/slow``), refused naming ``--ema-name ema/slow``, which then
takes that object's averages. Made by real TensorFlow (a subprocess); truth
``ema.average(v)`` at save time."""

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
for case in ("slow", "two"):
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        w = tf1.get_variable("fc/w", [3, 3])
        b = tf1.get_variable("fc/b", [3])
        loss = tf.reduce_sum(tf.square(tf.matmul(tf.ones([2, 3]), w) + b))
        opt = (tf1.train.GradientDescentOptimizer(0.05) if case == "slow" else
               tf1.train.MomentumOptimizer(0.05, 0.9))  # no slot beside the shadows: "slow"
        train = opt.minimize(loss, global_step=gs)
        emas = {"ema/slow": tf1.train.ExponentialMovingAverage(0.8, num_updates=gs,
                                                               name="ema/slow")}
        if case == "two":
            emas["ema/fast"] = tf1.train.ExponentialMovingAverage(0.3, name="ema/fast")
        with tf.control_dependencies([train]):
            step = tf.group(*[e.apply([w, b]) for e in emas.values()])
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(step)
            os.makedirs(f"{out}/{case}")
            tf1.train.Saver().save(s, f"{out}/{case}/model.ckpt", global_step=gs)
            for n, e in emas.items():
                for v in (w, b):
                    truth[f"{case}:{n}:{v.op.name}"] = s.run(e.average(v))
            for v in (w, b):
                truth[f"{case}:raw:{v.op.name}"] = s.run(v)
np.savez(f"{out}/truth.npz", **truth)
'''

# the README's evaluation of restore-ema's output: its own copied .meta's Saver restores it
EVAL = r'''
import json
import sys

import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()
prefix = tf.train.latest_checkpoint(sys.argv[2])
with tf.Graph().as_default():
    saver = tf1.train.import_meta_graph(prefix + ".meta")
    with tf1.Session() as s:
        saver.restore(s, prefix)
        got = {v.op.name: s.run(v).tolist() for v in tf1.global_variables()}
json.dump(got, open(sys.argv[3], "w"))
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_slashed_only")
    return out, run_script(SCRIPT, out)


def _check(path, truth, case, name):
    with np.load(path) as z:
        got = {k: z[k] for k in z.files}
    assert sorted(got) == ["fc/b", "fc/w"]
    for k, v in got.items():
        assert np.array_equal(v, truth[f"{case}:{name}:{k}"]), k
        assert not np.array_equal(v, truth[f"{case}:raw:{k}"]), k


def test_one_slashed_object_is_paired(made, tmp_path):
    out, truth = made
    code, stdout, err = run_cli(["list", str(out / "slow"), "--json"])
    assert code == 0, err
    doc = json.loads(stdout)
    rows = {v["name"]: v for v in doc["variables"]}
    assert rows["fc/w/ema/slow"]["role"] == "ema" and rows["fc/w/ema/slow"]["ema_of"] == "fc/w"
    for options in ([], ["--ema-name", "ema/slow"]):
        code, stdout, err = run_cli(["export", str(out / "slow"), "--out",
                                     str(tmp_path / "x.npz"), "--force", "--json", *options])
        assert code == 0, err
        _check(tmp_path / "x.npz", truth, "slow", "ema/slow")
        assert json.loads(stdout)["averaged"] == ["fc/w", "fc/b"]


def test_restore_ema_output_restores_the_averages(made, tmp_path):
    out, truth = made
    code, _, err = run_cli(["restore-ema", str(out / "slow"), "--out", str(tmp_path / "r")])
    assert code == 0, err
    dump = tmp_path / "got.json"
    run_script(EVAL + "\nimport numpy as np; np.savez(sys.argv[1] + '/truth.npz')",
               tmp_path, str(tmp_path / "r"), str(dump))
    got = json.loads(dump.read_text())
    for k in ("fc/w", "fc/b"):
        assert np.array_equal(np.array(got[k], np.float32), truth[f"slow:ema/slow:{k}"]), k


def test_two_slashed_objects_refused_naming_the_full_names(made, tmp_path):
    out, truth = made
    code, _, err = run_cli(["export", str(out / "two"), "--out", str(tmp_path / "y.npz")])
    assert code == 6, err
    assert "--ema-name ema/slow" in err and "--ema-name ema/fast" in err, err
    assert "--raw" not in err and "--ema-name slow" not in err, err
    assert not (tmp_path / "y.npz").exists()
    for name in ("ema/slow", "ema/fast"):
        code, _, err = run_cli(["export", str(out / "two"), "--out", str(tmp_path / "y.npz"),
                                "--force", "--ema-name", name])
        assert code == 0, err
        _check(tmp_path / "y.npz", truth, "two", name)
