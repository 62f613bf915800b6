"""A Keras 3 model trained by a custom loop whose first ``apply_gradients()`` listed the
variables head first: the optimizer was built in that order, not the model's, and a ``.keras``
cannot show it, so its equal-shaped layers' EMA copies pair in fit()'s order, wrong, with a
note naming the way out. That way out, ``--trainable`` in the loop's order, was refused for a
``.keras`` as contradicting config.json (review-11-user-r10 F1). ``--loop-order`` (Python
``loop_order=True``) states that the order is the loop's; without it another order than the
model's stays refused (more often a slip). Made here by Keras 3; the truth is the optimizer's
averages at save time (``_model_variables_moving_average``), compared bit for bit."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import assert_npz_holds, keras_averages, run_cli

LOOP = "d3,d2,d1"  # the order the loop listed the layers' variables in


def _trained(keras, tmp_path_factory, name: str, listed):
    """d1 -> d2 -> d3 (Dense(4) each), Adam(use_ema=True) built and stepped by a custom loop
    from ``listed(model)``; saved as ``<name>/m.keras``. Returns (path, model, truth)."""
    import tensorflow as tf

    keras.utils.set_random_seed(7)
    inp = keras.Input((4,))
    h = keras.layers.Dense(4, name="d1")(inp)
    h = keras.layers.Dense(4, name="d2")(h)
    model = keras.Model(inp, keras.layers.Dense(4, name="d3")(h))
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    x = tf.random.normal([8, 4], seed=1)
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x) ** 2)
        variables = listed(model)
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
    d = tmp_path_factory.mktemp(name)
    model.save(str(d / "m.keras"))
    truth = keras_averages(opt)
    return d / "m.keras", model, truth, opt


@pytest.fixture(scope="module")
def looped(keras, tmp_path_factory):
    path, model, truth, opt = _trained(keras, tmp_path_factory, "looped", lambda m: [
        w for layer in m.layers[1:][::-1] for w in layer.trainable_variables])  # head first
    assert [v.path for v in opt._trainable_variables][:2] == ["d3/kernel", "d3/bias"]
    assert not np.array_equal(truth["d1/kernel"], model.get_layer("d1").kernel.numpy())
    return path, truth


@pytest.fixture(scope="module")
def fitted(keras, tmp_path_factory):
    """The same model, its optimizer built in the model's order (as fit() builds it), by a
    loop that never finalizes: weights and copies differ, their order is fit()'s, assumed."""
    path, _, truth, _ = _trained(keras, tmp_path_factory, "fitted",
                                 lambda m: m.trainable_variables)
    return path, truth


def test_the_values_refuse_the_unstated_loop_order(keras, looped, tmp_path):
    """Without a statement the loop's file is refused by its values: each copy sits on the
    weight the loop averaged, not the one fit()'s order gives it (review-11-attack-r15 F3,
    user r12 F1/C1: paired in fit()'s order, exit 0); CLI and Python alike."""
    from ckpt_tools import EmaError, apply_keras_ema, keras_ema_values

    path, _ = looped
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped", str(path), "--out", str(out)])
    assert code == 6 and not out.exists() and len(err.strip().splitlines()) == 1, err
    text = " ".join(err.split())
    assert "nearer" in text and "--loop-order" in text, err
    # list says it too (review-11-attack-r17 F4: it showed the pairing, ema_unproven null)
    code, listed, err = run_cli(["list", str(path), "--json"])
    assert code == 0, err
    unproven = json.loads(listed)["ema_unproven"]
    assert unproven and unproven["option"] == "--trainable NAMES --loop-order", unproven
    with pytest.raises(EmaError, match="--loop-order"):
        keras_ema_values(str(path), not_swapped=True)
    model = keras.models.load_model(str(path))
    before = [v.numpy() for v in model.trainable_variables]
    with pytest.raises(EmaError, match="--loop-order"):
        apply_keras_ema(model, str(path), not_swapped=True)
    assert [v.numpy().tobytes() for v in model.trainable_variables] == [
        b.tobytes() for b in before]


