"""``ckpt restore-ema model.keras`` without ``--out`` works: a Keras file in gives a Keras file
out in a new ``<stem>_ema/`` beside it (never in the input's own directory, as README's
"Writing outputs safely" promises for every restore-ema output), written atomically, never
replacing the input; a second run needs ``--force``, which replaces the output only. The
output loads with ``keras.models.load_model`` and its weights are the averages Keras recorded
at save time (``fixtures/keras_ema/expected.npz``, fixtures/make_keras_fixtures.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import FIXTURES, run_cli

EMA = FIXTURES / "keras_ema"


@pytest.mark.parametrize("case", ["model", "adam"])
def test_restore_ema_of_a_keras_file_has_a_default_output(case, tmp_path, monkeypatch):
    keras = pytest.importorskip("keras")
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(EMA / f"{case}.keras", run / f"{case}.keras")
    before = (run / f"{case}.keras").read_bytes()
    monkeypatch.chdir(run)
    code, out, err = run_cli(["restore-ema", "--not-swapped", f"{case}.keras", "--dry-run"])
    assert code == 0 and f"{case}_ema/{case}.keras" in out + err, err
    assert sorted(p.name for p in run.iterdir()) == [f"{case}.keras"]
    code, _, err = run_cli(["restore-ema", "--not-swapped", f"{case}.keras"])
    assert code == 0, err
    target = run / f"{case}_ema" / f"{case}.keras"
    assert sorted(p.name for p in run.iterdir()) == [f"{case}.keras", f"{case}_ema"]
    assert sorted(p.name for p in target.parent.iterdir()) == [f"{case}.keras"]
    # a second run: the output exists; --force replaces it, never the input
    code, _, err = run_cli(["restore-ema", "--not-swapped", f"{case}.keras"])
    assert code == 7 and "--force" in err, err
    code, _, err = run_cli(["restore-ema", "--not-swapped", str(run / f"{case}.keras"), "--force"])
    assert code == 0, err
    assert (run / f"{case}.keras").read_bytes() == before
    _holds_averages(keras.models.load_model(target, compile=False), case)


def _holds_averages(model, case: str) -> None:
    """The model's trainable variables are the averages Keras recorded at save, bit for bit."""
    doc = json.loads((EMA / "expected.json").read_text())
    with np.load(EMA / "expected.npz") as z:
        truth = {k: z[k] for k in z.files}
    recorded = doc["cases"][case]["trainable_variables"]  # Keras' order at save
    for v, path in zip(model.trainable_variables, recorded, strict=True):
        assert path.endswith(v.path), (path, v.path)  # a Sequential's name may prefix it
        got = np.asarray(v.numpy())  # bfloat16: expected.npz holds its bits
        got = got.view(np.uint16) if got.dtype.name == "bfloat16" else got
        np.testing.assert_array_equal(got, truth[f"{case}:ema/{path}"], err_msg=path)


@pytest.mark.parametrize("case", ["model", "adam"])
def test_restore_ema_of_a_keras_archive_to_weights_h5(case, tmp_path):
    """review-11-user-r12 F13: --out x.weights.h5 of a .keras gives its weights alone, which
    Keras 3 load_weights() reads into the model (compiled or not) as the averages."""
    keras = pytest.importorskip("keras")
    out = tmp_path / "ema.weights.h5"
    code, said, err = run_cli(["restore-ema", "--not-swapped",
                               str(EMA / f"{case}.keras"), "--out", str(out)])
    assert code == 0 and str(out) in said + err, err
    for compile_ in (False, True):
        model = keras.models.load_model(EMA / f"{case}.keras", compile=compile_)
        model.load_weights(out)
        _holds_averages(model, case)


def test_restore_ema_of_a_tensorflow_checkpoint_still_needs_out():
    for args in (["restore-ema", str(FIXTURES / "linear_v2")],
                 ["restore-ema", str(EMA / "model.keras"), "--format", "h5"]):
        code, _, err = run_cli(args)
        assert code == 2 and "--out" in err and "required" in err, (args, err)


@pytest.mark.parametrize(("src", "args", "words"), [
    # the output is the input's kind: a .keras archive named .h5 opens nowhere
    ("model.keras", ["--out", "{d}/x.h5"], "name it *.keras or *.weights.h5"),
    ("model.weights.h5", ["--use-ema", "--out", "{d}/x.keras"], "name it *.weights.h5"),
    ("model.keras", ["--out", "{d}/x.npz"], "ckpt export writes .npz"),
    ("model.keras", ["--format", "v2", "--out", "{d}/v2"], "no Keras or TensorFlow loader"),
    # only the options given are named (review-24-user-u26 F12: no --include, which
    # restore-ema does not offer)
    ("model.keras", ["--grep", "hidden/*", "--out", "{d}/g"],
     "error: Invalid value for --grep: --grep does not apply to a Keras output"),
    ("model.keras", ["--grep", "hidden/*", "--regex", "x", "--out", "{d}/g"],
     "--grep, --regex do not apply to a Keras output"),
    ("model.keras", ["--exclude", "hidden/*", "--out", "{d}/g"], "does not apply"),
    ("model.keras", ["--slots", "drop", "--out", "{d}/g"], "does not apply"),
    ("model.keras", ["--ema-name", "avg", "--out", "{d}/g"], "does not apply"),
    ("model.keras", ["--name", "foo", "--out", "{d}/y.keras"], "already names the file"),
    # --name too: a zip named foo.h5 (or foo) opens nowhere
    ("model.keras", ["--name", "foo.h5", "--out", "{d}"], "--name foo.h5: the averages"),
    ("model.keras", ["--name", "foo", "--out", "{d}"], "name it *.keras or *.weights.h5"),
])
def test_restore_ema_of_a_keras_file_refuses_what_it_would_ignore(tmp_path, src, args, words):
    """Options a Keras output cannot honour, and --out names of another kind, are exit 2,
    never silently dropped (review-11-user-r9 F15, F16, F31); nothing is written."""
    code, _, err = run_cli(["restore-ema", "--not-swapped", str(EMA / src),
                            *[a.format(d=tmp_path / "o") for a in args]])
    assert code == 2, err
    assert words in " ".join(err.split()), err
    assert not (tmp_path / "o").exists()


