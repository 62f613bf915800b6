"""A TF2 object-based checkpoint restored into a TF1 graph by the names TensorFlow recorded
(``restore_ema`` / ``ema_saver(checkpoint=)``), where the names are shifted or swapped
(review-19-attack-r42). Names like ``dense``, ``dense_1`` are generated per process, so:

- F5: a head built before the model in training (saved or not) shifts every layer's name by
  one; a graph building only the model paired each layer with the previous one's average,
  exit 0, and the refusal's ``var_list=`` advice led to the same. Refused now wherever a
  matched weight has an unmatched saved lookalike, and weights get no ``var_list=`` advice.
- F1: two equal models built in the other order swap names: refused where lookalikes sit
  under different top-level objects under names that differ only by ``_N``.
- F2/F4: ``add_scope=`` / ``strip_scope=`` apply to the graph's names (an eval tower, a
  graph imported under ``import_scope``), in both functions alike.
- F3/F7: the advice names every variable to leave out; a shape mismatch names the graph's
  variable.

Made here by TensorFlow, names as a fresh process would give them (``tf.name_scope``); the
truth is ``ema.average(v)`` read at save time.
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest

import ckpt_tools
from ckpt_tools.errors import EmaError

SHIFTED = "hold other weights of the same shapes"


def _save(tf, path, objects: dict, variables: list, seed: int = 0):
    """Trains ``variables`` a few steps under one ExponentialMovingAverage and writes
    ``tf.train.Checkpoint(**objects, ema=[averages])``; returns (prefix, {recorded name:
    its average at save time})."""
    ema = tf.train.ExponentialMovingAverage(0.5)
    ema.apply(variables)
    for i in range(3):
        for j, v in enumerate(variables):
            v.assign_add(tf.random.stateless_normal(v.shape, [seed + j, i]))
        ema.apply(variables)
    averages = [ema.average(v) for v in variables]
    prefix = tf.train.Checkpoint(**objects, ema=averages).write(str(path / "ckpt"))
    truth = {v.name.split(":")[0]: a.numpy() for v, a in zip(variables, averages, strict=True)}
    for v in variables:  # the averages are not the weights
        assert not np.array_equal(truth[v.name.split(":")[0]], v.numpy())
    return prefix, truth


def _dense(tf, name: str, seed: int):
    """A Dense(4)'s weights named as Keras names them (``dense_1/kernel``, ``dense_1/bias``)."""
    m = tf.Module()
    with tf.name_scope(name):
        m.kernel = tf.Variable(tf.random.stateless_normal([4, 4], [seed, 1]), name="kernel")
        m.bias = tf.Variable(tf.random.stateless_normal([4], [seed, 2]), name="bias")
    return m


def _model(tf, names: list[str], seed: int = 10):
    """A model of Dense(4) layers named ``names``; returns (module, its variables)."""
    m = tf.Module()
    m.layers = [_dense(tf, n, seed + i) for i, n in enumerate(names)]
    return m, [v for layer in m.layers for v in (layer.kernel, layer.bias)]


def _graph(tf, names: list[str], scope: str | None = None):
    """A TF1 graph of Dense(4) layers named ``names`` (under ``scope``); returns (graph,
    {name: variable})."""
    g = tf.Graph()
    made = {}
    with g.as_default(), (tf.compat.v1.variable_scope(scope) if scope else nullcontext()):
        for n in names:
            with tf.compat.v1.variable_scope(n):
                made[f"{n}/kernel"] = tf.compat.v1.get_variable("kernel", [4, 4])
                made[f"{n}/bias"] = tf.compat.v1.get_variable("bias", [4])
    return g, {v.op.name: v for v in made.values()}


def _refused_both_ways(tf, g, prefix, match: str, **kw):
    with tf.compat.v1.Session(graph=g) as sess:
        with pytest.raises(EmaError, match=match) as e:
            ckpt_tools.restore_ema(sess, prefix, **kw)
    with g.as_default(), pytest.raises(EmaError, match=match):
        ckpt_tools.ema_saver(checkpoint=prefix, **kw)
    return str(e.value)


