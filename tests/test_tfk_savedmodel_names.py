"""tf_keras SavedModel (``model.save(dir, save_format="tf")``): its weights are named by their
layer paths, the ones the TF-format checkpoint of the same model shows
(``layer_with_weights-0/layer_with_weights-0/kernel``), not by the root's ``variables/0``
list alias, alike in ``list``, ``export`` and a stated ``--trainable`` (review r16 N2).

Truth from the real tf_keras in a subprocess: the keys ``tf.train.list_variables`` reports for
``model.save_weights`` (TF format), each with the average the optimizer held for that weight
(``optimizer._model_variables_moving_average``) at save time.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from helpers import assert_npz_holds, run_cli, run_script, set_terminal

pytest.importorskip("tf_keras")

SCRIPT = r'''
import os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np, tensorflow as tf, tf_keras as k

out, alike = sys.argv[1], len(sys.argv) > 2  # alike: enc and dec of one shape
tf.random.set_seed(0)


def sub(name, n_in, n_out):
    i = k.Input((n_in,))
    return k.Model(i, k.layers.Dense(n_out, name="fc")(i), name=name)


# every weight its own shape, or (alike) the pairing left open
enc, dec = (sub("enc", 4, 4), sub("dec", 4, 4)) if alike else (sub("enc", 4, 3), sub("dec", 3, 5))
i = k.Input((4,))
m = k.Model(i, dec(enc(i)))
opt = k.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
m.compile(opt, "mse")
x, y = tf.random.normal([16, 4]), tf.random.normal([16, 4 if alike else 5])
order = dec.trainable_variables + enc.trainable_variables  # a custom loop: dec first
for _ in range(4):
    with tf.GradientTape() as t:
        loss = tf.reduce_mean((m(x) - y) ** 2)
    opt.apply_gradients(zip(t.gradient(loss, order), order))
m.save(out + "/sm", save_format="tf")
m.save_weights(out + "/ckpt")
if alike:  # the names only
    np.savez(out + "/truth.npz", names=[k.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE") for k, _
                                        in tf.train.list_variables(out + "/ckpt")
                                        if k.startswith("layer_with_weights-")])
    sys.exit(0)
by_shape = {tuple(v.shape): v for v in m.trainable_variables}
assert len(by_shape) == 4
truth = {}
for key, shape in tf.train.list_variables(out + "/ckpt"):
    if key.startswith(("optimizer/", "_CHECKPOINTABLE")):
        continue
    v = by_shape[tuple(shape)]
    avg = opt._model_variables_moving_average[opt._index_dict[opt._var_key(v)]]
    truth[key.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE")] = avg.numpy()
truth["order"] = np.array(
    [n for v in order for n, a in truth.items() if n != "order" and a.shape == v.shape])
np.savez(out + "/truth.npz", **truth)
'''


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = tmp_path_factory.mktemp("tfk_sm")
    truth = run_script(SCRIPT, out)
    order = [str(n) for n in truth.pop("order")]
    return out, truth, order


def test_list_names_the_weights_by_their_layer_paths(saved):
    out, truth, _ = saved
    code, text, err = run_cli(["list", str(out / "sm"), "--json"])
    assert code == 0, err
    rows = json.loads(text)["variables"]
    weights = {r["path"]: r["key"] for r in rows if r["role"] == "weight"}
    assert sorted(weights) == sorted(truth)
    # the keys stay the SavedModel's own (its root's variables list)
    assert all(k.startswith("variables/") for k in weights.values()), weights


def test_export_and_stated_trainable_use_the_layer_paths(saved, tmp_path):
    out, truth, order = saved
    assert order[0].startswith("layer_with_weights-1/")  # dec, listed first by the loop
    npz = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(out / "sm"), "--out", str(npz)])
    assert code == 0, err
    assert_npz_holds(npz, truth)
    npz.unlink()
    code, _, err = run_cli(["export", str(out / "sm"), "--trainable", ",".join(order),
                            "--loop-order", "--out", str(npz)])
    assert code == 0, err
    assert_npz_holds(npz, truth)
    with np.load(npz) as z:
        assert all(not n.startswith("variables/") for n in z.files)


def test_at_80_columns_each_name_keeps_its_layer_and_its_last_segment(tmp_path, monkeypatch):
    """Averages of alike weights left open (their cells say so at length): at 80 columns a
    weight was shown as ``…/kernel`` or ``layer_with_weights-1/…``, the layer or the variable
    lost (s11g). Each keeps its head and its last segment, shortened by whole segments."""
    names = [str(n) for n in run_script(SCRIPT, tmp_path, "alike")["names"]]
    assert len(names) == 4
    set_terminal(monkeypatch)
    code, text, err = run_cli(["list", str(tmp_path / "sm")])
    assert code == 0, err
    cells = [line.split("  ", 1)[0] for line in text.splitlines()
             if line.startswith(("layer_with_weights-", "…"))]
    assert len(cells) == 4 and any("…" in c for c in cells), text
    for cell in cells:
        pattern = "/".join("[^/]+(?:/[^/]+)*" if p == "…" else re.escape(p)
                           for p in cell.split("/"))
        (name,) = [n for n in names if re.fullmatch(pattern, n)]
        head, last = name.split("/")[0], name.split("/")[-1]
        assert cell.startswith(head + "/") and cell.endswith("/" + last), (cell, text)
    assert all(len(line) <= 80 for line in text.split("\n\n")[0].splitlines()[1:]), text
