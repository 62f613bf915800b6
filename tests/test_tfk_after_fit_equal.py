"""A tf_keras (Keras 2) ``use_ema`` model's ``tf.train.Checkpoint`` saved after ``fit()``:
fit() ends by copying the averages into the weights (``finalize_variable_values``), so the
file's weights are the averages and restore-ema would change nothing; ``list`` still said
"use 'ckpt restore-ema' to evaluate with them" (review-33-user-u33 F5). Now it says so only
where a weight differs from its average (a checkpoint saved mid-fit), and says the weights
equal them where each does bit for bit, its pairing proven by the file (never by values).

The truth is tf_keras' own: at each save the test records whether every weight of
``model.trainable_variables`` equals ``optimizer._model_variables_moving_average``'s entry.
"""

from __future__ import annotations

import pytest
from helpers import run_cli
from helpers_keras import TF_KERAS, run_keras

BODY = """
model = dense_net(K, "hidden")
opt = K.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
model.compile(opt, "mse")

def snap(m):  # last epoch's end, before fit() copies the averages in: mid-fit
    tf.train.Checkpoint(model=m, optimizer=opt).write(f"{out}/mid/ckpt")
    truth["mid_equal"] = np.array(all(np.array_equal(v.numpy(), a.numpy()) for v, a in zip(
        m.trainable_variables, opt._model_variables_moving_average, strict=True)))

fit_snapped(K, model, snap)
tf.train.Checkpoint(model=model, optimizer=opt).write(f"{out}/end/ckpt")
truth["end_equal"] = np.array(all(np.array_equal(v.numpy(), a.numpy()) for v, a in zip(
    model.trainable_variables, opt._model_variables_moving_average, strict=True)))
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = tmp_path_factory.mktemp("tfk_after_fit")
    return out, run_keras(BODY, out, prelude=TF_KERAS)


def _summary(path) -> str:
    code, _out, err = run_cli(["list", str(path)])
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("EMA: ")]
    assert len(lines) == 1, err
    return lines[0]


def test_after_fit_the_weights_are_said_to_be_the_averages(saved):
    out, truth = saved
    assert bool(truth["end_equal"]) and not bool(truth["mid_equal"]), truth
    end = _summary(out / "end" / "ckpt")
    assert "the weights equal them bit for bit: use the file as it is" in end, end
    assert "restore-ema" not in end, end
    mid = _summary(out / "mid" / "ckpt")  # raw weights beside their averages
    assert "use 'ckpt restore-ema' to evaluate with them" in mid, mid
