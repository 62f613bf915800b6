"""``--use-ema``/``--no-use-ema``/``--trainable`` never pass silently: a statement that
contradicts the optimizer config a Keras file records is exit 6 naming the contradiction (the
file's config wins, as for a contradicting ``--trainable``), and on a TensorFlow checkpoint,
where they cannot decide anything, they are a usage error (exit 2) naming the file. The Keras
files are committed fixtures of the real Keras (``fixtures/make_keras_fixtures.py``)."""

from __future__ import annotations

import pytest
from helpers import FIXTURES, run_cli

from ckpt_tools import EmaError, OptionError, open_checkpoint

EMA = FIXTURES / "keras_ema"
H5 = FIXTURES / "keras_legacy_h5" / "model.h5"


@pytest.mark.parametrize(("path", "option", "recorded"), [
    (EMA / "no_ema.keras", "--use-ema", "use_ema=False"),
    (EMA / "model.keras", "--no-use-ema", "use_ema=True"),
    (H5, "--no-use-ema", "use_ema=True"),
])
def test_use_ema_contradicting_the_recorded_config_is_refused(path, option, recorded, tmp_path):
    for args in (["list", str(path)], ["map", str(path)],
                 ["export", str(path), "--out", str(tmp_path / "w.npz")]):
        code, _, err = run_cli([*args, option])
        assert code == 6, (args, err)
        assert f"error: {path}: {option} contradicts" in err and recorded in err, err
        assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "w.npz").exists()
    with pytest.raises(EmaError, match="contradicts"):
        open_checkpoint(path, use_ema=option == "--use-ema")


def test_use_ema_agreeing_with_the_config_is_accepted(tmp_path):
    code, _, err = run_cli(["export", str(EMA / "model.keras"), "--use-ema", "--out",
                            str(tmp_path / "w.npz"), "--not-swapped"])  # mid-fit(), unswapped
    assert code == 0, err


@pytest.mark.parametrize("option", [["--use-ema"], ["--no-use-ema"], ["--trainable", "a"]])
def test_keras_options_on_a_tensorflow_checkpoint_are_a_usage_error(option, tmp_path):
    path = FIXTURES / "towers_bn"
    for args in (["list", str(path)], ["map", str(path)], ["show", str(path), "global_step"],
                 ["export", str(path), "--out", str(tmp_path / "w.npz")]):
        code, _, err = run_cli([*args, *option])
        assert code == 2, (args, err)
        assert str(path) in err and option[0] in err and "Keras files" in err, err
    assert not (tmp_path / "w.npz").exists()
    with pytest.raises(OptionError, match="use_ema="):
        open_checkpoint(path, use_ema=False)


@pytest.mark.parametrize(("style", "said"), [
    ("keras", "no EMA copy in the optimizer (use_ema=True: it was not built with them, "
              "or keeps none of them"),
    ("tf2", "no average (ema.average(v)) in the checkpoint"),
    ("tf1", "no 'ExponentialMovingAverage' shadow"),
])
def test_unaveraged_warning_speaks_the_files_style(style, said, capsys):
    """map/restore-ema's warning about weights left raw names what is missing in the file's
    own terms (a Keras file has no 'ExponentialMovingAverage' shadows)."""
    from ckpt_tools.cli._output import Output
    from ckpt_tools.cli.ema import warn_unaveraged
    from ckpt_tools.emamap import EmaMap

    m = EmaMap("x", "ExponentialMovingAverage", {"a": "a"}, unaveraged=("a",),
               file_style=style)
    warn_unaveraged(Output(), m)
    err = capsys.readouterr().err
    assert said in err and "keep their raw values" in err, err


def test_export_collision_made_by_rename_names_rename(tmp_path):
    """Two names that --rename maps onto one: adjusting --rename is the fix (where both had
    one name already, --rename cannot separate them and the error says what can). The one
    line names the checkpoint and the output (review-22-user-u24 F5)."""
    code, _, err = run_cli(["export", str(FIXTURES / "linear_v2"), "--rename", "W=b", "--out",
                            str(tmp_path / "w.npz")])
    assert code == 7 and "exported as 'b' (W and b)" in err and "adjust --rename" in err, err
    assert "\n" not in err.strip() and str(FIXTURES / "linear_v2") in err, err
    assert f" -> {tmp_path / 'w.npz'}: two tensors" in err, err
    assert not (tmp_path / "w.npz").exists()


