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
