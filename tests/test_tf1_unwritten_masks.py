"""TF1 variables of a training graph that nothing writes, named like averages
(review-18-attack-r39 F8, TF1 form): a pruning mask ``dense/kernel/mask`` makes ``mask`` read
as an EMA name, so with the ``.meta`` the causal-mask buffer ``attn/mask`` (no ``attn``
stored) was left out as "an average of a tensor" and the pruning mask dropped as "an
optimizer slot", even by ``--raw``, exit 0 ``--strict``. No op of the graph writes either
(no optimizer, no ``ema.apply()`` update): frozen variables, which ``variables_to_restore()``
restores raw, exported raw. Real TF1 graph; the truth is every variable and
``ema.average(v)`` read in the session at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tf = pytest.importorskip("tensorflow")
    tf1 = tf.compat.v1
    d = tmp_path_factory.mktemp("unwritten")
    with tf.Graph().as_default():
        with tf1.variable_scope("dense"):
            k = tf1.get_variable("kernel", initializer=tf.random.stateless_normal([4, 3], [1, 2]))
            b = tf1.get_variable("bias", initializer=tf.zeros([3]))
            km = tf1.get_variable("kernel/mask", trainable=False,
                                  initializer=tf.constant(np.tril(np.ones([4, 3], np.float32))))
        with tf1.variable_scope("attn"):
            cm = tf1.get_variable("mask", trainable=False, initializer=tf.constant(
                np.tril(np.ones([5, 5], np.float32)) * 2.0))
        x = tf.random.stateless_normal([6, 4], [5, 5])
        loss = tf.reduce_sum((x @ (k * km) + b - 1.0) ** 2) + 0.0 * tf.reduce_sum(cm)
        train = tf1.train.GradientDescentOptimizer(0.01).minimize(loss)
        ema = tf1.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([train]):
            update = ema.apply(tf1.trainable_variables())
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(update)
            raw = {v.op.name: s.run(v) for v in (k, b, km, cm)}
            avg = {**raw, "dense/kernel": s.run(ema.average(k)),
                   "dense/bias": s.run(ema.average(b))}
            tf1.train.Saver().save(s, str(d / "model.ckpt"))
    assert not np.array_equal(avg["dense/kernel"], raw["dense/kernel"])
    return d / "model.ckpt", avg, raw


def _same(npz, truth):
    with np.load(npz) as z:
        assert sorted(z.files) == sorted(truth), z.files
        for name, want in truth.items():
            assert np.array_equal(z[name], want), name


def test_masks_nothing_writes_are_exported_raw(saved, tmp_path):
    path, avg, raw = saved
    code, _, err = run_cli(["export", str(path), "--out", str(tmp_path / "e.npz"), "--strict"])
    assert code == 0, err
    assert "averages of tensors" not in err, err
    said = " ".join(err.split())
    assert "1 weight keeps their raw values: the .meta lists them outside " \
           "trainable_variables" in said and "attn/mask" in said, said
    _same(tmp_path / "e.npz", avg)
    code, _, err = run_cli(["export", str(path), "--out", str(tmp_path / "r.npz"), "--raw"])
    assert code == 0, err
    _same(tmp_path / "r.npz", raw)


def test_list_reads_them_as_weights(saved):
    path, _, _ = saved
    code, out, err = run_cli(["list", str(path)])
    assert code == 0, err
    rows = {line.split("\t")[0]: line.split("\t") for line in out.splitlines() if "\t" in line}
    assert rows["attn/mask"][4] == "weight" and rows["dense/kernel/mask"][4] == "weight", out