@pytest.mark.parametrize("head_saved", [True, False])
def test_a_model_built_without_the_head_built_before_it_is_refused(tf, tmp_path, head_saved):
    """Training built a head (``dense``) first, so the model's layers are ``dense_1`` ..
    ``dense_3``; the graph builds only the model: ``dense``, ``dense_1``, ``dense_2``. Each
    graph layer's name is the previous saved layer's (F5: every layer got another's average,
    exit 0, with the head saved; without it, the advice ``var_list=`` did the same)."""
    head = _dense(tf, "dense", 1)
    model, variables = _model(tf, ["dense_1", "dense_2", "dense_3"])
    objects = {"model": model, **({"head": head} if head_saved else {})}
    prefix, truth = _save(tf, tmp_path, objects,
                          [head.kernel, head.bias] * head_saved + variables)
    g, made = _graph(tf, ["dense", "dense_1", "dense_2"])
    msg = _refused_both_ways(tf, g, prefix, SHIFTED)
    assert "apply_ema(tf.train.Checkpoint(NAME=model), path)" in msg, msg
    assert "var_list=" not in msg, msg
    # what the first refusal used to advise: leave out the names that did not match
    _refused_both_ways(tf, g, prefix, SHIFTED, var_list=[
        v for k, v in made.items() if not k.startswith("dense/")])
    # the TF2 way the refusal names restores each layer's own average
    tf2, _ = _model(tf, ["x", "y", "z"], seed=50)
    ckpt_tools.apply_ema(tf.train.Checkpoint(model=tf2), prefix)
    for i, layer in enumerate(tf2.layers):
        for v in (layer.kernel, layer.bias):
            want = truth[f"dense_{i + 1}/{v.name.split(':')[0].rpartition('/')[2]}"]
            assert v.numpy().tobytes() == want.tobytes()


def test_a_list_of_tf2_variables_of_a_model_built_without_its_head_is_refused(tf, tmp_path):
    """The same shift through ``apply_ema(list)`` in TF2 (F5, pre-existing there)."""
    head = _dense(tf, "dense", 1)
    model, variables = _model(tf, ["dense_1", "dense_2", "dense_3"])
    prefix, _ = _save(tf, tmp_path, {"head": head, "model": model},
                      [head.kernel, head.bias, *variables])
    _, live = _model(tf, ["dense", "dense_1", "dense_2"], seed=60)
    before = [v.numpy() for v in live]
    with pytest.raises(EmaError, match=SHIFTED):
        ckpt_tools.apply_ema(live, prefix)
    assert all(np.array_equal(v.numpy(), b) for v, b in zip(live, before, strict=True))


def test_two_equal_models_built_in_the_other_order_are_refused(tf, tmp_path):
    """Training built the encoder (``dense``) then the decoder (``dense_1``); the graph builds
    the decoder first, so each is named as the other was (F1: swapped averages, exit 0). The
    object paths (``enc/``, ``dec/``) tell them apart, the names cannot."""
    enc, ev = _model(tf, ["dense"], seed=20)
    dec, dv = _model(tf, ["dense_1"], seed=30)
    prefix, _ = _save(tf, tmp_path, {"enc": enc, "dec": dec}, ev + dv)
    g, _ = _graph(tf, ["dense", "dense_1"])
    msg = _refused_both_ways(tf, g, prefix, "sit under different top-level objects")
    assert "'dec/" in msg and "'enc/" in msg and "apply_ema(tf.train.Checkpoint(" in msg, msg
    _, live = _model(tf, ["dense", "dense_1"], seed=70)
    with pytest.raises(EmaError, match="sit under different top-level objects"):
        ckpt_tools.apply_ema(live, prefix)


def test_one_model_of_equal_layers_rebuilt_restores_its_averages(tf, tmp_path):
    """Not refused: one model's layers of one shape, every one matched, all under one
    top-level object (the plain rebuild); each gets its own average bit for bit."""
    model, variables = _model(tf, ["dense", "dense_1", "dense_2"])
    prefix, truth = _save(tf, tmp_path, {"model": model}, variables)
    g, made = _graph(tf, ["dense", "dense_1", "dense_2"])
    with tf.compat.v1.Session(graph=g) as sess:
        result = ckpt_tools.restore_ema(sess, prefix)
        for name, var in made.items():
            assert sess.run(var).tobytes() == truth[name].tobytes(), name
    assert sorted(result.averaged) == sorted(made)
    with g.as_default(), tf.compat.v1.Session(graph=g) as sess:
        ckpt_tools.ema_saver(checkpoint=prefix).restore(sess, prefix)
        for name, var in made.items():
            assert sess.run(var).tobytes() == truth[name].tobytes(), name


