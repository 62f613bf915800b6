"""tf_keras TF-format checkpoints (``model.save_weights(prefix)``, ``tf.train.Checkpoint(model=m,
optimizer=opt)``) of a model whose two nested models each hold a layer ``fc``, the
``Adam(use_ema=True)`` optimizer built by a custom training loop that listed the decoder's
variables first. Both averages of a shape are named ``Adam/average/fc/kernel``; the optimizer
records only the order it averaged them in, and the file cannot show whether ``fit()`` (model
order) or a loop (any order) built it. The save_weights form paired them in model order, exit
0, each average on the other sub-model's weight (review-11-attack-r14 F6). Now refused, naming
``--apply-order tracked`` (fit()) and ``--trainable NAMES --loop-order`` (a loop); the loop's
order stated gives the averages tf_keras kept (recorded at save time in a subprocess by the
real tf_keras, ``optimizer._model_variables_moving_average``), bit for bit, and so does
``apply_ema(model, path, trainable=the_loop_list)``; ``apply_ema(model, path)`` warns that it
assumed fit()'s order."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli, run_script

pytest.importorskip("tf_keras")

SCRIPT = r'''
import sys
import warnings

import numpy as np
import tensorflow as tf
import tf_keras

import ckpt_tools

out = sys.argv[1]
L = tf_keras.layers


def build():
    enc = tf_keras.Sequential([tf_keras.Input((4,)), L.Dense(4, name="fc")], name="enc")
    dec = tf_keras.Sequential([tf_keras.Input((4,)), L.Dense(4, name="fc")], name="dec")
    inp = tf_keras.Input((4,))
    return tf_keras.Model(inp, dec(enc(inp))), enc, dec


tf.random.set_seed(0)
m, enc, dec = build()
opt = tf_keras.optimizers.Adam(0.01, use_ema=True, ema_momentum=0.9)
m.compile(opt, "mse")
rs = np.random.RandomState(0)
x, y = rs.randn(16, 4).astype("float32"), rs.randn(16, 4).astype("float32")
loop = dec.trainable_variables + enc.trainable_variables  # the loop's own list
for _ in range(4):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((m(x) - y) ** 2)
    opt.apply_gradients(zip(tape.gradient(loss, loop), loop))
name = {id(enc.layers[0].kernel): "enc.kernel", id(enc.layers[0].bias): "enc.bias",
        id(dec.layers[0].kernel): "dec.kernel", id(dec.layers[0].bias): "dec.bias"}
truth = {name[id(v)]: opt._model_variables_moving_average[opt._index_dict[opt._var_key(v)]]
         .numpy() for v in loop}
truth.update({"raw." + name[id(v)]: v.numpy() for v in loop})
m.save_weights(out + "/sw/w")
tf.train.Checkpoint(model=m, optimizer=opt).write(out + "/ck/ck")

for form, path in (("sw", out + "/sw/w"), ("ck", out + "/ck/ck")):
    fresh, fenc, fdec = build()
    root = fresh if form == "sw" else tf.train.Checkpoint(model=fresh)
    ckpt_tools.apply_ema(root, path,
                         trainable=fdec.trainable_variables + fenc.trainable_variables)
    truth[f"api.{form}.enc.kernel"] = fenc.layers[0].kernel.numpy()
    truth[f"api.{form}.dec.kernel"] = fdec.layers[0].kernel.numpy()
    truth[f"api.{form}.dec.bias"] = fdec.layers[0].bias.numpy()
# A Checkpoint the caller opened with verify=False keeps it when re-read under trainable=:
# one byte of an average flipped, its CRC no longer matches (re-opened verifying, it failed).
import glob, shutil
shutil.copytree(out + "/sw", out + "/bad")
with ckpt_tools.open_checkpoint(out + "/bad/w") as c:
    # the optimizer's first variable after iterations: its first average (built first)
    avg = c.entries()["optimizer/_variables/1/.ATTRIBUTES/VARIABLE_VALUE"]
(data,) = glob.glob(out + "/bad/w.data-*")
with open(data, "r+b") as f:
    f.seek(avg.offset)
    byte = f.read(1)
    f.seek(avg.offset)
    f.write(bytes([byte[0] ^ 1]))
fresh, fenc, fdec = build()
try:
    ckpt_tools.apply_ema(fresh, ckpt_tools.open_checkpoint(out + "/bad/w", verify=False),
                         trainable=fdec.trainable_variables + fenc.trainable_variables)
    kept = "kept"
except ckpt_tools.CheckpointError as e:
    kept = str(e)
open(out + "/verify_kept.txt", "w").write(kept)
fresh, _, _ = build()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    result = ckpt_tools.apply_ema(fresh, out + "/sw/w")
open(out + "/assumed.txt", "w").write(",".join(result.assumed) + "\n" + "\n".join(
    str(w.message) for w in caught if issubclass(w.category, UserWarning)))
np.savez(out + "/truth.npz", **truth)
'''

SW = [f"layer_with_weights-{i}/layer_with_weights-0/{w}" for i in (0, 1)
      for w in ("kernel", "bias")]
LOOP = SW[2:] + SW[:2]  # dec (layer_with_weights-1) first, as the loop listed them


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tfk_loop_tf")
    return out, run_script(SCRIPT, out)


def _prefix(out, form: str) -> str:
    return str(out / "sw" / "w") if form == "sw" else str(out / "ck" / "ck")


def _names(form: str, names: list[str]) -> str:
    return ",".join(n if form == "sw" else "model/" + n for n in names)


def _load(path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("form", ["sw", "ck"])
def test_unstated_order_is_refused(made, form, tmp_path):
    out, _ = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", _prefix(out, form), "--out", str(target)])
    assert code == 6 and not target.exists(), err
    text = " ".join(err.split())
    assert "--apply-order tracked" in text and "--trainable NAMES --loop-order" in text, err


@pytest.mark.parametrize("form", ["sw", "ck"])
def test_the_loops_order_stated_gives_the_library_averages(made, form, tmp_path):
    out, truth = made
    raw_file, target = tmp_path / "raw.npz", tmp_path / "w.npz"
    code, _, err = run_cli(["export", _prefix(out, form), "--raw", "--out", str(raw_file)])
    assert code == 0, err
    raw = _load(raw_file)
    code, stdout, err = run_cli(["export", _prefix(out, form), "--trainable",
                                 _names(form, LOOP), "--loop-order", "--json",
                                 "--out", str(target)])
    assert code == 0, err
    assert "paired only because you stated --trainable" in " ".join(err.split()), err
    doc = json.loads(stdout)
    assert doc["stated_trainable"]["loop_order"] is True
    assert len(doc["stated_trainable"]["pairs"]) == 4
    got = _load(target)
    assert sorted(got) == sorted(raw) and len(got) == 4
    for key, value in got.items():
        (which,) = [k[4:] for k in truth if k.startswith("raw.")
                    and truth[k].tobytes() == raw[key].tobytes()]
        assert value.tobytes() == truth[which].tobytes(), (key, which)


def test_a_statement_that_does_not_fit_is_refused(made, tmp_path):
    """Kernels and biases swapped: the names and shapes refuse it; without --loop-order the
    list is not taken as a loop's (exit 2)."""
    out, _ = made
    target = tmp_path / "w.npz"
    wrong = [LOOP[1], LOOP[0], LOOP[3], LOOP[2]]
    code, _, err = run_cli(["export", _prefix(out, "sw"), "--trainable", ",".join(wrong),
                            "--loop-order", "--out", str(target)])
    assert code == 6 and not target.exists() and "not the loop's order" in err, err
    code, _, err = run_cli(["export", _prefix(out, "sw"), "--trainable", ",".join(LOOP),
                            "--out", str(target)])
    assert code == 2 and not target.exists() and "--loop-order" in err, err
    code, _, err = run_cli(["export", _prefix(out, "sw"), "--trainable", ",".join(LOOP[:2]),
                            "--loop-order", "--out", str(target)])
    assert code == 6 and not target.exists() and "every trainable weight" in err, err


