"""EMA name maps against TensorFlow's own ExponentialMovingAverage.variables_to_restore()."""

from __future__ import annotations

import pytest
from helpers import FIXTURES, META_CASES, expected, prefix

from ckpt_tools import EmaError, ema_map


def tf_map_in_checkpoint_keys(ema, graph_map=None) -> dict[str, str]:
    """TF's variables_to_restore(), translated to checkpoint keys via each part's slice info."""
    out = {}
    for name, var in (graph_map or ema.variables_to_restore()).items():
        info = var._save_slice_info
        if info is not None:
            out[info.full_name + name[len(var.op.name):]] = info.full_name
        else:
            out[name] = var.op.name
    return out


def _averaged(mapping: dict[str, str]) -> dict[str, str]:
    return {s: t for s, t in mapping.items() if s != t}


def test_map_equals_tensorflow_on_rebuilt_linear_model(tf):
    # An evaluation script rebuilds the model and asks TF for the map: the classic recipe.
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        v1.Variable(v1.random_uniform([1], -1.0, 1.0), name="W")
        v1.Variable(tf.zeros([1]), name="b")
        theirs = tf_map_in_checkpoint_keys(v1.train.ExponentialMovingAverage(0.9999))
    for case in ("linear_v2", "linear_v1"):
        assert ema_map(FIXTURES / case).mapping == theirs


def test_map_equals_tensorflow_on_rebuilt_partitioned_model(tf):
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        v1.get_variable("emb", [12, 4], partitioner=v1.fixed_size_partitioner(3))
        with v1.variable_scope("out"):
            v1.get_variable("kernel", [4, 2])
            v1.get_variable("bias", [2])
        theirs = tf_map_in_checkpoint_keys(v1.train.ExponentialMovingAverage(0.9))
    ours = ema_map(FIXTURES / "partitioned")
    assert _averaged(ours.mapping) == _averaged(theirs)
    assert theirs["emb/ExponentialMovingAverage"] == "emb"


def test_tensorflow_own_map_in_the_training_graph_is_wrong_and_ours_is_not(tf):
    # Pain point 14: in a graph that already holds the shadows, average_name() returns a
    # uniquified "W/ExponentialMovingAverage_1", which is not in the checkpoint.
    with tf.Graph().as_default():
        tf.compat.v1.train.import_meta_graph(prefix("linear_v2") + ".meta")
        theirs = tf_map_in_checkpoint_keys(tf.compat.v1.train.ExponentialMovingAverage(0.9))
    assert "W/ExponentialMovingAverage_1" in theirs
    assert ema_map(FIXTURES / "linear_v2").mapping["W/ExponentialMovingAverage"] == "W"


def _ema_names(case: str) -> list[str]:
    return list(dict.fromkeys(e["name"] for e in expected(case)["emas"]))


@pytest.mark.parametrize("case", META_CASES)
def test_map_equals_the_map_recorded_at_training_time(case):
    # variables_to_restore() of the training graph's own EMA objects, recorded by the fixture
    # script at save time (incl. the silently renamed "_1" shadows).
    for ema in expected(case)["emas"]:
        actual = {v.rsplit("/", 1)[-1] for k, v in ema["average_name"].items()}
        name = actual.pop() if len(actual) == 1 else ema["name"]
        ours = ema_map(FIXTURES / case, ema_name=name, slots="keep")
        assert ours.mapping == ema["variables_to_restore_ckpt"], (case, ema["name"])


def test_partitioned_map_uses_checkpoint_keys():
    m = ema_map(FIXTURES / "partitioned")
    assert m.mapping["emb/ExponentialMovingAverage"] == "emb"
    assert not any("part_" in k for k in m.mapping)


def test_default_drops_optimizer_slots():
    m = ema_map(FIXTURES / "towers_bn")
    assert not any(k.endswith("/Momentum") for k in m.mapping)
    assert "conv1/weights/Momentum" in m.dropped


def test_zero_debias_and_loss_averages_are_reported():
    exp = expected("towers_bn")
    m = ema_map(FIXTURES / "towers_bn")
    assert sorted(m.loss_averages) == sorted(exp["loss_averages"])
    assert sorted(m.debias) == sorted(k for ks in exp["zero_debias_keys"].values() for k in ks)


@pytest.mark.parametrize("case", META_CASES)
def test_inference_from_keys_agrees_with_the_graph(case):
    for name in _ema_names(case):
        from_meta = ema_map(FIXTURES / case, ema_name=name)
        from_keys = ema_map(FIXTURES / case, ema_name=name, use_meta=False)
        if from_meta.missing:
            continue
        averaged = {s: t for s, t in from_meta.mapping.items() if s != t}
        assert {s: t for s, t in from_keys.mapping.items() if s != t} == averaged, (case, name)


