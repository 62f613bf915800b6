"""Every command and Python function that hands back a Keras file's assumed pairing says so
(review-12-attack-r18 F1, F8; review-12-user-r13 F1, F4, F5): ``map`` (text and ``--json``),
``list``, ``show``, ``stats`` print the fit-order note on stderr (``-q`` too); ``ema_map()``,
``diff_ema()`` and ``bake_ema()`` issue an ``AssumptionWarning`` and carry ``assumed``;
``bake_ema()`` of a Keras file writes a Keras file. A file saved by ``model.save()`` after
``fit()`` does not prove its order by its values (fit() copied the averages into the weights
in that very order): still assumed, ``--strict --fit-order`` passes.

Made here by Keras 3: layers a -> b -> c of equal shapes, initialised alike (so values cannot
place the copies), trained by a custom loop listing c, b, a (a pairing in fit()'s order is
then wrong: what the notes must flag); the truth is the optimizer's
``zip(_trainable_variables, _model_variables_moving_average)`` at save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import keras_averages, run_cli

FIT_NOTE = "fit() builds the optimizer"


def _model(keras, init: str | None = "ones"):
    kw = {"kernel_initializer": init} if init else {}
    inp = keras.Input((8,))
    h = keras.layers.Dense(8, name="a", **kw)(inp)
    h = keras.layers.Dense(8, name="b", **kw)(h)
    return keras.Model(inp, keras.layers.Dense(8, name="c", **kw)(h))


@pytest.fixture(scope="module")
def looped(keras, tmp_path_factory):
    """The custom loop's file (c, b, a listed first). Returns (path, truth)."""
    import tensorflow as tf

    keras.utils.set_random_seed(5)
    model = _model(keras)
    opt = keras.optimizers.Adam(0.01, use_ema=True, ema_momentum=0.9)
    model.compile(opt, "mse")
    listed = [w for n in ("c", "b", "a") for w in model.get_layer(n).trainable_variables]
    x = tf.random.normal([16, 8], seed=2)
    for _ in range(20):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((model(x) - 1.0) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, listed), listed, strict=True))
    assert [v.path for v in opt._trainable_variables][:2] == ["c/kernel", "c/bias"]
    path = tmp_path_factory.mktemp("assumed_loop") / "m.keras"
    model.save(str(path))
    return path, keras_averages(opt)


@pytest.fixture(scope="module")
def fitted(keras, tmp_path_factory):
    """fit(), then model.save(): finalize_variable_values() copied each average into its
    weight. Returns (path, truth)."""
    keras.utils.set_random_seed(6)
    model = _model(keras, init=None)
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    rng = np.random.default_rng(0)
    model.fit(rng.normal(size=(16, 8)).astype("f4"), rng.normal(size=(16, 8)).astype("f4"),
              epochs=2, batch_size=8, verbose=0)
    path = tmp_path_factory.mktemp("assumed_fit") / "m.keras"
    model.save(str(path))
    truth = keras_averages(opt)
    assert all(v.numpy().tobytes() == truth[v.path].tobytes()
               for v in model.trainable_variables)
    return path, truth


def _fit_note(err: str) -> bool:
    return FIT_NOTE in " ".join(err.split())


def test_the_assumed_order_is_wrong_here(looped, tmp_path):
    """The premise: fit()'s order hands a's and c's averages to each other (what the notes
    below must flag); the loop's order stated gives the truth."""
    path, truth = looped
    for extra, right in (([], False), (["--trainable", "c,b,a", "--loop-order"], True)):
        out = tmp_path / f"{right}.npz"
        code, _, err = run_cli(["export", str(path), "--out", str(out), *extra,
                                "--not-swapped"])
        assert code == 0, err
        with np.load(out) as z:
            same = {k: z[k].tobytes() == truth[k].tobytes() for k in truth}
        assert all(same.values()) if right else not same["a/kernel"], same


@pytest.mark.parametrize("quiet", [[], ["-q"]], ids=["plain", "quiet"])
def test_map_notes_the_assumed_order(looped, quiet):
    path, truth = looped
    code, _, err = run_cli(["map", str(path), "--not-swapped", *quiet])
    assert code == 0 and _fit_note(err), err
    code, text, err = run_cli(["map", str(path), "--json", "--not-swapped", *quiet])
    assert code == 0 and _fit_note(err), err
    doc = json.loads(text)  # the bare mapping README documents, unchanged
    assert doc and all(isinstance(v, str) for v in doc.values()), text


