"""An optimizer subclass (use_ema=False) keeping per-weight variables of its own named
``average`` (running averages of the gradients) in a ``tf.train.Checkpoint``: their names
(``avg_grad_sgd/hidden_kernel_average``, tf_keras ``SGD/average/hidden/kernel``) are those of
Keras' EMA copies, and were taken as them: ``export --not-swapped`` (Keras 3) and a bare
``export`` (tf_keras) wrote the gradient averages as the EMA weights, exit 0
(review-14-attack-r27 F3). The object graph records a use_ema optimizer's copies in its
``_model_variables_moving_average``: only those are averages. Keras 3 and tf_keras generate
the files here; truth recorded from the optimizer at save time.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_keras import TF_KERAS, run_keras

_KERAS3 = '''
    ema = sys.argv[2] == "ema"
    class AvgGradSGD(keras.optimizers.SGD):
        def build(self, var_list):
            if self.built: return
            super().build(var_list)
            self.gavg = self.add_optimizer_variables(var_list, "average")
        def update_step(self, g, v, lr):
            a = self.gavg[self._get_variable_index(v)]
            self.assign(a, 0.9 * a + 0.1 * g)
            self.assign_sub(v, keras.ops.multiply(lr, a))
    m = dense_net(keras, "hidden")
    m.compile(AvgGradSGD(0.05, use_ema=ema, ema_momentum=0.5), "mse")
    def snap(model):
        o = model.optimizer
        truth.update({"gavg|" + v.path: a.numpy() for v, a in zip(o._trainable_variables, o.gavg)})
        if ema:
            truth.update({"ema|" + v.path: a.numpy() for v, a in
                          zip(o._trainable_variables, o._model_variables_moving_average)})
        tf.train.Checkpoint(model=model, optimizer=o).write(f"{out}/tf/ckpt")
    fit_snapped(keras, m, snap)
'''

_TF_KERAS = '''
    class AvgGradSGD(K.optimizers.SGD):
        def build(self, var_list):
            super().build(var_list)
            if getattr(self, "_gavg_built", False): return
            self.gavg = [self.add_variable_from_reference(v, "average") for v in var_list]
            self._gavg_built = True
        def update_step(self, g, v):
            a = self.gavg[self._index_dict[self._var_key(v)]]
            a.assign(0.9 * a + 0.1 * g); v.assign_sub(self.learning_rate * a)
    m = dense_net(K, "hidden")
    m.compile(AvgGradSGD(learning_rate=0.05), "mse")
    fit_snapped(K, m)
    o = m.optimizer
    truth.update({"gavg|" + v.name: v.numpy() for v in o.gavg})
    m.save_weights(f"{out}/tf/ckpt")
    tf.train.Checkpoint(model=m, optimizer=o).write(f"{out}/ck/ckpt")
'''


def _make(tmp_path_factory, script: str, *args: str, **prelude):
    out = tmp_path_factory.mktemp("named_average")
    return out, run_keras(script, out, *args, **prelude)


@pytest.fixture(scope="module", params=["noema", "ema"])
def keras3(request, tmp_path_factory):
    return request.param, *_make(tmp_path_factory, _KERAS3, request.param)


def test_keras3_gradient_averages_are_not_ema_copies(keras3, tmp_path):
    case, out, truth = keras3
    dest = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(out / "tf" / "ckpt"), "--not-swapped", "--strict",
                            "--out", str(dest)])
    if case == "noema":
        assert code == 6, err
        assert "no averages are stored" in err, err
        assert not dest.exists()
        return
    # use_ema=True as well: the listed copies are Keras' averages, not the gradient averages
    assert code == 0, err
    with np.load(dest) as z:
        assert len(z.files) == 4
        for k in z.files:
            assert z[k].tobytes() == truth[f"ema|{k}"].tobytes(), k


def test_tf_keras_gradient_averages_are_not_ema_copies(tmp_path_factory, tmp_path):
    pytest.importorskip("tf_keras")
    out, _truth = _make(tmp_path_factory, _TF_KERAS, prelude=TF_KERAS)
    for sub in ("tf", "ck"):
        dest = tmp_path / f"{sub}.npz"
        code, _, err = run_cli(["export", str(out / sub / "ckpt"), "--out", str(dest)])
        assert code == 6, err
        # the names are those of a resumed use_ema=True optimizer's unlisted averages too
        # (note/s32m): no average is proven, whatever they are
        said = " ".join(err.split())
        assert "no average is proven" in said and "variables of its own of that name" in said, err
        assert not dest.exists()
