"""An ``.h5`` of a tf_keras model holding a nested model (a Sequential/Functional used as a
layer) is what tf_keras' own legacy writer makes: the nested model is ONE layer group, its
layers' trainable weights then their non-trainable ones (review-11-attack-r14 F1). Before, the
nested layers were written as top-level groups (``base/a``, ``layer_with_weights-0/
layer_with_weights-1``, ``a``), exit 0: positional ``load_weights`` raised a layer-count
mismatch and ``by_name=True`` silently left the nested layers at init. Models are built and
trained here by tf_keras; the truth is ``optimizer._model_variables_moving_average`` (raw for
weights the optimizer does not train) recorded at save time, and each written ``.h5`` is
loaded by tf_keras' plain (positional) ``load_weights``. Where the input does not prove the
nested model's order (a TF-format checkpoint or a bare ``.weights.h5``: frozen flags not
recorded, equal-shaped layers), the ``.h5`` is refused (exit 5)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli


def _build(tfk, kind: str):
    L = tfk.layers
    i = tfk.Input((3,))
    if kind == "equal":  # a nested model of two equal-shaped layers: d, e swap if one freezes
        base = tfk.Sequential([tfk.Input((4,)), L.Dense(4, name="d"), L.Dense(4, name="e")],
                              name="base")
        return tfk.Model(i, L.Dense(2, name="head")(base(L.Dense(4, name="pre")(i))))
    base = tfk.Sequential([tfk.Input((4,)), L.Dense(5, name="a"), L.BatchNormalization(name="bn"),
                           L.Dense(6, name="b")], name="base")
    j = tfk.Input((7,))
    tower = tfk.Model(j, L.Dense(3, name="c")(j), name="tower")
    fz = L.Dense(7, name="fz")
    fz.trainable = False
    h = fz(base(L.Dense(4, name="pre")(i)))
    return tfk.Model(i, L.Dense(2, name="head")(tower(h)))


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    tfk = pytest.importorskip("tf_keras")
    import tensorflow as tf

    out = tmp_path_factory.mktemp("tfk_nested")
    truth = {}
    for kind in ("nested", "equal"):
        tf.random.set_seed(11)
        rs = np.random.RandomState(11)
        m = _build(tfk, kind)
        opt = tfk.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.5)
        m.compile(opt, "mse")
        x, y = rs.randn(16, 3).astype("float32"), rs.randn(16, 2).astype("float32")
        for _ in range(3):
            m.train_on_batch(x, y)
        averaged = {id(v) for v in m.trainable_variables}
        truth[kind] = [opt._model_variables_moving_average[opt._index_dict[opt._var_key(v)]
                                                          ].numpy()
                       if id(v) in averaged else v.numpy() for v in m.weights]
        m.save(str(out / f"{kind}.keras"))
        m.save(str(out / f"{kind}.h5"))
        m.save_weights(str(out / f"{kind}_tf" / "w"))
        tf.train.Checkpoint(model=m, optimizer=opt).write(str(out / f"{kind}_ck" / "ck"))
        m.save_weights(str(out / f"{kind}.weights.h5"))
    return tfk, out, truth


@pytest.mark.parametrize("src,extra", [
    ("nested.keras", []), ("nested.h5", []), ("nested_tf/w", ["--allow-missing"]),
    ("nested_ck/ck", [])])
@pytest.mark.parametrize("command", ["export", "restore-ema"])
def test_h5_of_a_nested_tf_keras_model_loads_by_position_bit_for_bit(made, tmp_path, src,
                                                                       extra, command):
    tfk, out, truth = made
    target = tmp_path / "m.h5"
    argv = ([command, str(out / src), "--out", str(target)] if command == "export" else
            [command, str(out / src), "--format", "h5", "--out", str(target)])
    code, _, err = run_cli(argv + extra)
    assert code == 0, err
    model = _build(tfk, "nested")
    model.load_weights(str(target))  # positional: one group per weighted layer of model.layers
    assert len(model.weights) == len(truth["nested"])
    for v, want in zip(model.weights, truth["nested"], strict=True):
        assert v.numpy().tobytes() == want.tobytes(), v.name


def test_h5_groups_are_tf_keras_own(made, tmp_path):
    """The nested models are one group each, named as tf_keras names them (by_name loads)."""
    import h5py

    tfk, out, truth = made
    code, _, err = run_cli(["export", str(out / "nested.keras"), "--out", str(tmp_path / "e.h5")])
    assert code == 0, err
    with h5py.File(tmp_path / "e.h5") as f, h5py.File(out / "nested.h5") as own:
        names = [n.decode() if isinstance(n, bytes) else n for n in f.attrs["layer_names"]]
        mine = [n for n in own["model_weights"].attrs["layer_names"]
                if len(own["model_weights"][n].attrs["weight_names"])]
        assert names == mine == ["pre", "base", "fz", "tower", "head"]
    model = _build(tfk, "nested")
    model.load_weights(str(tmp_path / "e.h5"), by_name=True)
    for v, want in zip(model.weights, truth["nested"], strict=True):
        assert v.numpy().tobytes() == want.tobytes(), v.name


@pytest.mark.parametrize("src,extra,written", [
    ("equal_tf/w", [], "w"),
    ("equal.weights.h5", ["--use-ema", "--optimizer", "adam"], "equal.weights.h5")])
def test_h5_of_a_nested_model_whose_order_is_not_recorded_is_refused(made, tmp_path, src,
                                                                       extra, written):
    """Which of ``d``, ``e`` is frozen decides the order tf_keras fills ``base`` in, and
    neither a TF-format checkpoint nor a bare .weights.h5 records it: exit 5, one line naming
    the file and the outputs that hold it; restore-ema's default one loads bit for bit."""
    tfk, out, truth = made
    target = tmp_path / "m.h5"
    for argv in (["export", str(out / src), "--out", str(target)],
                 ["restore-ema", str(out / src), "--format", "h5", "--out", str(target)]):
        code, _, err = run_cli(argv + extra)
        assert code == 5, err
        line = err.strip()
        assert "\n" not in line and str(out / src) in line and ".npz" in line, err
        assert "frozen" in line and "restore-ema to a" in line, err
        assert not target.exists()
    code, _, err = run_cli(["restore-ema", str(out / src), "--out", str(tmp_path / "r"), *extra])
    assert code == 0, err
    model = _build(tfk, "equal")
    model.load_weights(str(tmp_path / "r" / written))
    for v, want in zip(model.weights, truth["equal"], strict=True):
        assert v.numpy().tobytes() == want.tobytes(), v.name


def test_h5_of_the_equal_model_from_its_keras_archive_is_written(made, tmp_path):
    """The .keras records the frozen flags: the same model's .h5 loads bit for bit."""
    tfk, out, truth = made
    code, _, err = run_cli(["export", str(out / "equal.keras"), "--out", str(tmp_path / "e.h5")])
    assert code == 0, err
    model = _build(tfk, "equal")
    model.load_weights(str(tmp_path / "e.h5"))
    for v, want in zip(model.weights, truth["equal"], strict=True):
        assert v.numpy().tobytes() == want.tobytes(), v.name