@pytest.mark.parametrize("path", [EMA / "adam.keras", EMA / "no_ema.keras", H5])
def test_apply_order_on_a_keras_file_is_a_usage_error(path, tmp_path):
    """--apply-order states how ema.apply() ordered a TF2 checkpoint's variables; a Keras
    optimizer averages in the model's order, so on a Keras file it is refused (exit 2, naming
    the option and why) by every command that takes it, never ignored."""
    out = tmp_path / "o"
    with open_checkpoint(path) as ckpt:
        name = ckpt.variables()[0].name
    for args in (["list", str(path)], ["map", str(path)], ["stats", str(path)],
                 ["show", str(path), name], ["diff", str(path), "--ema"],
                 ["restore-ema", str(path), "--out", str(out) + ".keras"],
                 ["restore-ema", str(path), "--out", str(out) + ".keras", "--dry-run"],
                 ["export", str(path), "--out", str(out) + ".npz"],
                 ["average", str(path), str(path), "--ema", "--bake", "--out", str(out)]):
        for order in ("trainable", "tracked"):
            code, _, err = run_cli([*args, "--apply-order", order])
            assert code == 2, (args, err)
            assert f"error: {path}: --apply-order" in err and "Keras files" in err, (args, err)
            assert "model's order" in err and len(err.strip().splitlines()) == 1, (args, err)
    assert not list(tmp_path.iterdir())
    from ckpt_tools import ema_map, export_weights
    from ckpt_tools.ema_apply_order import stated_pairings
    from ckpt_tools.ema_decide import decide_pairing
    from ckpt_tools.emamap import proven_pairs
    from ckpt_tools.listing import list_variables

    for call in (lambda: ema_map(path, apply_order="tracked"),
                 lambda: proven_pairs(path, apply_order="tracked"),
                 lambda: list_variables(path, apply_order="tracked"),
                 lambda: export_weights(path, tmp_path / "w.npz", apply_order="tracked")):
        with pytest.raises(OptionError, match="apply_order="):
            call()
    with open_checkpoint(path) as ckpt:
        for call in (decide_pairing, stated_pairings):
            with pytest.raises(OptionError, match="does not apply to Keras files"):
                call(ckpt, apply_order="trainable")
    assert not list(tmp_path.iterdir())


def test_apply_order_without_diff_ema_is_a_usage_error():
    path = str(FIXTURES / "tf2_object")
    code, _, err = run_cli(["diff", path, path, "--apply-order", "trainable"])
    assert code == 2 and "--apply-order" in err and "only with --ema" in err, err


def test_apply_ema_on_a_keras_file_refuses_tensorflow_options():
    """apply_ema delegates a Keras file to apply_keras_ema; apply_order= (and the other
    TensorFlow pairing options) were dropped there without a word: refused before anything
    is read or assigned."""
    from ckpt_tools import apply_ema

    class Model:  # never touched: the options are refused first
        trainable_variables: list = []
        weights: list = []

    for options in ({"apply_order": "tracked"}, {"ema_name": "avg"}, {"allow_missing": True}):
        with pytest.raises(OptionError, match="do not apply to Keras files") as err:
            apply_ema(Model(), str(EMA / "adam.keras"), **options)
        assert next(iter(options)) + "=" in str(err.value), err.value


@pytest.mark.parametrize("name", ["towers_bn", "linear_v1"])
def test_apply_order_on_a_name_based_checkpoint_is_a_usage_error(name, tmp_path):
    """A TF1 (name-based) checkpoint keys each average by its variable's name, so
    --apply-order would change nothing: refused (exit 2) by every command, never ignored."""
    path = FIXTURES / name
    out = tmp_path / "o"
    for args in (["list", str(path)], ["map", str(path)],
                 ["restore-ema", str(path), "--out", str(out)],
                 ["export", str(path), "--out", str(out) + ".npz"],
                 ["average", str(path), str(path), "--ema", "--bake", "--out", str(out)]):
        code, _, err = run_cli([*args, "--apply-order", "trainable"])
        assert code == 2, (args, err)
        assert "--apply-order" in err and "name-based" in err, (args, err)
        assert len(err.strip().splitlines()) == 1, (args, err)
    assert not list(tmp_path.iterdir())
    from ckpt_tools import ema_map

    with pytest.raises(OptionError, match="apply_order="):
        ema_map(path, apply_order="tracked")


@pytest.mark.parametrize(("path", "says"), [
    (EMA / "adam.keras", "omit --ema-name"),
    # the model tracks its optimizer: both attributes reach the averages (e8664e9)
    (FIXTURES / "keras3_object", "kept as model, optimizer: pass --ema-name model or omit it"),
])
def test_a_wrong_ema_name_is_reported_as_the_option_not_as_the_file(path, says, tmp_path):
    """The averages are there under another name: the refusal names the option and what the
    file keeps, never a false cause ("use_ema=False", "save the averages")."""
    stated = ["--not-swapped"] if path.suffix == ".keras" else []  # saved mid-fit()
    code, _, err = run_cli(["export", str(path), "--ema-name", "zzz", *stated,
                            "--out", str(tmp_path / "w.npz")])
    assert code == 6 and "under the EMA name 'zzz'" in err and says in err, err
    assert "use_ema=False" not in err and "saves only what it is given" not in err, err
    assert not (tmp_path / "w.npz").exists()
    if "--ema-name model" in says:  # the offer works as printed
        code, _, err = run_cli(["export", str(path), "--ema-name", "model",
                                "--out", str(tmp_path / "w.npz")])
        assert code == 0, err


def test_list_json_says_an_undecided_use_ema_is_unproven():
    """A bare .weights.h5 whose layout fits use_ema=True and False: every pairing command
    refuses naming --use-ema, and list --json says so in ema_unproven (review-11-user-r8 9)."""
    import json

    code, text, _ = run_cli(["list", str(EMA / "adam.weights.h5"), "--json"])
    assert code == 0
    unproven = json.loads(text)["ema_unproven"]
    assert unproven["option"] == "--use-ema/--no-use-ema" and "--use-ema" in unproven["reason"]
    code, text, _ = run_cli(["list", str(EMA / "adam.weights.h5"), "--json", "--use-ema"])
    assert code == 0 and json.loads(text)["ema_unproven"]["option"] == "--not-swapped"
    code, text, _ = run_cli(["list", str(EMA / "adam.weights.h5"), "--json", "--use-ema",
                             "--not-swapped"])  # saved during fit(), never swapped
    assert code == 0 and json.loads(text)["ema_unproven"] is None
