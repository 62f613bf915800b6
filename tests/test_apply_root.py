"""Keras 3 models inside a ``tf.train.Checkpoint`` trained by a TF2 custom loop with
``tf.train.ExponentialMovingAverage``: ``apply_ema`` through the checkpoint's root restores the
averages (or raises), and two same-named models (a GAN's G and D) are never paired by a stated
``--apply-order`` that the file cannot establish. Checkpoints are made here by real Keras 3 /
TensorFlow; the truth is ``ema.average(v)`` read at save time, compared bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import train_ema
from typer.testing import CliRunner

import ckpt_tools
from ckpt_tools import EmaError
from ckpt_tools.cli import app

runner = CliRunner()


def _train(tf, keras, models, steps=3):
    """A TF2 custom loop: SGD steps, then ``ema.apply()`` of every trainable variable in model
    order; returns the EMA object and the variables it was applied to."""
    rs = np.random.RandomState(0)
    x = rs.randn(16, 4).astype("float32")
    ema = tf.train.ExponentialMovingAverage(0.5)
    tv = [v.value for m in models for v in m.trainable_variables]
    for _ in range(steps):
        with tf.GradientTape() as tape:
            y = x
            for m in models:
                y = m(y)
            loss = tf.reduce_mean(y ** 2)
        for g, v in zip(tape.gradient(loss, tv), tv, strict=True):
            v.assign_sub(0.1 * g)
        ema.apply(tv)
    return ema, tv


def _seq(keras, name=None):
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(4, name="fc1"),
                             keras.layers.Dense(4, name="fc2")], name=name)


@pytest.mark.parametrize("with_ema", [False, True], ids=["model_only", "ema_in_root"])
def test_apply_ema_through_a_checkpoint_root_holding_a_keras3_model(tf, keras, tmp_path,
                                                                    with_ema):
    keras.utils.set_random_seed(1)
    m = _seq(keras)
    ema, tv = _train(tf, keras, [m])
    truth = [ema.average(v).numpy() for v in tv]
    avgs = [ema.average(v) for v in tv]
    tf.train.Checkpoint(model=m, ema=avgs).write(str(tmp_path / "ck" / "ckpt"))

    fresh = _seq(keras)
    root = (tf.train.Checkpoint(model=fresh, ema=[tf.Variable(a) for a in truth]) if with_ema
            else tf.train.Checkpoint(model=fresh))
    result = ckpt_tools.apply_ema(root, str(tmp_path / "ck"))
    assert len(result.averaged) == len(truth)
    for v, want in zip(fresh.trainable_variables, truth, strict=True):
        assert np.array_equal(v.numpy(), want), v.path


def test_apply_ema_raises_when_nothing_of_the_object_is_in_the_checkpoint(tf, keras, tmp_path):
    keras.utils.set_random_seed(2)
    m = _seq(keras)
    ema, tv = _train(tf, keras, [m])
    tf.train.Checkpoint(model=m, ema=[ema.average(v) for v in tv]).write(
        str(tmp_path / "ck" / "ckpt"))
    other = tf.Module()
    other.w = tf.Variable(np.zeros((7, 7), np.float32))
    with pytest.raises(EmaError):
        ckpt_tools.apply_ema(tf.train.Checkpoint(elsewhere=other), str(tmp_path / "ck"))


@pytest.fixture(scope="module")
def gan(tf, keras, tmp_path_factory):
    """G and D, both ``Sequential(name="net")``; G created (and applied) first. Their averages
    saved as a list, a dict and two attributes."""
    d = tmp_path_factory.mktemp("gan")
    keras.utils.set_random_seed(3)
    G, D = _seq(keras, "net"), _seq(keras, "net")
    ema, _ = _train(tf, keras, [G, D])
    g_avg = [ema.average(v.value) for v in G.trainable_variables]
    d_avg = [ema.average(v.value) for v in D.trainable_variables]
    truth = {"g": [a.numpy() for a in g_avg], "d": [a.numpy() for a in d_avg]}
    tf.train.Checkpoint(g=G, d=D, ema=g_avg + d_avg).write(str(d / "gan_list" / "ckpt"))
    tf.train.Checkpoint(g=G, d=D, ema={"g": g_avg, "d": d_avg}).write(
        str(d / "gan_dict" / "ckpt"))
    tf.train.Checkpoint(g=G, d=D, g_ema=g_avg, d_ema=d_avg).write(str(d / "gan_attr" / "ckpt"))
    return d, truth


@pytest.mark.parametrize("case", ["gan_list", "gan_dict", "gan_attr"])
@pytest.mark.parametrize("order", [None, "tracked", "trainable"])
def test_same_named_models_are_refused_under_every_apply_order(tf, gan, tmp_path, case, order):
    d, _ = gan
    extra = ["--apply-order", order] if order else []
    for argv in (["map", str(d / case)],
                 ["restore-ema", str(d / case), "--out", str(tmp_path / "r")],
                 ["export", str(d / case), "--out", str(tmp_path / "w.npz")]):
        result = runner.invoke(app, [*argv, *extra])
        assert result.exit_code == 6, (argv, result.output)
        assert "--apply-order tracked" not in result.output, result.output
        assert "g/" in result.output and "d/" in result.output, result.output
    assert not (tmp_path / "w.npz").exists() and not (tmp_path / "r").exists()


def test_same_named_models_are_refused_by_apply_ema(tf, keras, gan):
    d, _ = gan
    G, D = _seq(keras, "net"), _seq(keras, "net")
    before = [v.numpy().copy() for v in G.trainable_variables + D.trainable_variables]
    for order in (None, "tracked", "trainable"):
        with pytest.raises(EmaError):
            ckpt_tools.apply_ema(tf.train.Checkpoint(g=G, d=D), str(d / "gan_list"),
                                 apply_order=order)
    after = [v.numpy() for v in G.trainable_variables + D.trainable_variables]
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))


def _unnamed_module(tf, directory, shapes, apply_idx):
    """A tf.Module with unnamed variables ``a``, ``b``, ``c`` (all called ``Variable``) of
    ``shapes``; ``ema.apply()`` got them in the order ``apply_idx``; the averages saved as a
    list. Returns the truth ``{attribute: ema.average(v)}``."""
    m = tf.Module()
    rs = np.random.RandomState(4)
    m.a, m.b, m.c = (tf.Variable(rs.randn(*s).astype("float32")) for s in shapes)
    vs = [m.a, m.b, m.c]
    ema = tf.train.ExponentialMovingAverage(0.5)
    for step in range(3):
        for v in vs:
            v.assign_add(np.full(v.shape, step + 1.0, np.float32))
        ema.apply([vs[i] for i in apply_idx])
    tf.train.Checkpoint(model=m, ema_vars=[ema.average(v) for v in vs]).write(
        str(directory / "ckpt"))
    return {n: ema.average(v).numpy() for n, v in zip("abc", vs, strict=True)}


def test_a_pairing_resting_on_a_stated_apply_order_says_so(tf, tmp_path):
    # apply() got c, a, b; stating "trainable" (a, b, c) fits the shapes: used as stated, and
    # every command says the pairing is the caller's statement (stderr note, --json field).
    d = tmp_path / "user"
    _unnamed_module(tf, d, [(2,), (2,), (2,)], [2, 0, 1])
    for argv in (["export", str(d), "--out", str(tmp_path / "w.npz"), "--json"],
                 ["restore-ema", str(d), "--out", str(tmp_path / "r"), "--json"],
                 ["list", str(d), "--json"]):
        result = runner.invoke(app, [*argv, "--apply-order", "trainable"])
        assert result.exit_code == 0, (argv, result.output)
        assert "paired only because you stated --apply-order trainable" in result.stderr
        doc = __import__("json").loads(result.stdout)
        assert doc["stated_apply_order"]["order"] == "trainable", argv
        assert len(doc["stated_apply_order"]["pairs"]) == 3, argv
    for argv in (["map", str(d)], ["stats", str(d)]):
        result = runner.invoke(app, [*argv, "--apply-order", "tracked"])
        assert result.exit_code == 0, (argv, result.output)
        assert "paired only because you stated --apply-order tracked" in result.stderr
    refused = runner.invoke(app, ["map", str(d)])
    assert refused.exit_code == 6
    assert "only if you know how ema.apply() was called" in refused.output


def test_a_stated_apply_order_the_shapes_contradict_is_refused(tf, tmp_path):
    # a, b are [2], c is [3]; apply() got c, a, b. Under "trainable" (a, b, c) the first
    # average ([3]) can only be c's, leaving nothing after it for the two others.
    d = tmp_path / "contra"
    _unnamed_module(tf, d, [(2,), (2,), (3,)], [2, 0, 1])
    result = runner.invoke(app, ["export", str(d), "--out", str(tmp_path / "w.npz"),
                                 "--apply-order", "trainable"])
    assert result.exit_code == 6, result.output
    assert "contradicts" in result.output
    assert not (tmp_path / "w.npz").exists()


def _online_target(tf, directory):
    """An online and a target network of one class in one checkpoint, both averaged (BYOL,
    mean teacher); returns ema.average(v) at save time by variable name."""

    class Net(tf.Module):
        def __init__(self, name):
            super().__init__(name=name)
            with self.name_scope:
                self.w = tf.Variable(tf.random.normal([3, 2]), name="w")
                self.b = tf.Variable(tf.random.normal([2]), name="b")

    online, target = Net("online"), Net("target")
    ema = tf.train.ExponentialMovingAverage(0.5)
    vs = online.trainable_variables + target.trainable_variables
    for _ in range(3):
        for v in vs:
            v.assign_add(tf.random.normal(v.shape))
        ema.apply(vs)
    names = {v.name.split(":")[0]: v for v in vs}
    tf.train.Checkpoint(online=online, target=target,
                        ema={n.replace("/", "_"): ema.average(v) for n, v in names.items()}
                        ).save(str(directory / "ckpt"))
    return Net, {n: ema.average(v).numpy() for n, v in names.items()}


@pytest.mark.parametrize("which", ["online", "target"])
def test_apply_ema_never_guesses_which_of_two_same_class_children_a_model_is(tf, tmp_path,
                                                                            which):
    """review-11-attack-r6 C1: the child of the root a live model is was chosen by counting
    matching keys, ties broken by set order (PYTHONHASHSEED): the target got the online
    network's averages. Two children fit: refused, naming the way to say which."""
    from ckpt_tools import EmaError, apply_ema

    Net, truth = _online_target(tf, tmp_path)
    net = Net(which)
    with pytest.raises(EmaError, match=r"fits 2 of the checkpoint's top-level objects"):
        apply_ema(net, str(tmp_path))
    apply_ema(tf.train.Checkpoint(**{which: net}), str(tmp_path))
    for n in ("w", "b"):
        assert getattr(net, n).numpy().tobytes() == truth[f"{which}/{n}"].tobytes()


