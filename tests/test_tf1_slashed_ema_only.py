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
from helpers import run_cli
from helpers_tf1 import restored_by_meta, run_tf1_script

SCRIPT = r'''
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
        with trained(tf, step) as s:
            os.makedirs(f"{out}/{case}")
            tf1.train.Saver().save(s, f"{out}/{case}/model.ckpt", global_step=gs)
            for n, e in emas.items():
                for v in (w, b):
                    truth[f"{case}:{n}:{v.op.name}"] = s.run(e.average(v))
            for v in (w, b):
                truth[f"{case}:raw:{v.op.name}"] = s.run(v)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_slashed_only")
    return out, run_tf1_script(SCRIPT, out)


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


def test_restore_ema_output_restores_the_averages(made, tmp_path, tf):
    """The README's evaluation of restore-ema's output: its own copied .meta's Saver."""
    out, truth = made
    code, _, err = run_cli(["restore-ema", str(out / "slow"), "--out", str(tmp_path / "r")])
    assert code == 0, err
    got = restored_by_meta(tf, tf.train.latest_checkpoint(str(tmp_path / "r")))
    for k in ("fc/w", "fc/b"):
        assert np.array_equal(got[k], truth[f"slow:ema/slow:{k}"]), k


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
