"""The write summaries agree with their counts: one weight exported, restored or averaged is
"1 weight", "1 variable now holds its EMA values", "1 EMA shadow" (review-29-user-u31 F3:
"1 weights, 1 with EMA values", "1 variables now hold their EMA values"). The checkpoint is
TensorFlow's: a ``tf.train.Checkpoint`` of one weight and its ``ExponentialMovingAverage``."""

from __future__ import annotations

import re

import numpy as np
from _corpus import run_cli
from helpers import run_script

ONE_WEIGHT = r"""
import sys
import numpy as np
import tensorflow as tf

out = sys.argv[1]
w = tf.Variable(tf.random.normal([4, 3], seed=1), name="w")
ema = tf.train.ExponentialMovingAverage(0.9)
ema.apply([w])
m = tf.Module()
m.w = w
ckpt = tf.train.Checkpoint(model=m, ema={"w": ema.average(w)})
for _ in range(2):
    w.assign_add(tf.ones_like(w) * 0.25)
    ema.apply([w])
    ckpt.save(out + "/run/ckpt")
np.savez(out + "/truth.npz", avg=ema.average(w).numpy())
"""


def _agrees(text: str, noun: str) -> None:
    """Every ``N noun(s)`` in ``text`` is singular exactly when N is 1."""
    found = re.findall(rf"\b(\d+) {noun}(s?)\b", text)
    assert found, text
    for n, s in found:
        assert (n == "1") == (s == ""), text


def test_one_weight_summaries_are_singular(tmp_path, capsys):
    truth = run_script(ONE_WEIGHT, tmp_path)
    run = str(tmp_path / "run")
    code, text, err = run_cli(["export", run, "--out", str(tmp_path / "w.npz")], capsys)
    assert code == 0, err
    assert "): 1 weight, 1 with EMA values" in text, text
    with np.load(tmp_path / "w.npz") as z:
        [name] = z.files
        assert z[name].tobytes() == truth["avg"].tobytes()
    code, text, err = run_cli(["restore-ema", run, "--out", str(tmp_path / "baked")], capsys)
    assert code == 0, err
    assert "1 variable now holds its EMA values" in text, text
    _agrees(text, "tensor")
    code, text, err = run_cli(["average", "--ema", f"{run}/ckpt-1", f"{run}/ckpt-2", "--out",
                               str(tmp_path / "avg")], capsys)
    assert code == 0, err
    assert "1 EMA shadow averaged over 2 checkpoints" in text, text


ONE_TENSOR = r"""
w = tf1.get_variable("w", initializer=tf.constant([1.0, 2.0, 3.0]))
h = tf1.get_variable("h", initializer=tf.constant([[1.5, -2.0]], dtype=tf.bfloat16))
with tf1.Session() as s:
    s.run(tf1.global_variables_initializer())
    tf1.train.Saver([w]).save(s, f"{out}/one/model.ckpt", write_meta_graph=False)
    tf1.train.Saver([h]).save(s, f"{out}/half/model.ckpt", write_meta_graph=False)
    truth["w"], truth["h"] = s.run([w, tf.cast(h, tf.float32)])
"""


def test_one_tensor_counts_are_singular(tmp_path, capsys):
    """verify's "1 tensors" and "1 tensors are stored as float32" outside the write summaries
    (s29g): a TF1 Saver of one variable, and of one bfloat16 variable exported to .npz."""
    from helpers_tf1 import run_tf1_script

    truth = run_tf1_script(ONE_TENSOR, tmp_path)
    one = str(tmp_path / "one")
    code, text, err = run_cli(["verify", one], capsys)
    assert code == 0, err
    assert "(v2): 1 tensor, " in text and "verified" in text, text
    _agrees(text, "tensor")
    data = tmp_path / "one" / "model.ckpt.data-00000-of-00001"
    raw = bytearray(data.read_bytes())  # the one tensor's first byte flipped
    raw[0] ^= 0xFF
    data.write_bytes(bytes(raw))
    code, text, err = run_cli(["verify", one], capsys)
    assert code == 4 and "1 problem found (1 tensor checked)" in err, err
    out = tmp_path / "h.npz"
    code, text, err = run_cli(["export", str(tmp_path / "half"), "--raw", "--out", str(out)],
                              capsys)
    assert code == 0, err
    assert "1 tensor is stored as float32" in text + err, text + err
    with np.load(out) as z:
        assert z["h"].tobytes() == truth["h"].tobytes()


def test_list_counts_no_s_and_names_bn_statistics(capsys):
    """review-30-user-u32 F1: a Keras 3 use_ema ``.keras`` (``fixtures/keras_ema``: fit() by
    Keras 3, with a BatchNormalization) listed "2 weight(s) have no EMA copy" for the batch
    norm's moving mean and variance, right under "6 of 6 weights have a shadow": no count is
    written "(s)" any more, and the statistics are called what they are."""
    from _corpus import FIXTURES

    code, text, err = run_cli(["list", str(FIXTURES / "keras_ema" / "model.keras")], capsys)
    said = " ".join((text + err).split())
    assert code == 0, said
    assert "(s)" not in said, said
    assert ("EMA: 2 BN statistics (moving mean/variance) have no EMA copy and keep their raw "
            "values, as config.json explains") in said, said
    assert "bn/moving_mean, bn/moving_variance" in said and "2 weights have no" not in said