def test_apply_ema_never_pairs_keras3_weights_by_their_generated_names(keras, tf, tmp_path):
    """review-11-attack-r6 C3: a Keras 3 model and a probe head trained by one optimizer: the
    weights are keyed by the optimizer's list, so apply_ema fell back to the live layers'
    generated names (dense, dense_1…), which shift when the eval script builds the probe
    first: every weight got another layer's average. Both models fit the file's structure:
    refused; stated as the root's child, the object graph's path through the model pairs
    them bit for bit."""
    from ckpt_tools import EmaError, apply_ema

    def build_main():
        inp = keras.Input((4,))
        return keras.Model(inp, keras.layers.Dense(4)(keras.layers.Dense(4)(inp)), name="main")

    def build_probe():
        inp = keras.Input((4,))
        return keras.Model(inp, keras.layers.Dense(4)(inp), name="probe")

    keras.utils.set_random_seed(7)
    main, probe = build_main(), build_probe()
    opt = keras.optimizers.Adam(0.1, use_ema=True, ema_momentum=0.5)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 4)).astype("float32")
    y = rng.normal(size=(16, 4)).astype("float32")
    vs = main.trainable_variables + probe.trainable_variables
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((probe(main(x)) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs, strict=True))
    tf.train.Checkpoint(model=main, probe=probe, optimizer=opt).save(str(tmp_path / "ckpt"))
    average = {id(v): a.numpy() for v, a in zip(opt._trainable_variables,
                                                 opt._model_variables_moving_average,
                                                 strict=True)}
    truth = [average[id(v)] for v in main.trainable_variables]

    build_probe()  # the eval script builds another Dense first: the names shift
    live = build_main()
    with pytest.raises(EmaError, match=r"fits 2 of the checkpoint's top-level objects"):
        apply_ema(live, str(tmp_path))
    # a custom loop, never swapped (SwapEMAWeights is a fit() callback): stated
    apply_ema(tf.train.Checkpoint(model=live), str(tmp_path), not_swapped=True)
    for v, want in zip(live.trainable_variables, truth, strict=True):
        assert v.numpy().tobytes() == want.tobytes(), v.path


