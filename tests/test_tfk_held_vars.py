"""tf_keras variables held in attributes, lists and dicts (``tf.Variable``s assigned to a layer
or model, not ``add_weight``), ``SGD(momentum, use_ema=True)``; truth recorded at save time by
the real tf_keras (``optimizer._model_variables_moving_average`` through ``_index_dict``).

- A custom ``Layer`` (in a ``Sequential``) holding unnamed variables (all ``Variable``) as an
  attribute re-assigned in ``build()``, a list and a dict: ``apply_ema(tf.train.Checkpoint(
  model=m), path)`` (the wrapper the docstring lists) reads the wrapped model's order as
  ``apply_ema(m, path)`` does (was: refused, telling to pass the live model it was given);
  a ``tf.Module`` around it (its own ``trainable_variables``) stays refused;
  the CLI refusal no longer advertises ``--apply-order tracked``, which it knows is refused
  for that file, and names the live model instead.
- A root ``Model`` holding a variable in a list attribute: tf_keras visits the list (a
  tracked child) where it was assigned among the sublayers, not with the model's own
  weights (last): ``--apply-order tracked`` pairs it so, bit for bit.
- A ``.keras`` of such a model and one with an ``add_weight`` in its place store the same
  keys (the root's ``vars/0`` and ``lin/vars/0``) while tf_keras trained them in opposite
  orders: the refusal stays (the file cannot tell), and each true ``--trainable`` is
  accepted bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import assert_npz_holds, run_cli, run_script

pytest.importorskip("tf_keras")

SCRIPT = r'''
import sys
import numpy as np
import tensorflow as tf
import tf_keras as K
import ckpt_tools

out = sys.argv[1]
arrays = {}
rng = np.random.default_rng(0)
x, y = rng.normal(size=(16, 4)).astype("float32"), rng.normal(size=(16, 4)).astype("float32")


def train(m):
    opt = K.optimizers.SGD(0.05, momentum=0.9, use_ema=True, ema_momentum=0.9)
    m.compile(opt, "mse")
    m.fit(x, y, epochs=1, batch_size=8, verbose=0)
    for _ in range(2):
        m.train_on_batch(x, y)
    average = {id(v): opt._model_variables_moving_average[opt._index_dict[opt._var_key(v)]]
               for v in m.trainable_variables}
    return opt, average


class Blk(K.layers.Layer):
    def build(self, shape):
        r = lambda: tf.Variable(tf.random.normal((4,)))
        self.zv = r()
        self.ws = [r(), r()]
        self.d = {"z": r(), "a": r()}
        self.zv = r()

    def call(self, x):
        return (x * self.zv + self.ws[0] + x * self.ws[1] * 0.5 + self.d["z"] * 0.3
                + x * self.d["a"] * 0.2)


def blk_model():
    return K.Sequential([K.Input((4,)), K.layers.Dense(4, name="pre"), Blk(name="blk")])


tf.random.set_seed(7)
m = blk_model()
opt, average = train(m)
for i, v in enumerate(m.trainable_variables):
    arrays[f"blk:ema:{i}"] = average[id(v)].numpy()
    arrays[f"blk:raw:{i}"] = v.numpy()
m.save_weights(out + "/blk/w")
tf.train.Checkpoint(model=m, optimizer=opt).write(out + "/blk/ck")
try:  # the wrapper around the root of a save_weights() file: said, never guessed
    ckpt_tools.apply_ema(tf.train.Checkpoint(model=blk_model()), out + "/blk/w")
except Exception as exc:
    open(f"{out}/blk_wrap_w.err", "w").write(f"{type(exc).__name__}: {exc}")
for form in ("bare", "wrap", "module"):
    fresh = blk_model()
    obj = fresh if form == "bare" else tf.train.Checkpoint(model=fresh)
    if form == "module":  # its own trainable_variables: a custom loop's order, not Keras'
        obj = tf.Module()
        obj.model = fresh
    try:
        ckpt_tools.apply_ema(obj, out + "/blk/ck")
    except Exception as exc:
        open(f"{out}/blk_{form}.err", "w").write(f"{type(exc).__name__}: {exc}")
        continue
    for i, v in enumerate(fresh.trainable_variables):
        arrays[f"blk:{form}:{i}"] = v.numpy()


@K.saving.register_keras_serializable(package="test_tfk_held_vars")
class MyLinear(K.layers.Layer):
    def build(self, shape):
        self.kernel = self.add_weight(name="kernel", shape=(4, 4),
                                      initializer="glorot_uniform")

    def call(self, x):
        return x @ self.kernel


def root_model(order):
    """W: self.ws = [tf.Variable], L: self.lin = MyLinear(), O: self.own = add_weight."""
    class Root(K.Model):
        def __init__(self, **kw):
            super().__init__(**kw)
            for what in order:
                if what == "W":
                    self.ws = [tf.Variable(tf.random.normal((4, 4)), name="kernel")]
                elif what == "L":
                    self.lin = MyLinear()
                else:
                    self.own = self.add_weight(name="kernel", shape=(4, 4),
                                               initializer="glorot_uniform")

        def call(self, x):
            for v in [*getattr(self, "ws", []), *([self.own] if "O" in order else [])]:
                x = tf.tanh(x @ v)
            return self.lin(x)

    Root.__name__ = Root.__qualname__ = "Root" + order
    return K.saving.register_keras_serializable(package="test_tfk_held_vars")(Root)()


for order in ("WL", "OL", "WLO"):
    m = root_model(order)
    m(x[:1])
    opt, average = train(m)
    # truth keyed by the names ckpt gives: the TF object path, the .keras weight path
    tf_path = {id(m.lin.kernel): "lin/kernel"}
    keras_path = {id(m.lin.kernel): "lin/0"}
    for i, v in enumerate(m._trainable_weights):  # the root's vars/<i> in the .keras
        keras_path[id(v)] = str(i)
    if "W" in order:
        tf_path[id(m.ws[0])] = "ws/0"
    if "O" in order:
        tf_path[id(m.own)] = "kernel"  # add_weight tracks it by its name
    for i, v in enumerate(m.trainable_variables):
        arrays[f"{order}:tf:{tf_path[id(v)]}"] = average[id(v)].numpy()
        arrays[f"{order}:keras:{keras_path[id(v)]}"] = average[id(v)].numpy()
        arrays[f"{order}:raw:{tf_path[id(v)]}"] = v.numpy()
    open(f"{out}/{order}.trainable", "w").write(
        ",".join(keras_path[id(v)] for v in m.trainable_variables))
    m.save_weights(f"{out}/{order}/w")
    m.save(f"{out}/{order}.keras")
np.savez(out + "/truth.npz", **arrays)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    out = tmp_path_factory.mktemp("tfk_held_vars")
    return out, run_script(SCRIPT, out)


def _part(truth, head: str) -> dict[str, np.ndarray]:
    return {k[len(head):]: v for k, v in truth.items() if k.startswith(head)}


def test_wrapped_live_model_reads_its_order(made):
    """``apply_ema(tf.train.Checkpoint(model=m), path)`` gives each of the layer's seven
    trainable variables its own average, bit for bit, as ``apply_ema(m, path)`` does."""
    out, truth = made
    ema, raw = _part(truth, "blk:ema:"), _part(truth, "blk:raw:")
    assert len(ema) == 7
    for form in ("bare", "wrap"):
        err = out / f"blk_{form}.err"
        assert not err.exists(), err.read_text()
        got = _part(truth, f"blk:{form}:")
        assert sorted(got) == sorted(ema)
        for i, value in ema.items():
            assert not np.array_equal(value, raw[i]), i
            assert got[i].tobytes() == value.tobytes(), (form, i)


def test_module_wrapper_stays_refused(made):
    """A ``tf.Module`` around the model has ``trainable_variables`` of its own, walked in
    another order than Keras': which one built the optimizer is not known, so refused."""
    out, truth = made
    err = out / "blk_module.err"
    assert err.exists() and not _part(truth, "blk:module:")
    assert err.read_text().startswith("UnprovenPairingError: "), err.read_text()


