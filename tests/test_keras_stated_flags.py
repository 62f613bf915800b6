"""``--trainable`` listing a layer config.json records frozen and leaving out a trainable one
of the same shapes (two layers swapped by mistake) is taken as stated, with a note naming both
(review-14-attack-r26 F4): config.json's flags are those at save, so either alone may be a
layer frozen or unfrozen since the optimizer was built, but both at once is a swap's look.
The file is made here by Keras 3; truth: the optimizer's averages at save time.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli


@pytest.fixture(scope="module")
def frozen_left(keras, tmp_path_factory):
    keras.utils.set_random_seed(4)
    inp = keras.Input((3,))
    left = keras.layers.Dense(3, name="left")
    x = keras.layers.Add()([left(inp), keras.layers.Dense(3, name="right")(inp)])
    model = keras.Model(inp, keras.layers.Dense(2, name="out")(x))
    left.trainable = False
    opt = keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    rng = np.random.default_rng(1)
    model.train_on_batch(rng.normal(size=(16, 3)).astype("float32"),
                         rng.normal(size=(16, 2)).astype("float32"))
    d = tmp_path_factory.mktemp("stated_flags")
    model.save(str(d / "m.keras"))
    truth = {v.path: opt._model_variables_moving_average[
        opt._get_variable_index(v)].numpy() for v in model.trainable_variables}
    return d / "m.keras", truth


def test_swapped_statement_is_noted_naming_both(frozen_left, tmp_path):
    path, _ = frozen_left
    code, text, err = run_cli(["export", str(path), "--not-swapped", "--trainable", "left,out",
                               "--out", str(tmp_path / "x.npz"), "--json"])
    assert code == 0, err
    assert "--trainable lists left/kernel, which config.json records frozen" in err, err
    assert "leaves out right/kernel" in err, err
    assert json.loads(text)["stated_trainable"]["contradicts_config"], text


def test_statement_agreeing_with_the_flags_has_no_such_note(frozen_left, tmp_path):
    path, truth = frozen_left
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(path), "--not-swapped", "--trainable", "right,out",
                            "--out", str(out)])
    assert code == 0, err
    assert "--trainable lists" not in err, err
    with np.load(out) as z:
        for k, v in truth.items():
            assert z[k].tobytes() == v.tobytes(), k
