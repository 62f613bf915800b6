"""``--apply-order tracked`` means the order the variables were tracked (the order their
attributes were assigned, which the object graph records), not creation order: a
``tf.Module`` that creates ``enc`` then ``dec`` but assigns ``self.dec`` first is tracked
``dec, enc``. Every text offering the option says so, so a true statement is right: given
``ema.apply()`` in assignment order, ``tracked`` pairs bit-exactly with ``ema.average(v)``."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli

tf = pytest.importorskip("tensorflow")


def _assigned_late(directory) -> dict[str, np.ndarray]:
    """Saves the module; returns object path -> ``ema.average(v)`` at save time."""

    class Block(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.random.normal([3, 3]))
            self.b = tf.Variable(tf.random.normal([3]))

    class Model(tf.Module):
        def __init__(self):
            super().__init__()
            enc = Block()  # created first ...
            dec = Block()
            self.dec = dec  # ... but assigned (tracked) second
            self.enc = enc

    tf.random.set_seed(1)
    m = Model()
    assigned = [m.dec.w, m.dec.b, m.enc.w, m.enc.b]  # attribute assignment order
    paths = ["model/dec/w", "model/dec/b", "model/enc/w", "model/enc/b"]
    ema = tf.train.ExponentialMovingAverage(0.5)
    for _ in range(3):
        for v in assigned:
            v.assign_add(tf.random.normal(v.shape))
        ema.apply(assigned)
    tf.train.Checkpoint(model=m, ema_vars=[ema.average(v) for v in assigned]).write(
        str(directory / "ckpt"))
    return {p: ema.average(v).numpy() for p, v in zip(paths, assigned, strict=True)}


def test_tracked_is_assignment_order_and_every_text_says_so(tmp_path):
    truth = _assigned_late(tmp_path / "ck")
    code, _, err = run_cli(["export", str(tmp_path / "ck"), "--out", str(tmp_path / "a.npz")])
    assert code == 6, err
    assert "the order their attributes were assigned" in err and "not creation order" in err
    assert "if it got them in creation order" not in err
    code, out, _ = run_cli(["export", "--help"])
    assert code == 0 and "not creation order" in " ".join(out.split())
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(tmp_path / "ck"), "--apply-order", "tracked",
                            "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        for path, value in truth.items():
            assert z[path].tobytes() == value.tobytes(), path


def test_tracked_is_keras_order_own_weights_before_sublayers(tmp_path):
    """A ConvNeXt-style Keras 3 block: a ``LayerNormalization`` and a ``Dense`` assigned in
    ``__init__``, a layer-scale ``gamma`` made in ``build()``. Keras lists the block's own
    ``gamma`` before its sublayers' weights (not in attribute order), and
    ``ema.apply(model.trainable_variables)`` got that order: ``apply_ema(..., apply_order=
    "tracked")`` with the live model (also as ``tf.train.Checkpoint(model=model)``) pairs
    every average bit for bit; ``--apply-order tracked`` is refused, as the file cannot show
    a sublayer re-assigned in ``build()``."""
    keras = pytest.importorskip("keras")

    class Block(keras.layers.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.norm = keras.layers.LayerNormalization(name="norm")
            self.proj = keras.layers.Dense(4, name="proj")

        def build(self, shape):
            self.gamma = self.add_weight(name="gamma", shape=(4,), initializer="ones")

        def call(self, x):
            return x + self.gamma * self.proj(self.norm(x))

    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.b1, self.b2 = Block(name="b1"), Block(name="b2")

        def call(self, x):
            return self.b2(self.b1(x))

    keras.utils.set_random_seed(3)
    model = Net()
    x = tf.random.normal([8, 4])
    model(x)
    opt = keras.optimizers.SGD(0.1)
    ema = tf.train.ExponentialMovingAverage(0.5)
    tv = [v.value for v in model.trainable_variables]
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables, strict=True))
        ema.apply(tv)
    d = tmp_path / "ck"
    tf.train.Checkpoint(model=model, ema=[ema.average(v) for v in tv]).write(str(d / "ckpt"))
    want = {id(v): ema.average(v).numpy() for v in tv}
    import ckpt_tools

    for wrap in (False, True):
        live = Net()
        live(x)
        ckpt_tools.apply_ema(tf.train.Checkpoint(model=live) if wrap else live, d,
                             apply_order="tracked")
        for saved, got in zip(tv, live.trainable_variables, strict=True):
            assert got.numpy().tobytes() == want[id(saved)].tobytes(), (wrap, got.path)
    # The file cannot show whether a block re-assigned a sublayer in build() (Keras 3 then
    # tracks it last too): the command line refuses and names the live-model way.
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(d), "--apply-order", "tracked", "--out", str(target)])
    assert code == 6, err
    assert "re-assigned in build()" in err and "apply_order=" in err, err
    assert not target.exists()
