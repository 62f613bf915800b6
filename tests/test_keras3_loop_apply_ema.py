"""``apply_ema`` into a fresh Keras 3 (TF backend) subclassed model whose blocks sit in a Python
list, trained by a TF2 custom loop with ``tf.train.ExponentialMovingAverage`` (or Keras'
``Adam(use_ema=True)``) and saved as ``tf.train.Checkpoint(model=net, optimizer=opt[,
ema=[...]])`` (review-19-user-u21 F1, F2).

TF's object graph does not record the list's layers: their weights are stored only through the
optimizer's ``_trainable_variables/N``. An eval process that passes the model wrapped as the
README says, ``tf.train.Checkpoint(model=net)``, or beside an optimizer not yet built (Keras
builds it at the first ``apply_gradients()``), reaches only the head: ``apply_ema`` returned
success with the blocks left at their random init. Every trainable variable Keras tracks in the
object given must now receive a value, else EmaError naming them and the call that works
(the optimizer built with the model's variables, passed under its saved name), which then
restores ``ema.average(v)`` recorded at save time bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from ckpt_tools import apply_ema  # noqa: E402
from ckpt_tools.errors import EmaError  # noqa: E402


def _net(block: str = "block"):
    """A subclassed Keras 3 model named ``net``: two Dense(4) blocks named ``<block>0``,
    ``<block>1`` in a Python list, a Dense(3) head."""

    class Net(keras.Model):
        def __init__(self):
            super().__init__(name="net")
            self.blocks = [keras.layers.Dense(4, name=f"{block}{i}") for i in range(2)]
            self.head = keras.layers.Dense(3, name="head")

        def call(self, x):
            for b in self.blocks:
                x = tf.nn.relu(b(x))
            return self.head(x)

    net = Net()
    net(tf.zeros([1, 4]))
    return net


def _train(path: str, use_ema: bool) -> list[np.ndarray]:
    """Trains three steps and saves; returns each trainable variable's average at save time,
    in ``net.trainable_variables`` order: ``ema.average(v)`` (tf.train.EMA), or the Keras
    optimizer's own ``_model_variables_moving_average`` (``use_ema=True``)."""
    keras.utils.set_random_seed(11)
    net = _net()
    x = tf.random.normal([8, 4])
    opt = keras.optimizers.Adam(0.01, use_ema=use_ema, ema_momentum=0.9)
    ema = tf.train.ExponentialMovingAverage(0.99)
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(net(x) ** 2)
        grads = tape.gradient(loss, net.trainable_variables)
        opt.apply_gradients(zip(grads, net.trainable_variables, strict=True))
        if not use_ema:
            ema.apply([v.value for v in net.trainable_variables])  # Keras 3: the tf.Variables
    tv = net.trainable_variables
    if use_ema:
        tf.train.Checkpoint(model=net, optimizer=opt).write(path)
        averages = {id(v): a for v, a in zip(opt._trainable_variables,
                                             opt._model_variables_moving_average, strict=True)}
        return [averages[id(v)].numpy() for v in tv]
    tf.train.Checkpoint(model=net, optimizer=opt,
                        ema=[ema.average(v.value) for v in tv]).write(path)
    return [ema.average(v.value).numpy() for v in tv]


def _fresh_opt(use_ema: bool):
    return keras.optimizers.Adam(0.01, use_ema=use_ema, ema_momentum=0.9)


def _refused(path: str, net, obj, block: str, **options) -> None:
    """apply_ema(obj) raises naming the list's variables and the call that works, and
    assigns nothing."""
    before = [v.numpy() for v in net.trainable_variables]
    with pytest.raises(EmaError) as err:
        apply_ema(obj, path, **options)
    msg = str(err.value)
    assert path in msg and f"net/{block}0/kernel (not reached by the object's paths)" in msg, msg
    assert "opt.build(model.trainable_variables)" in msg, msg
    assert "tf.train.Checkpoint(model=model, optimizer=opt)" in msg, msg
    assert "head/kernel (not reached" not in msg, msg  # the object graph holds the head
    for v, was in zip(net.trainable_variables, before, strict=True):
        assert v.numpy().tobytes() == was.tobytes(), v.path


def _restored(net, truth: list[np.ndarray]) -> None:
    for v, want in zip(net.trainable_variables, truth, strict=True):
        assert v.numpy().tobytes() == want.tobytes(), v.path


