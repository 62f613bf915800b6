"""``--format`` and the extension of ``--out`` must agree: a disagreement is a usage error
(exit 2) naming both, and nothing is written."""

from __future__ import annotations

import pytest
from _corpus import run_cli
from helpers import FIXTURES

TOWERS = str(FIXTURES / "towers_bn")
EXPORT_FORMATS = {"npz": ".npz", "safetensors": ".safetensors", "h5": ".h5"}


@pytest.mark.parametrize("fmt", sorted(EXPORT_FORMATS))
@pytest.mark.parametrize("ext", [".npz", ".safetensors", ".h5", ".hdf5", ".weights.h5"])
def test_export_format_and_extension_must_agree(fmt, ext, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    out = tmp_path / f"w{ext}"
    code, stdout, err = run_cli(["export", TOWERS, "--format", fmt, "--out", str(out)], capsys)
    agrees = ext.endswith(EXPORT_FORMATS[fmt]) or (fmt == "h5" and ext == ".hdf5")
    keras3_name = fmt == "h5" and ext == ".weights.h5"  # Keras reads it as its own layout
    if agrees and not keras3_name:
        assert code == 0 and out.is_file(), err
        return
    assert code == 2, err
    assert stdout == "" and not out.exists() and list(tmp_path.iterdir()) == []
    line = err.strip().splitlines()[-1]
    said = str(tmp_path / "w.h5") if keras3_name else f"--format {fmt}"
    assert line.startswith("error: ") and said in line and str(out) in line, err
    if keras3_name:  # a TF checkpoint in: restore-ema --format keras would refuse it (u26 F12)
        assert "--format keras" not in " ".join(err.split()), err


def test_export_without_a_known_extension_takes_the_format(tmp_path, capsys):
    code, _, err = run_cli(["export", TOWERS, "--format", "npz", "--out",
                            str(tmp_path / "w.bin")], capsys)
    assert code == 0 and (tmp_path / "w.bin").read_bytes()[:2] == b"PK", err
    code, _, err = run_cli(["export", TOWERS, "--out", str(tmp_path / "w.keras")], capsys)
    assert code == 2 and "Keras archive" in err and not (tmp_path / "w.keras").exists()
    code, _, err = run_cli(["export", TOWERS, "--to", "npz", "--out", str(tmp_path / "q.h5")],
                           capsys)
    assert code == 2 and "--format npz" in err  # the hidden alias is checked the same way


@pytest.mark.parametrize(("fmt", "name", "code"), [
    ("v2", "ema.h5", 2), (None, "ema.h5", 2), (None, "ema.npz", 2), ("v2", "ema.safetensors", 2),
    ("h5", "ema.npz", 2), ("h5", "ema.keras", 2), ("h5", "ema.h5", 0), ("v2", "ema_dir", 0),
])
def test_restore_ema_out_must_fit_the_format(fmt, name, code, tmp_path, capsys):
    out = tmp_path / name
    argv = ["restore-ema", TOWERS, "--out", str(out)] + (["--format", fmt] if fmt else [])
    got, _, err = run_cli(argv, capsys)
    assert got == code, err
    if code == 2:
        assert not out.exists() and str(out) in err and f"--format {fmt or 'v2'}" in err, err


def test_restore_ema_into_an_existing_directory_named_like_a_file(tmp_path, capsys):
    out = tmp_path / "run.h5"
    out.mkdir()
    code, _, err = run_cli(["restore-ema", TOWERS, "--out", str(out)], capsys)
    assert code == 0 and (out / "checkpoint").is_file(), err
