"""Python API for evaluation scripts: restore_ema, ema_saver (graph mode) and apply_ema (TF2)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FIXTURES, expected, expected_values, prefix

import ckpt_tools
from ckpt_tools import EmaError


def _value(sess, var):
    return sess.run(var.value() if hasattr(var, "value") else var)


@pytest.mark.parametrize("case", ["linear_v2", "linear_v1", "towers_bn", "partitioned",
                                  "sharded"])
def test_restore_into_imported_graph_gives_tensorflows_ema_values(case, tf):
    exp, values = expected(case), expected_values(case)
    shadow_of = {}
    for shadow, target in exp["ema_of"].items():
        shadow_of.setdefault(target, shadow)
    with tf.Graph().as_default():
        tf.compat.v1.train.import_meta_graph(prefix(case) + ".meta")
        config = tf.compat.v1.ConfigProto(allow_soft_placement=True)  # sharded uses /cpu:1
        with tf.compat.v1.Session(config=config) as sess:
            result = ckpt_tools.restore_ema(sess, FIXTURES / case)
            got: dict[str, list] = {}
            for var in tf.compat.v1.global_variables():
                info = var._save_slice_info
                key = info.full_name if info else var.op.name
                got.setdefault(key, []).append((info.var_offset if info else [0], var))
            for target, shadow in shadow_of.items():
                parts = [_value(sess, v) for _, v in sorted(got[target], key=lambda p: p[0])]
                value = np.concatenate(parts) if len(parts) > 1 else parts[0]
                assert value.tobytes() == values[shadow].tobytes(), target
    assert result.averaged


def test_restore_into_rebuilt_model_code(tf):
    v1 = tf.compat.v1
    values = expected_values("linear_v2")
    with tf.Graph().as_default():
        w = v1.Variable(v1.random_uniform([1], -1.0, 1.0), name="W")
        b = v1.Variable(tf.zeros([1]), name="b")
        with v1.Session() as sess:
            ckpt_tools.restore_ema(sess, FIXTURES / "linear_v2")
            assert sess.run(w).tobytes() == values["W/ExponentialMovingAverage"].tobytes()
            assert sess.run(b).tobytes() == values["b/ExponentialMovingAverage"].tobytes()


def test_ema_saver_restores_partitioned_variables(tf):
    v1 = tf.compat.v1
    values = expected_values("partitioned")
    with tf.Graph().as_default():
        emb = v1.get_variable("emb", [12, 4], partitioner=v1.fixed_size_partitioner(3))
        with v1.variable_scope("out"):
            kernel = v1.get_variable("kernel", [4, 2])
            v1.get_variable("bias", [2])
        saver = ckpt_tools.ema_saver()
        with v1.Session() as sess:
            saver.restore(sess, prefix("partitioned"))
            assert np.array_equal(sess.run(emb.as_tensor()),
                                  values["emb/ExponentialMovingAverage"])
            assert np.array_equal(sess.run(kernel), values["out/kernel/ExponentialMovingAverage"])


def test_restore_fails_clearly_without_shadows(tf):
    with tf.Graph().as_default():
        tf.compat.v1.train.import_meta_graph(prefix("linear_trainable_only") + ".meta")
        with tf.compat.v1.Session() as sess:
            with pytest.raises(EmaError, match="ExponentialMovingAverage"):
                ckpt_tools.restore_ema(sess, FIXTURES / "linear_trainable_only")


def test_shape_mismatch_names_both_sides(tf):
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        v1.Variable(tf.zeros([3]), name="W")
        v1.Variable(tf.zeros([1]), name="b")
        with v1.Session() as sess:
            with pytest.raises(EmaError, match=r"W/ExponentialMovingAverage.*\[3\]"):
                ckpt_tools.restore_ema(sess, FIXTURES / "linear_v2")


def _tf2_model(tf):
    class Dense(tf.Module):
        def __init__(self, fan_in, fan_out, name):
            super().__init__(name=name)
            self.kernel = tf.Variable(tf.zeros([fan_in, fan_out]), name="kernel")
            self.bias = tf.Variable(tf.zeros([fan_out]), name="bias")

    class Model(tf.Module):
        def __init__(self):
            super().__init__(name="model")
            self.dense = Dense(3, 2, "dense")
            self.params = {"block.0/scale": tf.Variable(tf.ones([2]), name="block.0/scale")}
            self.heads = [Dense(2, 2, "head")]
            self.steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="steps")

    return Model()


def test_apply_ema_to_a_tf2_model(tf):
    exp, values = expected("tf2_object"), expected_values("tf2_object")
    model = _tf2_model(tf)
    with pytest.raises(EmaError, match="--apply-order"):  # same-named, same-shaped biases
        ckpt_tools.apply_ema(model, FIXTURES / "tf2_object")
    result = ckpt_tools.apply_ema(model, FIXTURES / "tf2_object", apply_order="trainable")
    got = {
        "model/dense/kernel/.ATTRIBUTES/VARIABLE_VALUE": model.dense.kernel,
        "model/dense/bias/.ATTRIBUTES/VARIABLE_VALUE": model.dense.bias,
        "model/heads/0/kernel/.ATTRIBUTES/VARIABLE_VALUE": model.heads[0].kernel,
        "model/heads/0/bias/.ATTRIBUTES/VARIABLE_VALUE": model.heads[0].bias,
        "model/params/block..0.Sscale/.ATTRIBUTES/VARIABLE_VALUE": model.params["block.0/scale"],
    }
    for shadow, target in exp["ema_of"].items():
        assert got[target].numpy().tobytes() == values[shadow].tobytes(), target
    assert len(result.averaged) == 5
    assert model.steps.numpy() == values["model/steps/.ATTRIBUTES/VARIABLE_VALUE"]


def test_apply_ema_with_a_bare_variable_list_reports_ambiguity(tf):
    model = _tf2_model(tf)
    with pytest.raises(EmaError, match="ambiguous"):
        ckpt_tools.apply_ema(list(model.variables), FIXTURES / "tf2_object",
                             apply_order="trainable")


def test_apply_ema_to_a_keras3_model(tf):
    keras = pytest.importorskip("keras")
    exp, values = expected("keras3_object"), expected_values("keras3_object")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="hidden"),
                              keras.layers.BatchNormalization(name="bn"),
                              keras.layers.Dense(2, name="logits")], name="net")
    result = ckpt_tools.apply_ema(model, FIXTURES / "keras3_object")
    by_path = {v.path: v for v in model.variables}
    key_of_path = {p: k for k, p in exp["variable_paths"].items()}
    for shadow, target in exp["ema_of"].items():
        var = by_path[exp["variable_paths"][target]]
        assert np.asarray(var.numpy()).tobytes() == values[shadow].tobytes(), var.path
    moving_mean = by_path["net/bn/moving_mean"]
    assert np.array_equal(moving_mean.numpy(), values[key_of_path["net/bn/moving_mean"]])
    assert len(result.averaged) == len(exp["ema_of"])

