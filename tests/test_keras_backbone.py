"""Keras 3 transfer learning with a frozen ``keras.applications`` backbone (issue #11, review
F12/F13): a bare ``.weights.h5`` pairs the head's EMA copies where their shapes prove it, and
where they do not, ``list`` shows the pairing open ('?', ``ema_unproven`` naming
``--trainable``) as ``export`` refuses it. Files and truth from
``fixtures/make_keras_backbone.py`` (real Keras 3, ``ModelCheckpoint``, averages recorded at
save time from ``optimizer._model_variables_moving_average``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli, run_generator

pytest.importorskip("keras")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    out = tmp_path_factory.mktemp("keras_backbone")
    return out, run_generator("make_keras_backbone.py", out)


def _exported(path: Path, tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    target = tmp_path / "w.npz"
    target.unlink(missing_ok=True)
    # saved during fit(), no SwapEMAWeights: stated where the copies are used
    stated = [] if "--raw" in args else ["--not-swapped"]
    code, _, err = run_cli(["export", str(path), "--out", str(target), *args, *stated])
    if code:
        return code, {}, err
    with np.load(target) as z:
        return code, {k: z[k] for k in z.files}, err


def _truth(truth: dict, case: str, kind: str) -> dict[str, np.ndarray]:
    """``layer/variable`` (the last two parts of the Keras path) -> value, for ``kind``
    ``ema`` or ``raw``; those two parts name each weight of these models once."""
    got = {"/".join(k.split(":", 2)[2].split("/")[-2:]): v for k, v in truth.items()
           if k.startswith(f"{case}:{kind}:")}
    assert len(got) == sum(k.startswith(f"{case}:{kind}:") for k in truth)
    return got


def _matches_truth(got: dict, truth: dict, case: str, averaged: set[str]) -> None:
    ema, raw = _truth(truth, case, "ema"), _truth(truth, case, "raw")
    assert len(got) == len(raw), (len(got), len(raw))
    assert set(ema) == averaged
    for name, value in got.items():
        short = "/".join(name.split("/")[-2:])
        want = ema[short] if short in ema else raw[short]
        assert value.tobytes() == want.tobytes(), name


@pytest.mark.parametrize("name", ["mnv2.weights.h5", "mnv2.keras"])
def test_frozen_application_backbone_pairs_the_head(made, name, tmp_path):
    """MobileNetV2 frozen + Dense head: its layers are saved alphabetically (conv2d_10 before
    conv2d_2), so the backbone's order is not recorded, yet no backbone weight has the head's
    [1280,10] or [10]: the copies are proven the head's (the bare .weights.h5 was refused,
    exit 6 'the optimizer variables do not fit the 158 weights'). Bit for bit, and every
    backbone weight raw."""
    out, truth = made
    extra = ["--use-ema"] if name.endswith(".h5") else []
    code, got, err = _exported(out / name, tmp_path, *extra)
    assert code == 0, err
    _matches_truth(got, truth, "mnv2", {"cls/kernel", "cls/bias"})
    code, listed, err = run_cli(["list", str(out / name), "--json", *extra, "--not-swapped"])
    assert code == 0, err
    doc = json.loads(listed)
    assert doc["ema_unproven"] is None
    assert sorted(v["path"].removeprefix("sequential/") for v in doc["variables"]
                  if v["ema"]) == ["cls/bias", "cls/kernel"]


def test_head_bias_shaped_like_backbone_weights_is_open_in_list_and_export(made, tmp_path):
    """MobileNetV3Small frozen + neck Dense(32) + cls: the neck's [32] bias has the shape of
    six backbone BatchNormalization weights and the file does not record the order of the
    model's layers: that copy is not proven. export refuses naming --trainable; list says
    the same ('?' rows, ema_unproven), never 'none of N weights has a shadow'; the kernels'
    copies, whose shapes no other weight has, are proven. --trainable gives Keras' values."""
    out, truth = made
    path = out / "mnv3.weights.h5"
    code, _, err = _exported(path, tmp_path, "--use-ema")
    assert code == 6 and "--trainable" in err and "neck/bias" in err, err
    code, listed, err = run_cli(["list", str(path), "--json", "--use-ema"])
    assert code == 0, err
    doc = json.loads(listed)
    assert doc["ema_unproven"]["option"] == "--trainable"
    by_key = {v["key"]: v for v in doc["variables"]}
    (copy,) = [v for v in doc["variables"] if v["role"] == "ema" and not v["ema_of"]]
    assert copy["shape"] == [32]
    shown = {by_key[k]["path"] for k in copy["ema_candidates"]}
    assert "neck/bias" in shown and len(shown) > 1, shown
    assert all(by_key[k]["ema"] is None and by_key[k]["ema_candidates"]
               for k in copy["ema_candidates"])
    proven = {v["path"] for v in doc["variables"] if v["ema"]}
    assert proven == {"neck/kernel", "cls/kernel", "cls/bias"}, proven
    code, table, err = run_cli(["list", str(path), "--use-ema"])
    assert "does not prove the pairing" in err and "none of" not in err, err
    assert "pass --trainable" in err
    code, got, err = _exported(path, tmp_path, "--use-ema", "--trainable", "neck,cls")
    assert code == 0, err
    _matches_truth(got, truth, "mnv3", {"neck/kernel", "neck/bias", "cls/kernel", "cls/bias"})