def test_the_values_agree_with_fit_order(fitted, tmp_path):
    """The model's own order: the values agree, the copies pair as fit() built them."""
    path, truth = fitted
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped", str(path), "--out", str(out)])
    assert code == 0, err
    assert_npz_holds(out, truth)


def test_the_loops_order_without_loop_order_is_refused(looped, tmp_path):
    path, _ = looped
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped",
                            str(path), "--trainable", LOOP, "--out", str(out)])
    assert code == 6 and "--loop-order" in err and "contradicts config.json" in err, err
    assert len(err.strip().splitlines()) == 1 and not out.exists()
    # review-11-user-r12 F9: where the order differs, said as a position
    assert ("differs from the model's at name 1: you gave d3/kernel, the model has d1/kernel "
            "there") in err, err


def test_the_loops_order_with_loop_order_gives_the_averages(looped, tmp_path):
    path, truth = looped
    out = tmp_path / "w.npz"
    code, text, err = run_cli(["export", "--not-swapped",
                               str(path), "--trainable", LOOP, "--loop-order",
                               "--out", str(out), "--json"])
    assert code == 0, err
    assert_npz_holds(out, truth)
    stated = json.loads(text)["stated_trainable"]
    assert stated["reordered"][0].startswith("d3/"), stated
    assert "custom training loop's order you stated" in " ".join(err.split()), err


def test_restore_ema_with_the_loops_order_loads_the_averages(keras, looped, tmp_path):
    path, truth = looped
    out = tmp_path / "ema.keras"
    code, _, err = run_cli(["restore-ema", "--not-swapped",
                            str(path), "--trainable", LOOP, "--loop-order",
                            "--out", str(out)])
    assert code == 0, err
    model = keras.models.load_model(str(out))
    for v in model.trainable_variables:
        assert v.numpy().tobytes() == truth[v.path].tobytes(), v.path


def test_python_loop_order(keras, looped):
    from ckpt_tools import EmaError, apply_keras_ema

    path, truth = looped
    model = keras.models.load_model(str(path))
    order = [f"{n}/{w}" for n in ("d3", "d2", "d1") for w in ("kernel", "bias")]
    with pytest.raises(EmaError, match="loop_order=True"):
        apply_keras_ema(model, str(path), trainable=order, not_swapped=True)
    apply_keras_ema(model, str(path), trainable=order, loop_order=True, not_swapped=True)
    for v in model.trainable_variables:
        assert v.numpy().tobytes() == truth[v.path].tobytes(), v.path


def test_fit_order_assumption_is_said_even_with_q_and_in_json(fitted, tmp_path):
    path, _ = fitted
    code, text, err = run_cli(["export", "--not-swapped",
                               str(path), "--out", str(tmp_path / "w.npz"), "-q",
                               "--json"])
    assert code == 0, err
    assert "fit_order" in json.loads(text)["assumed"], text
    assert "--loop-order" in " ".join(err.split()), err
    # review-11-user-r12 F8: the note stderr had is in --json "notes" too
    notes = json.loads(text)["notes"]
    assert any("fit() builds the optimizer in" in n and "--loop-order" in n for n in notes), text


def test_loop_order_needs_trainable(looped, tmp_path):
    path, _ = looped
    code, _, err = run_cli(["export", "--not-swapped", str(path), "--loop-order", "--out",
                            str(tmp_path / "w.npz")])
    assert code == 2 and "--trainable" in err, err


def test_strict_refuses_the_fit_order_assumption(fitted, looped, tmp_path):
    path, _ = fitted
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped", str(path), "--out", str(out), "--strict"])
    assert code == 6 and len(err.strip().splitlines()) == 1, err
    assert str(path) in err and "fit_order" in err and "--loop-order" in err, err
    assert not out.exists()
    # stated, the order is no longer assumed; the file's weights are raw (a custom loop
    # never calls finalize_variable_values), so whether it was swapped is still asked
    path, _ = looped
    code, _, err = run_cli(["export", str(path), "--trainable", LOOP, "--loop-order",
                            "--out", str(out), "--strict"])
    assert code == 6 and "fit_order" not in err and "--not-swapped" in err, err


