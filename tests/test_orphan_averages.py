"""Averages of weights a TF2 checkpoint does not store are said, never dropped in silence
(review s10 F5): a Keras 3 model's layers kept in a plain Python list are not tracked by TF's
object graph, so ``tf.train.Checkpoint(model=m, ema_vars=[...])`` holds their averages
(``net/blk0/kernel/ExponentialMovingAverage``) but not their weights. Made here by Keras 3 and
a TF custom loop; the truth is ``ema.average(v)`` recorded at save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli


@pytest.fixture(scope="module")
def listed(keras, tf, tmp_path_factory):
    class Net(keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.blocks = [keras.layers.Dense(4, name=f"blk{i}") for i in range(2)]
            self.head = keras.layers.Dense(4, name="head")

        def build(self, shape):  # built here, the layers' variables get scoped TF names
            self.gain = self.add_weight(shape=(4,), initializer="ones", name="gain")
            super().build(shape)

        def call(self, x):
            for b in self.blocks:
                x = b(x)
            return self.head(x) * self.gain

    keras.utils.set_random_seed(0)
    m = Net(name="net")
    x = np.random.RandomState(0).randn(8, 4).astype("float32")
    m(x)
    tv = [v.value for v in m.trainable_variables]
    ema = tf.train.ExponentialMovingAverage(0.5)
    ema.apply(tv)
    opt = keras.optimizers.SGD(0.1)
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(m(x) - x))
        grads = tape.gradient(loss, m.trainable_variables)
        opt.apply_gradients(zip(grads, m.trainable_variables, strict=True))
        ema.apply(tv)
    out = tmp_path_factory.mktemp("orphans")
    tf.train.Checkpoint(model=m, ema_vars=[ema.average(v) for v in tv]).write(
        str(out / "ckpt"))
    truth = {v.path: ema.average(v.value).numpy() for v in m.trainable_variables}
    return out, truth


def test_export_says_which_averages_have_no_weight(listed, tmp_path):
    out, truth = listed
    npz = tmp_path / "e.npz"
    code, stdout, err = run_cli(["export", str(out), "--out", str(npz), "--json"])
    assert code == 0, err
    doc = json.loads(stdout)
    lacking = [w for w in doc["warnings"] if "does not store" in w]
    assert len(lacking) == 1, doc["warnings"]
    for name in ("net/blk0/kernel", "net/blk0/bias", "net/blk1/kernel", "net/blk1/bias"):
        assert name in lacking[0] and name in err, (name, lacking[0])
    assert "4 averages" in lacking[0] and "holds 3 weights" in lacking[0], lacking[0]
    with np.load(npz) as z:  # what is exported is the head's and gain's averages, exactly
        assert len(z.files) == 3
        for name in z.files:
            weight = "net/" + "/".join(p.lstrip("_") for p in name.split("/")[1:])
            assert z[name].tobytes() == truth[weight].tobytes(), name
    code, _, err = run_cli(["export", str(out), "--out", str(tmp_path / "h.npz"),
                            "--exclude", "net/blk*"])
    assert code == 0 and "does not store" not in err, err


def test_restore_ema_says_it_too(listed, tmp_path):
    out, _ = listed
    code, _, err = run_cli(["restore-ema", str(out), "--out", str(tmp_path / "r")])
    assert code == 0, err
    assert "4 averages belong to variables this checkpoint does not store" in err, err
    assert "net/blk1/kernel" in err and "restores none of those weights" in err, err


def test_list_says_which_averages_have_no_weight(listed):
    """review-30-user-u32 F2: list said "EMA: 3 of 3 weights have a shadow" and nothing of
    the 4 averages whose weights the file lacks, which export and restore-ema warn of."""
    out, _ = listed
    code, text, err = run_cli(["list", str(out)])
    assert code == 0, err
    said = " ".join(err.split())  # the lines under the table
    assert "EMA: 3 of 3 weights have a shadow" in said, said
    assert "EMA: 4 averages belong to variables this checkpoint does not store" in said, said
    assert "net/blk1/kernel" in said and "TrackedList" in said, said
    assert "--apply-order trainable:optimizer" in said, said
    code, text, err = run_cli(["list", str(out), "--json"])
    assert code == 0, err
    [warned] = json.loads(text)["warnings"]
    assert warned.startswith("4 averages belong to variables"), warned
