"""Keras setups whose EMA copies are easy to pair with the wrong weight, made by
``fixtures/make_keras_pairing.py`` with the truth recorded from the library at save time: each
file is paired bit for bit with Keras' own averages, or refused (exit 6) with a true reason.
Never another variable's average, never raw weights, with exit 0."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import FIXTURES, run_cli, run_generator

pytest.importorskip("keras")
pytest.importorskip("tf_keras")



@pytest.fixture(scope="session")
def made(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    out = tmp_path_factory.mktemp("keras_pairing")
    return out, run_generator("make_keras_pairing.py", out)


def _exported(made, name: str, tmp_path: Path, *extra: str) -> tuple[int, dict, str]:
    out, _ = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / name), "--out", str(target), "--force",
                            *extra])
    if code:
        assert not target.exists()
        return code, {}, err
    with np.load(target) as z:
        return code, {k: z[k] for k in z.files}, err


def _check(truth: dict, case: str, got: dict, rename=lambda n: n) -> None:
    """Every exported weight holds exactly its own average (by Keras), bit for bit."""
    want = {k.split(":", 1)[1]: v for k, v in truth.items()
            if k.startswith(case + ":") and ":raw:" not in k}
    assert {rename(n) for n in got} == set(want)
    for name, value in got.items():
        assert value.tobytes() == want[rename(name)].tobytes(), name


@pytest.mark.parametrize("name", ["tfk_frozen_after.keras", "tfk_frozen_after_tf/ckpt"])
def test_tf_keras_layer_frozen_after_training_keeps_its_own_average(made, name, tmp_path):
    """tf_keras: the optimizer holds an average for each of the 6 variables it was built with;
    one layer was frozen before saving. The averages are not shifted onto the next layer."""
    _, truth = made
    code, got, err = _exported(made, name, tmp_path)
    assert code == 0, err
    layer = {f"layer_with_weights-{i}": n for i, n in enumerate(["dense", "dense_1", "dense_2"])}
    _check(truth, "tfk_frozen_after", got,
           lambda n: "/".join([layer.get(n.split("/")[0], n.split("/")[0])] + n.split("/")[1:]))
    if name.endswith(".keras"):
        code, text, _ = run_cli(["list", str(made[0] / name), "--json"])
        notes = json.loads(text)["ema_evidence"]["notes"]
        assert any("frozen after the optimizer was built" in n for n in notes), notes


def test_tf_keras_h5_without_optimizer_is_refused_in_keras_terms(made, tmp_path):
    code, _, err = _exported(made, "tfk_frozen_after.h5", tmp_path)
    assert code == 6 and "no optimizer variables" in err, err


@pytest.mark.parametrize("ext", [".keras", ".weights.h5"])
def test_subclassed_attribute_order_is_never_taken_from_the_call_order(made, ext, tmp_path):
    """Attributes head, body, stem called stem -> body -> head: the averages follow the
    attributes, an order the file does not record. Values settle it a whole sublayer at a
    time (a kernel's layer also owns the bias after it), by a wide margin, and list --json
    says so; the pairing is Keras' own, bit for bit."""
    _, truth = made
    stated = ["--use-ema"] if ext == ".weights.h5" else []
    code, got, err = _exported(made, f"k3_attr_order{ext}", tmp_path, *stated)
    assert code == 0, err
    _check(truth, "k3_attr_order", got, _short)
    code, text, _ = run_cli(["list", str(made[0] / f"k3_attr_order{ext}"), "--json", *stated])
    evidence = json.loads(text)["ema_evidence"]
    assert evidence["source"] == "values" and "a whole sublayer at a time" in evidence["detail"]


def _short(name: str) -> str:
    """Exported name (``head/0``, ``stem/kernel``) -> the truth's ``<layer>/<variable>``."""
    layer, _, var = name.rpartition("/")
    return f"{layer.rsplit('/', 1)[-1]}/{ {'0': 'kernel', '1': 'bias'}.get(var, var)}"


@pytest.mark.parametrize("ext", [".keras", ".weights.h5"])
def test_subclassed_sublayers_nothing_can_tell_apart_are_refused(made, ext, tmp_path):
    """Equal shapes, equal values: neither the file nor the values prove which average is
    whose. Refused by every command, with a reason that is true."""
    path = str(made[0] / f"k3_attr_tied{ext}")
    for args in (["map", path], ["export", path, "--out", str(tmp_path / "w.npz")],
                 ["restore-ema", path, "--out", str(tmp_path / "o")]):
        code, _, err = run_cli(args + (["--use-ema"] if ext == ".weights.h5" else []))
        assert code == 6 and "use_ema=False" not in err, (args, err)
        assert "averages one of" in err and "apply_keras_ema" in err, (args, err)
    assert not (tmp_path / "w.npz").exists()
    if ext == ".weights.h5":  # without the statement, the values cannot settle use_ema either
        code, _, err = run_cli(["map", path])
        assert code == 6 and "--use-ema or --no-use-ema" in err and "cannot tell" in err, err
        # following the refusal's advice (--trainable, in model.trainable_variables order)
        _, truth = made
        order = [k.split(":", 1)[1] for k in truth
                 if k.startswith("k3_attr_tied:") and ":raw:" not in k]
        code, got, err = _exported(made, "k3_attr_tied.weights.h5", tmp_path, "--use-ema",
                                   "--trainable", ",".join(order))
        assert code == 0, err
        _check(truth, "k3_attr_tied", got, _short)


def test_apply_keras_ema_pairs_the_subclassed_model_by_its_live_order(made):
    """The live model decides what the file cannot: its trainable order is the optimizer's."""
    import keras

    sys.path.insert(0, str(FIXTURES))
    try:
        import make_keras_pairing as mk
    finally:
        sys.path.remove(str(FIXTURES))
    from ckpt_tools import apply_keras_ema

    out, truth = made
    model = mk._net(keras, tied=False)
    model(np.zeros((1, 4), "float32"))
    apply_keras_ema(model, out / "k3_attr_order.weights.h5", use_ema=True)
    for var in model.trainable_variables:
        want = truth[f"k3_attr_order:{var.path.split('/', 1)[1]}"]
        assert np.asarray(var.numpy()).tobytes() == want.tobytes(), var.path
