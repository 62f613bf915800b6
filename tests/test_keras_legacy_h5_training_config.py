"""A legacy HDF5 ``model.save("x.h5")`` names its optimizer variables but records no object
graph: an optimizer subclass keeping per-weight variables of its own named ``average`` (running
averages of the gradients) has them named as Keras names its EMA copies
(``avg_grad_sgd/hidden_kernel_average``, tf_keras ``SGD/average/hidden/kernel``), and with
``use_ema=False`` they were exported as the EMA weights, exit 0 (review-15-attack-r30 F2b).
The file's ``training_config`` records the optimizer's class and ``use_ema``: ``use_ema=False``
means no copies; a class that is not a Keras built-in with ``use_ema=True`` leaves which
variables are the copies unrecorded (a subclass may keep gradient averages in Keras' own
copies: refused unless --optimizer states a built-in in all but name); a built-in with
``use_ema=True`` pairs by name as before. Keras 3 and tf_keras generate the files here; truth
recorded from the optimizer at save time (before fit's end swaps the averages in).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli
from helpers_keras import TF_KERAS, run_keras

_KERAS3 = '''
    @keras.saving.register_keras_serializable("t15k")  # training_config: t15k>AvgGradSGD
    class AvgGradSGD(keras.optimizers.SGD):
        def build(self, var_list):
            if self.built: return
            super().build(var_list)
            self.gavg = self.add_optimizer_variables(var_list, "average")
        def update_step(self, g, v, lr):
            a = self.gavg[self._get_variable_index(v)]
            self.assign(a, 0.9 * a + 0.1 * g)
            self.assign_sub(v, keras.ops.multiply(lr, a))
    class GradInCopies(keras.optimizers.SGD):  # use_ema=True: its copies hold gradient averages
        def _update_model_variables_moving_average(self, trainable_variables):
            pass
        def update_step(self, g, v, lr):
            a = self._model_variables_moving_average[self._get_variable_index(v)]
            self.assign(a, 0.9 * a + 0.1 * g)
            self.assign_sub(v, keras.ops.multiply(lr, a))
    for case, opt in [("noema", AvgGradSGD(0.05)),
                      ("ema", GradInCopies(0.05, use_ema=True, ema_momentum=0.5)),
                      ("builtin", keras.optimizers.SGD(0.05, momentum=0.9, use_ema=True,
                                                       ema_momentum=0.5))]:
        m = dense_net(keras, "hidden")
        m.compile(opt, "mse")
        def snap(model, case=case):
            o = model.optimizer
            truth.update({f"{case}|raw|" + v.path: v.numpy() for v in model.weights})
            if o.use_ema:
                truth.update({f"{case}|ema|" + v.path: a.numpy() for v, a in
                              zip(o._trainable_variables, o._model_variables_moving_average)})
            model.save(f"{out}/{case}.h5")
            if case == "builtin":  # the same run saved without its optimizer
                model.save(f"{out}/noopt.h5", include_optimizer=False)
        fit_snapped(keras, m, snap)
    # a custom loop, the optimizer set on the uncompiled model: no training_config at all
    m = dense_net(keras, "hidden")
    opt = GradInCopies(0.05, use_ema=True, ema_momentum=0.5)
    x = np.random.default_rng(5).normal(size=(16, 6)).astype("float32")
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((m(x) - x[:, :3]) ** 2)
        opt.apply(tape.gradient(loss, m.trainable_variables), m.trainable_variables)
    m.optimizer = opt
    m.save(f"{out}/uncompiled.h5")
'''

_TF_KERAS = '''
    @K.utils.register_keras_serializable("t15k")
    class AvgGradSGD(K.optimizers.SGD):
        def build(self, var_list):
            super().build(var_list)
            if getattr(self, "_gavg_built", False): return
            self.gavg = [self.add_variable_from_reference(v, "average") for v in var_list]
            self._gavg_built = True
        def update_step(self, g, v):
            a = self.gavg[self._index_dict[self._var_key(v)]]
            a.assign(0.9 * a + 0.1 * g); v.assign_sub(self.learning_rate * a)
    class GradInCopies(K.optimizers.SGD):  # use_ema=True: its copies hold gradient averages
        def _update_model_variables_moving_average(self, var_list):
            pass
        def update_step(self, g, v):
            a = self._model_variables_moving_average[self._index_dict[self._var_key(v)]]
            a.assign(0.9 * a + 0.1 * g); v.assign_sub(self.learning_rate * a)
    for case, opt in [("noema", AvgGradSGD(learning_rate=0.05)),
                      ("ema", GradInCopies(learning_rate=0.05, use_ema=True, ema_momentum=0.5)),
                      ("builtin", K.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5))]:
        m = dense_net(K, "hidden")
        m.compile(opt, "mse")
        def snap(model, case=case):
            o = model.optimizer
            truth.update({f"{case}|raw|" + v.name: v.numpy() for v in model.weights})
            if o.use_ema:
                truth.update({f"{case}|ema|" + v.name: a.numpy() for v, a in
                              zip(model.trainable_variables, o._model_variables_moving_average)})
            model.save(f"{out}/{case}.h5")
            if case == "builtin":  # the same run saved without its optimizer
                model.save(f"{out}/noopt.h5", include_optimizer=False)
        fit_snapped(K, m, snap)
    m = dense_net(K, "hidden")
    opt = GradInCopies(learning_rate=0.05, use_ema=True, ema_momentum=0.5)
    x = np.random.default_rng(5).normal(size=(16, 6)).astype("float32")
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((m(x) - x[:, :3]) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, m.trainable_variables),
                                m.trainable_variables))
    m.optimizer = opt
    m.save(f"{out}/uncompiled.h5")
'''


@pytest.fixture(scope="module", params=["keras3", "tf_keras"])
def made(request, tmp_path_factory):
    if request.param == "tf_keras":
        pytest.importorskip("tf_keras")
    out = tmp_path_factory.mktemp("legacy_h5_tc")
    script, prelude = (_KERAS3, {}) if request.param == "keras3" else (
        _TF_KERAS, {"prelude": TF_KERAS})
    return request.param, out, run_keras(script, out, **prelude)


def _export(path, dest):
    # --not-swapped: true, saved during fit (no SwapEMAWeights)
    return run_cli(["export", str(path), "--not-swapped", "--out", str(dest)])


def _truth(truth, case, what):
    """{weight path as export names it (hidden/kernel): value}"""
    return {k.split("|", 2)[2].removesuffix(":0"): v for k, v in truth.items()
            if k.startswith(f"{case}|{what}|")}


def test_use_ema_false_recorded_no_copies(made, tmp_path):
    kind, out, truth = made
    dest = tmp_path / "x.npz"
    code, _, err = _export(out / "noema.h5", dest)
    assert code == 6, err  # was 0: the gradient averages written as the weights
    assert "use_ema=False" in err and "training_config" in err, err
    # the way to keep averages names the Keras that wrote the file
    assert ("tf_keras.optimizers" in err) == (kind == "tf_keras"), err
    assert not dest.exists()
    code, text, err = run_cli(["list", str(out / "noema.h5"), "--json"])
    assert code == 0, err
    info = json.loads(text)
    assert info["ema_evidence"]["use_ema"] is False, info["ema_evidence"]
    assert not [v for v in info["variables"] if v["role"] == "ema"]
    # the raw weights are still the way out, and are the weights
    code, _, err = run_cli(["export", str(out / "noema.h5"), "--raw", "--out",
                            str(tmp_path / "raw.npz")])
    assert code == 0, err
    raw = _truth(truth, "noema", "raw")
    with np.load(tmp_path / "raw.npz") as z:
        assert sorted(z.files) == sorted(raw), (z.files, list(raw))
        for k in z.files:
            assert z[k].tobytes() == raw[k].tobytes(), k


def test_custom_class_use_ema_true_refused(made, tmp_path):
    kind, out, truth = made
    dest = tmp_path / "x.npz"
    code, _, err = _export(out / "ema.h5", dest)
    assert code == 6, err  # was 0: the gradient averages in the copies written as the weights
    assert "not a Keras built-in" in err and "no option decides" not in err, err
    # the way out for a class that is a built-in in all but name (not this one: a false
    # statement is taken as said) names --optimizer (review-15-attack-r31 F2)
    assert "--optimizer CLASS[:OPTIONS]" in err, err
    assert not dest.exists()


def test_no_training_config_refused(made, tmp_path):
    """Saved with an optimizer but never compiled: the class and use_ema are unrecorded."""
    kind, out, truth = made
    dest = tmp_path / "x.npz"
    code, _, err = _export(out / "uncompiled.h5", dest)
    assert code == 6, err  # was 0: the gradient averages in the copies written as the weights
    assert "no training_config records" in err and "no option decides" in err, err
    assert not dest.exists()


def test_builtin_use_ema_true_still_paired(made, tmp_path):
    kind, out, truth = made
    dest = tmp_path / "x.npz"
    code, _, err = _export(out / "builtin.h5", dest)
    assert code == 0, err
    ema = _truth(truth, "builtin", "ema")
    with np.load(dest) as z:
        assert sorted(z.files) == sorted(ema), (z.files, list(ema))
        for k in z.files:
            assert z[k].tobytes() == ema[k].tobytes(), k


def test_include_optimizer_false_says_so(made, tmp_path):
    """``model.save("x.h5", include_optimizer=False)`` of a use_ema run records neither the
    optimizer nor its variables: the refusal leads with that, not with advice to train with
    use_ema=True, which the run did (review-15-attack-r31 F7)."""
    kind, out, truth = made
    dest = tmp_path / "x.npz"
    code, _, err = _export(out / "noopt.h5", dest)
    assert code == 6 and not dest.exists(), err
    assert "holds no optimizer EMA copies: saved with include_optimizer=False" in err, err
    assert "train with an optimizer created with use_ema=True" not in err, err
    assert "include_optimizer=True" in err and "ckpt export --raw" in err, err