@pytest.mark.parametrize("form", ["sw", "ck"])
def test_python_loop_list_gives_the_library_averages(made, form):
    _, truth = made
    for name in ("enc.kernel", "dec.kernel", "dec.bias"):
        assert truth[f"api.{form}.{name}"].tobytes() == truth[name].tobytes(), name
        assert truth[name].tobytes() != truth[f"raw.{name}"].tobytes(), name


def test_python_loop_list_keeps_the_callers_checkpoint_options(made):
    """apply_ema re-reads the file under trainable= with the caller's options (verify=False
    here, on a file whose average fails its CRC), never the defaults."""
    out, _ = made
    assert (out / "verify_kept.txt").read_text() == "kept"


def test_python_live_model_without_a_statement_says_what_it_assumed(made):
    out, _ = made
    assumed, _, warning = (out / "assumed.txt").read_text().partition("\n")
    assert assumed == "fit_order"
    assert "fit()" in warning and "trainable=" in warning


def test_python_strict_refuses_the_assumed_fit_order(made, tf):
    """strict=True: the live model's order is an assumption here, refused; stating it is not."""
    import tf_keras

    import ckpt_tools

    out, truth = made
    layers = tf_keras.layers
    enc = tf_keras.Sequential([tf_keras.Input((4,)), layers.Dense(4, name="fc")], name="enc")
    dec = tf_keras.Sequential([tf_keras.Input((4,)), layers.Dense(4, name="fc")], name="dec")
    inp = tf_keras.Input((4,))
    model = tf_keras.Model(inp, dec(enc(inp)))
    before = enc.layers[0].kernel.numpy()
    with pytest.raises(ckpt_tools.EmaError, match="trainable=model.trainable_variables"):
        ckpt_tools.apply_ema(model, _prefix(out, "sw"), strict=True)
    assert enc.layers[0].kernel.numpy().tobytes() == before.tobytes()  # nothing assigned
    result = ckpt_tools.apply_ema(model, _prefix(out, "sw"), strict=True,
                                  trainable=dec.trainable_variables + enc.trainable_variables)
    assert result.assumed == []
    assert enc.layers[0].kernel.numpy().tobytes() == truth["enc.kernel"].tobytes()
