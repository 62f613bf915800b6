"""Averages of a loss tensor (``ema.apply([loss])``) in a TF1 checkpoint read without its
``.meta`` (task s14b; s13g's note on r22 F4). ``total_loss/ExponentialMovingAverage`` was right
(``loss_average``); under a custom EMA name it read as a weight missing an average:

- zero-debiased (``ExponentialMovingAverage(zero_debias=True, name="dbg")``: ``total_loss/dbg``
  beside ``.../biased`` and ``.../local_step``): TF debiases only tensors' averages, so the
  layout proves a tensor's: now ``loss_average``, neither "missing" nor exported (it was
  refused, and with ``--allow-missing`` exported as a weight);
- not debiased (``name="lossavg"``): the keys cannot tell it from a weight, so it stays
  refused (exit 6), now saying it may be a loss average and naming ``--exclude``, which gives
  the weights' averages alone.

Made by TensorFlow (graph mode); truth ``ema.average(v)`` read at save time.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli


@pytest.fixture(scope="module")
def made(tmp_path_factory, tf):
    tf1 = tf.compat.v1
    out = tmp_path_factory.mktemp("tf1_loss_average_no_meta")
    truth = {}
    for case in ("debiased", "named"):
        with tf.Graph().as_default():
            gs = tf1.train.get_or_create_global_step()
            w = tf1.get_variable("fc/w", [3, 3])
            b = tf1.get_variable("fc/b", [3])
            loss = tf.reduce_sum(tf.square(tf.matmul(tf.ones([2, 3]), w) + b),
                                 name="total_loss")
            train = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=gs)
            ema = tf1.train.ExponentialMovingAverage(0.5)
            lavg = tf1.train.ExponentialMovingAverage(0.9, zero_debias=case == "debiased",
                                                      name="dbg" if case == "debiased"
                                                      else "lossavg")
            with tf.control_dependencies([train]):
                step = tf.group(ema.apply([w, b]), lavg.apply([loss]))
            with tf1.Session() as s:
                s.run(tf1.global_variables_initializer())
                for _ in range(3):
                    s.run(step)
                tf1.train.Saver().save(s, str(out / case / "model.ckpt"), global_step=gs)
                for v in (w, b):
                    truth[f"{case}:ema:{v.op.name}"] = s.run(ema.average(v).read_value())
                truth[f"{case}:loss_key"] = lavg.average(loss).op.name
    return out, truth


def _same(path, truth, case):
    with np.load(path) as z:
        got = {k: z[k] for k in z.files}
    assert sorted(got) == ["fc/b", "fc/w"], sorted(got)
    for k, v in got.items():
        want = truth[f"{case}:ema:{k}"]
        assert v.dtype == want.dtype and v.tobytes() == want.tobytes(), k


@pytest.mark.parametrize("extra", [[], ["--allow-missing"]])
def test_zero_debiased_custom_named_loss_average_is_no_weight(made, tmp_path, extra):
    out, truth = made
    key = truth["debiased:loss_key"]
    code, stdout, err = run_cli(["list", str(out / "debiased"), "--no-meta", "--json"])
    role = {v["name"]: v["role"] for v in json.loads(stdout)["variables"]}
    assert role[key] == "loss_average", role
    code, _, err = run_cli(["export", str(out / "debiased"), "--no-meta", *extra, "--out",
                            str(tmp_path / "x.npz")])
    assert code == 0, err
    _same(tmp_path / "x.npz", truth, "debiased")


def test_custom_named_loss_average_refusal_names_exclude(made, tmp_path):
    out, truth = made
    key = truth["named:loss_key"]
    code, _, err = run_cli(["export", str(out / "named"), "--no-meta", "--out",
                            str(tmp_path / "x.npz")])
    assert code == 6, err
    assert "loss tensor's average" in err and f"--exclude '{key}'" in err, err
    code, _, err = run_cli(["export", str(out / "named"), "--no-meta", "--exclude", key,
                            "--out", str(tmp_path / "x.npz")])
    assert code == 0, err
    _same(tmp_path / "x.npz", truth, "named")
