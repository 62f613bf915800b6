"""``--trainable`` printed as the help says (``[v.path for v in model.trainable_variables]``) in
another process than the one that saved the file names layers by Keras' per-process counters:
a notebook that made another model (or a stray Dense) first saves ``dense_1..3`` where a fresh
process names the same layers ``dense..dense_2``, so a stated ``dense_1`` is another layer of
the file (review-11-attack-r10 F15: each average one layer off, exit 0), on ``.keras`` and bare
``.weights.h5`` alike. Such names are refused wherever the file does not prove both processes
numbered alike and another numbering would select layers of the same shapes; the file's keys
(numbered by the file) and ``trainable=model.trainable_variables`` (by position) give the
truth, read from the optimizer at save time, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import keras_averages, run_cli

EXTS = [".keras", ".weights.h5"]


def _build(keras, frozen: int = 0):
    layers = keras.layers
    m = keras.Sequential([keras.Input((4,)), layers.Dense(4), layers.Dense(4), layers.Dense(4)])
    m.layers[frozen].trainable = False
    return m


def _train(keras, d, before, frozen: int = 0):
    """Saves ``d/m.keras`` and ``d/m.weights.h5`` of a model trained after ``before()`` (what
    the notebook made first); returns the truth and the raw weights by file key order."""
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    before()
    m = _build(keras, frozen)
    opt = keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5)
    m.compile(opt, "mse")
    x = np.random.RandomState(0).rand(16, 4).astype("float32")
    m.fit(x, x, verbose=0, epochs=2)
    m.train_on_batch(x, x)
    truth = keras_averages(opt)
    raw = [w.numpy() for w in m.weights]
    m.save(str(d / "m.keras"))
    m.save_weights(str(d / "m.weights.h5"))
    return truth, raw


def _printed(keras, before=lambda: None, frozen: int = 0) -> list[str]:
    """``[v.path for v in model.trainable_variables]`` in a fresh process after ``before()``."""
    keras.backend.clear_session()
    before()
    return [v.path for v in _build(keras, frozen).trainable_variables]


@pytest.fixture(scope="module")
def shifted(keras, tmp_path_factory):
    """Training made another Sequential first: sequential_1 with dense_1..3."""
    d = tmp_path_factory.mktemp("shift")
    truth, raw = _train(keras, d, lambda: keras.Sequential([keras.Input((4,)),
                                                            keras.layers.Dense(4)]))
    return d, truth, raw, _printed(keras)


@pytest.fixture(scope="module")
def stray(keras, tmp_path_factory):
    """Training made a stray Dense first: the model is sequential in both processes, its layers
    dense_1..3 in training and dense..dense_2 in a fresh one."""
    d = tmp_path_factory.mktemp("stray")
    truth, raw = _train(keras, d, lambda: keras.layers.Dense(4))
    return d, truth, raw, _printed(keras)


@pytest.fixture(scope="module")
def fresh(keras, tmp_path_factory):
    """Training in a fresh process, the last layer frozen (dense, dense_1 trained)."""
    d = tmp_path_factory.mktemp("fresh")
    truth, raw = _train(keras, d, lambda: None, frozen=2)
    return d, truth, raw


def _export(path, tmp_path, stated: list[str]):
    out = tmp_path / "w.npz"
    extra = ["--use-ema"] if path.name.endswith(".weights.h5") else []
    code, _, err = run_cli(["export", "--not-swapped",
                            str(path), *extra, "--trainable", ",".join(stated),
                            "--out", str(out)])
    got = None
    if out.exists():
        with np.load(out) as z:
            got = [z[k] for k in z.files]
        out.unlink()
    return code, err, got


def _assert_truth(got, truth, raw, averaged: list[int]):
    """``got`` in model.weights order: the averages where ``averaged``, raw elsewhere."""
    want = list(raw)
    for i, value in zip(averaged, truth.values(), strict=True):
        want[i] = value
    assert [g.tobytes() for g in got] == [w.tobytes() for w in want]


def _refused(code, err, got, *words):
    text = " ".join(err.split())
    assert code == 6 and got is None, err
    assert len(err.strip().splitlines()) == 1 and "m." in text, err
    assert all(w in text for w in words), err


def _keys(layers: list[str]) -> list[str]:
    return [f"layers/{name}/vars/{i}" for name in layers for i in (0, 1)]


@pytest.mark.parametrize("ext", EXTS)
def test_paths_printed_in_another_process_are_refused(shifted, ext, tmp_path):
    d, _, _, printed = shifted
    assert printed[0].startswith("sequential/")  # the file's model is sequential_1
    _refused(*_export(d / f"m{ext}", tmp_path, printed), "'sequential_1'", "another process",
             "ckpt list --json")


@pytest.mark.parametrize("ext", EXTS)
def test_the_files_own_names_are_refused_its_keys_give_the_truth(shifted, ext, tmp_path):
    """The names the file records (dense_2, dense_3) may as well come from a process that
    numbered its layers otherwise: refused. Its keys are numbered by the file itself."""
    d, truth, raw, _ = shifted
    _refused(*_export(d / f"m{ext}", tmp_path, list(truth)), "dense_1, dense_2, dense_3",
             "fresh process")
    code, err, got = _export(d / f"m{ext}", tmp_path, _keys(["dense_1", "dense_2"]))
    assert code == 0, err
    _assert_truth(got, truth, raw, [2, 3, 4, 5])


@pytest.mark.parametrize("ext", EXTS)
def test_shifted_layer_counters_are_refused(stray, ext, tmp_path, keras):
    """Same model name, layers counted from another number: refused, CLI and Python (model
    untouched); the variables themselves (trainable=model.trainable_variables) are matched by
    position: the truth."""
    from ckpt_tools import EmaError, apply_keras_ema

    d, truth, raw, printed = stray
    assert printed[0] == "sequential/dense_1/kernel" and list(truth)[0].endswith("dense_2/kernel")
    _refused(*_export(d / f"m{ext}", tmp_path, printed), "dense_1, dense_2, dense_3",
             "trainable=model.trainable_variables")
    keras.backend.clear_session()
    m = _build(keras)
    before = [w.numpy().tobytes() for w in m.weights]
    kw = {"use_ema": True} if ext == ".weights.h5" else {}
    with pytest.raises(EmaError, match="numbers per process"):
        apply_keras_ema(m, d / f"m{ext}", trainable=[v.path for v in m.trainable_variables],
                        **kw, not_swapped=True)
    assert [w.numpy().tobytes() for w in m.weights] == before
    apply_keras_ema(m, d / f"m{ext}", trainable=m.trainable_variables, **kw, not_swapped=True)
    _assert_truth([w.numpy() for w in m.weights], truth, raw, [2, 3, 4, 5])


@pytest.mark.parametrize("ext", EXTS)
def test_names_printed_after_a_stray_layer_are_refused(fresh, ext, tmp_path, keras):
    """A fresh training file; the names printed in a process that made a stray Dense first
    (dense_1, dense_2 for the trained dense, dense_1) fit the file's other layers: refused.
    Printed in a fresh process they are the file's: Keras' own averages, bit for bit."""
    d, truth, raw = fresh
    shifted = _printed(keras, lambda: keras.layers.Dense(4), frozen=2)
    assert shifted[0] == "sequential/dense_1/kernel", shifted
    _refused(*_export(d / f"m{ext}", tmp_path, shifted), "'dense', is not stated")
    code, err, got = _export(d / f"m{ext}", tmp_path, _printed(keras, frozen=2))
    assert code == 0, err
    _assert_truth(got, truth, raw, [0, 1, 2, 3])


def test_numbered_names_no_other_layers_could_fit_are_accepted(keras, tmp_path):
    """The stray-Dense notebook again, but layers of different widths: under any other
    numbering the stated layers' shapes would not fit the averages, so the file's own names
    (dense_2, dense_3) prove the pairing: Keras' averages, the frozen dense_1 raw."""
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    keras.layers.Dense(4)
    layers = keras.layers
    m = keras.Sequential([keras.Input((4,)), layers.Dense(3), layers.Dense(5), layers.Dense(4)])
    m.layers[0].trainable = False
    opt = keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5)
    m.compile(opt, "mse")
    x = np.random.RandomState(0).rand(16, 4).astype("float32")
    m.fit(x, x, verbose=0, epochs=2)
    truth, raw = keras_averages(opt), [w.numpy() for w in m.weights]
    assert list(truth)[0] == "sequential/dense_2/kernel"
    m.save_weights(str(tmp_path / "m.weights.h5"))
    code, err, got = _export(tmp_path / "m.weights.h5", tmp_path, list(truth))
    assert code == 0, err
    _assert_truth(got, truth, raw, [2, 3, 4, 5])


