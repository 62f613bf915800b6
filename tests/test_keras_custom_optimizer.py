"""An optimizer class that is not a Keras built-in (a registered subclass) may create
variables of its own before Keras' EMA copies, so a ``.keras`` does not prove where the
copies sit: refused (exit 6) in every command and in the Python API, never the subclass's own
variables handed back as averages (review-11-attack-r8 C3). Its ``tf.train.Checkpoint`` names
the copies and pairs them. Made here by Keras 3; the truth is the optimizer's averages."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli

import ckpt_tools


@pytest.fixture(scope="module")
def lookahead(keras, tf, tmp_path_factory):
    @keras.saving.register_keras_serializable(package="ckpttest")
    class LookaheadSGD(keras.optimizers.SGD):
        def build(self, variables):
            if self.built:
                return
            # slow weights first, then Keras' own (EMA copies, momentum)
            self._slow = [self.add_variable_from_reference(v, "slow") for v in variables]
            super().build(variables)

    keras.utils.set_random_seed(5)
    inp = keras.Input((4,))
    model = keras.Model(inp, keras.layers.Dense(3, name="out")(
        keras.layers.Dense(6, name="hidden")(inp)))
    opt = LookaheadSGD(0.05, momentum=0.9, use_ema=True, ema_momentum=0.5)
    model.compile(opt, "mse")
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(16, 4)).astype("float32"), rng.normal(size=(16, 3)).astype("float32")
    for _ in range(3):
        model.train_on_batch(x, y)
    out = tmp_path_factory.mktemp("lookahead")
    model.save(str(out / "m.keras"))
    tf.train.Checkpoint(model=model, optimizer=opt).write(str(out / "tf" / "ckpt"))
    truth = {v.path: opt._model_variables_moving_average[
        opt._get_variable_index(v)].numpy() for v in model.trainable_variables}
    return out, model, truth


def test_a_custom_optimizer_class_in_a_keras_file_is_refused(lookahead, tmp_path):
    out, model, _ = lookahead
    for args in (["export", str(out / "m.keras"), "--out", str(tmp_path / "w.npz")],
                 ["restore-ema", str(out / "m.keras"), "--out", str(tmp_path / "r")],
                 ["export", str(out / "m.keras"), "--trainable", "hidden,out",
                  "--out", str(tmp_path / "w.npz")]):
        code, _, err = run_cli(args)
        assert code == 6 and "ckpttest>LookaheadSGD, not a Keras built-in" in err, err
        assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "w.npz").exists() and not (tmp_path / "r").exists()
    with pytest.raises(ckpt_tools.EmaError, match="not a Keras built-in"):
        ckpt_tools.apply_keras_ema(model, out / "m.keras", load_weights=False, not_swapped=True)


def test_its_tf_checkpoint_pairs_the_copies_by_their_names(lookahead, tmp_path):
    out, _, truth = lookahead
    code, _, err = run_cli(["export", "--not-swapped",
                            str(out / "tf"), "--out", str(tmp_path / "w.npz")])
    assert code == 0, err
    with np.load(tmp_path / "w.npz") as z:
        got = {k: z[k] for k in z.files}
    assert len(got) == len(truth)
    for path, value in truth.items():
        match = [k for k in got if k.endswith(path)]
        assert len(match) == 1 and got[match[0]].tobytes() == value.tobytes(), (path, sorted(got))
