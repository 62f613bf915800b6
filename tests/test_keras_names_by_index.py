"""A Keras 3 subclassed model whose equal Dense sublayers the ``.keras`` stores two ways
(review-14-attack-r26 F6): ``zz``/``mm`` in the ``layers`` list (class recorded: ``zz/kernel``),
``aa``/``bb``/``head`` by attribute name (class and variable names not recorded: ``aa/0``).
The file proves no more than the index, so the names stay; ``list`` and ``export`` now say
why, naming the layers shown by index, instead of mixing the two styles without a word.

The truth: Keras 3 itself (``v.path`` of each weight at save time; the file's HDF5 groups).
"""

from __future__ import annotations

import numpy as np
import pytest
from _corpus import run_cli

keras = pytest.importorskip("keras")


@pytest.fixture(scope="module")
def same(tmp_path_factory):
    out = tmp_path_factory.mktemp("same")

    @keras.saving.register_keras_serializable("s15f_names_by_index")
    class Same(keras.Model):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.zz = keras.layers.Dense(6, name="zz")
            self.aa = keras.layers.Dense(6, name="aa")
            self.mm = keras.layers.Dense(6, name="mm")
            self.bb = keras.layers.Dense(6, name="bb")
            self.head = keras.layers.Dense(3, name="head")

        def call(self, x):
            for layer in (self.zz, self.aa, self.mm, self.bb):
                x = keras.ops.tanh(layer(x))
            return self.head(x)

    keras.utils.set_random_seed(3)
    m = Same(name="same")
    m(np.zeros((1, 6), "float32"))
    m.compile(keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5), "mse")
    rng = np.random.default_rng(5)
    m.fit(rng.normal(size=(8, 6)).astype("float32"), rng.normal(size=(8, 3)).astype("float32"),
          epochs=1, batch_size=4, verbose=0)
    paths = [v.path for v in m.weights]
    m.save(str(out / "same.keras"))
    return str(out / "same.keras"), paths


def test_list_says_why_some_weights_are_named_by_index(same, capsys):
    path, paths = same
    assert "same/aa/kernel" in paths and "same/zz/kernel" in paths  # Keras' own names
    code, out, err = run_cli(["list", path], capsys)
    assert code == 0, err
    said = out + err
    assert "zz/kernel" in said and "aa/0" in said, said  # what the file proves, as before
    line = next(x for x in said.splitlines() if "named by index" in x)
    assert line.startswith("aa, bb, head:"), line
    assert "does not record these layers' variable names" in line, line


def test_export_says_it_too(same, capsys, tmp_path):
    path, _ = same
    npz = tmp_path / "raw.npz"
    code, _, err = run_cli(["export", path, "--raw", "--out", str(npz)], capsys)
    assert code == 0, err
    assert "aa, bb, head: weights named by index" in err, err
    with np.load(npz) as got:
        assert {"zz/kernel", "aa/0", "head/1"} <= set(got.files), got.files