def test_a_file_without_layer_names_is_checked_by_its_own_numbering(fresh, keras, tmp_path):
    """A Keras that wrote no name attributes records no layer names: ckpt shows saving_lib's
    (layers/dense_1: dense_1), numbered per container by class in the order the saver reaches
    the layers, not in the order the process made (and named) them: names printed after a
    stray Dense (dense_1, dense_2) match one layer off, and even a fresh process's names
    (dense, dense_1) prove nothing where a list need not hold its layers in the order they
    were made (a subclassed model's ``self.blocks``): refused. The keys give the truth. The
    file is the fresh fixture's with its name attributes removed."""
    import shutil

    import h5py

    d, truth, raw = fresh
    path = tmp_path / "m.weights.h5"
    shutil.copy(d / "m.weights.h5", path)
    with h5py.File(path, "a") as f:
        groups = []
        f.visititems(lambda _, o: groups.append(o) if "name" in o.attrs else None)
        for o in groups:
            del o.attrs["name"]
    shifted = _printed(keras, lambda: keras.layers.Dense(4), frozen=2)
    _refused(*_export(path, tmp_path, shifted), "does not record", "ckpt list --json")
    _refused(*_export(path, tmp_path, _printed(keras, frozen=2)), "does not record",
             "layers/dense/vars/0")
    code, err, got = _export(path, tmp_path, _keys(["dense", "dense_1"]))
    assert code == 0, err
    _assert_truth(got, truth, raw, [0, 1, 2, 3])


