"""A model's own ``<v>/<x>`` list is the model's wherever the checkpoint happens to store its
weights (review-17-attack-r37 F2, F5).

A ``tf.train.Checkpoint`` stores each variable under the first path it finds, breadth first:
a Keras 3 optimizer tracks the model's variables in ``_trainable_variables``, so once the
model nests its layers the weights are stored as ``optimizer/_trainable_variables/N``; with
the model as the root (``Checkpoint(root=m, ...)``) each attribute is a child of the root.
Pruning masks ``m.masks = [<w>/mask ...]`` were then read as a list "saved apart from the
model" and left out of every export (``--ema-name ema --strict`` exit 0, no word). Now the
object graph's every path decides: the masks are written as stored, with the warning.
Made here by real TensorFlow and Keras 3; truth: the variables and ``ema.average(v)``."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli


def _net(tf, masks: bool):
    class Dense(tf.Module):
        def __init__(self, seed, name):
            super().__init__(name=name)
            with self.name_scope:
                self.w = tf.Variable(tf.random.stateless_normal([3, 3], [seed, 1]), name="w")
                self.b = tf.Variable(tf.zeros([3]), name="b")

        def __call__(self, x):
            return x @ self.w + self.b

    class Net(tf.Module):
        def __init__(self):
            super().__init__(name="net")
            self.layers = [Dense(1, "d0"), Dense(2, "d1")]
            if masks:
                self.masks = [tf.Variable(tf.cast(tf.abs(d.w) > 0.5, tf.float32),
                                          name=d.w.name[:-2] + "/mask", trainable=False)
                              for d in self.layers]

        def __call__(self, x):
            for d in self.layers:
                x = d(x)
            return x

    return Net()


@pytest.fixture(scope="module")
def optimizer_first(tf, keras, tmp_path_factory):
    """The README's TF2 loop: a tf.Module, a Keras 3 optimizer, a TF EMA; masks on the model."""
    m = _net(tf, masks=True)
    opt, ema = keras.optimizers.Adam(0.1), tf.train.ExponentialMovingAverage(0.5)
    x = tf.random.stateless_normal([6, 3], [9, 9])
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((m(x) - 1.0) ** 2)
        grads = tape.gradient(loss, m.trainable_variables)
        opt.apply_gradients(zip(grads, m.trainable_variables, strict=True))
        ema.apply(m.trainable_variables)
    out = tmp_path_factory.mktemp("reach") / "ckpt"
    tf.train.Checkpoint(model=m, optimizer=opt,
                        ema=[ema.average(v) for v in m.trainable_variables]).write(str(out))
    truth = {f"{d.name}/{n}": ema.average(getattr(d, n)).numpy()
             for d in m.layers for n in ("w", "b")}
    return out, truth, [k.numpy() for k in m.masks]


@pytest.fixture(scope="module")
def root_model(tf, tmp_path_factory):
    """The model as the checkpoint's root, masks on it, a default EMA's averages beside."""
    m = _net(tf, masks=True)
    ema = tf.train.ExponentialMovingAverage(0.5)
    for step in range(3):
        for v in m.trainable_variables:
            v.assign_add(tf.fill(v.shape, float(step + 1)))
        ema.apply(m.trainable_variables)
    out = tmp_path_factory.mktemp("root") / "ckpt"
    tf.train.Checkpoint(root=m, ema=[ema.average(v) for v in m.trainable_variables]).write(
        str(out))
    named = {f"layers/{i}/{n}": getattr(d, n) for i, d in enumerate(m.layers) for n in "wb"}
    return out, {k: ema.average(v).numpy() for k, v in named.items()}, \
        [k.numpy() for k in m.masks], {k: v.numpy() for k, v in named.items()}


def _arrays(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def test_masks_beside_an_optimizer_tracked_model_are_written(optimizer_first, tmp_path):
    src, truth, masks = optimizer_first
    for args in (["--ema-name", "ema", "--strict"], ["--raw"]):
        out = tmp_path / "o.npz"
        code, _, err = run_cli(["export", str(src), "--out", str(out), "--force", *args])
        assert code == 0, err
        got = _arrays(out)
        assert "model/masks/0" in err and "may be model weights or averages" in err, err
        assert [got["model/masks/0"].tobytes(), got["model/masks/1"].tobytes()] == [
            k.tobytes() for k in masks], sorted(got)
        if args[0] == "--ema-name":
            for name, value in truth.items():
                assert got[name].tobytes() == value.tobytes(), name


def test_masks_of_a_root_model_are_written(root_model, tmp_path):
    src, averages, masks, raw = root_model
    for args, want in ((["--ema-name", "ema", "--strict"], averages), (["--raw"], raw)):
        out = tmp_path / "o.npz"
        code, _, err = run_cli(["export", str(src), "--out", str(out), "--force", *args])
        assert code == 0, err
        got = _arrays(out)
        assert [got["masks/0"].tobytes(), got["masks/1"].tobytes()] == [
            k.tobytes() for k in masks], sorted(got)
        assert sorted(got) == sorted([*want, "masks/0", "masks/1"]), sorted(got)
        for name, value in want.items():
            assert got[name].tobytes() == value.tobytes(), name