def test_an_object_whose_structure_matches_nothing_is_not_paired_by_names(tf, tmp_path):
    """Two modules whose variables carry the names ``layer/kernel``: the live module holds them
    under other attributes than the saved one, so its structure matches nothing saved and
    pairing by names would rest on names alone (Keras and TF generate them per process). An
    object is refused; a list of variables states that names pair them and is bit-exact."""

    class Saved(tf.Module):
        def __init__(self):
            super().__init__()
            self.a = tf.Variable(tf.random.normal([3]), name="first")
            self.b = tf.Variable(tf.random.normal([2]), name="second")

    class Renamed(tf.Module):
        def __init__(self):
            super().__init__()
            self.x = tf.Variable(tf.zeros([3]), name="first")
            self.y = tf.Variable(tf.zeros([2]), name="second")

    m = Saved()
    ema = tf.train.ExponentialMovingAverage(0.5)
    train_ema(tf, m.trainable_variables, ema)
    d = tmp_path / "ck"
    tf.train.Checkpoint(model=m, ema=[ema.average(v) for v in m.trainable_variables]).write(
        str(d / "ckpt"))
    live = Renamed()
    with pytest.raises(EmaError, match="structure .* matches no object"):
        ckpt_tools.apply_ema(live, d)
    assert not live.x.numpy().any() and not live.y.numpy().any()  # nothing assigned
    ckpt_tools.apply_ema([live.x, live.y], d)
    assert live.x.numpy().tobytes() == ema.average(m.a).numpy().tobytes()
    assert live.y.numpy().tobytes() == ema.average(m.b).numpy().tobytes()


