"""Keras 3's own recipe for checkpointing EMA weights, ``fit(callbacks=[SwapEMAWeights(
swap_on_epoch=True), ModelCheckpoint(...)])``: a mid-training file holds the averages as its
weights and the raw weights as its EMA copies, which the file cannot show (review r14 F7).
Every command that hands values or a pairing back refuses it (exit 6) naming ``--not-swapped``
and ``--raw`` (review-13-attack-r23 F1; tests/test_keras_swap_refused.py has the review's
setup); ``ckpt list`` says it in a note and in ``--json``'s ``"assumed"``. Where the weights
equal their copies bit for bit (the last epoch's file; ``model.save()`` after ``fit()``, whose
``finalize_variable_values()`` copies the averages into the weights) nothing is assumed.

Made here by Keras 3; the truth is recorded by callbacks around the swap: the optimizer's
averages (``_model_variables_moving_average``) before ``SwapEMAWeights`` runs, and the model's
weights right after ``ModelCheckpoint`` saved them. Layers of distinct shapes, so the fit-order
assumption does not arise (tests/test_keras_loop_order.py has it)."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
from helpers import assert_npz_holds, keras_averages, run_cli

STRICT_COMMANDS = (["list"], ["map"], ["diff", "--ema"])


@pytest.fixture(scope="module")
def swapped(keras, tmp_path_factory):
    d = tmp_path_factory.mktemp("swapped")
    keras.utils.set_random_seed(3)
    inp = keras.Input((4,))
    out = keras.layers.Dense(2, name="b")(keras.layers.Dense(3, name="a")(inp))
    model = keras.Model(inp, out)
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(16, 4)).astype("float32"), rng.normal(size=(16, 2)).astype("float32")
    truth: dict = {}

    class Before(keras.callbacks.Callback):  # runs before SwapEMAWeights' on_epoch_end
        def on_epoch_end(self, epoch, logs=None):
            truth["averages", epoch] = keras_averages(opt)

    class Saved(keras.callbacks.Callback):  # runs after ModelCheckpoint: the file's state
        def on_epoch_end(self, epoch, logs=None):
            truth["weights", epoch] = {v.path: v.numpy() for v in model.trainable_variables}
            truth["copies", epoch] = keras_averages(opt)

    model.fit(x, y, epochs=2, batch_size=8, verbose=0, callbacks=[
        Before(), keras.callbacks.SwapEMAWeights(swap_on_epoch=True),
        keras.callbacks.ModelCheckpoint(str(d / "e{epoch}.keras")), Saved()])
    model.save(str(d / "after.keras"))
    truth["after"] = keras_averages(opt)
    # what the library did: epoch 1 saved swapped, the last epoch and fit()'s end equal
    first, last = truth["weights", 0], truth["weights", 1]
    assert all(first[k].tobytes() == truth["averages", 0][k].tobytes() for k in first)
    assert all(first[k].tobytes() != truth["copies", 0][k].tobytes() for k in first)
    assert all(last[k].tobytes() == truth["copies", 1][k].tobytes() for k in last)
    assert all(v.numpy().tobytes() == truth["after"][v.path].tobytes()
               for v in model.trainable_variables)
    return d, truth


def test_a_swapped_file_is_refused_and_listed_as_assumed(swapped, tmp_path):
    d, _ = swapped
    path = str(d / "e1.keras")
    code, text, err = run_cli(["export", path, "--out", str(tmp_path / "w.npz"), "--json"])
    assert code == 6 and not text, (text, err)
    assert "SwapEMAWeights" in err and "--raw" in err and "--not-swapped" in err, err
    assert not (tmp_path / "w.npz").exists()
    code, text, err = run_cli(["list", path, "--json"])
    assert code == 0 and json.loads(text)["assumed"] == ["not_swapped"], (text, err)
    code, text, err = run_cli(["restore-ema", path, "--out", str(tmp_path / "ema.keras"),
                               "--json"])
    assert code == 6 and "--not-swapped" in err, (text, err)
    assert not (tmp_path / "ema.keras").exists()


@pytest.mark.parametrize("args", [["export", "--out", "w.npz"],
                                  ["restore-ema", "--out", "ema.keras"], ["diff", "--ema"]],
                         ids=lambda a: a[0])
def test_quiet_keeps_the_swap_refusal(swapped, tmp_path, args):
    """-q keeps the refusal: a swapped file's raw weights never come back with exit 0 and
    nothing said (review-12-user-r13 F0, review-13-attack-r23 F1)."""
    d, _ = swapped
    rest = [str(tmp_path / a) if a.endswith((".npz", ".keras")) else a for a in args[1:]]
    code, _, err = run_cli([args[0], str(d / "e1.keras"), *rest, "-q"])
    assert code == 6 and "SwapEMAWeights" in err, err


@pytest.mark.parametrize("extra", [[], ["--not-swapped"]], ids=["refused", "stated"])
def test_restore_ema_swap_text_names_no_option_it_lacks(swapped, tmp_path, extra):
    """restore-ema has no --raw: its refusal and its note say to use the file as it is
    (ckpt export --raw)."""
    d, _ = swapped
    code, _, err = run_cli(["restore-ema", str(d / "e1.keras"), "--out",
                            str(tmp_path / "ema.keras"), *extra])
    assert code == (0 if extra else 6), err
    swap = [line for line in err.splitlines() if "SwapEMAWeights" in line]
    assert len(swap) == 1, err
    assert "ckpt export --raw" in swap[0] and "use --raw" not in swap[0], err
    assert "--raw then" not in swap[0], err


@pytest.mark.parametrize("command", ["export", "restore-ema"])
def test_strict_refuses_a_swapped_file_naming_raw(swapped, tmp_path, command):
    d, _ = swapped
    path = str(d / "e1.keras")
    out = tmp_path / ("w.npz" if command == "export" else "ema.keras")
    code, _, err = run_cli([command, path, "--out", str(out), "--strict"])
    assert code == 6, err
    assert len(err.strip().splitlines()) == 1, err
    assert path in err and "not_swapped" in err and "--raw" in err, err
    assert not out.exists()


@pytest.mark.parametrize("args", STRICT_COMMANDS, ids=lambda a: a[0])
def test_strict_refuses_a_swapped_file_in_every_pairing_command(swapped, args):
    d, _ = swapped
    path = str(d / "e1.keras")
    code, _, err = run_cli([args[0], path, *args[1:], "--strict"])
    assert code == 6 and path in err and "not_swapped" in err and "--raw" in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_raw_as_strict_says_gives_the_averages(swapped, tmp_path):
    d, truth = swapped
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(d / "e1.keras"), "--raw", "--strict", "--out",
                            str(out)])
    assert code == 0, err
    assert_npz_holds(out, truth["averages", 0])


@pytest.mark.parametrize("name", ["after.keras", "e2.keras"])
def test_weights_equal_to_their_averages_assume_no_swap(swapped, tmp_path, name):
    d, truth = swapped
    path = str(d / name)
    out = tmp_path / "w.npz"
    code, text, err = run_cli(["export", path, "--out", str(out), "--json"])
    assert code == 0, err
    assert "assumed" not in json.loads(text), text
    assert "SwapEMAWeights" not in err, err
    assert_npz_holds(out, truth["after"] if name == "after.keras" else truth["copies", 1])
    code, text, err = run_cli(["list", path, "--json"])
    assert code == 0 and "assumed" not in json.loads(text), (text, err)


@pytest.mark.parametrize("args", [["export", "--out", "w.npz"],
                                  ["restore-ema", "--out", "ema.keras"], *STRICT_COMMANDS],
                         ids=lambda a: a[0])
def test_strict_passes_a_proven_file(swapped, tmp_path, args):
    d, _ = swapped
    rest = [str(tmp_path / a) if a.endswith((".npz", ".keras")) else a for a in args[1:]]
    code, _, err = run_cli([args[0], str(d / "after.keras"), *rest, "--strict"])
    assert code == 0, err


def test_python_strict(keras, swapped, tmp_path):
    from ckpt_tools import EmaError, apply_keras_ema, ema_map, export_weights, keras_ema_values

    d, truth = swapped
    swapped_file, proven = str(d / "e1.keras"), str(d / "after.keras")
    out = tmp_path / "w.npz"
    for call in (lambda p: keras_ema_values(p, strict=True),
                 lambda p: ema_map(p, strict=True),
                 lambda p: export_weights(p, out, strict=True)):
        with pytest.raises(EmaError, match="not_swapped"):
            call(swapped_file)
        assert not out.exists()
        call(proven)
    assert_npz_holds(out, truth["after"])
    model = keras.models.load_model(proven)
    with pytest.raises(EmaError, match="not_swapped"):
        apply_keras_ema(model, swapped_file, strict=True)
    apply_keras_ema(model, proven, strict=True)
    for v in model.trainable_variables:
        assert v.numpy().tobytes() == truth["after"][v.path].tobytes(), v.path
    with pytest.raises(EmaError, match="--not-swapped"):  # without strict: refused too
        keras_ema_values(swapped_file)
    assert len(keras_ema_values(swapped_file, not_swapped=True)) == 4  # as stated


@pytest.fixture(scope="module")
def unswapped(keras, tmp_path_factory):
    """ModelCheckpoint without SwapEMAWeights: mid-training, the weights are raw and the
    copies the averages (recorded after ModelCheckpoint saved the epoch's file)."""
    d = tmp_path_factory.mktemp("unswapped")
    keras.utils.set_random_seed(4)
    inp = keras.Input((4,))
    model = keras.Model(inp, keras.layers.Dense(2, name="b")(keras.layers.Dense(3, name="a")(inp)))
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(16, 4)).astype("float32"), rng.normal(size=(16, 2)).astype("float32")
    truth: dict = {}

    class Saved(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            truth[epoch] = keras_averages(opt)

    model.fit(x, y, epochs=2, batch_size=8, verbose=0, callbacks=[
        keras.callbacks.ModelCheckpoint(str(d / "e{epoch}.keras")), Saved()])
    return d / "e1.keras", truth[0]


def test_not_swapped_stated_passes_strict(unswapped, tmp_path):
    """--not-swapped states what --strict would refuse as assumed; the file's averages, bit
    for bit, and --json says it was stated, not assumed."""
    path, averages = unswapped
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(path), "--out", str(out), "--strict"])
    assert code == 6 and "--not-swapped" in err and not out.exists(), err
    code, text, err = run_cli(["export", str(path), "--out", str(out), "--strict",
                               "--not-swapped", "--json"])
    assert code == 0, err
    doc = json.loads(text)
    assert doc.get("stated_not_swapped") is True and "assumed" not in doc, text
    assert "because you stated --not-swapped" in " ".join(err.split()), err
    assert_npz_holds(out, averages)
    for args in (["list", "--json"], ["map"], ["diff", "--ema"]):
        code, text, err = run_cli([args[0], str(path), *args[1:], "--strict", "--not-swapped"])
        assert code == 0, (args, err)
    code, text, err = run_cli(["list", str(path), "--json", "--not-swapped"])
    assert code == 0 and "assumed" not in json.loads(text), text


