"""TF1 frozen (``trainable=False``) model variables beside averaged ones (review-13-attack-r22
F10, CRITICAL): a fine-tuned head on a frozen backbone, ``get_variable(..., trainable=False)``
and tf_slim's frozen ``fully_connected`` + frozen ``batch_norm``. ``export`` (npz, safetensors,
h5, the Python ``export_weights``) and ``restore-ema --format h5`` left the frozen weights out
(exit 0, no note): a by-name load kept them at their initial values.

Truth is TF's own ``ema.variables_to_restore()`` at save time: every model variable (global,
neither the step, an optimizer's variable nor a shadow) restored from the key TF maps to it;
the export must hold exactly those, bit for bit, the frozen ones raw and said in a note and in
``raw_expected``. Without the ``.meta`` nothing proves a variable frozen: refused (exit 6) naming
``--allow-missing``, which then gives the same values.
"""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''


def record(case, s, gs, opt, ema, extra=()):
    """TF's variables_to_restore(): model variable -> the value of the key it restores from
    (``extra``: other state it restores as it is, such as a loss tensor's average)"""
    skip = {gs.op.name} | {v.op.name for v in opt.variables()} | {v.op.name for v in extra}
    skip |= {ema.average(v).op.name for v in tf1.moving_average_variables()}
    by_name = {v.op.name: v for v in tf1.global_variables()}
    for key, var in ema.variables_to_restore().items():
        if var.op.name not in skip:
            truth[f"{case}:{var.op.name}"] = s.run(by_name[key])
    truth[f"{case}:frozen"] = np.array(sorted(
        v.op.name for v in tf1.global_variables() if v.op.name not in skip
        and v not in tf1.trainable_variables()
        and not v.op.name.endswith(("moving_mean", "moving_variance"))))


def save(case, s, step, saver=None):
    for _ in range(3):
        s.run(step)
    os.makedirs(f"{out}/{case}")
    (saver or tf1.train.Saver()).save(s, f"{out}/{case}/model.ckpt",
                                      global_step=tf1.train.get_global_step())


with tf.Graph().as_default():  # a head on a frozen backbone; Adam (slots, beta powers)
    gs = tf1.train.get_or_create_global_step()
    bb = tf1.get_variable("backbone/conv/weights", [3, 4], trainable=False)
    scale = tf1.get_variable("backbone/temperature", [], trainable=False,
                             initializer=tf1.constant_initializer(1.5))
    w = tf1.get_variable("head/weights", [4, 2])
    y = tf.matmul(tf.matmul(tf.ones([1, 3]), bb), w) * scale
    opt = tf1.train.AdamOptimizer(0.05)
    loss = tf.reduce_sum(tf.square(y - 1), name="total_loss")
    train = opt.minimize(loss, global_step=gs)
    ema = tf1.train.ExponentialMovingAverage(0.6, num_updates=gs)
    # averages of the loss tensor under custom names, one zero-debiased: not model weights
    lavg = tf1.train.ExponentialMovingAverage(0.9, name="lossavg")
    dbg = tf1.train.ExponentialMovingAverage(0.9, zero_debias=True, name="dbg")
    with tf.control_dependencies([train]):
        step = tf.group(ema.apply(tf1.trainable_variables()), lavg.apply([loss]),
                        dbg.apply([tf.identity(loss, name="loss_copy")]))
    state = [v for v in tf1.global_variables()
             if v.op.name.startswith(("total_loss/", "loss_copy/"))]
    assert len(state) == 4, state  # lossavg; dbg, its biased and local_step
    with tf1.Session() as s:
        s.run(tf1.global_variables_initializer())
        save("frozen", s, step)
        record("frozen", s, gs, opt, ema, state)

import tf_slim as slim  # noqa: E402
from tensorflow.python.framework import ops  # noqa: E402

ops.Tensor = getattr(ops, "Tensor", tf.Tensor)  # tf_slim reads it; TF 2.21 moved it
with tf.Graph().as_default():  # tf_slim: frozen backbone, frozen batch_norm, trained logits
    gs = tf1.train.get_or_create_global_step()
    x = tf1.random_normal([4, 5], seed=1)
    net = slim.fully_connected(x, 4, normalizer_fn=slim.batch_norm, normalizer_params={
        "is_training": False, "trainable": False}, trainable=False, scope="backbone")
    logits = slim.fully_connected(net, 3, activation_fn=None, scope="logits")
    opt = tf1.train.MomentumOptimizer(0.05, 0.9)
    train = slim.learning.create_train_op(tf.reduce_mean(tf.square(logits)), opt,
                                          global_step=gs)
    ema = tf1.train.ExponentialMovingAverage(0.6, num_updates=gs)
    with tf.control_dependencies([train]):
        step = ema.apply(tf1.trainable_variables())
    with tf1.Session() as s:
        s.run(tf1.global_variables_initializer())
        save("slim", s, step)
        record("slim", s, gs, opt, ema)