@pytest.mark.parametrize("args", [["list"], ["stats"], ["show", "--regex", "vars/2$"]],
                         ids=lambda a: a[0])
def test_reports_of_the_pairing_note_it(looped, args):
    path, _ = looped
    code, text, err = run_cli([args[0], str(path), *args[1:], "--not-swapped"])
    assert code == 0 and _fit_note(err), err
    if args[0] == "list":  # the summary under the table too (review-12-user-r13 F1)
        assert "their pairing assumes fit_order" in " ".join((text + err).split()), err
    else:
        code, text, err = run_cli([args[0], str(path), *args[1:], "--json", "--not-swapped"])
        assert code == 0 and "fit_order" in json.loads(text)["assumed"], text


@pytest.mark.parametrize("args", [["-q"], ["-q", "--grep", "*"]], ids=["plain", "typer"])
def test_list_quiet_names_keep_the_notes(looped, capsys, args):
    """``list -q``'s names-only paths (the typer-free one and the app's) print the names the
    assumed pairing gives the copies: the notes say so on stderr (review-12-attack-r21 F2)."""
    from ckpt_tools.cli import main

    path, _ = looped
    with pytest.raises(SystemExit) as exited:
        main(["list", str(path), *args])
    captured = capsys.readouterr()
    assert exited.value.code == 0, captured.err
    assert "c/kernel" in captured.out.split() and _fit_note(captured.err), captured
    with pytest.raises(SystemExit) as exited:
        main(["list", str(path), *args, "--fit-order", "--not-swapped"])
    captured = capsys.readouterr()
    assert exited.value.code == 0 and not _fit_note(captured.err), captured.err
    assert "rests on your statements" in captured.err, captured.err


@pytest.mark.parametrize("command", [["export", "--out", "w.npz"], ["list"]],
                         ids=lambda a: a[0])
def test_trainable_in_the_models_order_is_said_to_decide(looped, tmp_path, command):
    """--trainable naming the weights in the model's order moves no copy from fit()'s
    pairing, yet it is what pairs these equal-shaped copies (wrongly here: the loop listed
    c, b, a): the note and --json's stated_trainable count all 6 (review-12-attack-r21 F5)."""
    path, _ = looped
    args = [command[0], str(path), *[str(tmp_path / a) if a.endswith(".npz") else a
                                     for a in command[1:]],
            "--trainable", "a,b,c", "--not-swapped", "--json"]
    code, text, err = run_cli(args)
    assert code == 0, err
    assert "6 EMA copies are paired only because you stated --trainable" in \
        " ".join(err.split()), err
    doc = json.loads(text)
    assert len(doc["stated_trainable"]["pairs"]) == 6 and not doc.get("assumed"), text


def test_show_of_a_weight_alone_says_nothing(looped):
    """A weight's statistics do not depend on the pairing: no note."""
    path, _ = looped
    code, _, err = run_cli(["show", str(path), "--regex", "layers/dense/vars/0$"])
    assert code == 0 and not _fit_note(err), err


def test_python_ema_map_and_diff_ema_warn(looped):
    from ckpt_tools import AssumptionWarning, diff_ema, ema_map, open_checkpoint

    path, _ = looped  # saved by a custom loop, never swapped: stated
    with pytest.warns(AssumptionWarning, match="fit_order") as caught:
        m = ema_map(str(path), not_swapped=True)
    assert "fit_order" in m.assumed and len(caught) == 1
    assert caught[0].filename == __file__  # points at the caller
    with pytest.warns(AssumptionWarning, match="fit_order"), \
            open_checkpoint(str(path), not_swapped=True) as ckpt:
        report = diff_ema(ckpt)
    assert "fit_order" in report.assumed


def test_variables_warns_once_where_ema_of_is_assumed(looped):
    """open_checkpoint(p).variables() hands out Variable.ema_of: where that pairing is
    assumed, one AssumptionWarning per open checkpoint, pointing at the caller
    (review-12-attack-r21 F4); stated, none."""
    import warnings

    from ckpt_tools import AssumptionWarning, open_checkpoint

    path, _ = looped
    with open_checkpoint(str(path)) as ckpt:
        with pytest.warns(AssumptionWarning, match="fit_order") as caught:
            links = {v.name: v.ema_of for v in ckpt.variables() if v.role == "ema"}
            ckpt.variables()
        assert len(caught) == 1 and caught[0].filename == __file__, caught
        assert len(links) == 6
    with open_checkpoint(str(path), trainable=["a", "b", "c"], not_swapped=True) as ckpt, \
            warnings.catch_warnings():
        warnings.simplefilter("error", AssumptionWarning)
        ckpt.variables()


