"""Exported ``.npz``/``.safetensors`` files record whether they hold EMA or raw values
(u16 F14; :mod:`ckpt_tools.export_record`): the npz archive comment and safetensors'
``__metadata__`` (strings only, as the format requires) say ``values`` ``ema``/``raw``/
``mixed``, the names written raw beside averages, and what the pairing was stated or assumed;
``np.load`` and ``safe_open`` still read the arrays.

The truth: each fixture's ``expected.npz``, recorded from Keras / TensorFlow at save time
(fixtures/keras_ema: a Keras 3 SGD(use_ema=True) model with batch norm, whose moving
statistics no optimizer averages; fixtures/towers_bn: TF1 EMA over every weight and BN stat).
"""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest
from typer.testing import CliRunner

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
KERAS = os.path.join(FIXTURES, "keras_ema", "model.keras")


def _ckpt(*args):
    from ckpt_tools.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def _npz_record(path) -> dict:
    return json.loads(zipfile.ZipFile(path).comment)["ckpt_tools"]


def _safetensors_record(path) -> dict:
    from safetensors import safe_open

    with safe_open(str(path), "np") as f:
        meta = f.metadata()
    assert all(isinstance(v, str) for v in meta.values()), meta
    return meta


def test_keras_ema_export_names_what_is_raw(tmp_path):
    out = tmp_path / "ema.npz"
    _ckpt("export", KERAS, "--not-swapped", "--out", out)
    with np.load(os.path.join(FIXTURES, "keras_ema", "expected.npz")) as z:
        truth = {k: z[k] for k in z.files}
    averaged = {k.split("/")[-1][: -len("_average")] for k in truth
                if k.startswith("model:optimizer/") and k.endswith("_average")}
    record = _npz_record(out)
    with np.load(out) as z:
        names = list(z.files)
        for name in names:  # each value is what the record says it is
            if name in record.get("raw", []):
                want = truth[f"model:weight/{name}"]
            else:
                want = truth[f"model:optimizer/sgd/{name.replace('/', '_')}_average"]
            if want.dtype == np.uint16:  # bfloat16, recorded as its bits; export widens
                want = (want.astype(np.uint32) << 16).view(np.float32)
            assert z[name].tobytes() == want.tobytes(), name
    raw = [n for n in names if n.replace("/", "_") not in averaged]
    assert raw == ["bn/moving_mean", "bn/moving_variance"]
    assert record["values"] == "mixed" and record["raw"] == raw
    assert record["stated"] == ["not_swapped"]


def test_raw_export_says_raw(tmp_path):
    ema, raw = tmp_path / "ema.safetensors", tmp_path / "raw.safetensors"
    _ckpt("export", os.path.join(FIXTURES, "towers_bn"), "--out", ema)
    _ckpt("export", os.path.join(FIXTURES, "towers_bn"), "--raw", "--out", raw)
    assert _safetensors_record(ema)["values"] == "ema"
    assert _safetensors_record(raw)["values"] == "raw"
    assert _safetensors_record(raw)["format"] == "tf"  # what converters check stays


@pytest.mark.parametrize("flag,values", [("--raw", "stored"), ("--not-swapped", "mixed")])
def test_npz_raw_and_ema_differ(flag, values, tmp_path):
    out = tmp_path / "w.npz"
    _ckpt("export", KERAS, flag, "--out", out)
    assert _npz_record(out)["values"] == values


def test_comment_too_long_for_zip_gives_counts():
    from ckpt_tools.export_record import ZIP_COMMENT_MAX, npz_comment, values_record

    plan = {f"layer{i:05d}/moving_mean": f"k{i}" for i in range(5000)}
    record = values_record({**plan, "w": "w_avg"}, ["w"])
    raw = npz_comment(record, {})
    assert len(raw) <= ZIP_COMMENT_MAX
    doc = json.loads(raw)["ckpt_tools"]
    assert doc == {"values": "mixed", "raw_count": 5000}