def test_wrapper_around_a_saved_root_is_told_to_pass_it_bare(made):
    """``model.save_weights()`` saved the model as the root: a ``tf.train.Checkpoint(model=
    m)`` around it matches nothing saved; the error says its ``model`` is the root and to
    pass it bare."""
    out, _ = made
    said = (out / "blk_wrap_w.err").read_text()
    assert said.startswith("EmaError: "), said
    assert "the object's model has the structure of the checkpoint's root" in said, said
    assert "pass it bare, apply_ema(model, path)" in said, said


@pytest.mark.parametrize("name", ["w", "ck"])
def test_refusal_names_the_live_model_not_a_refused_option(made, tmp_path, name):
    """The CLI refuses (exit 6, one line) and, knowing ``--apply-order tracked`` is refused
    for this file too, says so and names the live model instead of advertising it."""
    out, _ = made
    target = tmp_path / "e.npz"
    said = []
    for extra in ([], ["--apply-order", "tracked"]):
        code, _, err = run_cli(["export", str(out / "blk" / name), *extra,
                                "--out", str(target)])
        assert code == 6, err
        lines = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and "Traceback" not in err, err
        assert "apply_ema(model, path)" in lines[0], lines[0]
        assert "pass --apply-order tracked" not in lines[0], lines[0]
        said.append(lines[0])
    assert "--apply-order tracked would not place them either" in said[0], said[0]
    assert "holds such a weight of its own and another in a sublayer" in said[0], said[0]
    assert not target.exists()