def test_tf_train_ema_list_blocks_refused_until_the_optimizer_is_built(tmp_path):
    """tf.train.EMA: nothing but the optimizer's list keys the blocks' weights (and their
    averages), so the model wrapped, beside an unbuilt optimizer (strict too) or bare is
    refused; the optimizer built with the model's variables restores every average."""
    path = str(tmp_path / "ckpt")
    truth = _train(path, use_ema=False)
    stated = {"apply_order": "trainable:optimizer"}
    for make, extra in [
        (lambda n: tf.train.Checkpoint(model=n), {}),  # the README's wrapping
        (lambda n: tf.train.Checkpoint(model=n, optimizer=_fresh_opt(False)), {}),  # unbuilt
        (lambda n: tf.train.Checkpoint(model=n, optimizer=_fresh_opt(False)), {"strict": True}),
        (lambda n: n, {}),  # the model itself (F2: the Python form the CLI's refusal names)
    ]:
        net = _net()
        _refused(path, net, make(net), "block", **stated, **extra)
    net = _net()
    opt = _fresh_opt(False)
    opt.build(net.trainable_variables)
    result = apply_ema(tf.train.Checkpoint(model=net, optimizer=opt), path, **stated)
    assert len(result.averaged) == len(truth)
    _restored(net, truth)


def test_keras_use_ema_list_blocks_wrapped_pair_or_are_refused(tmp_path):
    """Keras ``Adam(use_ema=True)``: the averages' names (``adam/net_block0_kernel_average``)
    name the layers, so the model wrapped pairs its list's weights by them as the bare model
    does; renamed layers match none and are refused, until the optimizer is built."""
    path = str(tmp_path / "ckpt")
    truth = _train(path, use_ema=True)
    for make in (lambda n: tf.train.Checkpoint(model=n),
                 lambda n: tf.train.Checkpoint(model=n, optimizer=_fresh_opt(True)), lambda n: n):
        net = _net()
        result = apply_ema(make(net), path, not_swapped=True)
        assert len(result.averaged) == len(truth)
        _restored(net, truth)
    for make in (lambda n: tf.train.Checkpoint(model=n),
                 lambda n: tf.train.Checkpoint(model=n, optimizer=_fresh_opt(True))):
        net = _net("other")
        _refused(path, net, make(net), "other", not_swapped=True)
    net = _net("other")
    opt = _fresh_opt(True)
    opt.build(net.trainable_variables)
    apply_ema(tf.train.Checkpoint(model=net, optimizer=opt), path, not_swapped=True)
    _restored(net, truth)


def test_variables_listed_keep_their_own_message(tmp_path):
    """A list of variables is paired by name (no object paths): its refusal is unchanged."""
    path = str(tmp_path / "ckpt")
    _train(path, use_ema=False)
    net = _net()
    with pytest.raises(EmaError, match="no checkpoint key for this variable") as err:
        apply_ema(net.trainable_variables, path, apply_order="trainable:optimizer")
    assert "not reached" not in str(err.value)


def test_averages_of_unstored_list_blocks_are_averages_not_weights(tmp_path):
    """The optimizer stepped only the head while ``ema.apply()`` averaged every variable: the
    list's blocks' weights are stored nowhere, their averages are (``ema/0`` ...
    ``net/kernel/ExponentialMovingAverage``, named like the stored head). They are averages
    of unstored variables, said so, never weights "missing" an average nor exported as raw
    (review-19-user-u21 F5); the head's averages export bit for bit."""
    import json
    import zipfile

    from helpers import run_cli

    keras.utils.set_random_seed(5)
    net = _net()
    x = tf.random.normal([8, 4])
    opt = keras.optimizers.Adam(0.01)
    ema = tf.train.ExponentialMovingAverage(0.99)
    tv = net.trainable_variables
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(net(x) ** 2)
        grads = tape.gradient(loss, tv)
        opt.apply_gradients(list(zip(grads, tv, strict=True))[-2:])  # the head only
        ema.apply([v.value for v in tv])
    tf.train.Checkpoint(model=net, optimizer=opt,
                        ema=[ema.average(v.value) for v in tv]).write(str(tmp_path / "ck" / "ckpt"))
    heads = sorted(ema.average(v.value).numpy().tobytes() for v in tv[-2:])

    ck = str(tmp_path / "ck")
    code, out, err = run_cli(["list", ck, "--json"])
    assert code == 0, err
    roles = {v["name"]: v["role"] for v in json.loads(out)["variables"]}
    assert [roles[f"ema/{i}/.ATTRIBUTES/VARIABLE_VALUE"] for i in range(4)] == ["ema"] * 4, roles
    for extra in ([], ["--allow-missing"]):
        npz = tmp_path / f"w{len(extra)}.npz"
        code, _, err = run_cli(["export", ck, *extra, "--out", str(npz)])
        assert code == 0, err
        assert "4 averages belong to variables this checkpoint does not store" in err, err
        with np.load(npz) as z:
            assert sorted(z[n].tobytes() for n in z.files) == heads
        assert "raw" not in json.loads(zipfile.ZipFile(npz).comment or b"{}"), err