def test_restore_ema_json_of_a_keras_file_says_its_format(tmp_path):
    code, out, err = run_cli(["restore-ema", "--not-swapped", str(EMA / "model.keras"), "--out",
                              str(tmp_path / "x.keras"), "--json"])
    assert code == 0, err
    assert json.loads(out)["format"] == "keras"


def test_keras_outputs_of_averages_mention_the_swapped_case(tmp_path):
    """A file saved after SwapEMAWeights(swap_on_epoch=True) is indistinguishable from an
    ordinary one (README), so export and restore-ema of a Keras 3 file's averages refuse it
    unstated (review-13-attack-r23 F1; before: a note, review-11-attack-r10 F4,
    review-11-user-r9 F18), -q too, naming --not-swapped and --raw; stated, the note says the
    swapped case (--raw); TF files stay quiet."""
    for argv in (["export", str(EMA / "model.keras"), "--out", str(tmp_path / "w.npz")],
                 ["restore-ema", str(EMA / "model.keras"), "--out", str(tmp_path / "r.keras")]):
        for quiet in ([], ["-q"]):
            code, _, err = run_cli([*argv, *quiet])
            assert code == 6 and "SwapEMAWeights" in err and "--raw" in err, err
            assert "--not-swapped" in err and not Path(argv[-1]).exists(), err
        code, _, err = run_cli([*argv, "--not-swapped"])
        assert code == 0 and "SwapEMAWeights" in err and "--raw" in err, err
        # equal-shaped weights (biases, BatchNorm gamma/beta): paired in fit()'s order, which
        # a custom loop may not have followed (review-11-attack-r10 F9)
        assert "the order fit() builds the optimizer in" in " ".join(err.split()), err
        code, _, err = run_cli([*argv, "-q", "--force", "--not-swapped"])
        assert code == 0 and "SwapEMAWeights" in err, err
    code, _, err = run_cli(["export", str(FIXTURES / "linear_v2"), "--out",
                            str(tmp_path / "t.npz")])
    assert code == 0 and "SwapEMAWeights" not in err, err


def test_a_tf_keras_legacy_h5_does_not_mention_swap_ema_weights(tmp_path):
    """review-11-user-r11 F1: tf_keras has no SwapEMAWeights callback, so its legacy .h5
    (keras_version 2.x) gets no note about it, and ``assumed`` does not list
    ``not_swapped``. Made here by tf_keras; the truth is its optimizer's averages."""
    tf_keras = pytest.importorskip("tf_keras")
    tf_keras.utils.set_random_seed(2)
    model = tf_keras.Sequential([tf_keras.layers.Dense(3, input_shape=(4,), name="a"),
                                 tf_keras.layers.Dense(2, name="b")])
    opt = tf_keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    x = np.random.default_rng(1).random((8, 4)).astype("float32")
    for _ in range(3):
        model.train_on_batch(x, x[:, :2])
    model.save(str(tmp_path / "m.h5"))
    truth = {v.name.split(":")[0]: a.numpy() for v, a in zip(
        model.trainable_variables, opt._model_variables_moving_average, strict=True)}
    code, out, err = run_cli(["export", str(tmp_path / "m.h5"), "--out",
                              str(tmp_path / "w.npz"), "--json"])
    assert code == 0, err
    assert "SwapEMAWeights" not in err, err
    assert "not_swapped" not in json.dumps(json.loads(out).get("assumed", [])), out
    with np.load(tmp_path / "w.npz") as z:
        got = {k: z[k] for k in z.files}
    assert sorted(got) == sorted(truth), (sorted(got), sorted(truth))
    for name, value in truth.items():
        assert got[name].tobytes() == value.tobytes(), name


def test_restore_ema_q_without_out_prints_where_it_wrote(tmp_path, monkeypatch):
    """-q silences the summary, not the one fact the user cannot know: the output's place,
    which ckpt chose (review-13-user-u15 F7). With --out given, -q prints nothing."""
    keras = pytest.importorskip("keras")
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(EMA / "adam.keras", run / "adam.keras")
    monkeypatch.chdir(run)
    code, out, err = run_cli(["restore-ema", "--not-swapped", "adam.keras", "-q"])
    assert code == 0, err
    target = run / "adam_ema" / "adam.keras"
    assert out.splitlines() == [str(Path("adam_ema") / "adam.keras")], out
    assert target.is_file() and "wrote" not in out + err
    _holds_averages(keras.models.load_model(target, compile=False), "adam")
    code, out, err = run_cli(["restore-ema", "--not-swapped", "adam.keras", "-q",
                              "--out", str(tmp_path / "o" / "x.keras")])
    assert code == 0 and out == "", (out, err)
