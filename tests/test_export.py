"""``ckpt export`` and ``restore-ema --format h5``: averaged weights for converters."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from helpers import FIXTURES, decide_args, expected, expected_values, run_cli
from typer.testing import CliRunner

from ckpt_tools import open_checkpoint
from ckpt_tools.cli import app
from ckpt_tools.export import export_weights

runner = CliRunner()


def _ema_of_weights(case: str) -> dict[str, str]:
    """weight key -> the shadow TensorFlow paired with it (expected.json's ema_of)."""
    with open_checkpoint(FIXTURES / case) as ckpt:
        weights = {v.name for v in ckpt.variables() if v.role in ("weight", "bn_stat")}
    pairs = {t: s for s, t in expected(case)["ema_of"].items() if t in weights}
    with open_checkpoint(FIXTURES / case) as ckpt:  # ckpt list shows the same where it can
        assert all(pairs[v.name] == v.ema for v in ckpt.variables() if v.ema and v.name in pairs)
    return pairs


def _read_safetensors(path) -> dict[str, np.ndarray]:
    import struct

    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__")
    dtypes = {"F32": np.float32, "F64": np.float64, "I64": np.int64}
    base = 8 + n
    return {k: np.frombuffer(raw[base + v["data_offsets"][0] : base + v["data_offsets"][1]],
                             dtypes[v["dtype"]]).reshape(v["shape"]) for k, v in header.items()}


@pytest.mark.parametrize("fmt", ["npz", "safetensors", "h5"])
@pytest.mark.parametrize("case", ["towers_bn", "partitioned", "tf2_object", "keras3_object",
                                  "model_garden_slot"])
def test_export_round_trip_holds_tensorflows_ema_values(case, fmt, tmp_path):
    out = tmp_path / f"w.{fmt}"
    result = runner.invoke(app, ["export", str(FIXTURES / case), "--out", str(out), "--json",
                                 *decide_args(case)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    values = expected_values(case)
    pairs = _ema_of_weights(case)
    if fmt == "npz":
        with np.load(out) as z:
            got = {k: z[k] for k in z.files}
    elif fmt == "safetensors":
        got = _read_safetensors(out)
    else:
        with h5py.File(out) as f:
            got = {}
            for layer in f.attrs["layer_names"]:
                for w in f[layer].attrs["weight_names"]:
                    got[w[:-2]] = f[layer][w][()]
    assert set(got) == set(doc["tensors"])
    for name, src in doc["tensors"].items():
        assert got[name].tobytes() == values[src].tobytes(), name
    weights = set(pairs)
    assert {doc["tensors"][n] for n in doc["averaged"]} == {pairs[w] for w in weights}
    assert not any("Momentum" in n or "/Adam" in n or "global_step" in n for n in got)


def test_raw_export_warns_when_averages_exist(tmp_path):
    result = runner.invoke(app, ["export", str(FIXTURES / "towers_bn"), "--out",
                                 str(tmp_path / "raw.npz"), "--raw"])
    assert result.exit_code == 0
    assert "RAW" in result.stderr
    values = expected_values("towers_bn")
    with np.load(tmp_path / "raw.npz") as z:
        assert np.array_equal(z["conv1/weights"], values["conv1/weights"])


def test_rename_include_exclude(tmp_path):
    r = export_weights(FIXTURES / "tf2_object", tmp_path / "w.npz", rename=["model/="],
                       exclude=["*/steps"], apply_order="trainable")
    assert "dense/kernel" in r.tensors and not any(n.startswith("model/") for n in r.tensors)
    r = export_weights(FIXTURES / "towers_bn", tmp_path / "c.npz", include=["conv1/*"])
    assert r.tensors and all(n.startswith("conv1/") for n in r.tensors)


def test_restore_ema_h5_loads_into_keras_by_layer_name(tmp_path):
    keras = pytest.importorskip("keras")
    from keras.src.legacy.saving import legacy_h5_format

    result = runner.invoke(app, ["restore-ema", str(FIXTURES / "partitioned"), "--out",
                                 str(tmp_path / "w.h5"), "--format", "h5"])
    assert result.exit_code == 0, result.output
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="out")])
    with h5py.File(tmp_path / "w.h5") as f:
        legacy_h5_format.load_weights_from_hdf5_group_by_name(f, model, skip_mismatch=False)
    values = expected_values("partitioned")
    kernel, bias = model.get_layer("out").get_weights()
    assert np.array_equal(kernel, values["out/kernel/ExponentialMovingAverage"])
    assert np.array_equal(bias, values["out/bias/ExponentialMovingAverage"])