@pytest.mark.parametrize("name", ["towers.keras", "towers.weights.h5"])
def test_equal_sublayers_one_frozen_listed_open(made, name, tmp_path):
    """A subclassed model with two equal Dense(8) sublayers, one frozen, SGD(use_ema=True):
    which one the first two copies average is not recorded. list marks both sides '?' with
    ema_unproven naming --trainable (it said 'none of 6 weights has a shadow' while export
    refused); the out_layer's copies are proven; Keras' own trainable paths decide it."""
    out, truth = made
    extra = ["--use-ema"] if name.endswith(".h5") else []
    code, _, err = _exported(out / name, tmp_path, *extra)
    assert code == 6 and "--trainable" in err, err
    code, listed, err = run_cli(["list", str(out / name), "--json", *extra])
    assert code == 0, err
    doc = json.loads(listed)
    assert doc["ema_unproven"]["option"] == "--trainable"
    open_copies = [v for v in doc["variables"] if v["role"] == "ema" and not v["ema_of"]]
    assert [v["shape"] for v in open_copies] == [[8, 8], [8]]
    assert all(len(v["ema_candidates"]) == 2 for v in open_copies)
    open_weights = [v for v in doc["variables"] if v["role"] == "weight" and v["ema_candidates"]]
    assert len(open_weights) == 4 and not any(v["ema"] for v in open_weights)
    code, table, err = run_cli(["list", str(out / name), *extra])
    assert "none of" not in table + err and "pass --trainable" in err, err
    # a --trainable that fits no layout: open as well (it said 'none of 6 weights has a shadow')
    code, listed, err = run_cli(["list", str(out / name), "--json", *extra, "--trainable",
                                 "towers/dense_2/kernel,towers/dense_2/bias"])
    assert code == 0 and json.loads(listed)["ema_unproven"]["option"] == "--trainable", err
    stated = [k.split(":", 2)[2] for k in truth if k.startswith("towers:ema:")]
    code, got, err = _exported(out / name, tmp_path, *extra, "--trainable", ",".join(stated))
    assert code == 0, err
    shown = {"dense/kernel": "raw:towers/dense/kernel", "dense/bias": "raw:towers/dense/bias",
             "dense_1/kernel": "ema:towers/dense_1/kernel",
             "dense_1/bias": "ema:towers/dense_1/bias",
             "dense_2/kernel": "ema:towers/dense_2/kernel",
             "dense_2/bias": "ema:towers/dense_2/bias"}
    assert set(got) == set(shown)
    for key, value in got.items():
        assert value.tobytes() == truth[f"towers:{shown[key]}"].tobytes(), key
