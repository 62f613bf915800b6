"""``--trainable`` on a bare ``.weights.h5``. A Functional model with three equal-shaped Dense
layers (``left``, ``right``, ``right2``) lists its layers in Keras' order, so every EMA copy
pairs without a statement as fit() builds the optimizer; a stated order that moves them is
taken (a custom ``train_step`` may have built the optimizer otherwise, which the file does
not record) but said to be the caller's statement (review-11-attack-r7 m1, r9 F4). The file
is made here by Keras 3; the truth is the optimizer's averages at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_npz_holds, run_cli


@pytest.fixture(scope="module")
def branches(keras, tmp_path_factory):
    keras.utils.set_random_seed(3)
    inp = keras.Input((3,))
    left = keras.layers.Dense(3, name="left")(inp)
    right = keras.layers.Dense(3, name="right")(inp)
    right2 = keras.layers.Dense(3, name="right2")(right)
    out = keras.layers.Dense(2, name="out")(keras.layers.Add()([right2, left]))
    model = keras.Model(inp, out)
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 3)).astype("float32")
    y = rng.normal(size=(16, 2)).astype("float32")
    for _ in range(3):
        model.train_on_batch(x, y)
    d = tmp_path_factory.mktemp("branches")
    model.save_weights(str(d / "m.weights.h5"))
    truth = {v.path: opt._model_variables_moving_average[
        opt._get_variable_index(v)].numpy() for v in model.trainable_variables}
    return d / "m.weights.h5", truth


def test_trainable_moving_the_files_order_is_marked_as_the_statement(branches, tmp_path):
    """A bare .weights.h5 records no model class: a train_step of its own may have built the
    optimizer in another order (review-11-attack-r9 F4), so the file's layer order is no proof
    against --trainable; the pairs it moves are reported as the caller's statement."""
    import json

    path, _ = branches
    out = tmp_path / "w.npz"
    code, text, err = run_cli(["export", "--not-swapped", str(path), "--use-ema", "--trainable",
                               "left,right,right2,out", "--out", str(out), "--json"])
    assert code == 0, err
    assert "paired only because you stated --trainable" in err, err
    assert len(json.loads(text)["stated_trainable"]["pairs"]) == 6, text


@pytest.mark.parametrize("stated", [[], ["--trainable", "right,right2,left,out"]])
def test_trainable_agreeing_with_the_file_pairs_bit_for_bit(branches, stated, tmp_path):
    path, truth = branches
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped",
                            str(path), "--use-ema", *stated, "--out", str(out)])
    assert code == 0, err
    assert_npz_holds(out, truth)


@pytest.fixture(scope="module")
def frozen_left(keras, tmp_path_factory):
    """``left`` frozen before compiling, ``right`` of the same shape trained: a bare
    ``.weights.h5`` does not record which was frozen, so only ``--trainable`` pairs it."""
    keras.utils.set_random_seed(4)
    inp = keras.Input((3,))
    left_layer = keras.layers.Dense(3, name="left")
    x = keras.layers.Add()([left_layer(inp), keras.layers.Dense(3, name="right")(inp)])
    model = keras.Model(inp, keras.layers.Dense(2, name="out")(x))
    left_layer.trainable = False
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    rng = np.random.default_rng(1)
    model.train_on_batch(rng.normal(size=(16, 3)).astype("float32"),
                         rng.normal(size=(16, 2)).astype("float32"))
    d = tmp_path_factory.mktemp("frozen_left")
    model.save_weights(str(d / "m.weights.h5"))
    truth = {v.path: opt._model_variables_moving_average[
        opt._get_variable_index(v)].numpy() for v in model.trainable_variables}
    truth.update({v.path: v.numpy() for v in model.weights if v.path not in truth})
    return d / "m.weights.h5", truth


def test_pairings_resting_on_trainable_are_said_to_be_a_statement(frozen_left, tmp_path):
    """As for --apply-order: stderr says the pairing is the caller's statement, and --json
    lists the pairs it decided (review-11-user-r8 4)."""
    import json

    path, truth = frozen_left
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped", str(path), "--use-ema", "--out", str(out)])
    assert code == 6 and "--trainable" in err, err
    code, text, err = run_cli(["export", "--not-swapped",
                               str(path), "--use-ema", "--trainable", "right,out",
                               "--out", str(out), "--json"])
    assert code == 0, err
    assert "paired only because you stated --trainable" in err, err
    # out's averages are proven by their shape alone; left or right is the statement
    assert len(json.loads(text)["stated_trainable"]["pairs"]) == 2, text
    with np.load(out) as z:
        for name, value in truth.items():
            assert z[name].tobytes() == value.tobytes(), name


