"""``--ema-name a,b``: the averages of EMA objects that averaged different variables, taken
together the way a trainer restores them (the union of each object's ``variables_to_restore()``).
Each checkpoint is made here by real TensorFlow; the truth is each ``ema.average(v)`` read at
save time, compared bit for bit (review-11-attack-r9 F5)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import ckpt_tools
from ckpt_tools.cli import app

runner = CliRunner()
BOTH = "wavg,ExponentialMovingAverage"


def _tf1(tf, directory, *, w_by_both: bool = False) -> tuple[str, dict[str, np.ndarray]]:
    """TF1 graph: W averaged by an EMA named ``wavg``, b by a default-named one (and W by
    that one too with ``w_by_both``). Returns the prefix and {variable: the average the
    trainer evaluates it with}, read from the EMA objects at save time."""
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        w = v1.get_variable("W", [3], initializer=v1.zeros_initializer())
        b = v1.get_variable("b", [2], initializer=v1.zeros_initializer())
        ema_w = tf.train.ExponentialMovingAverage(0.5, name="wavg")
        ema_b = tf.train.ExponentialMovingAverage(0.7)
        update = tf.group(ema_w.apply([w]), ema_b.apply([w, b] if w_by_both else [b]))
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for step in range(3):
                sess.run([v1.assign_add(w, tf.fill([3], 1.0 + step)),
                          v1.assign_add(b, tf.fill([2], 2.0 - step))])
                sess.run(update)
            avg_w, avg_b = sess.run([ema_w.average(w), ema_b.average(b)])
            prefix = v1.train.Saver().save(sess, str(directory / "model.ckpt"))
    return prefix, {"W": avg_w, "b": avg_b}


@pytest.mark.parametrize("meta", [True, False], ids=["meta", "keys"])
def test_two_ema_objects_on_different_variables_export_and_restore(tf, tmp_path, meta):
    prefix, truth = _tf1(tf, tmp_path)
    extra = [] if meta else ["--no-meta"]
    out = tmp_path / "w.npz"
    result = runner.invoke(app, ["export", prefix, "--ema-name", BOTH, "--out", str(out),
                                 *extra])
    assert result.exit_code == 0, result.output
    with np.load(out) as z:
        assert sorted(z.files) == ["W", "b"]
        for name, value in truth.items():
            assert z[name].tobytes() == value.tobytes(), name
        assert z["W"].tobytes() != z["b"].tobytes()
    baked = tmp_path / "baked"
    result = runner.invoke(app, ["restore-ema", prefix, "--ema-name", BOTH, "--out",
                                 str(baked), *extra])
    assert result.exit_code == 0, result.output
    reader = tf.train.load_checkpoint(str(baked))
    for name, value in truth.items():
        assert reader.get_tensor(name).tobytes() == value.tobytes(), name
    result = runner.invoke(app, ["map", prefix, "--ema-name", BOTH, "--json", *extra])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"W/wavg": "W", "b/ExponentialMovingAverage": "b"}
    m = ckpt_tools.ema_map(prefix, ema_name=["wavg", "ExponentialMovingAverage"], use_meta=meta)
    assert m.missing == () and sorted(m.averaged) == ["W", "b"]


def test_one_name_says_how_to_take_both(tf, tmp_path):
    """One --ema-name leaves the other object's variable without an average: the refusal
    names the comma form that takes both, and following it gives the truth."""
    prefix, truth = _tf1(tf, tmp_path)
    result = runner.invoke(app, ["export", prefix, "--ema-name", "wavg", "--no-meta", "--out",
                                 str(tmp_path / "w.npz")])
    assert result.exit_code == 6, result.output
    assert f"--ema-name {BOTH}" in " ".join(result.output.split()), result.output
    assert not (tmp_path / "w.npz").exists()


def test_a_variable_averaged_by_two_named_objects_is_refused(tf, tmp_path):
    prefix, _ = _tf1(tf, tmp_path, w_by_both=True)
    for extra in ([], ["--no-meta"]):
        out = tmp_path / "w.npz"
        result = runner.invoke(app, ["export", prefix, "--ema-name", BOTH, "--out", str(out),
                                     *extra])
        assert result.exit_code == 6, result.output
        text = " ".join(result.output.split())
        assert "W has averages of two of the EMA objects named" in text, text
        assert "W/wavg" in text and "W/ExponentialMovingAverage" in text, text
        assert not out.exists()


def test_a_name_that_takes_nothing_is_refused(tf, tmp_path):
    prefix, _ = _tf1(tf, tmp_path)
    result = runner.invoke(app, ["export", prefix, "--ema-name", "wavg,slow", "--no-meta",
                                 "--out", str(tmp_path / "w.npz")])
    assert result.exit_code == 6, result.output
    assert "--ema-name slow takes no average" in " ".join(result.output.split())
    for bad in ("wavg,,b", "wavg,wavg"):
        result = runner.invoke(app, ["map", prefix, "--ema-name", bad])
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output


def test_tf2_two_named_ema_objects(tf, tmp_path):
    """TF2 loop: named variables, EMA ``wavg`` over W and a default-named one over b, the
    averages saved as one list beside the model."""
    m = tf.Module()
    m.W = tf.Variable(tf.zeros([3]), name="W")
    m.b = tf.Variable(tf.zeros([2]), name="b")
    ema_w = tf.train.ExponentialMovingAverage(0.5, name="wavg")
    ema_b = tf.train.ExponentialMovingAverage(0.7)
    for step in range(3):
        m.W.assign_add(tf.fill([3], 1.0 + step))
        m.b.assign_add(tf.fill([2], 2.0 - step))
        ema_w.apply([m.W])
        ema_b.apply([m.b])
    truth = {"model/W": ema_w.average(m.W).numpy(), "model/b": ema_b.average(m.b).numpy()}
    prefix = tf.train.Checkpoint(model=m, ema=[ema_w.average(m.W), ema_b.average(m.b)]).write(
        str(tmp_path / "ckpt"))
    out = tmp_path / "w.npz"
    result = runner.invoke(app, ["export", prefix, "--ema-name", BOTH, "--out", str(out)])
    assert result.exit_code == 0, result.output
    with np.load(out) as z:
        assert sorted(z.files) == sorted(truth)
        for name, value in truth.items():
            assert z[name].tobytes() == value.tobytes(), name