'''

CASES = ("frozen", "slim")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    pytest.importorskip("tf_slim")
    out = tmp_path_factory.mktemp("tf1_frozen")
    return out, run_tf1_script(SCRIPT, out)


def _truth(truth, case):
    want = {k.split(":", 1)[1]: v for k, v in truth.items()
            if k.startswith(case + ":") and k != f"{case}:frozen"}
    return want, [str(n) for n in truth[f"{case}:frozen"]]


def _read(path, fmt):
    if fmt == "npz":
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    if fmt == "safetensors":
        from safetensors.numpy import load_file

        return load_file(str(path))
    got = {}
    with h5py.File(path, "r") as f:  # Keras layout: each layer group names its weights
        def visit(name, obj):
            if isinstance(obj, h5py.Group) and "weight_names" in obj.attrs:
                for wn in obj.attrs["weight_names"]:
                    wn = wn.decode() if isinstance(wn, bytes) else wn
                    got[wn[:-2]] = obj[wn][()]
        f.visititems(visit)
    return got


def _same(got, want):
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert got[k].dtype == v.dtype and np.array_equal(got[k], v), k


@pytest.mark.parametrize("fmt", ["npz", "safetensors", "h5"])
@pytest.mark.parametrize("case", CASES)
def test_export_holds_frozen_weights_raw(made, tmp_path, case, fmt):
    out, truth = made
    want, frozen = _truth(truth, case)
    assert frozen  # the generator made frozen model variables
    dest = tmp_path / f"x.{fmt}"
    code, stdout, err = run_cli(["export", str(out / case), "--out", str(dest), "--json"])
    assert code == 0, err
    doc = json.loads(stdout)
    _same(_read(dest, fmt), want)
    assert sorted(doc["raw_expected"]) == sorted(frozen)
    assert set(doc["raw_expected"].values()) == {"not_trainable"}
    assert set(frozen) <= set(doc["raw"]) and not set(frozen) & set(doc["averaged"])
    assert any("outside trainable_variables" in n and frozen[0] in n
               for n in doc["notes"]), doc["notes"]
    assert doc["warnings"] == []


@pytest.mark.parametrize("case", CASES)
def test_python_export_and_restore_ema_h5(made, tmp_path, case):
    import ckpt_tools

    out, truth = made
    want, frozen = _truth(truth, case)
    r = ckpt_tools.export_weights(str(out / case), tmp_path / "api.npz")
    _same(_read(tmp_path / "api.npz", "npz"), want)
    assert set(r.raw_expected) == set(frozen) and r.notes
    code, stdout, err = run_cli(["restore-ema", str(out / case), "--out", str(tmp_path / "r"),
                                 "--format", "h5", "--json"])
    assert code == 0, err
    doc = json.loads(stdout)
    _same(_read(doc["output"], "h5"), want)
    assert set(doc["raw_expected"]) == set(frozen) and doc["notes"]


@pytest.mark.parametrize("case", CASES)
def test_no_meta_refuses_then_allow_missing_agrees(made, tmp_path, case):
    """Without the .meta a weight without an average may be a trainable one ema.apply()
    left out: refused, naming each and --allow-missing, which gives TF's values."""
    out, truth = made
    want, frozen = _truth(truth, case)
    code, _, err = run_cli(["export", str(out / case), "--no-meta", "--out",
                            str(tmp_path / "n.npz")])
    assert code == 6 and "--allow-missing" in err and frozen[0] in err, err
    assert "frozen (trainable=False" in err, err
    code, _, err = run_cli(["export", str(out / case), "--no-meta", "--allow-missing",
                            "--out", str(tmp_path / "n.npz")])
    assert code == 0, err
    got = _read(tmp_path / "n.npz", "npz")
    # without the .meta the custom-named loss averages read as weights too (F4, not here)
    _same({k: got[k] for k in want if k in got}, want)


@pytest.mark.parametrize("case", CASES)
def test_list_shows_frozen_weights_as_weights(made, case):
    """`list` showed them as role `other` although export writes them as model weights
    (review-13-attack-r22 F10, s13g): now `weight`, like a Keras file's frozen layers, with no
    shadow expected (never `missing`); the roles of everything else are unchanged."""
    out, truth = made
    want, frozen = _truth(truth, case)
    code, stdout, err = run_cli(["list", str(out / case), "--json"])
    assert code == 0, err
    role = {v["name"]: v["role"] for v in json.loads(stdout)["variables"]}
    assert {role[n] for n in frozen} == {"weight"}, role
    assert all(role[n] != "other" for n in want), role
    code, stdout, err = run_cli(["list", str(out / case), "--role", "other", "--json"])
    assert not set(frozen) & {v["name"] for v in json.loads(stdout)["variables"]}
    code, stdout, err = run_cli(["list", str(out / case), "--wide"])
    assert code == 0, err
    rows = [line for line in stdout.splitlines() if line.split() and line.split()[0] in frozen]
    assert len(rows) == len(frozen) and not any("missing" in r for r in rows), stdout
    assert "missing" not in stdout, stdout
