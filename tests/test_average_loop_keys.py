"""``ckpt average`` of averages kept under keys a loop took from ``ema.apply()``'s order, and of
Keras weights that only look numbered like them (review-33-attack-r129 C1, C2, M1). A run of
two unnamed weights (TF names both ``Variable``) resumed in a new process whose ``apply()`` got
them reversed: its averages swap names (``Variable/fast`` is w's in ck-1, b's in ck-2), and
attributes ``a0``, ``a1`` or a dict keyed ``a{i}`` set in that order follow the swap, naming no
weight: they were averaged by key, exit 0, the mean of two variables' averages. A Keras 3 model
of layers whose ``add_weight()`` has no name (``variable``, ``variable_1``...) saved with its
optimizer, or with a list of its weights, was refused as such averages instead and
``--drop-unproven-averages`` left every weight out. Each save in its own process; truth from
``ema.average(v).numpy()`` at save time and ``tf.train.load_checkpoint``."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli
from helpers_keras import run_keras

# one save per process: argv[2] = 1 (ck-1, apply() got [w, b]) or 2 (the resume: [b, w])
_BODY = """
k = int(sys.argv[2])
def steps(vs, ema, n=2):
    for _ in range(n):
        for v in vs: v.assign_add(tf.random.normal(v.shape))
        ema.apply(vs)
# C2: averages under a custom EMA name saved alone in a dict a loop keyed in apply() order
u = tf.Module(); u.w = tf.Variable(tf.zeros([3])); u.b = tf.Variable(tf.zeros([3]))
uo = [u.w, u.b] if k == 1 else [u.b, u.w]
fe = tf.train.ExponentialMovingAverage(0.5, name="fast"); fe.apply(uo); steps(uo, fe)
tf.train.Checkpoint(ema={f"a{i}": fe.average(v) for i, v in enumerate(uo)}).write(
    f"{out}/fast_dict/ck")
# C1: attributes a0, a1 set in apply() order on a module holding one unnamed weight, its
# sub-module the other (both Variable)
t = tf.Module(); t.w = tf.Variable(tf.zeros([3])); t.sub = tf.Module()
t.sub.w = tf.Variable(tf.zeros([3]))
to = [t.w, t.sub.w] if k == 1 else [t.sub.w, t.w]
te = tf.train.ExponentialMovingAverage(0.5); te.apply(to); steps(to, te)
for i, v in enumerate(to): setattr(t, f"a{i}", te.average(v))
tf.train.Checkpoint(model=t).write(f"{out}/attr_loop/ck")
# the same loop naming them after the weight, then its counter (review-33-attack-r134 C1)
t2 = tf.Module(); t2.w = t.w; t2.sub = t.sub
for i, v in enumerate(to): setattr(t2, f"w_ema_{i}", te.average(v))
tf.train.Checkpoint(model=t2).write(f"{out}/attr_sfx/ck")
truth.update({"attr_loop:a0": te.average(to[0]).numpy(), "attr_loop:w": te.average(t.w).numpy(),
              "attr_sfx:a0": t2.w_ema_0.numpy(), "attr_sfx:w": te.average(t.w).numpy(),
              "fast_dict:a0": fe.average(uo[0]).numpy(), "fast_dict:w": fe.average(u.w).numpy(),
              "names": np.array([t.a0.name, fe.average(uo[0]).name])})
# M1: Keras 3 add_weight() without a name, saved with its optimizer (TF keys the weights at its
# _trainable_variables places) and with a list of the model's weights
class Lin(keras.layers.Layer):
    def build(self, shape):
        self.a = self.add_weight(shape=(shape[-1], 2)); self.c = self.add_weight(shape=(2,))
    def call(self, x): return x @ self.a + self.c
