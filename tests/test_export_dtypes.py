"""Dtypes survive export: each output format's own consumer gets the stored values back.

bfloat16 and float8 have no NumPy/HDF5 type: ``.npz`` widens them exactly (float32) and says so
in the archive comment; ``.h5`` stores bfloat16 as float32 with a ``dtype`` attribute, which
Keras' loaders cast back to bfloat16 without loss; ``.safetensors`` holds them natively. A
format that cannot hold a dtype at all is refused with exit 5 naming one that can.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from typer.testing import CliRunner

from ckpt_tools.cli import app
from ckpt_tools.formats.bundle_writer import BundleWriter

runner = CliRunner()
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BASE = np.array([[0.5, -1.25, 3.0], [0.001953125, -448.0, 2.0]], np.float32)
VALUES = {"net/bf16": BASE.astype(ml_dtypes.bfloat16), "net/f16": BASE.astype(np.float16),
          "net/f8": BASE.astype(ml_dtypes.float8_e4m3fn),
          "net/f8b": BASE.astype(ml_dtypes.float8_e5m2), "net/f32": BASE}


@pytest.fixture
def ckpt(tmp_path):
    (tmp_path / "in").mkdir()
    prefix = tmp_path / "in" / "model.ckpt"
    with BundleWriter(str(prefix)) as w:
        for key, value in VALUES.items():
            w.add_array(key, value)
    return prefix


def _export(src, out, *extra):
    result = runner.invoke(app, ["export", str(src), "--out", str(out), "--raw", "--json",
                                 *extra])
    return result


def test_npz_widens_exactly_and_says_so(ckpt, tmp_path):
    out = tmp_path / "w.npz"
    result = _export(ckpt, out)
    assert result.exit_code == 0, result.output
    with np.load(out) as z:
        got = {k: z[k] for k in z.files}
    for key, value in VALUES.items():
        name = key
        kept = value.dtype if value.dtype.name in ("float16", "float32") else np.float32
        assert got[name].dtype == kept, name
        assert np.array_equal(got[name], value.astype(np.float32)), name
    comment = json.loads(zipfile.ZipFile(out).comment)
    assert comment == {"ckpt_tools": {"values": "raw",  # --raw (export_record)
                                      "widened": {"net/bf16": "bfloat16",
                                                  "net/f8": "float8_e4m3fn",
                                                  "net/f8b": "float8_e5m2"}}}


def test_safetensors_holds_bfloat16_float16_and_float8(ckpt, tmp_path):
    from safetensors import safe_open
    from safetensors.numpy import load_file

    out = tmp_path / "w.safetensors"
    assert _export(ckpt, out).exit_code == 0
    header = json.loads(out.read_bytes()[8: 8 + int.from_bytes(out.read_bytes()[:8], "little")])
    # the checkpoint's name, never the local path (review-12-attack-r19 F8)
    assert header["__metadata__"] == {"format": "tf", "source": "model.ckpt", "values": "raw"}
    assert {k: v["dtype"] for k, v in header.items() if k != "__metadata__"} == {
        "net/bf16": "BF16", "net/f16": "F16", "net/f8": "F8_E4M3", "net/f8b": "F8_E5M2",
        "net/f32": "F32"}
    with safe_open(str(out), "np") as f:  # float8: the numpy loader has no float8 type,
        assert set(f.keys()) == set(VALUES)  # the header and bytes are what torch/JAX read
    data = out.read_bytes()[8 + int.from_bytes(out.read_bytes()[:8], "little"):]
    for key in ("net/f8", "net/f8b"):
        lo, hi = header[key]["data_offsets"]
        assert data[lo:hi] == VALUES[key].tobytes()
    small = tmp_path / "small.safetensors"
    assert _export(ckpt, small, "--include", "net/f*1*", "--include", "net/bf16").exit_code == 0
    for key, value in load_file(str(small)).items():
        assert value.dtype == VALUES[key].dtype and value.tobytes() == VALUES[key].tobytes()


def test_h5_refuses_float8_naming_the_formats_that_hold_it(ckpt, tmp_path):
    out = tmp_path / "w.h5"
    result = _export(ckpt, out)
    assert result.exit_code == 5
    assert "float8_e4m3fn, which h5 cannot hold; export to .safetensors or .npz" in \
        result.output
    assert not out.exists()


def test_h5_bfloat16_loads_into_a_bfloat16_keras_model_with_the_same_values(tmp_path):
    keras = pytest.importorskip("keras")
    import sys

    sys.path.insert(0, str(FIXTURES))
    try:
        from make_keras_fixtures import functional_model
    finally:
        sys.path.remove(str(FIXTURES))
    out = tmp_path / "ema.h5"
    result = runner.invoke(app, ["export", str(FIXTURES / "keras_ema" / "model.keras"),
                                 "--not-swapped", "--out", str(out), "--json"])  # mid-fit()
    assert result.exit_code == 0, result.output
    keras.utils.set_random_seed(0)
    model = functional_model()
    model.load_weights(out)
    doc = json.loads((FIXTURES / "keras_ema" / "expected.json").read_text())
    with np.load(FIXTURES / "keras_ema" / "expected.npz") as z:
        for v in model.weights:
            trainable = v.path in doc["cases"]["model"]["trainable_variables"]
            want = z[f"model:{'ema' if trainable else 'weight'}/{v.path}"]
            got = np.asarray(v.numpy())
            if str(v.dtype) == "bfloat16":
                got = got.view(np.uint16)  # the fixture records bfloat16 as bit patterns
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), v.path
