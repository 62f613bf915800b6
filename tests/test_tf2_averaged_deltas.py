"""A TF2 variable whose own average under TF's default name is stored is a variable, never
another variable's average, whatever its name reads like (review-16-attack-r35 F0, F0b, F3):
delta tuning keeps trainable deltas named ``<kernel>/delta`` in a list on the model. They were
read as an "averages container" (or as ``k0``'s average under an EMA named "delta"), their
proven averages never read: the refusal's own suggestions exported the raw deltas as the
kernels, or dropped the deltas, exit 0 under --strict. Real TensorFlow; truth is each
variable and ``ema.average(v)`` at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli


def _saved(tf, d, frozen: bool):
    class Net(tf.Module):
        def __init__(self):
            super().__init__(name="net")
            with self.name_scope:
                self.k0 = tf.Variable(tf.random.stateless_normal([4, 4], [1, 2]), name="k0",
                                      trainable=not frozen)
                self.k1 = tf.Variable(tf.random.stateless_normal([4, 4], [3, 4]), name="k1",
                                      trainable=not frozen)
            self.deltas = [tf.Variable(tf.zeros([4, 4]), name=k.name.split(":")[0] + "/delta")
                           for k in (self.k0, self.k1)]

    m = Net()
    ema = tf.train.ExponentialMovingAverage(0.5)
    x = tf.random.stateless_normal([6, 4], [5, 5])
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((x @ (m.k0 + m.deltas[0]) @ (m.k1 + m.deltas[1]) - 1.0) ** 2)
        grads = tape.gradient(loss, m.trainable_variables)
        for v, g in zip(m.trainable_variables, grads, strict=True):
            v.assign_sub(0.01 * g)
        ema.apply(m.trainable_variables)
    tf.train.Checkpoint(model=m, ema=[ema.average(v) for v in m.trainable_variables]).write(
        str(d / "ckpt"))
    names = {"model/k0": m.k0, "model/k1": m.k1, "model/deltas/0": m.deltas[0],
             "model/deltas/1": m.deltas[1]}
    return {k: (v if frozen and k.startswith("model/k") else ema.average(v)).numpy()
            for k, v in names.items()}


@pytest.mark.parametrize("frozen", [False, True], ids=["all_trained", "frozen_kernels"])
def test_deltas_with_their_own_averages_are_weights(tmp_path, frozen):
    tf = pytest.importorskip("tensorflow")
    truth = _saved(tf, tmp_path, frozen)
    out = tmp_path / "x.npz"
    # frozen kernels have no average: --allow-missing keeps them raw, as they are
    extra = ["--allow-missing"] if frozen else []
    code, _, err = run_cli(["export", str(tmp_path / "ckpt"), "--strict", *extra,
                            "--out", str(out)])
    assert code == 0, err
    with np.load(out) as z:
        assert sorted(z.files) == sorted(truth), z.files
        for k, v in truth.items():
            assert z[k].tobytes() == v.tobytes(), k
    # the file disproves "delta is an EMA's name": the statement is not taken
    code, _, err = run_cli(["export", str(tmp_path / "ckpt"), "--strict", "--ema-name", "delta",
                            *extra, "--out", str(tmp_path / "y.npz")])
    assert code != 0 or np.load(tmp_path / "y.npz")["model/k0"].tobytes() \
        == truth["model/k0"].tobytes(), err
