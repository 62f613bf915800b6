"""A Keras 3 model with repeated blocks, ``use_ema=True``, saved in
``tf.train.Checkpoint(model=model, optimizer=opt)``: the blocks' sublayers record the same
``full_name`` (``sequential/block/kernel`` for both of a block's Dense layers), and the keys
run through the optimizer's ``_trainable_variables/N``. ``export`` and ``map``
name such weights by their path through the model
(``model/_functional/_operations/1/d1/_kernel``), never by the optimizer's list
(``restore-ema`` keeps the checkpoint's keys, as TensorFlow restores by key). Made here by
real Keras 3; the truth is ``optimizer._model_variables_moving_average`` read at save time."""

from __future__ import annotations

import numpy as np
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()


def _save(tf, keras, directory) -> dict[str, np.ndarray]:
    """Returns path through the model -> its average at save time."""
    keras.utils.set_random_seed(0)

    class Block(keras.layers.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.d1, self.d2 = keras.layers.Dense(4), keras.layers.Dense(4)

        def call(self, x):
            return self.d2(self.d1(x))

    m = keras.Sequential([keras.Input((4,)), Block(), Block(), keras.layers.Dense(2)])
    opt = keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5,
                               ema_overwrite_frequency=None)
    x = np.random.RandomState(0).randn(8, 4).astype("float32")
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(m(x) ** 2)
        grads = tape.gradient(loss, m.trainable_variables)
        opt.apply_gradients(zip(grads, m.trainable_variables, strict=True))
    average = {id(v): a.numpy() for v, a in zip(opt._trainable_variables,
                                                 opt._model_variables_moving_average,
                                                 strict=True)}
    tf.train.Checkpoint(model=m, optimizer=opt).write(str(directory / "ckpt"))
    truth = {}
    for i, block in enumerate(m.layers[:2]):
        for attr in ("d1", "d2"):
            dense = getattr(block, attr)
            where = f"model/_functional/_operations/{i + 1}/{attr}"
            truth[f"{where}/_kernel"] = average[id(dense.kernel)]
            truth[f"{where}/bias"] = average[id(dense.bias)]
    return truth


def test_repeated_blocks_are_named_by_their_path_through_the_model(tf, keras, tmp_path):
    d = tmp_path / "k3"
    truth = _save(tf, keras, d)
    target = tmp_path / "w.npz"
    # a custom loop, never swapped by SwapEMAWeights: stated (--not-swapped)
    result = runner.invoke(app, ["export", str(d), "--out", str(target), "--not-swapped"])
    assert result.exit_code == 0, result.output
    with np.load(target) as z:
        assert not [n for n in z.files if n.startswith("optimizer/")], z.files
        for path, value in truth.items():
            assert z[path].tobytes() == value.tobytes(), path
    shown = runner.invoke(app, ["map", str(d), "--not-swapped"])
    assert shown.exit_code == 0, shown.output
    assert "optimizer/_trainable_variables" not in shown.output, shown.output
    assert all(p in shown.output for p in truth), shown.output
    restored = runner.invoke(app, ["restore-ema", str(d), "--out", str(tmp_path / "r"),
                                   "--json", "--not-swapped"])
    assert restored.exit_code == 0, restored.output
    # restore-ema keeps the checkpoint's keys (TensorFlow restores by key): all ten averaged
    assert len(__import__("json").loads(restored.stdout)["replaced"]) == 10