def test_python_not_swapped(unswapped):
    from ckpt_tools import EmaError, keras_ema_values, open_checkpoint

    path, averages = unswapped
    with pytest.raises(EmaError, match="not_swapped=True"):
        keras_ema_values(path, strict=True)
    got = keras_ema_values(path, strict=True, not_swapped=True)
    with open_checkpoint(path) as ckpt:
        shown = {v.name: v.path for v in ckpt.variables()}
    assert {shown[k]: v.tobytes() for k, v in got.items()} == {
        k: v.tobytes() for k, v in averages.items()}


def test_not_swapped_on_a_tensorflow_checkpoint_is_a_usage_error():
    from helpers import FIXTURES

    code, _, err = run_cli(["export", str(FIXTURES / "linear_v2"), "--not-swapped", "--out",
                            "never.npz"])
    assert code == 2 and "--not-swapped" in err and "TensorFlow checkpoint" in err, err


@pytest.fixture(scope="module")
def swapped_tf(keras, tmp_path_factory):
    """The same recipe, the run saving tf.train.Checkpoint(model=, optimizer=) after the swap
    (review-11-attack-r16 F3): its Keras 3 copies are paired by their paths, and the swap
    question is the same as for the .keras."""
    import tensorflow as tf

    d = tmp_path_factory.mktemp("swapped_tf")
    keras.utils.set_random_seed(5)
    inp = keras.Input((4,))
    model = keras.Model(inp, keras.layers.Dense(2, name="b")(keras.layers.Dense(3, name="a")(inp)))
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(16, 4)).astype("float32"), rng.normal(size=(16, 2)).astype("float32")
    truth: dict = {}

    class Save(keras.callbacks.Callback):  # after SwapEMAWeights: the model holds averages
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 0:
                tf.train.Checkpoint(model=model, optimizer=opt).write(str(d / "ckpt"))
                truth["weights"] = {v.path: v.numpy() for v in model.trainable_variables}
                truth["copies"] = keras_averages(opt)

    model.fit(x, y, epochs=2, batch_size=8, verbose=0, callbacks=[
        keras.callbacks.SwapEMAWeights(swap_on_epoch=True), Save()])
    first = truth["weights"]
    assert all(first[k].tobytes() != truth["copies"][k].tobytes() for k in first)
    return str(d / "ckpt"), truth