def test_a_trainable_in_the_files_order_still_decides_equal_shapes(branches, tmp_path):
    """A statement that keeps the pairing the file gives without it still decides the copies
    of equal-shaped weights (left, right, right2: their order is the build order, which the
    file leaves open and assumes without it): it is said to be the statement, counting those
    6 copies, not out's (its shape alone pairs them) (review-12-attack-r21 F5)."""
    import json

    path, _ = branches
    code, text, err = run_cli(["export", "--not-swapped", str(path), "--use-ema", "--out",
                               str(tmp_path / "a.npz"), "--json"])
    assert code == 0 and "fit_order" in json.loads(text)["assumed"], text
    code, text, err = run_cli(["export", "--not-swapped", str(path), "--use-ema", "--trainable",
                               "right,right2,left,out", "--out", str(tmp_path / "w.npz"),
                               "--json"])
    assert code == 0 and "6 EMA copies are paired only because you stated --trainable" in \
        " ".join(err.split()), err
    doc = json.loads(text)
    assert "fit_order" not in doc.get("assumed", []), text
    assert len(doc["stated_trainable"]["pairs"]) == 6, text


def test_keras_ema_values_takes_the_trainable_statement_without_tensorflow(frozen_left):
    """The refusal's advice, followed in the TF-free API (review-11-user-r8 6)."""
    import ckpt_tools

    path, truth = frozen_left
    with pytest.raises(ckpt_tools.EmaError, match="trainable"):
        ckpt_tools.keras_ema_values(path, use_ema=True, not_swapped=True)
    values = ckpt_tools.keras_ema_values(path, use_ema=True, trainable=["right", "out"],
                                         not_swapped=True)
    with ckpt_tools.open_checkpoint(path, use_ema=True, trainable=["right", "out"]) as ckpt:
        path_of = {v.name: v.path for v in ckpt.variables()}
    got = {path_of[k]: v for k, v in values.items()}
    assert sorted(got) == ["out/bias", "out/kernel", "right/bias", "right/kernel"]
    for name, value in got.items():
        assert value.tobytes() == truth[name].tobytes(), name


def test_restore_ema_marks_the_stated_trainable_and_use_ema(branches, tmp_path):
    """restore-ema on a Keras file says, like export, what rests on the caller's statements:
    --trainable moving the file's order, and --use-ema where the file records no use_ema
    (review-11-user-r9 F1, F2); the written file holds the averages of the pairing stated."""
    import json

    path, _ = branches
    code, text, err = run_cli(["restore-ema", "--not-swapped",
                               str(path), "--use-ema", "--trainable",
                               "left,right,right2,out", "--out", str(tmp_path / "r"),
                               "--json"])
    assert code == 0, err
    doc = json.loads(text)
    assert "paired only because you stated --trainable" in err, err
    assert "only because you stated --use-ema" in " ".join(err.split()), err
    assert len(doc["stated_trainable"]["pairs"]) == 6 and doc["stated_use_ema"] is True, doc


def test_export_marks_a_stated_use_ema(branches, tmp_path):
    import json

    path, truth = branches
    out = tmp_path / "w.npz"
    code, text, err = run_cli(["export", "--not-swapped",
                               str(path), "--use-ema", "--out", str(out), "--json"])
    assert code == 0, err
    assert "only because you stated --use-ema" in " ".join(err.split()), err
    assert json.loads(text)["stated_use_ema"] is True
    assert_npz_holds(out, truth)


@pytest.mark.parametrize("json_out", [[], ["--json"]])
def test_list_marks_a_stated_use_ema(branches, json_out):
    """``list --use-ema`` says, as map and export do, that the copies are EMA copies only by
    the statement (review-11-user-r10 F11); ``--json`` carries ``stated_use_ema``."""
    import json

    path, _ = branches
    code, text, err = run_cli(["list", str(path), "--use-ema", *json_out])
    assert code == 0, err
    assert "only because you stated --use-ema" in " ".join(err.split()), err
    if json_out:
        assert json.loads(text)["stated_use_ema"] is True