def test_several_ema_objects_are_refused_until_one_is_named():
    # W has W/avg, W/ExponentialMovingAverage and W/ExponentialMovingAverage_1 (three EMA
    # objects; without the .meta nothing proves 'avg' is not an optimizer's slot, with it the
    # AssignMovingAvg ops do): the file does not say which one to evaluate with.
    for use_meta in (True, False):
        with pytest.raises(EmaError) as err:
            ema_map(FIXTURES / "custom_ema_name", use_meta=use_meta)
        msg = str(err.value)
        assert ("more than one average" if use_meta else
                "more than one tensor stored as <weight>/<name>") in msg, msg
        assert "--ema-name avg" in msg
        assert "--ema-name ExponentialMovingAverage_1" in msg
    for name in ("avg", "ExponentialMovingAverage", "ExponentialMovingAverage_1"):
        for use_meta in (True, False):
            m = ema_map(FIXTURES / "custom_ema_name", ema_name=name, use_meta=use_meta)
            assert {s: t for s, t in m.mapping.items() if s != t} == {
                f"W/{name}": "W", f"b/{name}": "b"}


def test_tf2_object_checkpoint_map_pairs_through_object_graph():
    exp = expected("tf2_object")
    # dense/bias and heads/0/bias share a name and a shape: apply()'s order decides, and the
    # file does not record it
    with pytest.raises(EmaError, match="--apply-order") as err:
        ema_map(FIXTURES / "tf2_object")
    assert "model/dense/bias or model/heads/0/bias" in str(err.value)
    m = ema_map(FIXTURES / "tf2_object", apply_order="trainable")
    assert {s: t for s, t in m.mapping.items() if s != t} == exp["ema_of"]
    # the kernels differ in shape: paired, even the lone uniquified kernel/..._1 of heads/0
    # (--ema-name ExponentialMovingAverage still finds it)
    m = ema_map(FIXTURES / "tf2_object", apply_order="trainable",
                ema_name="ExponentialMovingAverage")
    assert {s: t for s, t in m.mapping.items() if s != t} == exp["ema_of"]


def test_scope_rewrites_and_filters():
    m = ema_map(FIXTURES / "towers_bn", strip_scope="conv1/", add_scope="eval/",
                include=["conv1/*"])
    assert m.mapping["conv1/weights/ExponentialMovingAverage"] == "eval/weights"
    assert all(t.startswith("eval/") for t in m.mapping.values())
    m = ema_map(FIXTURES / "towers_bn", exclude=["logits/*"], non_averaged="drop")
    assert all(s != t for s, t in m.mapping.items())
    assert not any(t.startswith("logits/") for t in m.mapping.values())


def test_trainable_only_checkpoint_explains_the_mistake():
    m = ema_map(FIXTURES / "linear_trainable_only")
    assert set(m.missing) == {"W", "b"}
    with pytest.raises(EmaError) as err:
        m.require_complete()
    msg = str(err.value)
    assert "W/ExponentialMovingAverage" in msg and "trainable_variables" in msg
    assert "the .meta graph has 'W/ExponentialMovingAverage'" in msg  # saved, then dropped


def test_wrong_ema_name_hints_at_the_right_one():
    with pytest.raises(EmaError, match="--ema-name avg"):
        ema_map(FIXTURES / "custom_ema_name", ema_name="Nope", use_meta=False).require_complete()


def test_style_selects_one_kind_of_average():
    m = ema_map(FIXTURES / "tf2_object", style="object", apply_order="trainable")
    assert {s: t for s, t in m.mapping.items() if s != t} == expected("tf2_object")["ema_of"]
    wrong = ema_map(FIXTURES / "tf2_object", style="tf1", apply_order="trainable")
    with pytest.raises(EmaError, match="keeps them as object"):
        wrong.require_complete()
    keras3 = ema_map(FIXTURES / "keras3_object", style="keras")
    assert len(keras3.averaged) == len(expected("keras3_object")["ema_of"])


def test_list_reports_the_style_of_each_average():
    from ckpt_tools import open_checkpoint

    for case, style in (("towers_bn", "tf1"), ("tf2_object", "object"),
                        ("keras3_object", "keras"), ("model_garden_slot", "slot")):
        with open_checkpoint(FIXTURES / case) as ckpt:
            styles = {v.ema_style for v in ckpt.variables() if v.role == "ema" or v.ema}
        assert styles == {style}, case