def _values(path) -> list[bytes]:
    with np.load(path) as z:
        return sorted(z[k].tobytes() for k in z.files)


def test_a_tf_checkpoint_of_keras_copies_is_refused_unstated(swapped_tf, tmp_path):
    path, truth = swapped_tf
    out = tmp_path / "w.npz"
    code, text, err = run_cli(["export", path, "--out", str(out), "--json"])
    assert code == 6 and "SwapEMAWeights" in err and "--not-swapped" in err, (text, err)
    assert not out.exists()
    code, text, err = run_cli(["list", path, "--json"])
    assert code == 0 and json.loads(text)["assumed"] == ["not_swapped"], (text, err)
    code, _, err = run_cli(["export", path, "--out", str(out), "--not-swapped"])
    assert code == 0, err
    assert _values(out) == sorted(v.tobytes() for v in truth["copies"].values())  # as said
    code, _, err = run_cli(["export", path, "--out", str(tmp_path / "s.npz"), "--strict"])
    assert code == 6 and "not_swapped" in err and "--not-swapped" in err, err
    assert not (tmp_path / "s.npz").exists()
    code, _, err = run_cli(["export", path, "--raw", "--strict", "--out", str(tmp_path / "r.npz")])
    assert code == 0, err  # the file's own weights: the averages of a swapped save
    assert _values(tmp_path / "r.npz") == sorted(v.tobytes() for v in truth["weights"].values())
    code, text, err = run_cli(["export", path, "--strict", "--not-swapped", "--json", "--out",
                               str(tmp_path / "n.npz")])
    assert code == 0 and json.loads(text).get("stated_not_swapped") is True, (text, err)


