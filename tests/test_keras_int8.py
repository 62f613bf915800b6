"""A Keras 3 model quantized to int8 (``model.quantize("int8")``: int8 kernels beside float
kernel scales, both non-trainable) and fine-tuned with ``use_ema``: ``export`` wrote every float
weight and left the int8 kernels out, exit 0 (review-11-attack-r10 F19). The kernels are model
weights, exported as stored; the averages of the trainable weights are the optimizer's, read at
save time. Made here by Keras 3."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import keras_averages, run_cli


@pytest.fixture(scope="module")
def quantized(keras, tf, tmp_path_factory):
    layers = keras.layers
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((8,)), layers.Dense(8, name="a"),
                          layers.LayerNormalization(name="ln"), layers.Dense(4, name="c")],
                         name="q")
    m.quantize("int8")
    opt = keras.optimizers.Adam(0.02, use_ema=True, ema_momentum=0.5)
    m.compile(opt, "mse")
    x = np.random.RandomState(0).rand(32, 8).astype("float32")
    y = np.random.RandomState(1).rand(32, 4).astype("float32")
    m.fit(x, y, verbose=0, epochs=2)
    m.train_on_batch(x, y)
    averages = keras_averages(opt)
    kernels = {v.path: v.numpy() for v in m.weights if v.dtype == "int8"}
    assert len(kernels) == 2
    d = tmp_path_factory.mktemp("int8")
    m.save(str(d / "m.keras"))
    tf.train.Checkpoint(model=m, optimizer=opt).write(str(d / "obj" / "ckpt"))
    return d, averages, kernels


# (the .keras refuses its averages, naming --trainable: the int8 layers count as custom ones
# whose trainable weights the file does not name; its raw export must hold the kernels)
@pytest.mark.parametrize(("source", "extra"), [("m.keras", ["--raw"]), ("obj", [])])
def test_int8_kernels_are_exported_with_the_averages(quantized, tmp_path, source, extra):
    d, averages, kernels = quantized
    out = tmp_path / "w.npz"
    # --raw takes no --not-swapped (exit 2 since c3ccba7: it cannot change the raw weights).
    stated = [] if "--raw" in extra else ["--not-swapped"]
    code, _, err = run_cli(["export", *stated, str(d / source), "--out", str(out), *extra])
    assert code == 0, err
    with np.load(out) as z:
        got = {name: z[name] for name in z.files}

    def find(path: str) -> np.ndarray:
        tail = path.split("/", 1)[1]
        hits = [v for k, v in got.items() if path.endswith(k) or k.endswith(tail)]
        assert len(hits) == 1, (path, sorted(got))
        return hits[0]

    for path, value in kernels.items():
        kernel = find(path)
        assert kernel.dtype == np.int8 and kernel.tobytes() == value.tobytes(), path
    for path, value in averages.items() if not extra else ():
        assert find(path).tobytes() == value.tobytes(), path