@pytest.mark.parametrize(("scope", "options"), [
    ("eval", {"add_scope": "eval/"}),  # import_meta_graph(import_scope="eval"), an eval tower
    (None, {"strip_scope": "net/"}),  # saved under net/, rebuilt without it
])
def test_scope_options_apply_to_the_recorded_names(tf, tmp_path, scope, options):
    """F2/F4: the scope options map the graph's names onto the recorded ones, in restore_ema
    and ema_saver alike (one refused, the other ignored them)."""
    model, variables = _model(tf, ["net/dense"] if scope is None else ["dense"])
    prefix, truth = _save(tf, tmp_path, {"model": model}, variables)
    g, made = _graph(tf, ["dense"], scope)
    own = {k: k.removeprefix("eval/") if scope else f"net/{k}" for k in made}
    with tf.compat.v1.Session(graph=g) as sess:
        result = ckpt_tools.restore_ema(sess, prefix, **options)
        for name, var in made.items():
            assert sess.run(var).tobytes() == truth[own[name]].tobytes(), name
    assert sorted(result.averaged) == sorted(made)
    with g.as_default(), tf.compat.v1.Session(graph=g) as sess:
        ckpt_tools.ema_saver(checkpoint=prefix, **options).restore(sess, prefix)
        for name, var in made.items():
            assert sess.run(var).tobytes() == truth[own[name]].tobytes(), name
    if scope:  # without the option: refused, naming it
        msg = _refused_both_ways(tf, g, prefix, "recorded under another scope")
        assert 'add_scope="eval/"' in msg, msg


def test_the_advice_names_every_variable_to_leave_out(tf, tmp_path):
    """F3: a TF1 training graph's optimizer state is recorded under no name; the error shows
    8 problems, the advice names the rest, and following it restores the averages."""
    model, variables = _model(tf, ["dense"])
    prefix, truth = _save(tf, tmp_path, {"model": model}, variables)
    g, made = _graph(tf, ["dense"])
    with g.as_default():
        extra = [tf.compat.v1.get_variable(f"slot_{i}", [1]) for i in range(10)]
    with tf.compat.v1.Session(graph=g) as sess:
        with pytest.raises(EmaError) as e:
            ckpt_tools.restore_ema(sess, prefix)
        msg = str(e.value)
        assert "without the 10 variables" in msg and "slot_8, slot_9" in msg, msg
        assert "it records dense/bias, dense/kernel)" in msg, msg
        ckpt_tools.restore_ema(sess, prefix, var_list=list(made.values()))
        for name, var in made.items():
            assert sess.run(var).tobytes() == truth[name].tobytes(), name
    assert len(extra) == 10


def test_a_shape_mismatch_names_the_graph_variable(tf, tmp_path):
    """F7: the graph's ``dense/kernel``, not the object key, is named."""
    model, variables = _model(tf, ["dense"])
    prefix, _ = _save(tf, tmp_path, {"model": model}, variables)
    g = tf.Graph()
    with g.as_default(), tf.compat.v1.variable_scope("dense"):
        tf.compat.v1.get_variable("kernel", [4, 3])
        tf.compat.v1.get_variable("bias", [4])
    with tf.compat.v1.Session(graph=g) as sess, \
            pytest.raises(EmaError, match=r"restored: dense/kernel: checkpoint 'ema/0/"):
        ckpt_tools.restore_ema(sess, prefix)


def test_a_weight_without_its_average_is_named_as_the_graph_names_it(tf, tmp_path):
    """F7: a graph variable whose ema.average(v) was not saved leads with its graph name."""
    model, variables = _model(tf, ["dense"])
    ema = tf.train.ExponentialMovingAverage(0.5)
    ema.apply(variables[:1])
    prefix = tf.train.Checkpoint(model=model, ema=[ema.average(variables[0])]).write(
        str(tmp_path / "ckpt"))
    g, _ = _graph(tf, ["dense"])
    msg = _refused_both_ways(tf, g, prefix, "allow_missing=True")
    assert "dense/bias (saved as model/layers/0/bias; no average:" in msg, msg


def test_graph_weights_no_name_records_get_no_var_list_advice(tf, tmp_path):
    """F5: the graph built a head first (``dense``) and the model after it (``dense_1`` ..
    ``dense_3``), training did not: ``dense_3`` is recorded for nothing while the other
    names match the wrong layers. Leaving the unrecorded weights out is no way: refused
    without that advice."""
    model, variables = _model(tf, ["dense", "dense_1", "dense_2"])
    prefix, _ = _save(tf, tmp_path, {"model": model}, variables)
    g, _ = _graph(tf, ["dense", "dense_1", "dense_2", "dense_3"])
    msg = _refused_both_ways(tf, g, prefix, "look like the saved weights")
    assert "dense_3/kernel (no saved variable was recorded under this name)" in msg, msg
    assert "var_list=" not in msg and "apply_ema(model, path)" in msg, msg