def test_python_on_a_tf_checkpoint_of_keras_copies(swapped_tf, tmp_path):
    import warnings

    from ckpt_tools import AssumptionWarning, EmaError, UnprovenPairingError, export_weights

    path, _ = swapped_tf
    with pytest.raises(UnprovenPairingError, match="not_swapped=True") as refused:
        export_weights(path, tmp_path / "w.npz")
    assert refused.value.option == "--not-swapped" and not (tmp_path / "w.npz").exists()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = export_weights(path, tmp_path / "w.npz", not_swapped=True)
    assert result.assumed == []
    assert not any(issubclass(w.category, AssumptionWarning) for w in caught)
    with pytest.raises(EmaError, match="not_swapped"):
        export_weights(path, tmp_path / "s.npz", strict=True)


def test_trainable_takes_the_names_list_shows_on_a_tf_checkpoint(swapped_tf, tmp_path):
    """A Keras 3 model's weights keyed through the optimizer's lists show their own names in
    'ckpt list' (a/kernel): --trainable takes those names (review-12-attack-r21 N1); the
    fit() order (a, b) fits the copies' paths, the other is refused."""
    path, truth = swapped_tf
    code, text, _ = run_cli(["list", path, "--json"])
    shown = [v["path"] for v in json.loads(text)["variables"] if v["role"] == "weight"]
    assert shown == ["a/kernel", "a/bias", "b/kernel", "b/bias"], shown
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", path, "--trainable", ",".join(shown), "--loop-order",
                            "--not-swapped", "--out", str(out)])
    assert code == 0, err
    assert _values(out) == sorted(v.tobytes() for v in truth["copies"].values())
    code, _, err = run_cli(["export", path, "--trainable", "b/kernel,b/bias,a/kernel,a/bias",
                            "--loop-order", "--out", str(tmp_path / "x.npz")])
    assert code == 6 and "not the loop's order" in err, err


