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