def test_variables_unwarned_is_variables_without_the_warning(looped):
    """The library's own accessor: the same variables, no AssumptionWarning (the commands
    and API functions say the assumption themselves); variables() still warns after it."""
    import warnings

    from ckpt_tools import AssumptionWarning, open_checkpoint

    path, _ = looped
    with open_checkpoint(str(path)) as ckpt:
        with warnings.catch_warnings():
            warnings.simplefilter("error", AssumptionWarning)
            quiet = ckpt.variables_unwarned()
        with pytest.warns(AssumptionWarning, match="fit_order"):
            loud = ckpt.variables()
    assert [(v.name, v.role, v.ema_of) for v in quiet] == [
        (v.name, v.role, v.ema_of) for v in loud]


def test_list_json_prints_no_python_warning(looped):
    """The CLI says it in "assumed": no Python warning line on stderr."""
    code, text, err = run_cli(["list", str(looped[0]), "--json"])
    assert code == 0 and "fit_order" in json.loads(text)["assumed"], text
    assert "AssumptionWarning" not in err and "warnings.warn" not in err, err


def test_bake_ema_of_a_keras_file_writes_keras(keras, looped, fitted, tmp_path):
    """Keras in, Keras out (issue 11 item 6): never a TF bundle named m.keras.index."""
    from ckpt_tools import AssumptionWarning, bake_ema

    path, _ = looped
    with pytest.warns(AssumptionWarning, match="fit_order"):
        result = bake_ema(str(path), tmp_path / "loop", not_swapped=True)
    assert "fit_order" in result.assumed
    assert sorted(p.name for p in (tmp_path / "loop").iterdir()) == ["m.keras"]
    path, truth = fitted
    with pytest.warns(AssumptionWarning, match="fit_order"):
        result = bake_ema(str(path), tmp_path / "fit")
    assert result.assumed == ["fit_order"]
    assert result.files == [str(tmp_path / "fit" / "m.keras")]
    model = keras.models.load_model(result.files[0])
    for v in model.trainable_variables:
        assert v.numpy().tobytes() == truth[v.path].tobytes(), v.path


def test_after_fit_the_order_is_still_assumed(fitted, tmp_path):
    """Every weight equals its fit()-order copy after fit(), which proves nothing: fit()
    copied them in that order. Assumed (noted, --strict refuses); --fit-order states it."""
    path, truth = fitted
    out = tmp_path / "w.npz"
    code, text, err = run_cli(["export", str(path), "--out", str(out), "--json"])
    assert code == 0 and json.loads(text)["assumed"] == ["fit_order"] and _fit_note(err), err
    code, _, err = run_cli(["export", str(path), "--out", str(out), "--strict", "--force"])
    assert code == 6 and "fit_order" in err, err
    code, _, err = run_cli(["export", str(path), "--out", str(out), "--strict", "--force",
                            "--fit-order"])
    assert code == 0, err
    with np.load(out) as z:
        assert all(z[k].tobytes() == truth[k].tobytes() for k in truth)


@pytest.fixture(scope="module")
def pretrained(keras, tmp_path_factory):
    """A custom loop listing b before a builds the optimizer (pre-training), then fit() and
    model.save() (review-12-attack-r21 F3): fit()'s finalize_variable_values() copies the
    averages into the weights by model order, so each weight holds the other's average and
    equals its fit()-order copy. Returns (path, truth: each weight's own average)."""
    import tensorflow as tf

    keras.utils.set_random_seed(11)
    inp = keras.Input((8,))
    model = keras.Model(inp, keras.layers.Dense(8, name="b")(keras.layers.Dense(8, name="a")(
        inp)))
    opt = keras.optimizers.Adam(0.01, use_ema=True, ema_momentum=0.9)
    tv = model.trainable_variables
    order = [tv[2], tv[3], tv[0], tv[1]]
    rng = np.random.default_rng(0)
    x, y = (rng.normal(size=(32, 8)).astype("float32") for _ in range(2))
    for _ in range(5):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, order), order, strict=True))
    model.compile(opt, "mse")
    truth: dict = {}

    class Record(keras.callbacks.Callback):
        def on_train_end(self, logs=None):  # before fit()'s finalize_variable_values
            truth.update(keras_averages(opt))

    model.fit(x, y, epochs=2, batch_size=8, verbose=0, callbacks=[Record()])
    assert model.get_layer("a").kernel.numpy().tobytes() == truth["b/kernel"].tobytes()
    path = tmp_path_factory.mktemp("assumed_pretrained") / "m.keras"
    model.save(str(path))
    return path, truth