def _caught(call, *args, **kw):
    """``call(...)``'s result and the RecordedStatementWarnings it issued."""
    import warnings

    from ckpt_tools import RecordedStatementWarning as Said
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        return call(*args, **kw), [w.message for w in said if issubclass(w.category, Said)]


@pytest.mark.parametrize("fmt", ["keras", "h5"])
def test_a_restored_output_repeats_not_swapped(swapped, tmp_path, fmt):
    """review-33-attack-r128 F3: restore-ema --not-swapped of the swapped e1.keras (a false
    statement) wrote its raw copies as the weights, read later as proven averages with no
    word of it. Its mark records it: list, map, export (and its file), Python repeat it."""
    from ckpt_tools import export_weights

    d, truth = swapped
    out = str(tmp_path / f"m.{fmt}")
    code, _, err = run_cli(["restore-ema", str(d / "e1.keras"), "--not-swapped", "--format",
                            fmt, "--out", out])
    assert code == 0, err
    for args in (["list"], ["map"], ["export", "--out", str(tmp_path / "e.npz")]):
        code, text, err = run_cli([args[0], out, *args[1:]])  # (map: an .h5 has no copies)
        said = " ".join((text + err).split())
        assert code == (6 if args == ["map"] and fmt == "h5" else 0), said
        assert "read under --not-swapped, as its mark records" in said, said
    assert_npz_holds(tmp_path / "e.npz", truth["copies", 0])
    record = json.loads(zipfile.ZipFile(tmp_path / "e.npz").comment)["ckpt_tools"]
    assert record.get("stated") == ["not_swapped"], record  # the export's file says it too
    result, said = _caught(export_weights, out, tmp_path / "p.npz")
    assert [w.stated for w in said] == [["not_swapped"]], said
    assert result.to_dict()["written_under"] == {"not_swapped": True}, result


def test_a_tf_checkpoints_restored_output_repeats_not_swapped(swapped_tf, tmp_path):
    """review-33-attack-r128 F3: restore-ema --not-swapped, and average --ema --bake
    --not-swapped, of a tf.train.Checkpoint(model=, optimizer=Adam(use_ema=True)) wrote no
    _CKPT_TOOLS_RECORD: its reads said nothing of the statement. Both record it now."""
    import shutil

    from ckpt_tools import export_weights

    path, truth = swapped_tf
    code, _, err = run_cli(["restore-ema", path, "--not-swapped", "--out", str(tmp_path / "r")])
    assert code == 0, err
    for d in ("a", "b"):  # two saves of the run, alike (the mean is each one's values)
        shutil.copytree(path.rsplit("/", 1)[0], tmp_path / d)
    code, _, err = run_cli(["average", "--ema", "--bake", "--not-swapped", str(tmp_path / "a"),
                            str(tmp_path / "b"), "--newest", str(tmp_path / "b"),
                            "--out", str(tmp_path / "v")])
    assert code == 0, err
    for out in ("r", "v"):
        code, _, err = run_cli(["export", str(tmp_path / out), "--out", str(tmp_path / "e.npz"),
                                "--force"])
        assert code == 0 and "read under --not-swapped" in " ".join(err.split()), err
        assert _values(tmp_path / "e.npz") == sorted(v.tobytes() for v in truth["copies"].values())
        result, said = _caught(export_weights, str(tmp_path / out), tmp_path / f"{out}.npz")
        assert [w.stated for w in said] == [["not_swapped"]], said
        assert result.stated["written_under"] == {"not_swapped": True}, result
