"""An 8-bit integer variable of a TensorFlow checkpoint is a weight whatever its name, and
never wants an average (review-16-attack-r32 F3, the int8 half).

A hand-quantized ``w_q`` (int8) beside float weights averaged by a TF2 EMA was read as
"other" and left out of ``ckpt export`` without a word, exit 0. TensorFlow's
``ExponentialMovingAverage.apply()`` takes float variables only (checked here), so an integer
weight keeps its raw value with a note, never a refusal asking for ``--allow-missing``. Truth:
the variables and ``ema.average(v)`` at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli


@pytest.fixture(scope="module")
def saved(tf, tmp_path_factory):
    out = tmp_path_factory.mktemp("int8")
    m = tf.Module()
    m.w = tf.Variable(tf.ones([2, 3]), name="w")
    m.q = tf.Variable(tf.constant([[1, -2, 3], [-4, 5, 127]], tf.int8), name="w_q")
    m.u = tf.Variable(tf.constant([[1, 2, 255]], tf.uint8), name="mask")
    ema = tf.train.ExponentialMovingAverage(0.5)
    with pytest.raises(TypeError, match="float"):
        ema.apply([m.q])  # why an integer weight never has an average
    for step in range(3):
        m.w.assign_add(tf.fill([2, 3], float(step + 1)))
        ema.apply([m.w])
    tf.train.Checkpoint(model=m, ema=[ema.average(m.w)]).write(str(out / "ckpt"))
    return out / "ckpt", {"model/w": ema.average(m.w).numpy(), "model/q": m.q.numpy(),
                          "model/u": m.u.numpy()}, m.w.numpy()


def test_integer_weights_are_exported_raw_with_a_note(saved, tmp_path):
    src, truth, raw_w = saved
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(src), "--out", str(out), "--strict"])
    assert code == 0, err
    assert "2 integer weights keep their raw values" in err and "warning" not in err, err
    with np.load(out) as z:
        assert sorted(z.files) == sorted(truth), z.files
        for k, v in truth.items():
            assert z[k].dtype == v.dtype and z[k].tobytes() == v.tobytes(), k
    assert not np.array_equal(truth["model/w"], raw_w)  # the average, not the raw weight


def test_integer_weights_are_listed_as_weights(saved):
    src, _, _ = saved
    code, stdout, err = run_cli(["list", str(src), "--role", "weight", "-q"])
    assert code == 0, err
    assert sorted(stdout.split()) == ["model/q", "model/u", "model/w"], stdout
