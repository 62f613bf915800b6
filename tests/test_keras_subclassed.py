"""Keras 3 subclassed models: the names ``ckpt`` gives weights the file records by attribute
and index only, and the ``--trainable`` names it accepts (Keras' own
``[v.path for v in model.trainable_variables]`` among them). Files and truth from
``fixtures/make_keras_subclassed.py`` (real Keras 3, averages recorded at save)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import FIXTURES, run_cli, run_generator

pytest.importorskip("keras")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray], dict[str, list[str]]]:
    out = tmp_path_factory.mktemp("keras_subclassed")
    truth = run_generator("make_keras_subclassed.py", out)
    return out, truth, json.loads((out / "truth.json").read_text())


def _listed(path: Path) -> dict[str, tuple[str, str]]:
    """checkpoint key -> (name shown, role) of every model weight ``ckpt list`` shows."""
    code, out, err = run_cli(["list", str(path), "--json"])
    assert code == 0, err
    return {v["key"]: (v["path"] or v["name"], v["role"])
            for v in json.loads(out)["variables"] if v["role"] in ("weight", "bn_stat")}


def _export(path: Path, tmp_path: Path, *args: str) -> dict[str, np.ndarray]:
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped", str(path), "--out", str(target), *args])
    assert code == 0, err
    with np.load(target) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("name", ["own.keras", "own.weights.h5"])
def test_model_own_weight_named_by_the_model_and_keras_paths_accepted(made, name, tmp_path):
    """``self.add_weight`` in the model: shown as ``net2/0`` (the model's name; the file does
    not record ``mix``), and Keras' ``net2/mix, net2/b/kernel, ...`` states the trainable
    weights (it used to be exit 3 'names no weight')."""
    out, truth, paths = made
    assert _listed(out / name)["vars/0"] == ("net2/0", "weight")
    got = _export(out / name, tmp_path, "--trainable", ",".join(paths["own"]),
                  *(["--use-ema"] if name.endswith(".h5") else []))
    shown = {"net2/0": "net2/mix", "b/0": "net2/b/kernel", "b/1": "net2/b/bias",
             "a/0": "net2/a/kernel", "a/1": "net2/a/bias"}
    assert set(got) == set(shown)
    for key, value in got.items():
        assert value.tobytes() == truth[f"own:{shown[key]}"].tobytes(), key


def test_attribute_batch_normalization_statistics_are_bn_stat(made, tmp_path):
    """A trainable BatchNormalization held as ``self.bn`` (named ``batch_normalization`` by
    Keras): its moving statistics are ``bn_stat``, not weights (they were listed and counted
    as weights ``batch_normalization/2``, ``/3``)."""
    out, truth, paths = made
    listed = _listed(out / "subbn.keras")
    assert listed["bn/vars/0"] == ("batch_normalization/gamma", "weight")
    assert listed["bn/vars/2"] == ("batch_normalization/moving_mean", "bn_stat")
    assert listed["bn/vars/3"] == ("batch_normalization/moving_variance", "bn_stat")
    assert sum(role == "weight" for _, role in listed.values()) == 8
    code, _, err = run_cli(["export", "--not-swapped", str(out / "subbn.keras"), "--out",
                            str(tmp_path / "x.npz")])
    # online+bn and target+tbn have equal shapes: several sets of weights fit the copies
    assert code == 6 and "several pairings" in err and "--trainable" in err, err
    assert "nor a subset" not in err and "None" not in err, err
    got = _export(out / "subbn.keras", tmp_path, "--trainable", ",".join(paths["subbn"]))
    for name in ("dense/kernel", "dense/bias", "batch_normalization/gamma",
                 "batch_normalization/beta"):
        assert got[name].tobytes() == truth[f"subbn:net/{name}"].tobytes(), name


@pytest.mark.parametrize("stated", ["b", "b/kernel,b/bias"])
def test_same_named_sublayers_are_named_by_attribute(made, stated, tmp_path):
    """``self.a = Dense(4, name="fc")`` and ``self.b`` likewise: shown and exported as
    ``a/0``, ``b/0`` (not ``fc/0`` twice, which export refused as a name collision), and
    ``--trainable b`` states the trained one: b gets its averages, the frozen a stays raw."""
    out, truth, _ = made
    listed = _listed(out / "dup.keras")
    assert sorted(n for n, _ in listed.values()) == ["a/0", "a/1", "b/0", "b/1"]
    code, _, err = run_cli(["export", "--not-swapped",
                            str(out / "dup.keras"), "--out", str(tmp_path / "x.npz")])
    assert code == 6 and "--trainable" in err and "nor a subset" not in err, err
    got = _export(out / "dup.keras", tmp_path, "--trainable", stated)
    want = {"a/0": "dup_raw:a/kernel", "a/1": "dup_raw:a/bias", "b/0": "dup:b/kernel",
            "b/1": "dup:b/bias"}
    assert set(got) == set(want)
    for key, value in got.items():
        assert value.tobytes() == truth[want[key]].tobytes(), key


def _subblock_model():
    """The model ``make_keras_subclassed.py`` trains for ``subblock``, built fresh (the
    generator's own ``subblock_model``)."""
    sys.path.insert(0, str(FIXTURES))
    try:
        import make_keras_subclassed as mk
    finally:
        sys.path.remove(str(FIXTURES))
    return mk.subblock_model(np.zeros((1, 4), "float32"))


def test_custom_block_in_tf_checkpoint_exports_and_applies(made, tmp_path):
    """A custom layer's up/down Dense are tracked only through the optimizer's lists and both
    record ``net/kernel``: export names them by object path (it was exit 7, a name
    collision) and apply_ema on a live model pairs them through the averages' names (it
    raised 'no checkpoint key'), every value its average recorded at save."""
    out, truth, paths = made
    got = _export(out / "subblock_tf", tmp_path)
    assert len(got) == len(paths["subblock"]) == 6
    want = sorted(truth[f"subblock:{p}"].tobytes() for p in paths["subblock"])
    assert sorted(v.tobytes() for v in got.values()) == want
    assert got["model/head/_kernel"].tobytes() == truth["subblock:net/head/kernel"].tobytes()

    from ckpt_tools import apply_ema

    model = _subblock_model()
    result = apply_ema(model, out / "subblock_tf", not_swapped=True)  # mid-fit(), unswapped
    assert len(result.averaged) == 6 and not result.raw
    for var in model.trainable_variables:
        assert np.array(var.numpy()).tobytes() == truth[f"subblock:{var.path}"].tobytes(), \
            var.path


def test_finetune_recipe_refusal_names_the_trainable_that_fits(made, tmp_path):
    """keras.io fine-tuning (blocks 0-1 of four equal blocks frozen, recompiled): several
    sets of layers fit, so the .keras is refused, but the refusal's --trainable for the flags
    at save is exactly what a recompiled model needs: used as printed, it pairs every
    average bit for bit."""
    import re

    out, truth, paths = made
    code, _, err = run_cli(["export", "--not-swapped", str(out / "finetune.keras"), "--out",
                            str(tmp_path / "x.npz")])
    assert code == 6, err
    stated = re.search(r"--trainable (\S+)\)", err)
    assert stated and stated.group(1) == "base/blk2,base/blk3,head", err
    got = _export(out / "finetune.keras", tmp_path, "--trainable", stated.group(1))
    assert len(got) == 10
    for path in paths["finetune"]:
        name = path if path.startswith("head/") else f"base/{path}"
        assert got[name].tobytes() == truth[f"finetune:{path}"].tobytes(), path