@pytest.mark.parametrize("order", ["WL", "OL", "WLO"])
def test_tracked_places_a_root_list_where_it_was_assigned(made, tmp_path, order):
    """``--apply-order tracked`` on the TF-format ``save_weights``: a variable the root
    model holds in a list is visited where the list was assigned (first in ``WL``), the
    model's ``add_weight`` last: every weight gets its own average, bit for bit."""
    out, truth = made
    target = tmp_path / "e.npz"
    code, _, err = run_cli(["export", str(out / order / "w"), "--apply-order", "tracked",
                            "--out", str(target)])
    assert code == 0, err
    ema = _part(truth, f"{order}:tf:")
    assert len(ema) == len(order)
    for key, value in ema.items():
        assert not np.array_equal(value, truth[f"{order}:raw:{key}"]), key
    assert_npz_holds(target, ema)


def test_keras_root_own_weights_stay_refused(made, tmp_path):
    """A list-held variable and an ``add_weight`` are stored alike (the root's ``vars/0``)
    while tf_keras trained them before and after the sublayer: both files are refused, exit
    6 naming ``--trainable`` and saying why; each true ``--trainable`` is paired bit for
    bit."""
    import zipfile

    out, truth = made

    def stored(order: str) -> list[str]:
        import io

        import h5py

        with zipfile.ZipFile(out / f"{order}.keras") as z, \
                h5py.File(io.BytesIO(z.read("model.weights.h5")), "r") as f:
            found: list[str] = []
            f.visit(lambda n: found.append(n) if n.endswith("/0") and "vars" in n
                    and not n.startswith(("optimizer", "metrics")) else None)
            return sorted(found)

    assert stored("WL") == stored("OL") == ["lin/vars/0", "vars/0"]
    trainable = {o: (out / f"{o}.trainable").read_text() for o in ("WL", "OL")}
    assert trainable == {"WL": "0,lin/0", "OL": "lin/0,0"}
    for order in ("WL", "OL", "WLO"):
        target = tmp_path / f"{order}.npz"
        code, _, err = run_cli(["export", str(out / f"{order}.keras"), "--out", str(target)])
        assert code == 6, err
        line = [x for x in err.splitlines() if x.startswith("error:")][0]
        assert "--trainable" in line and "list or dict attribute" in line, line
        assert not target.exists()
        code, _, err = run_cli(["export", str(out / f"{order}.keras"), "--trainable",
                                (out / f"{order}.trainable").read_text(), "--out", str(target)])
        assert code == 0, err
        assert_npz_holds(target, _part(truth, f"{order}:keras:"))
