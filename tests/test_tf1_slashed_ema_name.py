"""A TF1 EMA named with a slash (``ExponentialMovingAverage(name="ema/slow")``) beside a
variable the graph trains under the weight's scope (``W/ema``): the shadow ``W/ema/slow``
reads by its last part as ``W/ema``'s average under ``slow``, and ``W/ema`` as ``W``'s under
``ema``. The ``.meta`` proves neither: ``W/ema`` is trainable (ema.apply() never makes a
trainable shadow) and ``moving_average_variables`` lists W and b only. Both readings handed
out wrong values with exit 0, each reached by an option a refusal suggested
(review-11-attack-r10 F17). Made by real TensorFlow; truth ``ema.average(v)`` at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import same_bits
from typer.testing import CliRunner

import ckpt_tools
from ckpt_tools.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def slashed(tmp_path_factory):
    tf = pytest.importorskip("tensorflow")
    v1 = tf.compat.v1
    directory = tmp_path_factory.mktemp("slashed")
    with tf.Graph().as_default():
        w = v1.get_variable("W", [3, 3])
        b = v1.get_variable("b", [3])
        decoy = v1.get_variable("W/ema", [3, 3])  # trained, under W's scope
        ema = tf.train.ExponentialMovingAverage(0.5, name="ema/slow")
        update = ema.apply([w, b])
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for i in range(3):
                sess.run([v1.assign_add(w, tf.fill([3, 3], 1.0 + i)),
                          v1.assign_add(b, tf.fill([3], -1.0 - i)),
                          v1.assign_add(decoy, tf.fill([3, 3], 5.0 + i))])
                sess.run(update)
            truth = {"W": sess.run(ema.average(w)), "b": sess.run(ema.average(b)),
                     "W/ema": sess.run(decoy)}  # never averaged: its raw value
            prefix = v1.train.Saver().save(sess, str(directory / "model.ckpt"))
    return prefix, truth


def _export(prefix, tmp_path, *options):
    out = tmp_path / "w.npz"
    result = runner.invoke(app, ["export", prefix, "--out", str(out), "--force", *options])
    return result, out


@pytest.mark.parametrize("options", [[], ["--ema-name", "ema/slow"]])
def test_the_graph_trained_variable_is_the_one_without_an_average(slashed, tmp_path, options):
    prefix, _ = slashed
    result, out = _export(prefix, tmp_path, *options)
    assert result.exit_code == 6, result.output
    assert "W/ema" in result.output and "ema/slow" in result.output, result.output
    assert "--ema-name slow" not in result.output and "ema/slow,slow" not in result.output
    assert not out.exists()


@pytest.mark.parametrize("options", [["--allow-missing"],
                                     ["--ema-name", "ema/slow", "--allow-missing"]])
def test_averages_of_w_and_b_and_the_raw_trained_variable(slashed, tmp_path, options):
    prefix, truth = slashed
    result, out = _export(prefix, tmp_path, *options)
    assert result.exit_code == 0, result.output
    with np.load(out) as npz:
        got = {k: npz[k] for k in npz.files}
    assert sorted(got) == sorted(truth)
    for name, value in truth.items():
        assert same_bits(got[name], value), name
    mapping = ckpt_tools.ema_map(prefix, allow_missing=True).mapping
    assert mapping["W/ema/slow"] == "W" and mapping["b/ema/slow"] == "b"
    assert mapping["W/ema"] == "W/ema"


def test_restore_ema_writes_the_averages(slashed, tmp_path):
    tf = pytest.importorskip("tensorflow")
    prefix, truth = slashed
    out = tmp_path / "baked"
    result = runner.invoke(app, ["restore-ema", prefix, "--out", str(out), "--allow-missing"])
    assert result.exit_code == 0, result.output
    reader = tf.train.load_checkpoint(str(out))
    for name, value in truth.items():
        assert same_bits(reader.get_tensor(name), value), name


@pytest.mark.parametrize("options", [["--ema-name", "ema"],
                                     ["--ema-name", "ema", "--allow-missing"]])
def test_the_trained_variable_is_never_taken_for_an_average(slashed, tmp_path, options):
    prefix, _ = slashed
    result, out = _export(prefix, tmp_path, *options)
    assert result.exit_code == 6, result.output
    assert "W/ema is a variable the graph trains" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and not out.exists()
