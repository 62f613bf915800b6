"""A Keras 3 GAN trained in a custom loop (two Adam optimizers, tf.train.ExponentialMovingAverage
over the generator, tf.train.Checkpoint of both nets, both optimizers and the generator's
averages): export refuses (the discriminator has no average), and the refusal never claims
".meta update ops" of a TF2 checkpoint, which has no .meta (review-16-user-u18 F3): that hint
is the TF1 .meta reading's. Real TensorFlow and Keras 3."""

from __future__ import annotations

import os

import pytest
from _tf_runner import run_python
from helpers import run_cli

#: The user's script as they wrote it (the review's repro), run in a fresh process.
SCRIPT = r"""
import os, sys, numpy as np
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf, keras
out = sys.argv[1]
keras.utils.set_random_seed(1)
def net(n_in, n_out, name):
    return keras.Sequential([keras.Input((n_in,)), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(n_out)], name=name)
gen, disc = net(4, 2, "generator"), net(2, 1, "discriminator")
go, do = keras.optimizers.Adam(1e-3), keras.optimizers.Adam(1e-3)
ema = tf.train.ExponentialMovingAverage(0.9)
gvars = [v.value if hasattr(v, "value") else v for v in gen.trainable_variables]
bce = keras.losses.BinaryCrossentropy(from_logits=True)
def step(real):
    z = tf.random.normal([32, 4])
    with tf.GradientTape() as gt, tf.GradientTape() as dt:
        fake = gen(z); rl = disc(real); fl = disc(fake)
        gl = bce(tf.ones_like(fl), fl); dl = bce(tf.ones_like(rl), rl) + bce(tf.zeros_like(fl), fl)
    go.apply_gradients(zip(gt.gradient(gl, gen.trainable_variables), gen.trainable_variables))
    do.apply_gradients(zip(dt.gradient(dl, disc.trainable_variables), disc.trainable_variables))
    ema.apply(gvars)
step(tf.random.normal([32, 2]) + 3.0)
ck = tf.train.Checkpoint(generator=gen, discriminator=disc, g_opt=go, d_opt=do,
                         gen_ema=[ema.average(v) for v in gvars])
for i in range(20): step(tf.random.normal([32, 2]) + 3.0)
path = ck.save(out + "/ckpt")
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    pytest.importorskip("keras")
    d = tmp_path_factory.mktemp("gan")
    run_python(["-c", SCRIPT, str(d)], check=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    return d


def test_refusal_claims_no_meta(saved, tmp_path):
    code, _, err = run_cli(["export", str(saved), "--out", str(tmp_path / "x.npz")])
    said = " ".join(err.split())
    assert code == 6 and "--allow-missing" in said, err
    assert ".meta" not in said, said
    assert not (tmp_path / "x.npz").exists()
