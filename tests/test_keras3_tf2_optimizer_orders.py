"""The Keras optimizer's recorded order offered for same-named TF2 averages is offered as what it
is, and not where the file shows two optimizers recording different orders
(review-19-attack-r44 F2, F5; after 7a33e95).

A Keras 3 subclassed model ``net`` assigns its head BEFORE a Python list of blocks (so
``net.trainable_variables`` visits the head first), trained by a ``tf.GradientTape`` loop with
``tf.train.ExponentialMovingAverage`` over ``net.trainable_variables``:

- F2: the optimizer is given a hand-built ``var_list`` (body + head). The refusal offered
  ``--apply-order trainable:optimizer`` describing the optimizer's list as
  ``model.trainable_variables``; following it put every average on another variable, exit 0.
  The offer now says the optimizer's order is its ``var_list`` at build and pairs correctly only
  if ``ema.apply()`` got that same list.
- F5: a warm-up SGD built on ``net.trainable_variables``, then Adam on body + head, both saved:
  their recorded orders pair the averages differently, so no option is offered (``list``:
  ``ema_unproven.option`` null) and both are named; stating the warm-up's order (the list
  ``ema.apply()`` got) gives ``ema.average(v)`` at save time bit for bit.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")


def _net():
    class Block(keras.layers.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.d1 = keras.layers.Dense(4, name="d1")
            self.d2 = keras.layers.Dense(4, name="d2")

        def call(self, x):
            return self.d2(tf.nn.relu(self.d1(x)))

    class Net(keras.Model):
        def __init__(self):
            super().__init__(name="net")
            self.head = keras.layers.Dense(4, name="head")  # before the blocks
            self.blocks = [Block(name=f"block{i}") for i in range(2)]

        def call(self, x):
            for b in self.blocks:
                x = b(x)
            return self.head(x)

    return Net()


def _train(directory, warmup: bool):
    """Trains and saves; returns (saved raw value bytes, ema.average(v)) per variable."""
    keras.utils.set_random_seed(7)
    net = _net()
    x = tf.random.normal([8, 4])
    net(x)
    main, warm = keras.optimizers.Adam(0.01), keras.optimizers.SGD(0.01)
    ema = tf.train.ExponentialMovingAverage(0.9)

    def body_head():
        return [v for b in net.blocks for v in b.trainable_variables] + \
            net.head.trainable_variables

    for step in range(4):
        opt, var_list = (warm, net.trainable_variables) if warmup and step == 0 else (
            main, body_head())
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(net(x) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, var_list), var_list, strict=True))
        ema.apply([v.value for v in net.trainable_variables])
    assert net.trainable_variables[0].path == "net/head/kernel"  # ema.apply()'s order
    saved = {"model": net, "optimizer": main, **({"warmup": warm} if warmup else {})}
    tf.train.Checkpoint(**saved, ema=[ema.average(v.value) for v in net.trainable_variables]
                        ).write(str(directory / "ckpt"))
    truth = [(v.numpy().tobytes(), ema.average(v.value).numpy())
             for v in net.trainable_variables]
    assert len({raw for raw, _ in truth}) == len(truth)
    return truth


def _average_of(truth, raw: np.ndarray) -> np.ndarray:
    found = [avg for saved, avg in truth if saved == raw.tobytes()]
    assert len(found) == 1
    return found[0]


def test_offer_says_the_optimizers_order_is_its_var_list(tmp_path):
    _train(tmp_path / "ck", warmup=False)
    ck = str(tmp_path / "ck")
    code, _, err = run_cli(["export", ck, "--out", str(tmp_path / "w.npz")])
    said = " ".join(err.split())
    assert code == 6 and "--apply-order trainable:optimizer" in said, said
    # the optimizer's list is its var_list at build, not model.trainable_variables
    assert "zip(grads, model.trainable_variables)" not in said, said
    assert "var_list at build" in said and "body + head" in said, said
    assert "only if ema.apply() got the same list, in the same order" in said, said


def test_two_optimizers_recording_different_orders_offer_none(tmp_path):
    truth = _train(tmp_path / "ck", warmup=True)
    ck = str(tmp_path / "ck")
    for cmd in (["map", ck], ["export", ck, "--out", str(tmp_path / "w.npz")],
                ["restore-ema", ck, "--out", str(tmp_path / "r")]):
        code, _, err = run_cli(cmd)
        said = " ".join(err.split())
        assert code == 6, (cmd, said)
        assert "'optimizer' and 'warmup' record different orders" in said, said
        assert "--apply-order trainable:optimizer" not in said, said
    assert not (tmp_path / "w.npz").exists()
    code, out, err = run_cli(["list", ck, "--json"])
    assert code == 0, err
    assert json.loads(out)["ema_unproven"]["option"] is None

    # the warm-up's order is the list ema.apply() got: stated, every average bit for bit
    code, _, err = run_cli(["export", ck, "--apply-order", "trainable:warmup",
                            "--out", str(tmp_path / "w.npz")])
    assert code == 0, err
    code, _, err = run_cli(["export", ck, "--raw", "--out", str(tmp_path / "raw.npz")])
    assert code == 0, err
    with np.load(tmp_path / "w.npz") as z, np.load(tmp_path / "raw.npz") as raw:
        assert sorted(z.keys()) == sorted(raw.keys()) and len(z.keys()) == len(truth)
        for name in z.keys():
            assert z[name].tobytes() == _average_of(truth, raw[name]).tobytes(), name
