"""``export``'s warning about tensors written as stored that may be averages names only what
the name filters let it write (review-32-attack-r120 F4): with ``-g 'model/*'`` it named
``ema/c``, which the filter left out of the file, and told the user to ``--exclude`` it.
Built by real TensorFlow (TF2 eager), truth from ``ema.average(v)``; the EMA objects carry
names of their own (TF numbers names process-wide, and xdist runs other files here)."""

from __future__ import annotations

import numpy as np
from helpers import run_cli


def test_the_written_as_stored_warning_names_only_tensors_written(tf, tmp_path):
    class M(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.random.stateless_normal([2, 3], [4, 1]), name="w")
            self.b = tf.Variable(tf.zeros([3]), name="b")
            self.c = tf.Variable(tf.ones([3]), name="c")

    m = M()
    var = {"w": m.w, "b": m.b, "c": m.c}
    fast = tf.train.ExponentialMovingAverage(0.5, name="r120fast")
    slow = tf.train.ExponentialMovingAverage(0.9, name="r120slow")
    for i in range(3):
        for v in var.values():
            v.assign(v * 0.7 + 0.2 * (i + 1))
        fast.apply(list(var.values()))
        slow.apply(list(var.values()))
    holder = tf.Module()  # one attribute holding two objects' averages: c's is slow's
    holder.w, holder.b, holder.c = (fast.average(m.w), fast.average(m.b), slow.average(m.c))
    tf.train.Checkpoint(model=m, ema=holder).write(str(tmp_path / "ck/ckpt"))
    base = ["export", str(tmp_path / "ck"), "--ema-name", "r120fast", "--allow-missing"]
    code, _, err = run_cli([*base, "--out", str(tmp_path / "all.npz")])
    assert code == 0 and "written as stored" in err and "ema/c" in err, err
    code, _, err = run_cli([*base, "-g", "model/*", "--out", str(tmp_path / "g.npz")])
    assert code == 0, err
    assert "written as stored" not in err and "ema/c" not in err, err  # was named, not written
    with np.load(tmp_path / "g.npz") as got:
        assert sorted(got.files) == ["model/b", "model/c", "model/w"], got.files
        for k in "wb":
            assert got[f"model/{k}"].tobytes() == fast.average(var[k]).numpy().tobytes()
        assert got["model/c"].tobytes() == m.c.numpy().tobytes()  # raw: --allow-missing