lm = keras.Sequential([keras.Input((3,)), Lin(), Lin()], name="lins")
for v in lm.weights: v.assign(tf.random.normal(v.shape) + k)
lo = keras.optimizers.Adam(0.1, use_ema=True, ema_momentum=0.5); lo.build(lm.trainable_variables)
lo.apply([tf.ones_like(v) for v in lm.trainable_variables], lm.trainable_variables)
tf.train.Checkpoint(model=lm, optimizer=lo).write(f"{out}/keras_opt/ck")
tf.train.Checkpoint(model=lm, weights=list(lm.weights)).write(f"{out}/keras_list/ck")
truth["trained"] = np.array([v.path for v in lo._trainable_variables])
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(ck-1's folder, ck-2's folder, each save's truth): ck-2 in a new process."""
    d = tmp_path_factory.mktemp("average_loop_keys")
    first, second = d / "p1", d / "p2"
    first.mkdir()
    second.mkdir()
    return first, second, run_keras(_BODY, first, "1"), run_keras(_BODY, second, "2")


_KEY = "/.ATTRIBUTES/VARIABLE_VALUE"


def _average(runs, case: str, out_dir, *extra: str) -> tuple[int, str, str]:
    cks = [str(r / case / "ck") for r in runs[:2]]
    code, out, err = run_cli(["average", *cks, "--newest", cks[1], "--out", str(out_dir),
                              *extra])
    return code, out, " ".join(err.split())


@pytest.mark.parametrize("extra", [[], ["--ema"]])
@pytest.mark.parametrize("case", ["attr_loop", "fast_dict", "attr_sfx"])
def test_averages_kept_under_a_loops_keys_are_refused(runs, tmp_path, case, extra):
    """C1 / C2: a0 holds w's average in ck-1 and the other weight's in ck-2 under one recorded
    name (``model/a0`` beside ``model/w``: ``Variable/ExponentialMovingAverage``; ``ema/a0``:
    ``Variable/fast``). The plain average wrote their mean, exit 0: refused now."""
    _, _, truth1, truth2 = runs
    assert list(truth1["names"]) == list(truth2["names"]), (truth1["names"], truth2["names"])
    np.testing.assert_array_equal(truth1[f"{case}:a0"], truth1[f"{case}:w"])
    assert not np.array_equal(truth2[f"{case}:a0"], truth2[f"{case}:w"])
    code, _, err = _average(runs, case, tmp_path / "out", *extra)
    assert code == 6 and "named after 'Variable'" in err, err
    assert not (tmp_path / "out").exists()


def test_a_loops_attributes_are_left_out_when_asked(runs, tmp_path, tf):
    """C1: --drop-unproven-averages leaves a0, a1 out (not mixed) and averages the weights,
    each the mean of its values as tf.train.load_checkpoint reads them."""
    code, out, err = _average(runs, "attr_loop", tmp_path / "out", "--drop-unproven-averages",
                              "--json")
    assert code == 0, err
    assert json.loads(out)["dropped"] == [f"model/a{i}{_KEY}" for i in range(2)]
    ins = [tf.train.load_checkpoint(str(r / "attr_loop" / "ck")) for r in runs[:2]]
    read = tf.train.load_checkpoint(str(tmp_path / "out" / "ck"))
    for key in (f"model/w{_KEY}", f"model/sub/w{_KEY}"):
        want = np.mean([r.get_tensor(key) for r in ins], axis=0, dtype=np.float64)
        np.testing.assert_array_equal(read.get_tensor(key), want.astype(np.float32), key)


_LISTED = {"keras_opt": "optimizer/_trainable_variables", "keras_list": "weights"}


@pytest.mark.parametrize("case", sorted(_LISTED))
@pytest.mark.parametrize("extra", [[], ["--drop-unproven-averages", "--json"]])
def test_a_keras_models_weights_are_averaged_not_taken_for_averages(runs, tmp_path, tf, extra,
                                                                     case):
    """M1: the weights at the optimizer's ``_trainable_variables`` places (or a list's of
    ``model.weights``) record ``lins/lin/variable``, ``..._1``: refused as averages numbered in
    apply()'s order, and --drop-unproven-averages left every weight out, exit 0. Now every
    weight is the mean of its two saved values, bit for bit, none dropped."""
    names = [str(n) for n in runs[2]["trained"]]
    assert any(n.endswith("/variable_1") for n in names), names
    code, out, err = _average(runs, case, tmp_path / "out", *extra)
    assert code == 0, err
    if extra:
        assert json.loads(out)["dropped"] == [], out
    ins = [tf.train.load_checkpoint(str(r / case / "ck")) for r in runs[:2]]
    read = tf.train.load_checkpoint(str(tmp_path / "out" / "ck"))
    weights = [f"{_LISTED[case]}/{i}{_KEY}" for i in range(4)]
    assert set(weights) <= set(ins[1].get_variable_to_shape_map())
    for key in weights:
        want = np.mean([r.get_tensor(key) for r in ins], axis=0, dtype=np.float64)
        np.testing.assert_array_equal(read.get_tensor(key), want.astype(np.float32), key)
