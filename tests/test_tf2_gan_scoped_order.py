"""A TF2 GAN of unnamed variables (review-14-attack-r25 F5): ``g`` and ``d`` of one
``tf.Module`` class, ``ema.apply(g.trainable_variables)``, saved as
``tf.train.Checkpoint(generator=g, discriminator=d, ema=[...])``. Every variable is
``Variable`` of one shape, so the file cannot tell whose averages the list holds; the refusal
names the statement that does, ``--apply-order trainable:generator`` (Python:
``apply_order="trainable:generator"``), which pairs them bit for bit, in the CLI and through
``apply_ema`` with the live generator under its saved attribute. Real TensorFlow; truth is
``ema.average(v)`` at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import train_ema
from typer.testing import CliRunner

from ckpt_tools import apply_ema
from ckpt_tools.cli import app

runner = CliRunner()


def _net(tf):
    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.layers = [tf.Variable(tf.random.normal([3, 3])) for _ in range(2)]

    return Net()


@pytest.fixture(scope="module")
def gan(tf, tmp_path_factory):
    g, d = _net(tf), _net(tf)
    ema = tf.train.ExponentialMovingAverage(0.5)
    train_ema(tf, g.trainable_variables + d.trainable_variables, ema,
              averaged=g.trainable_variables)
    out = tmp_path_factory.mktemp("gan")
    tf.train.Checkpoint(generator=g, discriminator=d,
                        ema=[ema.average(v) for v in g.trainable_variables]).save(
        str(out / "ckpt"))
    return out, [ema.average(v).numpy() for v in g.layers], [v.numpy() for v in d.layers]


def test_refusal_names_the_statement(gan, tmp_path):
    d, _, _ = gan
    result = runner.invoke(app, ["export", str(d), "--apply-order", "trainable",
                                 "--out", str(tmp_path / "x.npz")])
    assert result.exit_code == 6, result.output
    said = " ".join(result.output.split())
    # It names the form and both objects, never one object as if the file said which
    # (the sorted last one was offered before: a guess a user could copy).
    assert "--apply-order trainable:PATH, PATH one of discriminator, generator" in said, said
    assert "trainable:generator" not in said and "trainable:discriminator" not in said, said


def test_stated_attribute_pairs_the_generators_averages(gan, tmp_path):
    d, avg, raw_d = gan
    out = tmp_path / "x.npz"
    result = runner.invoke(app, ["export", str(d), "--apply-order", "trainable:generator",
                                 "--allow-missing", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "paired only because you stated --apply-order trainable:generator" in result.output
    with np.load(out) as z:
        for i in range(2):
            assert z[f"generator/layers/{i}"].tobytes() == avg[i].tobytes(), i
            assert z[f"discriminator/layers/{i}"].tobytes() == raw_d[i].tobytes(), i


def test_python_with_the_live_generator(tf, gan):
    d, avg, _ = gan
    g = _net(tf)
    apply_ema(tf.train.Checkpoint(generator=g), str(d), apply_order="trainable:generator")
    for i in range(2):
        assert g.layers[i].numpy().tobytes() == avg[i].tobytes(), i


def test_bad_attribute_spelling_is_a_usage_error(gan, tmp_path):
    d, _, _ = gan
    result = runner.invoke(app, ["export", str(d), "--apply-order", "trainable:",
                                 "--out", str(tmp_path / "x.npz")])
    assert result.exit_code == 2, result.output
