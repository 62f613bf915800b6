"""Two averages of one saved variable that nothing recorded tells apart: one
``ExponentialMovingAverage`` over a GAN's G and D (both ``dense/kernel``, same shape), saved with
only G (``tf.train.Checkpoint(generator=G, ema=[...both averages])``). Which of the two averages
is G's is not in the file (TF's ``_N`` suffixes count names process-wide), and no
``--ema-name`` picks one: every command refuses (exit 6) and suggests no option that would be
refused again. Checkpoints are made here by real TensorFlow."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import ckpt_tools
from ckpt_tools import EmaError
from ckpt_tools.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def gd(tf, tmp_path_factory):
    class Net(tf.Module):
        def __init__(self):
            super().__init__(name="net")
            with tf.name_scope("dense"):
                self.kernel = tf.Variable(tf.random.normal([4, 4]), name="kernel")

    g, d = Net(), Net()
    ema = tf.train.ExponentialMovingAverage(0.5)
    for _ in range(3):
        for v in (d.kernel, g.kernel):
            v.assign_add(tf.random.normal(v.shape))
        ema.apply([d.kernel, g.kernel])  # D first: G's average is the _1 one
    out = tmp_path_factory.mktemp("gd")
    tf.train.Checkpoint(generator=g, ema=[ema.average(d.kernel), ema.average(g.kernel)]).save(
        str(out / "ckpt"))
    return out


@pytest.mark.parametrize("extra", [[], ["--ema-name", "ExponentialMovingAverage"],
                                   ["--ema-name", "ema"]])
def test_averages_nothing_tells_apart_are_refused_without_a_looping_option(gd, extra,
                                                                          tmp_path):
    result = runner.invoke(app, ["export", str(gd), "--out", str(tmp_path / "w.npz"), *extra])
    assert result.exit_code == 6, result.output
    err = result.stderr
    assert "no --ema-name decides" in err and "discriminator" in err, err
    assert "pass --ema-name" not in err, err
    assert not (tmp_path / "w.npz").exists()


def test_list_marks_them_open_and_names_no_option(gd):
    result = runner.invoke(app, ["list", str(gd)])
    assert result.exit_code == 0, result.output
    assert "no option decides" in result.output and "pass --ema-name" not in result.output
    rows = [r for r in result.stdout.splitlines() if r.startswith("ema/")]
    assert len(rows) == 2 and all("of ?" in r for r in rows), rows
    with pytest.raises(EmaError, match="no --ema-name decides"):
        ckpt_tools.ema_map(gd)