def test_map_cli_json_is_the_contract():
    result = runner.invoke(app, ["map", str(FIXTURES / "partitioned"), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["emb/ExponentialMovingAverage"] == "emb"
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in doc.items())


def test_map_cli_fails_on_trainable_only_checkpoint():
    result = runner.invoke(app, ["map", str(FIXTURES / "linear_trainable_only")])
    assert result.exit_code == 6
    assert "trainable_variables" in result.stderr
    assert "Traceback" not in result.stderr


def test_dry_run_h5_names_the_file_it_would_write(tmp_path):
    out = tmp_path / "x"
    result = runner.invoke(app, ["restore-ema", str(FIXTURES / "partitioned"), "--out", str(out),
                                 "--format", "h5", "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["output"] == str(out / "model.ckpt.h5")
    assert not out.exists()
    result = runner.invoke(app, ["restore-ema", str(FIXTURES / "partitioned"), "--out", str(out),
                                 "--format", "h5", "--json"])
    assert json.loads(result.stdout)["output"] == str(out / "model.ckpt.h5")


def test_a_rename_rule_that_renames_nothing_is_refused(tmp_path):
    """review-16-user-u18 F6: a typo'd ``--rename`` prefix, or a rule an earlier one shadows,
    left the names unchanged with exit 0 (a converter loading by name then fails far from the
    cause); like an ``--exclude`` that matches nothing, it is exit 3 naming the rule, and
    nothing is written."""
    out = tmp_path / "w.npz"
    src = str(FIXTURES / "linear_v2")
    code, _, err = run_cli(["export", src, "--out", str(out), "--rename", "nothere/=x/"])
    assert code == 3 and "--rename 'nothere/=x/' renamed no exported name" in err, err
    assert len(err.strip().splitlines()) == 1 and not out.exists(), err
    code, _, err = run_cli(["export", src, "--out", str(out), "--rename", "=net/",
                            "--rename", "W=V"])
    assert code == 3 and "--rename 'W=V'" in err and "'=net/'" not in err, err
    code, _, err = run_cli(["export", src, "--out", str(out), "--rename", "W=V"])
    assert code == 0, err
    with np.load(out) as z:
        assert "V" in z.files and "W" not in z.files, z.files


def test_python_rename_takes_one_rule_as_a_string(tmp_path):
    """review-16-attack-r34 F11: ``export_weights(rename="W=V")`` read the string as a list of
    one-character rules."""
    out = tmp_path / "w.npz"
    export_weights(FIXTURES / "linear_v2", out, rename="W=V")
    with np.load(out) as z:
        assert "V" in z.files and "W" not in z.files, z.files
        truth = expected_values("linear_v2")["W/ExponentialMovingAverage"]
        assert z["V"].tobytes() == truth.tobytes()


def test_python_globs_given_as_strings_are_one_glob(tmp_path):
    """``export_weights(exclude="b*")`` read the string as the globs 'b' and '*', and '*'
    left out every weight."""
    out = tmp_path / "w.npz"
    export_weights(FIXTURES / "linear_v2", out, exclude="b*")
    with np.load(out) as z:
        assert z.files == ["W"], z.files


def test_python_export_over_an_existing_file_names_overwrite(tmp_path):
    """From Python the option is ``overwrite=True``, not only the CLI's ``--force``
    (review-22-user-u24 F9); the file is left as it was."""
    from ckpt_tools import OutputError

    out = tmp_path / "d.npz"
    out.write_bytes(b"mine")
    with pytest.raises(OutputError, match=r"already exists \(pass --force to replace it; "
                                          r"Python: overwrite=True\)"):
        export_weights(FIXTURES / "linear_v2", out)
    assert out.read_bytes() == b"mine"
