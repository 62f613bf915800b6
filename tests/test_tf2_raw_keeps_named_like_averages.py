"""``export --raw`` writes every TF2 variable a name of the user's alone would call an average
(review-16-attack-r33 F10, r34 F1, F2): a sub-module named like a weight (``block/w`` beside
``block/w/x``), with the module as the checkpoint's root, or as two towers of one class, no
EMA at all. They were dropped with exit 0 (``--raw --strict``): model weights lost. Now written
as stored with a warning naming them; a default-named average stays out. Real TensorFlow;
the truth is each variable's value at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli


def _block(tf):
    class Leaf(tf.Module):
        def __init__(self):
            super().__init__(name="w")
            with self.name_scope:
                self.kernel = tf.Variable(tf.random.stateless_normal([4, 4], [1, 2]), name="x")

    class Block(tf.Module):
        def __init__(self):
            super().__init__(name="block")
            with self.name_scope:
                self.w = tf.Variable(tf.random.stateless_normal([4, 4], [5, 6]), name="w")
                self.gate = Leaf()  # variables block/w and block/w/x

    return Block()


@pytest.mark.parametrize("layout", ["root", "towers"])
def test_raw_keeps_every_model_variable(tmp_path, layout):
    tf = pytest.importorskip("tensorflow")
    if layout == "root":
        b = _block(tf)
        tf.train.Checkpoint(b).write(str(tmp_path / "ckpt"))
        truth = {"w": b.w.numpy(), "gate/kernel": b.gate.kernel.numpy()}
    else:
        enc, dec = _block(tf), _block(tf)
        for v in dec.trainable_variables:
            v.assign_add(tf.ones_like(v))
        tf.train.Checkpoint(enc=enc, dec=dec).write(str(tmp_path / "ckpt"))
        truth = {f"{n}/{k}": v.numpy() for n, m in (("enc", enc), ("dec", dec))
                 for k, v in (("w", m.w), ("gate/kernel", m.gate.kernel))}
    out = tmp_path / "raw.npz"
    code, _, err = run_cli(["export", str(tmp_path / "ckpt"), "--raw", "--strict",
                            "--out", str(out)])
    assert code == 0, err
    # the model (root or tower) tracks gate/kernel beside w: read as its weight, no warning
    # needed (object_held.model_held, r34 F2, F3); kept either way
    with np.load(out) as z:
        assert sorted(z.files) == sorted(truth), z.files
        for k, v in truth.items():
            assert z[k].tobytes() == v.tobytes(), k


def test_raw_leaves_out_a_default_named_average(tmp_path):
    tf = pytest.importorskip("tensorflow")
    m = tf.Module()
    m.w = tf.Variable(tf.random.stateless_normal([3, 3], [1, 2]), name="w")
    ema = tf.train.ExponentialMovingAverage(0.5)
    ema.apply([m.w])
    m.w.assign_add(tf.ones_like(m.w))
    ema.apply([m.w])
    tf.train.Checkpoint(model=m, ema=[ema.average(m.w)]).write(str(tmp_path / "ckpt"))
    out = tmp_path / "raw.npz"
    code, _, err = run_cli(["export", str(tmp_path / "ckpt"), "--raw", "--out", str(out)])
    assert code == 0, err
    assert "may be model weights" not in err, err
    with np.load(out) as z:
        assert z.files == ["model/w"] and z["model/w"].tobytes() == m.w.numpy().tobytes()


def test_raw_keeps_per_weight_tensors_kept_in_a_list_on_the_model(tmp_path):
    """review-16-attack-r34 F1: hand-rolled pruning masks, one per weight, named after it
    (``w0/mask``) and kept in a list on the model, read like averages of an EMA named "mask":
    ``--raw`` dropped them, exit 0."""
    tf = pytest.importorskip("tensorflow")
    m = tf.Module()
    m.w0 = tf.Variable(tf.random.stateless_normal([3, 3], [1, 2]), name="w0")
    m.w1 = tf.Variable(tf.random.stateless_normal([3], [3, 4]), name="w1")
    m.masks = [tf.Variable(tf.cast(tf.abs(v) > 0.5, tf.float32), name=v.name[:-2] + "/mask")
               for v in (m.w0, m.w1)]
    tf.train.Checkpoint(model=m).write(str(tmp_path / "ckpt"))
    truth = {"model/w0": m.w0.numpy(), "model/w1": m.w1.numpy(),
             "model/masks/0": m.masks[0].numpy(), "model/masks/1": m.masks[1].numpy()}
    out = tmp_path / "raw.npz"
    code, _, err = run_cli(["export", str(tmp_path / "ckpt"), "--raw", "--strict",
                            "--out", str(out)])
    assert code == 0, err
    with np.load(out) as z:
        assert sorted(z.files) == sorted(truth), z.files
        for k, v in truth.items():
            assert z[k].tobytes() == v.tobytes(), k


def test_export_keeps_masks_beside_a_default_ema(tmp_path):
    """review-16-attack-r35 F1: the same masks beside a real default EMA: the refusal's
    ``--ema-name ema`` wrote the averages and dropped the masks, exit 0, no word."""
    tf = pytest.importorskip("tensorflow")
    m = tf.Module()
    m.w0 = tf.Variable(tf.random.stateless_normal([3, 3], [1, 2]), name="w0")
    m.w1 = tf.Variable(tf.random.stateless_normal([3], [3, 4]), name="w1")
    m.masks = [tf.Variable(tf.cast(tf.abs(v) > 0.5, tf.float32), name=v.name[:-2] + "/mask")
               for v in (m.w0, m.w1)]
    ema = tf.train.ExponentialMovingAverage(0.5)
    for _ in range(3):
        for v in (m.w0, m.w1):
            v.assign_add(tf.ones_like(v))
        ema.apply([m.w0, m.w1])
    tf.train.Checkpoint(model=m, ema=[ema.average(v) for v in (m.w0, m.w1)]).write(
        str(tmp_path / "ckpt"))
    truth = {"model/w0": ema.average(m.w0).numpy(), "model/w1": ema.average(m.w1).numpy(),
             "model/masks/0": m.masks[0].numpy(), "model/masks/1": m.masks[1].numpy()}
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(tmp_path / "ckpt"), "--strict", "--ema-name", "ema",
                            "--out", str(out)])
    assert code == 0, err
    assert "may be model weights or averages" in " ".join(err.split()), err
    with np.load(out) as z:
        assert sorted(z.files) == sorted(truth), z.files
        for k, v in truth.items():
            assert z[k].tobytes() == v.tobytes(), k
