"""``--apply-order tracked`` ("as Keras' model.trainable_variables") on a tf_keras model
holding same-named sublayers in a dict: Keras visits a dict's values sorted by key, a
layer's attributes in assignment order, and the object graph records insertion order for
both, so the file cannot tell which: refused (exit 6) naming the live-model way, never
paired in the graph's order (was: each head given the other's average, exit 0).
``apply_ema(live_model, path, apply_order="tracked")`` reads the live model's own order and
gives every average bit for bit. Truth: ``ema.average(v)`` recorded at save by the real
tf_keras/TensorFlow in a subprocess."""

from __future__ import annotations

import pytest
from helpers import run_cli, run_script

pytest.importorskip("tf_keras")

SCRIPT = r'''
import sys
import numpy as np
import tensorflow as tf
import tf_keras as K
import ckpt_tools

out = sys.argv[1]


class Sub(K.Model):
    def __init__(self):
        super().__init__()
        self.heads = {"zeta": K.layers.Dense(4, name="fc"), "alpha": K.layers.Dense(4, name="fc")}
        self.tail = [K.layers.Dense(4, name="fc"), K.layers.Dense(4, name="fc")]

    def call(self, t):
        return self.tail[1](self.tail[0](self.heads["alpha"](self.heads["zeta"](t))))


tf.random.set_seed(0)
m = Sub()
m(tf.zeros((1, 4)))
tv = m.trainable_variables
ema = tf.train.ExponentialMovingAverage(0.5)
opt = K.optimizers.SGD(0.05)
x = tf.random.normal([8, 4])
for _ in range(3):
    with tf.GradientTape() as t:
        loss = tf.reduce_mean(m(x) ** 2)
    opt.apply_gradients(zip(t.gradient(loss, tv), tv))
    ema.apply(tv)
tf.train.Checkpoint(model=m, ema=[ema.average(v) for v in tv]).write(out + "/ck/ckpt")
arrays = {f"ema:{i}": ema.average(v).numpy() for i, v in enumerate(tv)}
live = Sub()
live(tf.zeros((1, 4)))
ckpt_tools.apply_ema(live, out + "/ck", apply_order="tracked")
arrays.update({f"api:{i}": v.numpy() for i, v in enumerate(live.trainable_variables)})
np.savez(out + "/truth.npz", **arrays)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tracked_dict")
    return out, run_script(SCRIPT, out)


def test_tracked_over_a_dict_of_layers_is_refused(made, tmp_path):
    out, _ = made
    target = tmp_path / "e.npz"
    code, _, err = run_cli(["export", str(out / "ck"), "--apply-order", "tracked", "--out",
                            str(target)])
    assert code == 6, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert str(out / "ck") in lines[0], lines[0]
    assert "--apply-order tracked leaves two orders" in lines[0] and "heads" in lines[0]
    assert "apply_order='tracked'" in lines[0], lines[0]
    assert not target.exists()


def test_apply_ema_tracked_with_the_live_model_gives_the_library_averages(made):
    _, truth = made
    n = len([k for k in truth if k.startswith("ema:")])
    assert n == 8
    for i in range(n):
        assert truth[f"api:{i}"].tobytes() == truth[f"ema:{i}"].tobytes(), i
