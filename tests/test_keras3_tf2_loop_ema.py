"""A Keras 3 (TF backend) subclassed model trained by a TF2 custom loop (``tf.GradientTape`` and
a Keras optimizer) with ``tf.train.ExponentialMovingAverage`` applied to
``model.trainable_variables`` each step, saved as ``tf.train.Checkpoint(model=net,
optimizer=opt, ema=[ema.average(v) ...])`` (review-18-user-u20 F4).

Keras 3 names every ``tf.Variable`` of such a model like the model (``net/kernel``), blocks kept
in a Python list are not in the object graph at all (their variables are stored only as the
optimizer's ``_trainable_variables/N``), and nothing in the file proves which average is
whose: every command refuses (exit 6) and names the one statement that decides,
``--apply-order trainable:optimizer`` (``ema.apply()`` got the list the optimizer was built
with), under which ``map``, ``export`` and ``restore-ema`` give ``ema.average(v)`` as
recorded at save time, bit for bit. Truth comes from TensorFlow: the averages at save time,
the checkpoint's own values read by ``tf.train.load_checkpoint``, and a fresh model restored
by ``tf.train.Checkpoint.read``."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

_STATED = "--apply-order trainable:optimizer"


def _net(blocks: str, count: int, head: int, order=None):
    """A subclassed Keras 3 model named ``net``: ``count`` blocks of two Dense(4) kept in a
    Python list (``blocks="list"``) or as attributes, then a Dense(``head``) head; or
    (``blocks="dense"``, README's plainest subclass: review-24-user-u26 F13) ``count``
    default-named Dense layers held as attributes ``d0``, ``d1``…, of the widths ``order``
    gives (4 each by default), then the head."""

    class Block(keras.layers.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.d1 = keras.layers.Dense(4, name="d1")
            self.d2 = keras.layers.Dense(4, name="d2")

        def call(self, x):
            return self.d2(tf.nn.relu(self.d1(x)))

    class Dense(keras.Model):
        def __init__(self):
            super().__init__(name="net")
            for i, width in enumerate(order or [4] * count):
                setattr(self, f"d{i}", keras.layers.Dense(width))
            self.head = keras.layers.Dense(head)

        def call(self, x):
            for i in range(count):
                x = tf.nn.relu(getattr(self, f"d{i}")(x))
            return self.head(x)

    class Net(keras.Model):
        def __init__(self):
            super().__init__(name="net")
            made = [Block(name=f"block{i}") for i in range(count)]
            if blocks == "list":
                self.blocks = made
            else:
                for i, b in enumerate(made):
                    setattr(self, f"b{i}", b)
            self.head = keras.layers.Dense(head, name="head")

        def call(self, x):
            for b in (self.blocks if blocks == "list" else
                      [getattr(self, f"b{i}") for i in range(count)]):
                x = b(x)
            return self.head(x)

    return Dense() if blocks == "dense" else Net()


def _train(directory, blocks: str, optimizer: str, ema_as: str, count: int = 2,
           head: int = 2, order=None, built=None) -> list[tuple[bytes, np.ndarray]]:
    """Trains and saves; returns, per trainable variable in ``apply()`` order, its raw value
    (bytes) and ``ema.average(v)`` at save time. ``built``: the indices into
    ``trainable_variables`` the optimizer is built with, in that order (a loop whose
    optimizer got another order than ``ema.apply()``)."""
    keras.utils.set_random_seed(7)
    net = _net(blocks, count, head, order)
    x = tf.random.normal([8, 4])
    net(x)
    opt = keras.optimizers.Adam(0.01) if optimizer == "adam" else keras.optimizers.SGD(0.1)
    if built is not None:
        opt.build([net.trainable_variables[i] for i in built])
    ema = tf.train.ExponentialMovingAverage(0.99)
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(net(x) ** 2)
        grads = tape.gradient(loss, net.trainable_variables)
        opt.apply_gradients(zip(grads, net.trainable_variables, strict=True))
        ema.apply([v.value for v in net.trainable_variables])  # Keras 3: the tf.Variables
    tv = net.trainable_variables
    saved = ([ema.average(v.value) for v in tv] if ema_as == "list"
             else {v.path: ema.average(v.value) for v in tv})
    tf.train.Checkpoint(model=net, optimizer=opt, ema=saved).write(str(directory / "ckpt"))
    truth = [(v.numpy().tobytes(), ema.average(v.value).numpy()) for v in tv]
    assert len({raw for raw, _ in truth}) == len(truth)  # each variable told by its value
    return truth


def _average_of(truth, raw: np.ndarray) -> np.ndarray:
    """``ema.average(v)`` at save time of the variable whose saved value is ``raw``."""
    found = [avg for saved, avg in truth if saved == raw.tobytes()]
    assert len(found) == 1
    return found[0]


VARIANTS = [
    # the user's setup: blocks in a list, Adam, the averages saved as a list
    pytest.param("list", "adam", "list", 2, 2, id="list-adam-ema_list"),
    # a head of the blocks' shape: the model's head is a candidate beside the optimizer's list
    pytest.param("list", "sgd", "dict", 2, 4, id="list-sgd-ema_dict-same_head"),
    # fourteen variables: the optimizer's _trainable_variables is a list, never a dict
    pytest.param("attrs", "adam", "dict", 3, 4, id="attrs-adam-ema_dict-14vars"),
    pytest.param("attrs", "sgd", "list", 2, 2, id="attrs-sgd-ema_list"),
    # Dense layers held by the model itself (model/d0/_kernel): review-24-user-u26 F13
    pytest.param("dense", "adam", "list", 2, 2, id="dense-adam-ema_list"),
]


@pytest.mark.parametrize(("blocks", "optimizer", "ema_as", "count", "head"), VARIANTS)
def test_refused_then_paired_bit_exact_by_the_optimizer_order(tmp_path, blocks, optimizer,
                                                              ema_as, count, head):
    truth = _train(tmp_path / "ck", blocks, optimizer, ema_as, count, head)
    ck = str(tmp_path / "ck")
    for cmd in (["map", ck], ["export", ck, "--out", str(tmp_path / "r.npz")],
                ["restore-ema", ck, "--out", str(tmp_path / "r")],
                ["export", ck, "--apply-order", "tracked", "--out", str(tmp_path / "t.npz")]):
        code, _, err = run_cli(cmd)
        assert code == 6, (cmd, err)
        assert _STATED in err and "not a proof" in err, err
        assert str(tmp_path / "ck") in err
    assert not (tmp_path / "r.npz").exists() and not (tmp_path / "t.npz").exists()
    code, out, err = run_cli(["list", ck])
    assert code == 0 and f"pass {_STATED} to decide" in out + err, out + err

    reader = tf.train.load_checkpoint(ck + "/ckpt")  # write(): no state file
    code, out, err = run_cli(["map", ck, *_STATED.split(), "--json"])
    assert code == 0, err
    pairs = {k: v for k, v in json.loads(out).items() if k != v}
    assert len(pairs) == len(truth)
    for avg_key, var_key in pairs.items():
        want = _average_of(truth, reader.get_tensor(var_key))
        assert reader.get_tensor(avg_key).tobytes() == want.tobytes(), (avg_key, var_key)

    code, _, err = run_cli(["export", ck, *_STATED.split(), "--strict",
                            "--out", str(tmp_path / "w.npz")])
    assert code == 0, err
    # read through the optimizer's list, not the model's attributes (u26 F13): no note
    # about a tf.Module's sorted attributes or containers read alike
    assert "sorted by name" not in err and "also reads" not in err, err
    # --raw writes each weight's own value under the same name: the value says which
    # variable the name is (truth's raw values), whose average must be beside it
    code, _, err = run_cli(["export", ck, "--raw", "--out", str(tmp_path / "raw.npz")])
    assert code == 0, err
    with np.load(tmp_path / "w.npz") as z, np.load(tmp_path / "raw.npz") as raw:
        assert sorted(z.keys()) == sorted(raw.keys()) and len(z.keys()) == len(truth)
        for name in z.keys():
            assert z[name].tobytes() == _average_of(truth, raw[name]).tobytes(), name

    out_dir = tmp_path / "restored"
    code, _, err = run_cli(["restore-ema", ck, *_STATED.split(), "--out", str(out_dir)])
    assert code == 0, err
    restored = tf.train.load_checkpoint(str(out_dir))
    for var_key in pairs.values():
        want = _average_of(truth, reader.get_tensor(var_key))
        assert restored.get_tensor(var_key).tobytes() == want.tobytes(), var_key


def test_restored_model_holds_the_averages_read_by_tensorflow(tmp_path):
    """TensorFlow itself reads restore-ema's output into a fresh model (through the
    optimizer's list, where the model's Python list of blocks is not in the object graph):
    every weight is ``ema.average(v)`` of the same variable at save time."""
    truth = _train(tmp_path / "ck", "list", "adam", "list")
    out_dir = tmp_path / "restored"
    code, _, err = run_cli(["restore-ema", str(tmp_path / "ck"), *_STATED.split(),
                            "--out", str(out_dir)])
    assert code == 0, err
    net = _net("list", 2, 2)
    net(tf.zeros([1, 4]))
    opt = keras.optimizers.Adam(0.01)
    opt.build(net.trainable_variables)
    tf.train.Checkpoint(model=net, optimizer=opt).read(
        tf.train.latest_checkpoint(str(out_dir))).expect_partial()
    for v, (_, avg) in zip(net.trainable_variables, truth, strict=True):
        assert v.numpy().tobytes() == avg.tobytes(), v.path


def test_without_the_optimizer_nothing_decides(tmp_path):
    """Saved without the optimizer, the blocks kept in a Python list are stored nowhere: no
    order is offered (the optimizer's is not in the file), and the averages are refused."""
    keras.utils.set_random_seed(7)
    net = _net("list", 2, 4)
    x = tf.random.normal([8, 4])
    net(x)
    ema = tf.train.ExponentialMovingAverage(0.99)
    ema.apply([v.value for v in net.trainable_variables])
    tf.train.Checkpoint(model=net, ema=[ema.average(v.value) for v in net.trainable_variables]
                        ).write(str(tmp_path / "ck" / "ckpt"))
    code, _, err = run_cli(["export", str(tmp_path / "ck"), "--out", str(tmp_path / "w.npz")])
    assert code == 6, err
    assert "trainable:optimizer" not in err
    assert not (tmp_path / "w.npz").exists()


def test_optimizer_built_in_another_order_is_refused(tmp_path):
    """The hostile twin of F13 (review-24-user-u26): the loop built the optimizer with d0, d2,
    d1, head while ``ema.apply()`` got ``trainable_variables`` (d0, d1, d2, head); d1 and d2
    (biases [4] and [8]) traded, so ``--apply-order trainable:optimizer`` is a false
    statement the shapes contradict: refused (exit 6), nothing written."""
    _train(tmp_path / "ck", "dense", "adam", "list", count=3, head=4, order=[4, 4, 8],
           built=[0, 1, 4, 5, 2, 3, 6, 7])
    code, _, err = run_cli(["export", str(tmp_path / "ck"), *_STATED.split(),
                            "--out", str(tmp_path / "w.npz")])
    assert code == 6, err
    assert not (tmp_path / "w.npz").exists()


def test_dense_attributes_without_the_optimizer_offer_no_order(tmp_path):
    """review-24-user-u26 F13: Dense layers held by the model itself, saved without the
    optimizer: every ``--apply-order`` is refused (Keras' tracking order is not in the
    file), so ``list`` offers none and names the Python call, which (the live model's own
    ``trainable_variables``) gives ``ema.average(v)`` bit for bit."""
    from ckpt_tools import apply_ema

    keras.utils.set_random_seed(7)
    net = _net("dense", 2, 2)
    x = tf.random.normal([8, 4])
    net(x)
    ema = tf.train.ExponentialMovingAverage(0.5)
    for _ in range(2):
        net.d0.kernel.assign_add(tf.ones_like(net.d0.kernel))
        net.d1.bias.assign_add(tf.fill(net.d1.bias.shape, 0.5))
        ema.apply([v.value for v in net.trainable_variables])
    truth = [ema.average(v.value).numpy() for v in net.trainable_variables]
    tf.train.Checkpoint(model=net, ema=[ema.average(v.value) for v in net.trainable_variables]
                        ).write(str(tmp_path / "ck" / "ckpt"))
    code, out, err = run_cli(["list", str(tmp_path / "ck")])
    assert code == 0 and "no option decides" in out + err, out + err
    assert "pass --apply-order" not in out + err and "apply_ema(model" in out + err, out + err
    for order in ("tracked", "trainable"):
        code, _, err = run_cli(["export", str(tmp_path / "ck"), "--apply-order", order,
                                "--out", str(tmp_path / "w.npz")])
        assert code == 6, err
    live = _net("dense", 2, 2)
    live(x)
    apply_ema(live, str(tmp_path / "ck"), apply_order="trainable")
    for v, want in zip(live.trainable_variables, truth, strict=True):
        assert v.numpy().tobytes() == want.tobytes(), v.path
