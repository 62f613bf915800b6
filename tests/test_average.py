"""``ckpt average``: checked against NumPy on what TensorFlow reads, and restored by TensorFlow."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from _corpus import run_subprocess

from ckpt_tools import EmaError, average_checkpoints, open_checkpoint
from ckpt_tools.average import checkpoints_of_run

STEPS = 4  # checkpoints kept by the run


@pytest.fixture(scope="session")
def tf1_run(tmp_path_factory, tf):
    """A TF1 run: partitioned variable, EMA, sharded Saver, STEPS checkpoints kept."""
    v1 = tf.compat.v1
    run = tmp_path_factory.mktemp("tf1_run")
    with tf.Graph().as_default():
        step = v1.train.get_or_create_global_step()
        w = v1.get_variable("emb", shape=[6, 3], partitioner=v1.fixed_size_partitioner(2),
                            initializer=v1.random_normal_initializer(seed=1))
        b = v1.get_variable("b", shape=[3], initializer=v1.zeros_initializer())
        h = v1.get_variable("half", shape=[2], dtype=tf.float16,
                            initializer=v1.ones_initializer())
        loss = tf.reduce_sum(tf.square(tf.reduce_sum(w, 0) + b - 1.0)) + tf.reduce_sum(
            tf.cast(h, tf.float32) ** 2)
        opt = v1.train.MomentumOptimizer(0.1, 0.9).minimize(loss, global_step=step)
        ema = v1.train.ExponentialMovingAverage(0.5, step)
        with tf.control_dependencies([opt]):
            train = ema.apply(v1.trainable_variables())
        saver = v1.train.Saver(sharded=True, max_to_keep=STEPS)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for _ in range(STEPS + 1):
                sess.run(train)
                saver.save(sess, str(run / "model.ckpt"), global_step=step)
    return run


def _tf_values(tf, prefix: str) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(prefix)
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()}


def _mean(values: list[np.ndarray]) -> np.ndarray:
    acc = np.zeros(values[0].shape, np.float64)
    for v in values:
        acc += v
    return (acc / len(values)).astype(values[0].dtype)


def test_average_matches_numpy_and_tensorflow_restores_it(tf1_run, tmp_path, tf):
    inputs = checkpoints_of_run(tf1_run, 3)
    assert [p.rsplit("-", 1)[1] for p in inputs] == ["3", "4", "5"]
    result = average_checkpoints(inputs, tmp_path / "avg")
    truth = [_tf_values(tf, p) for p in inputs]
    out = _tf_values(tf, result.prefix)
    assert set(out) == set(truth[-1])
    for key, value in out.items():
        if truth[-1][key].dtype.kind == "f" and key != "global_step":
            np.testing.assert_array_equal(value, _mean([t[key] for t in truth]), err_msg=key)
            assert key in result.averaged
        else:
            np.testing.assert_array_equal(value, truth[-1][key], err_msg=key)
    assert out["global_step"] == 5 and "global_step" in result.copied
    assert out["half"].dtype == np.float16
    # The partitioned variable is still partitioned, and TensorFlow's Saver restores it.
    with open_checkpoint(result.prefix) as ckpt:
        assert ckpt.entry("emb").slices and len(ckpt.entry("emb").slices) == 2
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        saver = v1.train.import_meta_graph(result.prefix + ".meta")
        with v1.Session() as sess:
            saver.restore(sess, result.prefix)
            parts = sorted((v for v in v1.global_variables()
                            if re.fullmatch(r"emb/part_\d+", v.op.name)), key=lambda v: v.op.name)
            emb = np.concatenate(sess.run(parts), 0)
    np.testing.assert_array_equal(emb, _mean([t["emb"] for t in truth]))


def test_ema_average_and_bake(tf1_run, tmp_path, tf):
    inputs = checkpoints_of_run(tf1_run, 2)
    result = average_checkpoints(inputs, tmp_path / "ema", ema=True, bake=True)
    truth = [_tf_values(tf, p) for p in inputs]
    out = _tf_values(tf, result.prefix)
    shadow = "b/ExponentialMovingAverage"
    np.testing.assert_array_equal(out[shadow], _mean([t[shadow] for t in truth]))
    np.testing.assert_array_equal(out["b"], out[shadow])  # baked under the plain name
    assert result.baked["b"] == shadow
    np.testing.assert_array_equal(out["b/Momentum"], truth[-1]["b/Momentum"])  # not averaged


def test_ema_without_shadows_is_exit_6(tmp_path):
    from helpers import FIXTURES

    with pytest.raises(EmaError, match="no EMA shadows"):
        average_checkpoints([FIXTURES / "linear_trainable_only"] * 2,
                            tmp_path / "x", ema=True)


def test_different_shapes_are_exit_6_naming_the_variable(tmp_path):
    from helpers import FIXTURES

    proc = run_subprocess(["average", str(FIXTURES / "linear_v2"), str(FIXTURES / "towers_bn"),
                           "--out", str(tmp_path / "x")])
    assert proc.returncode == 6, proc.stderr
    assert proc.stderr.startswith("error:") and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_cli_last_n_json_and_refusals(tf1_run, tmp_path):
    before = {p.name: p.read_bytes() for p in tf1_run.iterdir()}
    proc = run_subprocess(["average", str(tf1_run), "--last", "4", "--out",
                           str(tmp_path / "avg"), "--json"])
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert len(doc["inputs"]) == 4 and "emb" in doc["averaged"]
    assert (tmp_path / "avg" / "checkpoint").is_file()
    # Too few checkpoints listed: exit 3; output exists: exit 7; input directory: exit 7.
    assert run_subprocess(["average", str(tf1_run), "--last", "9", "--out",
                           str(tmp_path / "b")]).returncode == 3
    again = run_subprocess(["average", str(tf1_run), "--last", "2", "--out",
                            str(tmp_path / "avg")])
    assert again.returncode == 7 and "already exists" in again.stderr
    inside = run_subprocess(["average", str(tf1_run), "--last", "2", "--out", str(tf1_run)])
    assert inside.returncode == 7
    assert {p.name: p.read_bytes() for p in tf1_run.iterdir()} == before
    assert run_subprocess(["average", str(tf1_run), "--out", str(tmp_path / "c")]
                          ).returncode == 2


def test_tf2_object_checkpoints(tmp_path, tf):
    """A CheckpointManager run; TensorFlow's tf.train.Checkpoint restores the average."""
    run = tmp_path / "tf2_run"
    w = tf.Variable(tf.random.stateless_normal([3, 2], seed=[1, 2]), name="w")
    ema = tf.train.ExponentialMovingAverage(0.5)
    ema.apply([w])
    step = tf.Variable(0, dtype=tf.int64)
    ckpt = tf.train.Checkpoint(w=w, w_ema=ema.average(w), step=step)
    manager = tf.train.CheckpointManager(ckpt, str(run), max_to_keep=3)
    for _ in range(3):
        w.assign_add(tf.ones_like(w))
        ema.apply([w])
        step.assign_add(1)
        manager.save()
    inputs = checkpoints_of_run(run, 3)
    result = average_checkpoints(inputs, tmp_path / "avg")
    truth = [_tf_values(tf, p) for p in inputs]
    key = "w/.ATTRIBUTES/VARIABLE_VALUE"
    w2 = tf.Variable(tf.zeros([3, 2]))
    e2 = tf.Variable(tf.zeros([3, 2]))
    s2 = tf.Variable(0, dtype=tf.int64)
    tf.train.Checkpoint(w=w2, w_ema=e2, step=s2).restore(result.prefix).assert_consumed()
    np.testing.assert_array_equal(w2.numpy(), _mean([t[key] for t in truth]))
    np.testing.assert_array_equal(
        e2.numpy(), _mean([t["w_ema/.ATTRIBUTES/VARIABLE_VALUE"] for t in truth]))
    assert s2.numpy() == 3