def test_python_strict_fit_order(keras, fitted):
    from ckpt_tools import EmaError, apply_keras_ema

    path, _ = fitted
    model = keras.models.load_model(str(path))
    with pytest.raises(EmaError, match="fit_order"):
        apply_keras_ema(model, str(path), strict=True, not_swapped=True)


def test_python_api_warns_what_it_assumed(keras, fitted, looped, tmp_path):
    """apply_keras_ema, keras_ema_values and export_weights pair the copies in fit()'s order
    as the CLI does, and say so: an AssumptionWarning naming fit_order (review-11-user-r12
    C1: they were silent), ExportResult.assumed; the loop's order stated: no fit_order."""
    import warnings

    from ckpt_tools import AssumptionWarning, apply_keras_ema, export_weights, keras_ema_values

    path, _ = fitted

    def said(call):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = call()
        return result, [str(w.message) for w in caught
                        if issubclass(w.category, AssumptionWarning)]

    model = keras.models.load_model(str(path))
    _, messages = said(lambda: apply_keras_ema(model, str(path), not_swapped=True))
    assert len(messages) == 1 and "fit_order" in messages[0] and "--loop-order" in messages[0]
    _, messages = said(lambda: keras_ema_values(str(path), not_swapped=True))
    assert len(messages) == 1 and "fit_order" in messages[0], messages
    result, messages = said(lambda: export_weights(str(path), tmp_path / "w.npz",
                                                   not_swapped=True))
    assert "fit_order" in result.assumed and result.to_dict()["assumed"] == result.assumed
    assert len(messages) == 1 and "fit_order" in messages[0], messages
    path, truth = looped
    model = keras.models.load_model(str(path))
    _, messages = said(lambda: apply_keras_ema(model, str(path), trainable=[
        v for name in ("d3", "d2", "d1") for v in model.get_layer(name).trainable_variables],
        loop_order=True, not_swapped=True))
    assert not any("fit_order" in m for m in messages), messages
    for v in model.trainable_variables:
        assert v.numpy().tobytes() == truth[v.path].tobytes(), v.path


def test_diff_ema_and_the_cli_say_it_once(fitted, tmp_path):
    """diff --ema said nothing of the assumption (review-11-user-r12 F6); the CLI prints its
    note, never the library's Python warning line as well."""
    path, _ = fitted
    code, text, err = run_cli(["diff", "--not-swapped", str(path), "--ema", "--json"])
    assert code == 0, err
    assert "fit_order" in json.loads(text)["assumed"], text
    assert "fit() builds the optimizer" in " ".join(err.split()), err
    code, _, err = run_cli(["export", "--not-swapped", str(path), "--out", str(tmp_path / "w.npz")])
    assert code == 0 and "AssumptionWarning" not in err, err
    assert " ".join(err.split()).count("fit() builds the optimizer") == 1, err


@pytest.fixture(scope="module")
def reversed_loop(keras, tmp_path_factory):
    """A loop listing every variable backwards (biases before kernels): no shape order of
    fit()'s fits the optimizer's variables, so the pairing is refused, not assumed."""
    import tensorflow as tf

    keras.utils.set_random_seed(8)
    inp = keras.Input((4,))
    model = keras.Model(inp, keras.layers.Dense(4, name="e2")(keras.layers.Dense(4, name="e1")(
        inp)))
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    x = tf.random.normal([8, 4], seed=2)
    backwards = list(reversed(model.trainable_variables))
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, backwards), backwards, strict=True))
    d = tmp_path_factory.mktemp("reversed")
    model.save(str(d / "m.keras"))
    assert [v.path for v in opt._trainable_variables][0] == "e2/bias"
    return d / "m.keras", keras_averages(opt), [v.path for v in backwards]


def test_a_loop_order_no_shape_fits_names_loop_order(reversed_loop, tmp_path):
    """review-11-user-r12 F7: the refusal names --loop-order, and following it gives the
    averages bit for bit (one round trip, not two)."""
    path, truth, order = reversed_loop
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped", str(path), "--out", str(out)])
    assert code == 6 and len(err.strip().splitlines()) == 1 and not out.exists(), err
    assert "--trainable NAMES --loop-order" in err, err
    code, _, err = run_cli(["export", "--not-swapped", str(path), "--trainable", ",".join(order),
                            "--loop-order", "--out", str(out)])
    assert code == 0, err
    assert_npz_holds(out, truth)


