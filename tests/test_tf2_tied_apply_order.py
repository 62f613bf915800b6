"""A tied variable shared by two stated objects (review-16-attack-r33 F3): an encoder and a
decoder holding one embedding, ``ema.apply(enc.trainable_variables + dec.trainable_variables)``
(legal in TF2: the embedding's average is created once, where the list first holds it), the
averages saved as ``[ema.average(v) for v in ...]`` (one object twice in the list). The true
``--apply-order trainable:encoder,decoder`` was refused with the very message that suggested
it, because the objects' order under the root was read as a container's; the statement orders
them. Real TensorFlow; truth is ``ema.average(v)`` read at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli

import ckpt_tools


@pytest.fixture(scope="module")
def tied(tf, tmp_path_factory):
    out = tmp_path_factory.mktemp("tied")
    emb = tf.Variable(tf.random.stateless_normal([3, 3], [0, 0]))

    class Enc(tf.Module):
        def __init__(self):
            super().__init__()
            self.emb = emb
            self.w = tf.Variable(tf.random.stateless_normal([3, 3], [0, 1]))

    class Dec(tf.Module):
        def __init__(self):
            super().__init__()
            self.emb = emb
            self.w = tf.Variable(tf.random.stateless_normal([3, 3], [0, 2]))
            self.z = tf.Variable(tf.random.stateless_normal([3, 3], [0, 3]))

    enc, dec = Enc(), Dec()
    vl = list(enc.trainable_variables) + list(dec.trainable_variables)
    assert len(vl) == 5  # the embedding twice
    ema = tf.train.ExponentialMovingAverage(0.5)
    for s in range(3):
        for i, v in enumerate({id(v): v for v in vl}.values()):
            v.assign_add(tf.ones_like(v) * (i + 1) * (s + 1))
        ema.apply(vl)
    tf.train.Checkpoint(encoder=enc, decoder=dec,
                        ema=[ema.average(v) for v in vl]).write(str(out / "ckpt"))
    truth = {p: ema.average(v).numpy() for p, v in [("decoder/emb", emb), ("encoder/w", enc.w),
                                                    ("decoder/w", dec.w), ("decoder/z", dec.z)]}
    raw = {p: v.numpy() for p, v in [("encoder/w", enc.w), ("decoder/w", dec.w)]}
    assert all(not np.array_equal(truth[p], raw[p]) for p in raw)
    return out, truth


def test_the_true_comma_statement_pairs_a_shared_variable(tied, tmp_path):
    d, truth = tied
    code, _, err = run_cli(["export", str(d), "--strict", "--out", str(tmp_path / "no.npz")])
    assert code == 6 and "trainable:PATH1,PATH2" in err, err  # the file alone does not tell
    code, _, err = run_cli(["export", str(d), "--strict", "--apply-order",
                            "trainable:encoder,decoder", "--out", str(tmp_path / "w.npz")])
    assert code == 0, err
    z = np.load(tmp_path / "w.npz")
    assert sorted(z.files) == sorted(truth)
    for name, average in truth.items():
        assert np.array_equal(z[name], average), name
    m = ckpt_tools.ema_map(d, apply_order="trainable:encoder,decoder", strict=True)
    with ckpt_tools.open_checkpoint(d) as ckpt:
        pairs = {t: s for s, t in m.pairs if s != t}
        assert len(pairs) == len(truth)
        paths = {k: p for p in truth for k in ckpt.keys() if k.startswith(p + "/")}
        for weight, average in pairs.items():
            assert np.array_equal(ckpt.tensor(average), truth[paths[weight]]), weight
