"""A custom optimizer that creates a slot of its own before ``super().build()`` puts it where a
built-in keeps its EMA copies; a bare ``.weights.h5`` records the optimizer only by its name
(review-14-attack-r26 F0). Stating ``--use-ema``/``--trainable`` (true statements) exported the
slot as the "EMA values", exit 0. The values must prove the inferred layout whatever is stated:
refused (exit 6). A built-in's file still exports Keras' own averages. Truth recorded from the
optimizer at save time (Keras 3 and tf_keras generated here).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers import run_cli
from helpers_keras import KERAS3, TF_KERAS, dense_net, run_keras

_KERAS3 = '''
    name = sys.argv[2]
    class PreSGD(keras.optimizers.Optimizer):
        def build(self, var_list):
            if self.built: return
            self.prev = self.add_optimizer_variables(var_list, "prev")  # own slot first
            super().build(var_list)                                     # then the averages
        def update_step(self, g, v, lr):
            p = self.prev[self._get_variable_index(v)]
            self.assign(p, 0.5 * p + g); self.assign_sub(v, keras.ops.multiply(lr, p))
    m = dense_net(keras, "hidden", "mid")
    opt = (keras.optimizers.SGD(0.05, momentum=0.5, use_ema=True, ema_momentum=0.5)
           if name == "builtin" else
           PreSGD(learning_rate=0.05, use_ema=True, ema_momentum=0.5, name=name))
    m.compile(opt, "mse")
    def snap(model):
        o = model.optimizer
        truth.update({v.path: a.numpy() for v, a in
                      zip(o._trainable_variables, o._model_variables_moving_average)})
        model.save_weights(f"{out}/m.weights.h5")
    fit_snapped(keras, m, snap)
'''

_TF_KERAS = '''
    class PreSGD(K.optimizers.Optimizer):
        def __init__(self, learning_rate=0.05, name="PreSGD", **kw):
            super().__init__(name=name, **kw)
            self._learning_rate = self._build_learning_rate(learning_rate)
        def build(self, var_list):
            if getattr(self, "_built", False): return
            self.prev = [self.add_variable_from_reference(v, "prev") for v in var_list]
            super().build(var_list); self._built = True
        def update_step(self, g, v):
            p = self.prev[self._index_dict[self._var_key(v)]]
            p.assign(0.5 * p + g); v.assign_sub(self.learning_rate * p)
    m = dense_net(K, "hidden", "mid")
    m.compile(PreSGD(0.05, use_ema=True, ema_momentum=0.5), "mse")
    def snap(model):
        o = model.optimizer
        truth.update({v.name.split(":")[0]:
                      o._model_variables_moving_average[o._index_dict[o._var_key(v)]].numpy()
                      for v in model.trainable_variables})
        model.save_weights(f"{out}/m.weights.h5")
    fit_snapped(K, m, snap)
'''


def _make(tmp_path_factory, script: str, *args: str, prelude: str = KERAS3):
    out = tmp_path_factory.mktemp("custom_slot")
    return out / "m.weights.h5", run_keras(script, out, *args, prelude=prelude)


@pytest.fixture(scope="module", params=["pre_sgd", "sgd", "builtin"])
def keras3(request, tmp_path_factory):
    return request.param, *_make(tmp_path_factory, _KERAS3, request.param)


def test_keras3_custom_slot_first_refused_whatever_is_stated(keras3, tmp_path):
    name, path, truth = keras3
    out = tmp_path / "x.npz"
    args = ["export", str(path), "--use-ema", "--not-swapped", "--trainable",
            "hidden,mid,head", "--out", str(out)]
    code, _, err = run_cli(args)
    assert code == 6 and not out.exists(), err  # SGD(momentum): the option is not recorded
    assert "do not prove them averages" in err, err
    assert ("nearer the weights" in err if name == "pre_sgd" else
            "--optimizer sgd:momentum" in err), err
    # stated (falsely, for the custom class): the values contradict it, refused
    code, _, err = run_cli([*args, "--optimizer", "sgd:momentum"])
    if name != "builtin":
        assert code == 6, err
        assert "do not prove them averages" in err and "nearer the weights" in err, err
        assert not out.exists()
        return
    assert code == 0, err  # a built-in SGD(momentum) still gives Keras' own averages
    with np.load(out) as z:
        assert sorted(z.files) == sorted(truth)
        for k in truth:
            assert z[k].tobytes() == truth[k].tobytes(), k


def test_keras3_custom_named_sgd_refused_with_use_ema_alone(keras3, tmp_path):
    name, path, _truth = keras3
    if name != "sgd":
        pytest.skip("the name 'sgd' passes the count check: only values tell")
    code, _, err = run_cli(["export", str(path), "--use-ema", "--not-swapped", "--out",
                            str(tmp_path / "x.npz")])
    assert code == 6, err
    assert "do not prove them averages" in err, err


def test_keras3_python_statement_refused(keras3):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    from ckpt_tools import EmaError, apply_keras_ema

    name, path, truth = keras3
    m = dense_net(keras, "hidden", "mid")
    if name == "builtin":
        with pytest.raises(EmaError, match="sgd:momentum"):  # not recorded: stated below
            apply_keras_ema(m, str(path), use_ema=True, not_swapped=True,
                            trainable=m.trainable_variables)
        apply_keras_ema(m, str(path), use_ema=True, not_swapped=True,
                        trainable=m.trainable_variables, optimizer="sgd:momentum")
        for v in m.trainable_variables:
            assert v.numpy().tobytes() == truth[v.path].tobytes(), v.path
        return
    for stated in (None, "sgd:momentum"):
        with pytest.raises(EmaError, match="do not prove them averages"):
            apply_keras_ema(m, str(path), use_ema=True, not_swapped=True,
                            trainable=m.trainable_variables, optimizer=stated)


def test_tf_keras_custom_slot_first_refused_with_use_ema(tmp_path_factory, tmp_path):
    pytest.importorskip("tf_keras")
    path, _truth = _make(tmp_path_factory, _TF_KERAS, prelude=TF_KERAS)
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(path), "--use-ema", "--out", str(out)])
    assert code == 6, err
    # a tf_keras bare file records no optimizer name: --optimizer decides first
    assert "not proven averages" in err and "--optimizer CLASS[:OPTIONS]" in err, err
    assert not out.exists()