def test_a_sub_model_built_first_is_not_a_shifted_model_name(keras, tmp_path):
    """A sub-model built before the model holding it is ``sequential`` inside ``sequential_1``:
    Keras' own paths start with the sub-model's name, a layer of the file, not a shifted model
    name. The .keras (config.json's flags agree) gives Keras' averages; the bare file, where
    nothing proves the numbering, is refused by it, and its keys give the truth."""
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    layers = keras.layers
    base = keras.Sequential([keras.Input((4,)), layers.Dense(4), layers.Dense(4)])
    m = keras.Sequential([keras.Input((4,)), base, layers.Dense(4)])
    base.layers[0].trainable = False
    opt = keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5)
    m.compile(opt, "mse")
    x = np.random.RandomState(0).rand(16, 4).astype("float32")
    m.fit(x, x, verbose=0, epochs=2)
    truth, raw = keras_averages(opt), [w.numpy() for w in m.weights]
    printed = [v.path for v in m.trainable_variables]
    assert printed[0] == "sequential/dense_1/kernel" and m.name == "sequential_1", printed
    m.save(str(tmp_path / "m.keras"))
    m.save_weights(str(tmp_path / "m.weights.h5"))
    code, err, got = _export(tmp_path / "m.keras", tmp_path, printed)
    assert code == 0, err
    _assert_truth(got, truth, raw, [2, 3, 4, 5])
    _refused(*_export(tmp_path / "m.weights.h5", tmp_path, printed), "'dense', is not stated")
    keys = ["layers/sequential/layers/dense_1/vars/0", "layers/sequential/layers/dense_1/vars/1",
            "layers/dense/vars/0", "layers/dense/vars/1"]
    code, err, got = _export(tmp_path / "m.weights.h5", tmp_path, keys)
    assert code == 0, err
    _assert_truth(got, truth, raw, [2, 3, 4, 5])


def test_custom_sublayers_numbered_by_a_stray_one_are_refused(keras, tmp_path):
    """A subclassed model holding two custom Blocks (a frozen, b trained), the notebook having
    made a stray Block first: the file names them block_1, block_2 (a class it does not
    record), a fresh process block, block_1, so its printed net/block_1/w is the file's a.
    Refused (was: a got b's average, exit 0); the key of b gives Keras' average."""
    class Block(keras.layers.Layer):
        def build(self, shape):
            self.w = self.add_weight(name="w", shape=(4, 4))

        def call(self, x):
            return x @ self.w

    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.a, self.b = Block(), Block()

        def call(self, x):
            return self.b(self.a(x))

    def build():
        m = Net()
        m(np.zeros((1, 4), "float32"))
        m.a.trainable = False
        return m

    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    Block()
    m = build()
    opt = keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5)
    m.compile(opt, "mse")
    x = np.random.RandomState(0).rand(16, 4).astype("float32")
    m.fit(x, x, verbose=0, epochs=2)
    m.train_on_batch(x, x)
    truth, raw = keras_averages(opt), [w.numpy() for w in m.weights]
    m.save_weights(str(tmp_path / "m.weights.h5"))
    keras.backend.clear_session()
    printed = [v.path for v in build().trainable_variables]
    assert printed == ["net/block_1/w"] and list(truth) == ["net/block_2/w"], printed
    _refused(*_export(tmp_path / "m.weights.h5", tmp_path, printed), "block_1, block_2",
             "apply_keras_ema(model, path) without trainable=")
    code, err, got = _export(tmp_path / "m.weights.h5", tmp_path, ["b/vars/0"])
    assert code == 0, err
    _assert_truth(got, truth, raw, [1])
    from ckpt_tools import apply_keras_ema

    keras.backend.clear_session()
    m = build()
    apply_keras_ema(m, tmp_path / "m.weights.h5", use_ema=True, not_swapped=True)
    _assert_truth([w.numpy() for w in m.weights], truth, raw, [1])