def test_weights_a_keras_optimizer_does_not_average_are_worded_as_its(tf, keras, tmp_path):
    """A BYOL-style target network beside the online model, one ``Adam(use_ema=True)`` over the
    online one, all in a tf.train.Checkpoint: the target's weights keep raw values, and the
    warning speaks of the optimizer's EMA copies, not of ``ema.average(v)``."""

    def build():
        inp = keras.Input((4,))
        return keras.Model(inp, keras.layers.Dense(4)(keras.layers.Dense(4)(inp)))

    keras.utils.set_random_seed(1)
    online, target = build(), build()
    opt = keras.optimizers.Adam(0.1, use_ema=True, ema_momentum=0.5)
    x = np.random.RandomState(0).randn(16, 4).astype("float32")
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((online(x) - tf.stop_gradient(target(x))) ** 2)
        grads = tape.gradient(loss, online.trainable_variables)
        opt.apply_gradients(zip(grads, online.trainable_variables, strict=True))
    tf.train.Checkpoint(online=online, target=target, optimizer=opt).write(
        str(tmp_path / "ck" / "ckpt"))
    result = runner.invoke(app, ["export", str(tmp_path / "ck"), "--out",
                                 str(tmp_path / "w.npz"), "--not-swapped"])
    assert result.exit_code == 0, result.output
    assert "4 weights have no EMA copy in the optimizer" in result.output, result.output
    assert "ema.average" not in result.output


def test_a_variable_the_checkpoint_lacks_never_gets_another_ones_average(tf, tmp_path):
    """An autoencoder whose encoder and decoder variables share names (``layer/kernel``): the
    run saved only the encoder and its averages. The decoder is not in the checkpoint, so
    ``apply_ema`` of the whole model, or of its variable list, refuses; it never restores the
    encoder's average into the decoder by name. The encoder alone is bit-exact."""

    class Dense(tf.Module):
        def __init__(self):
            super().__init__(name="layer")
            with self.name_scope:
                self.kernel = tf.Variable(tf.random.normal([3, 3]), name="kernel")

    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.enc, self.dec = Dense(), Dense()

    m = Net()
    ema = tf.train.ExponentialMovingAverage(0.5)
    train_ema(tf, [m.enc.kernel], ema)
    d = tmp_path / "ck"
    tf.train.Checkpoint(enc=m.enc, ema=[ema.average(m.enc.kernel)]).write(str(d / "ckpt"))
    want = ema.average(m.enc.kernel).numpy()
    for target in (lambda n: n, lambda n: list(n.variables)):
        live = Net()
        with pytest.raises(EmaError, match="could not be restored"):
            ckpt_tools.apply_ema(target(live), d)
        assert not live.dec.kernel.numpy().any() or \
            live.dec.kernel.numpy().tobytes() != want.tobytes()
    live = Net()
    ckpt_tools.apply_ema(live.enc, d)
    assert live.enc.kernel.numpy().tobytes() == want.tobytes()


def test_ema_names_found_are_names_ema_name_takes(tf, keras, tmp_path):
    """A Keras 3 ``Adam(use_ema=True)`` and a ``tf.train.ExponentialMovingAverage`` over one
    model: the refusal's "EMA names found" are the choices --ema-name takes (the optimizer's
    attribute), never each Keras average's own name (``dense_kernel_average``)."""
    keras.utils.set_random_seed(4)
    m = _seq(keras)
    opt = keras.optimizers.Adam(0.1, use_ema=True, ema_momentum=0.5)
    ema = tf.train.ExponentialMovingAverage(0.5)
    x = np.random.RandomState(0).randn(16, 4).astype("float32")
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(m(x) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, m.trainable_variables),
                                m.trainable_variables, strict=True))
        ema.apply([v.value for v in m.trainable_variables])
    tf.train.Checkpoint(model=m, optimizer=opt,
                        ema=[ema.average(v.value) for v in m.trainable_variables]).write(
        str(tmp_path / "ck" / "ckpt"))
    result = runner.invoke(app, ["export", str(tmp_path / "ck"), "--out",
                                 str(tmp_path / "w.npz")])
    assert result.exit_code == 6, result.output
    found = result.stderr.split("EMA names found: ", 1)[1].split(";", 1)[0]
    assert found == "ExponentialMovingAverage, optimizer", result.stderr
    assert "--ema-name ema or --ema-name optimizer" in result.stderr
