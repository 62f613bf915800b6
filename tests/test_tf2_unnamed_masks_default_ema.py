"""Unnamed TF2 variables (TensorFlow names them all ``Variable``), pruning masks kept in a list
on the model (``m.masks = [Variable/mask, ...]``) and ONE default-named EMA whose averages are
saved ``ema=[...]`` (review-17-attack-r37 F6). The masks were read as averages of an EMA named
"mask" and joined the default averages' same-name pairing: the default export was refused as
"4 averages ... several default-named EMA objects ... no --apply-order can pair them", and
every true statement (``--apply-order trainable``, ``--ema-name ExponentialMovingAverage``,
``apply_ema(live, apply_order='trainable')``) was refused too. Nothing but a name of the
user's reads ``Variable/mask`` as an average, so the export asks only for the default
averages' apply order, and under it writes w, v = their averages and the masks as stored,
with the warning. Real TensorFlow; truth is each variable and ``ema.average(v)`` at save
time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli

import ckpt_tools


def _net(tf):
    class Net(tf.Module):
        def __init__(self):
            super().__init__(name="net")
            self.w = tf.Variable(tf.random.stateless_normal([3, 3], [1, 2]))
            self.v = tf.Variable(tf.random.stateless_normal([3, 3], [3, 4]))

    return Net()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tf = pytest.importorskip("tensorflow")
    d = tmp_path_factory.mktemp("unmask")
    m = _net(tf)
    tv = list(m.trainable_variables)  # v, w: a tf.Module sorts its attributes
    masks = [tf.Variable(tf.cast(tf.abs(x) > 0.5, tf.float32), name=x.name[:-2] + "/mask",
                         trainable=False) for x in tv]
    ema = tf.train.ExponentialMovingAverage(0.5)
    for i in range(3):
        for j, x in enumerate(tv):
            x.assign_add(tf.ones_like(x) * (j + 1) * (i + 1))
        ema.apply(tv)
    assert {x.name for x in tv} == {"Variable:0"} and {k.name for k in masks} == {
        "Variable/mask:0"}
    m.masks = masks
    tf.train.Checkpoint(model=m, ema=[ema.average(x) for x in tv]).write(str(d / "ckpt"))
    truth = {"model/w": ema.average(m.w).numpy(), "model/v": ema.average(m.v).numpy(),
             "model/masks/0": masks[0].numpy(), "model/masks/1": masks[1].numpy()}
    assert not np.array_equal(truth["model/w"], m.w.numpy())
    return d / "ckpt", truth


def test_default_export_asks_only_the_default_averages_order(saved, tmp_path):
    path, _ = saved
    code, _, err = run_cli(["export", str(path), "--out", str(tmp_path / "x.npz")])
    said = " ".join(err.split())
    assert code == 6, err
    assert "2 averages cannot be paired" in said, said
    assert "--apply-order trainable" in said, said
    assert "several default-named EMA objects" not in said, said
    assert "no --apply-order can pair them" not in said, said
    assert "model/masks/0 may average" not in said, said


@pytest.mark.parametrize("extra", [[], ["--ema-name", "ExponentialMovingAverage"]])
def test_apply_order_gives_the_averages_and_the_masks_as_stored(saved, tmp_path, extra):
    path, truth = saved
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(path), "--apply-order", "trainable", "--strict",
                            "--out", str(out), *extra])
    assert code == 0, err
    assert "may be model weights or averages" in " ".join(err.split()), err
    with np.load(out) as z:
        assert sorted(z.files) == sorted(truth), z.files
        for k, want in truth.items():
            assert z[k].tobytes() == want.tobytes(), k


def test_apply_ema_with_the_live_module(saved):
    tf = pytest.importorskip("tensorflow")
    path, truth = saved
    m = _net(tf)
    m.masks = [tf.Variable(tf.zeros([3, 3]), name="Variable/mask", trainable=False)
               for _ in range(2)]
    ckpt_tools.apply_ema(m, str(path), apply_order="trainable")
    got = {"model/w": m.w, "model/v": m.v, "model/masks/0": m.masks[0],
           "model/masks/1": m.masks[1]}
    for k, want in truth.items():
        assert got[k].numpy().tobytes() == want.tobytes(), k
