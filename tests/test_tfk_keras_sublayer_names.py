"""A tf_keras ``.keras`` file records no name for a MultiHeadAttention's sublayers (only the
attributes ``_query_dense``...): its weights are named as tf_keras names them
(``mha/query/kernel``, the layer name config.json records and the names MultiHeadAttention
gives its sublayers), not ``multi_head_attention/_query_dense/kernel``; export under those
names with ``--trainable`` in those names writes the averages. Made here by real tf_keras; the
truth is ``v.name`` and ``opt._model_variables_moving_average`` read at save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli, run_script

pytest.importorskip("tf_keras")

SCRIPT = r'''
import json
import os
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
import tf_keras as k

out = sys.argv[1]
k.utils.set_random_seed(3)
i = k.Input((4, 6))
x = k.layers.MultiHeadAttention(2, 3, name="mha")(i, i)
m = k.Model(i, k.layers.Dense(3, name="head")(k.layers.GlobalAveragePooling1D()(x)))
opt = k.optimizers.Adam(0.01, use_ema=True, ema_momentum=0.8)
m.compile(opt, "mse")
rs = np.random.RandomState(0)
xs, ys = rs.randn(16, 4, 6).astype("float32"), rs.randn(16, 3).astype("float32")
tv = m.trainable_variables
for _ in range(4):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((m(xs) - ys) ** 2)
    opt.apply_gradients(zip(tape.gradient(loss, tv), tv))
truth = {}
for v in tv:
    truth[v.name[:-2]] = opt._model_variables_moving_average[
        opt._index_dict[opt._var_key(v)]].numpy()
m.save(f"{out}/m.keras")
with open(f"{out}/names.json", "w") as f:
    json.dump({"weights": [v.name[:-2] for v in m.weights],
               "trainable": [v.name[:-2] for v in tv]}, f)
np.savez(f"{out}/truth.npz", **truth)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tfk_mha")
    truth = run_script(SCRIPT, out)
    return out, truth, json.loads((out / "names.json").read_text())


def test_list_names_attention_sublayers_as_tf_keras_does(made):
    out, _, names = made
    code, text, err = run_cli(["list", "--json", str(out / "m.keras")])
    assert code == 0, err
    paths = {v["path"] for v in json.loads(text)["variables"] if v["role"] == "weight"}
    assert "mha/query/kernel" in names["weights"]  # tf_keras' own name
    assert paths == set(names["weights"]), (paths, names)


def test_export_with_trainable_in_those_names_writes_the_averages(made, tmp_path):
    out, truth, names = made
    dest = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / "m.keras"), "-o", str(dest),
                            "--trainable", ",".join(names["trainable"])])
    assert code == 0, err
    with np.load(dest) as got:
        for name in names["trainable"]:
            assert np.array_equal(got[name], truth[name]), name
