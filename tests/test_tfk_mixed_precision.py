"""tf_keras (Keras 2) ``mixed_float16``: ``compile`` wraps ``Adam``/``SGD(momentum)``
``use_ema=True`` in a ``LossScaleOptimizerV3``, or the user wraps ``AdamW`` in one explicitly.
The wrapped optimizer is built outside its name scope, so its averages are named
``average/h/kernel`` (not ``Adam/average/h/kernel``): proven averages all the same, by the
object graph (the optimizer's ``_model_variables_moving_average`` list), by config.json's and
the ``.h5`` training config's ``inner_optimizer`` (``use_ema: true``) with the optimizer's
variable names. Every layout (TF-format ``save_weights``, ``tf.train.Checkpoint``, ``.keras``,
legacy ``.h5``) gives, through ``export``, ``restore-ema``, ``map`` and ``list``, the averages
tf_keras holds for each weight (``inner_optimizer._model_variables_moving_average``, looked up
by tf_keras' own index of each model variable), bit for bit. Made here by tf_keras.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli, run_script

pytest.importorskip("tf_keras")

SCRIPT = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, tensorflow as tf, tf_keras as k
out = sys.argv[1]
k.mixed_precision.set_global_policy("mixed_float16")
makers = {
    "adam": lambda: k.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5),
    "sgd": lambda: k.optimizers.SGD(0.1, momentum=0.9, use_ema=True, ema_momentum=0.5),
    "explicit": lambda: k.mixed_precision.LossScaleOptimizer(
        k.optimizers.AdamW(0.05, use_ema=True, ema_momentum=0.5)),
}
truth = {}
for case, make in makers.items():
    k.utils.set_random_seed(1)
    m = k.Sequential([k.Input((3,)), k.layers.Dense(4, name="h"),
                      k.layers.BatchNormalization(),
                      k.layers.Dense(2, name="out", dtype="float32")])
    m.compile(make(), "mse")
    x = np.random.rand(16, 3).astype("float32")
    y = np.random.rand(16, 2).astype("float32")
    m.fit(x, y, epochs=2, batch_size=8, verbose=0)
    m.train_on_batch(x, y)  # fit() ends copying the averages into the weights
    opt = m.optimizer
    assert type(opt).__name__ == "LossScaleOptimizerV3", type(opt)
    inner = opt.inner_optimizer
    for i, v in enumerate(m.trainable_variables):
        avg = inner._model_variables_moving_average[inner._index_dict[inner._var_key(v)]]
        assert avg.numpy().tobytes() != v.numpy().tobytes()
        truth[f"{case}/raw{i}"] = v.numpy()
        truth[f"{case}/ema{i}"] = avg.numpy()
    d = f"{out}/{case}"
    m.save_weights(f"{d}/tf/ckpt")
    tf.train.Checkpoint(model=m, optimizer=opt).write(f"{d}/obj/ckpt")
    m.save(f"{d}/model.keras")
    m.save(f"{d}/model.h5")
np.savez(f"{out}/truth.npz", **truth)
"""

CASES = ("adam", "sgd", "explicit")
FILES = ("tf/ckpt", "obj/ckpt", "model.keras", "model.h5")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = tmp_path_factory.mktemp("tfk_mixed")
    return out, run_script(SCRIPT, out)


def _export(path, out, *extra) -> dict[str, np.ndarray]:
    code, _, err = run_cli(["export", str(path), "--out", str(out), *extra])
    assert code == 0, err
    with np.load(out) as z:
        return {n: z[n] for n in z.files}


def _restored(text: str) -> str:
    return json.loads(text)["output"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", FILES)
def test_mixed_precision_averages_bit_for_bit(saved, case, name, tmp_path):
    out, truth = saved
    path = out / case / name
    n = sum(1 for k in truth if k.startswith(f"{case}/raw"))
    raw = _export(path, tmp_path / "raw.npz", "--raw")
    ema = _export(path, tmp_path / "ema.npz")
    assert sorted(raw) == sorted(ema)
    which = {}  # exported name -> index in model.trainable_variables (its raw value says)
    for key, value in raw.items():
        hits = [i for i in range(n) if truth[f"{case}/raw{i}"].tobytes() == value.tobytes()]
        if hits:
            (which[key],) = hits
    assert sorted(which.values()) == list(range(n)), which
    for key, value in ema.items():
        want = truth[f"{case}/ema{which[key]}"] if key in which else raw[key]  # BN statistics
        assert value.dtype == want.dtype and value.tobytes() == want.tobytes(), key
    # restore-ema: the written checkpoint's weights are the averages
    code, text, err = run_cli(["restore-ema", str(path), "--out", str(tmp_path / "r" / "x"),
                               "--json"])
    assert code == 0, err
    back = _export(_restored(text), tmp_path / "back.npz", "--raw")
    assert {k: v.tobytes() for k, v in back.items()} == {k: v.tobytes() for k, v in ema.items()}
    # map and list: one proven average per trainable weight
    code, text, err = run_cli(["map", str(path), "--json"])
    assert code == 0, err
    assert sum(1 for src, dst in json.loads(text).items() if src != dst) == n, text
    code, text, err = run_cli(["list", str(path), "--json"])
    assert code == 0, err
    listed = json.loads(text)["variables"]
    assert sum(1 for v in listed if v["role"] == "ema" and v["ema_of"]) == n, text
    assert not [v for v in listed if v["role"] == "weight" and "average" in v["name"]]
