"""review-30-user-u32 F5: a Keras 3 model whose only layers are in a list attribute
(``self.blocks = [Dense(8), Dense(8), Dense(2)]``), custom loop, saved as
``tf.train.Checkpoint(model=m, ema=[ema.average(v.value) for v in m.trainable_variables])``.
Keras 3 keeps the list in a ``TrackedList``, which ``tf.train.Checkpoint`` does not save: the
file holds the averages and no weight. The refusal told the user to save exactly that call; it
now names the cause and the README's remedy (save the optimizer too, ``--apply-order
trainable:optimizer``), which, typed as printed, exports the averages bit for bit.

Truth: ``ema.average(v)`` at save time, written by the script (real Keras 3 / TensorFlow)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import run_cli, run_script
from helpers_keras import KERAS3_LOOP

SCRIPT = KERAS3_LOOP + r"""
class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.blocks = [keras.layers.Dense(8), keras.layers.Dense(8), keras.layers.Dense(2)]
    def call(self, x):
        for b in self.blocks:
            x = b(x)
        return x
m = Net(); m(tf.zeros((1, 3)))
opt = keras.optimizers.SGD(0.1)
ema = tf.train.ExponentialMovingAverage(0.9)
train(m, opt, lambda: ema.apply([v.value for v in m.trainable_variables]), 3)
avgs = [ema.average(v.value) for v in m.trainable_variables]
np.savez(os.path.join(out, "truth.npz"), **{f"a{i}": a.numpy() for i, a in enumerate(avgs)})
tf.train.Checkpoint(model=m, ema=avgs).write(os.path.join(out, "given", "ckpt"))
tf.train.Checkpoint(model=m, optimizer=opt, ema=avgs).write(os.path.join(out, "opt", "ckpt"))
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    pytest.importorskip("tensorflow")
    pytest.importorskip("keras")
    out = tmp_path_factory.mktemp("k3_layer_list")
    return out, run_script(SCRIPT, out)


def test_the_refusal_names_the_unsaved_layer_list_and_a_remedy_that_works(made, tmp_path):
    out, truth = made
    code, _o, err = run_cli(["export", str(out / "given"), "--out", str(tmp_path / "x.npz")])
    assert code == 6, err
    line = " ".join(err.split())
    assert "ema=[ema.average(v) for v in model.trainable_variables]" not in line, line
    assert "model holds no variable" in line and "TrackedList" in line, line
    stated = re.search(r"state (--apply-order \S+)", line)
    assert stated and stated.group(1) == "--apply-order trainable:optimizer", line
    code, _o, err = run_cli(["export", str(out / "opt"), "--out", str(tmp_path / "o.npz"),
                             *stated.group(1).split()])
    assert code == 0, err
    said = " ".join(err.split())  # u32 F3: named through the optimizer's list, not the model
    assert "object path through the model" not in said, said
    assert ("6 weights are named by their object path through the optimizer's list of the "
            "variables it trains (e.g. optimizer/_trainable_variables/0/net/kernel)") in said, said
    # u33 F4: "the optimizer records no layer names", which an Adam's slot names belie
    # (adam/net_dense_1_kernel_momentum): what records only positions is the list
    assert "the optimizer records no layer names" not in said, said
    assert "their own names repeat (net/kernel), and that list records only their positions, " \
        "not their layers' names" in said, said
    with np.load(tmp_path / "o.npz") as got:
        written = sorted(got[k].tobytes() for k in got.files)
    assert written == sorted(v.tobytes() for v in truth.values()), sorted(got.files)