@pytest.fixture(scope="module")
def heads(keras, tmp_path_factory):
    """A multi-task fit(): four Dense(1) heads (scalar biases), Adam(use_ema=True), the
    optimizer built by fit() in the model's order. Seed 39 is one whose epoch-5 file the value
    check took for a custom loop ("task3/bias is 23x nearer task0/bias", review-11-attack-r17
    F2): groups this small prove nothing."""
    layers = keras.layers
    keras.utils.set_random_seed(39)
    inp = keras.Input((8,))
    h = layers.Dense(16, activation="relu")(inp)
    model = keras.Model(inp, [layers.Dense(1, name=f"task{k}")(h) for k in range(4)])
    x = np.random.rand(64, 8).astype("f4")
    ys = [np.random.rand(64, 1).astype("f4") * k for k in range(4)]
    opt = keras.optimizers.Adam(0.01, use_ema=True, ema_momentum=0.9)
    model.compile(opt, ["mse"] * 4)
    d = tmp_path_factory.mktemp("heads")
    truth: dict = {}

    class Truth(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            truth.update(keras_averages(opt))

    model.fit(x, ys, batch_size=16, epochs=5, verbose=0, shuffle=False, callbacks=[
        keras.callbacks.ModelCheckpoint(str(d / "e{epoch:02d}.keras")), Truth()])
    return d / "e05.keras", truth, [v.path for v in model.trainable_variables]


def test_small_groups_prove_no_loop(heads, tmp_path):
    """No false refusal of a fit() file (r17 F2), and a stated order is the caller's: never
    checked against values (r17 F3), nor then counted as the assumed fit order (r17 F6)."""
    path, truth, order = heads
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped", str(path), "--out", str(out)])
    assert code == 0, err
    assert_npz_holds(out, truth)
    code, text, err = run_cli(["export", "--not-swapped", str(path), "--trainable", ",".join(order),
                               "--loop-order", "--json", "--out", str(out), "--force"])
    assert code == 0, err
    assert "fit_order" not in json.loads(text).get("assumed", []), text
    assert_npz_holds(out, truth)


def _layer_norm_mlp(keras, seed: int):
    """Dense(16) -> LayerNormalization -> relu, four times, then Dense(1), compiled with
    SGD(0.1, use_ema=True, ema_momentum=0.9). Returns (model, optimizer)."""
    layers = keras.layers
    keras.utils.set_random_seed(seed)
    inp = keras.Input((16,))
    h = inp
    for i in range(4):
        h = layers.Dense(16, name=f"l{i}")(h)
        h = layers.Activation("relu")(layers.LayerNormalization(name=f"ln{i}")(h))
    model = keras.Model(inp, layers.Dense(1, name="out")(h))
    opt = keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.9)
    model.compile(opt, "mse")
    return model, opt


@pytest.fixture(scope="module")
def layer_norm_fit(keras, tmp_path_factory):
    """fit() of Dense(16) -> LayerNormalization -> relu, four times, SGD(0.1, use_ema=True,
    ema_momentum=0.9), saved mid-epoch after steps 7 and 8 (ModelCheckpoint(save_freq=...)):
    the (16,) group holds zero-initialised biases and betas beside ones-initialised gammas,
    whose pull on the group's centre made a lagging l1/bias copy near ln1/beta read as a
    custom loop's ("4x nearer ln1/beta", review-20-attack-r51 F2). Returns
    [(path, truth)]."""
    model, opt = _layer_norm_mlp(keras, seed=1)
    rs = np.random.RandomState(1)
    x, y = rs.randn(128, 16).astype("f4"), rs.randn(128, 1).astype("f4")
    d = tmp_path_factory.mktemp("layer_norm_fit")
    saved = []

    class Save(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            step = int(opt.iterations.numpy())
            if step in (7, 8):
                model.save(str(d / f"s{step}.keras"))
                saved.append((d / f"s{step}.keras", keras_averages(opt)))

    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[Save()])
    return saved