def test_weights_equal_to_their_copies_do_not_prove_the_order(pretrained, tmp_path):
    path, truth = pretrained
    out = tmp_path / "w.npz"
    code, text, err = run_cli(["export", str(path), "--out", str(out), "--json"])
    assert code == 0 and json.loads(text)["assumed"] == ["fit_order"] and _fit_note(err), err
    with np.load(out) as z:  # the assumed order is wrong here: flagged, and not the truth
        assert z["a/kernel"].tobytes() == truth["b/kernel"].tobytes()
    code, _, err = run_cli(["export", str(path), "--out", str(out), "--strict", "--force"])
    assert code == 6 and "fit_order" in err, err
    code, _, err = run_cli(["export", str(path), "--out", str(out), "--force", "--trainable",
                            "b/kernel,b/bias,a/kernel,a/bias", "--loop-order", "--not-swapped"])
    assert code == 0, err
    with np.load(out) as z:
        assert all(z[k].tobytes() == truth[k].tobytes() for k in truth)


def test_everything_stated_is_one_line(looped, tmp_path):
    """review-12-user-r13 F5 (b): --fit-order --not-swapped: one short note."""
    path, _ = looped
    code, _, err = run_cli(["export", str(path), "--out", str(tmp_path / "w.npz"),
                            "--fit-order", "--not-swapped", "-q"])
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert notes == ["note: the pairing rests on your statements: --fit-order, "
                     "--not-swapped"], err


def test_raw_warning_names_the_swapped_case(looped, tmp_path):
    """review-12-user-r13 F4: the not_swapped note sends the user to --raw; its warning must
    not then say to drop it without naming that case. review-20-user-u22 F3: dropping --raw
    alone is refused here (the not_swapped question), so it names --not-swapped instead."""
    path, _ = looped
    code, _, err = run_cli(["export", str(path), "--out", str(tmp_path / "w.npz"), "--raw"])
    assert code == 0 and "SwapEMAWeights" in err, err
    assert "otherwise pass --not-swapped instead of --raw" in err and "drop --raw" not in err
    code, _, err = run_cli(["export", str(path), "--out", str(tmp_path / "v.npz")])
    assert code == 6 and "--not-swapped" in err, err  # what dropping --raw alone gives


@pytest.mark.parametrize("stated", [["--fit-order"], []])
def test_a_restore_ema_output_is_not_said_to_rest_on_its_copies_order(fitted, tmp_path, stated):
    """review-32-user-u34: ``list`` of restore-ema's output said "their pairing assumes
    fit_order, which the file cannot prove" of the EMA copies it keeps, though its weights
    are the averages, paired when it was written (under the stated order here). It now says
    the copies' pairing is not needed; where restore-ema assumed the order, its mark's note
    says so. The weights are the truth's averages."""
    path, truth = fitted
    out = tmp_path / "r" / "m.keras"
    code, _, err = run_cli(["restore-ema", str(path), *stated, "--out", str(out)])
    assert code == 0, err
    code, text, err = run_cli(["list", str(out)])
    said = " ".join((text + err).split())
    assert code == 0, err
    assert "their pairing assumes" not in said and "could trade EMA copies" not in said, said
    assert "its weights are the averages, so the pairing of its EMA copies, which assumes " \
           "fit_order, is not needed" in said, said
    assert ("ckpt restore-ema paired the averages" in said) is not bool(stated), said
    code, _, err = run_cli(["export", str(out), "--out", str(tmp_path / "w.npz")])
    assert code == 0, err
    with np.load(tmp_path / "w.npz") as z:
        assert all(z[k].tobytes() == truth[k].tobytes() for k in truth)
