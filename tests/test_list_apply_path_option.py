"""``list`` and ``list --json`` name ``--apply-order trainable:PATH`` (``ema_unproven.option``)
where an object path decides the pairing (review-16-attack-r33 F9): GANs whose generator's
averages were saved as a list, ``Checkpoint(model=gan, ema=[...])`` of unnamed variables and a
Keras 3 generator and discriminator with the same layer names, said "no option decides"
(``option: null``) while ``export`` named the statement and paired them with it. Real
TensorFlow / Keras 3; truth is ``ema.average(v)`` read at save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli

OPTION = "--apply-order trainable:PATH"


def _option(path) -> tuple[str | None, str]:
    code, text, err = run_cli(["list", str(path), "--json"])
    assert code == 0, err
    unproven = json.loads(text)["ema_unproven"]
    code, text, err = run_cli(["list", str(path)])
    assert code == 0, err
    return unproven and unproven["option"], " ".join((text + err).split())


def _exported(path, tmp_path, statement):
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(path), "--strict", "--allow-missing",
                            "--apply-order", statement, "--out", str(out)])
    assert code == 0, err
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def test_nested_gan_of_unnamed_variables(tf, tmp_path):
    def net(seed):
        m = tf.Module()
        m.vs = [tf.Variable(tf.random.stateless_normal([3, 3], [seed, i])) for i in range(3)]
        return m

    g, d = net(1), net(10)
    gan = tf.Module()
    gan.generator, gan.discriminator = g, d
    ema = tf.train.ExponentialMovingAverage(0.5)
    for step in range(1, 4):
        for v in g.trainable_variables + d.trainable_variables:
            v.assign_add(tf.random.stateless_normal(v.shape, [step, 7]) * 0.1)
        ema.apply(g.trainable_variables)
    tf.train.Checkpoint(model=gan, ema=[ema.average(v) for v in g.trainable_variables]).write(
        str(tmp_path / "gan" / "ckpt"))
    truth = {**{f"model/generator/vs/{i}": ema.average(v).numpy() for i, v in enumerate(g.vs)},
             **{f"model/discriminator/vs/{i}": v.numpy() for i, v in enumerate(d.vs)}}
    option, said = _option(tmp_path / "gan")
    assert option == OPTION, said
    assert f"pass {OPTION} to decide" in said and "no option decides" not in said.split(
        "EMA:")[-1], said
    arrays = _exported(tmp_path / "gan", tmp_path, "trainable:model/generator")
    assert sorted(arrays) == sorted(truth)
    for key, value in truth.items():
        assert arrays[key].tobytes() == value.tobytes(), key


def test_keras_gan_with_the_same_layer_names(tf, tmp_path):
    keras = pytest.importorskip("keras")

    def net(seed):
        keras.utils.set_random_seed(seed)
        i = keras.Input((3,))
        return keras.Model(i, keras.layers.Dense(3, name="fc2")(
            keras.layers.Dense(3, name="fc1")(i)))

    g, d = net(1), net(2)
    ema = tf.train.ExponentialMovingAverage(0.5)
    for s in range(1, 4):
        for v in g.trainable_variables + d.trainable_variables:
            v.assign(v + tf.ones_like(v) * s * 0.1)
        ema.apply([v.value for v in g.trainable_variables])
    tf.train.Checkpoint(generator=g, discriminator=d,
                        ema=[ema.average(v.value) for v in g.trainable_variables]).write(
        str(tmp_path / "kgan" / "ckpt"))
    truth = {f"generator/{v.path}": ema.average(v.value).numpy() for v in g.trainable_variables}
    option, said = _option(tmp_path / "kgan")
    assert option == OPTION, said
    arrays = _exported(tmp_path / "kgan", tmp_path, "trainable:generator")
    for key, value in truth.items():
        assert arrays[key].tobytes() == value.tobytes(), key