def test_a_layer_norm_fit_proves_no_loop(layer_norm_fit, tmp_path):
    """review-20-attack-r51 F2: copies of weights initialised alike are compared with each
    other, not only with a centre that unlike weights (gammas) pull away: no refusal."""
    assert len(layer_norm_fit) == 2
    for path, truth in layer_norm_fit:
        out = tmp_path / f"{path.stem}.npz"
        code, _, err = run_cli(["export", "--not-swapped", str(path), "--out", str(out)])
        assert code == 0, err
        assert_npz_holds(out, truth)


@pytest.fixture(scope="module")
def bias_beta_traded(keras, tmp_path_factory):
    """The same four Dense(16) -> LayerNormalization -> relu blocks, but a custom loop whose
    variable list trades l1/bias and ln1/beta (both (16,), both started at zero), SGD(0.1,
    use_ema=True, ema_momentum=0.9), saved after each of steps 60-75. Returns [(path, truth,
    ratio)]: ``ratio`` is how many times nearer ln1/beta than any other (16,) weight the copy
    at l1/bias's place sits (that copy is ln1/beta's average: the optimizer recorded it so)."""
    import tensorflow as tf

    model, opt = _layer_norm_mlp(keras, seed=0)
    listed = list(model.trainable_variables)
    names = [v.path for v in listed]
    a, b = names.index("l1/bias"), names.index("ln1/beta")
    listed[a], listed[b] = listed[b], listed[a]
    rs = np.random.RandomState(0)
    x, y = rs.randn(64, 16).astype("f4"), rs.randn(64, 1).astype("f4")

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(xb, training=True) - yb) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, listed), listed, strict=True))

    d = tmp_path_factory.mktemp("bias_beta_traded")
    saved = []
    for s in range(1, 76):
        i = (s - 1) % 8
        step(x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8])
        if s >= 60:
            model.save(str(d / f"s{s}.keras"))
            truth = keras_averages(opt)
            weights = {v.path: v.numpy() for v in model.trainable_variables}
            far = {p: float(np.linalg.norm(truth["ln1/beta"] - w))
                   for p, w in weights.items() if w.shape == (16,)}
            near = far.pop("ln1/beta")
            saved.append((d / f"s{s}.keras", truth, min(far.values()) / near))
    return saved


def test_traded_alike_started_copies_are_refused(bias_beta_traded, tmp_path):
    """review-21-attack-r57 F1: where the copy at l1/bias's place sits 4x nearer ln1/beta
    than any other weight (the README's "clearly nearer"), the file is refused, though the
    copy at ln1/beta's place lies close beside it (both started at zero): comparing copies
    with each other (r51 F2) took that closeness for a common start and exported the two
    traded, exit 0. Files with a smaller margin stay assumed (fit_order, with its note)."""
    clear = [path for path, _truth, ratio in bias_beta_traded if ratio >= 4.0]
    assert clear, [ratio for *_, ratio in bias_beta_traded]
    for path in clear:
        out = tmp_path / f"{path.stem}.npz"
        code, _, err = run_cli(["export", "--not-swapped", str(path), "--out", str(out)])
        assert code == 6 and "--loop-order" in err, (path.name, code, err)
        assert not out.exists()


def test_a_complete_loop_statement_assumes_no_fit_order(looped, tmp_path):
    """review-11-attack-r17 F6: a complete --trainable --loop-order statement keeping d2 in
    the model's position (d3,d2,d1) reported "assumed": ["fit_order", ...] and --strict
    --not-swapped refused it; a statement covering every copy assumes no order."""
    path, truth = looped
    out = tmp_path / "w.npz"
    code, text, err = run_cli(["export", "--not-swapped",
                               str(path), "--trainable", LOOP, "--loop-order",
                               "--json", "--out", str(out)])
    assert code == 0 and "assumed" not in json.loads(text), text
    code, _, err = run_cli(["export", str(path), "--trainable", LOOP, "--loop-order",
                            "--strict", "--not-swapped", "--out", str(out), "--force"])
    assert code == 0, err
    assert_npz_holds(out, truth)
