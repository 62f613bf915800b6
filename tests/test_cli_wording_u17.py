"""review-15-user-u17: what a new user's first commands say.

Truth: ``fixtures/towers_bn`` was written by real TensorFlow (``fixtures/make_fixtures.py``)."""

from __future__ import annotations

import pytest
from helpers import FIXTURES, run_cli

TOWERS = str(FIXTURES / "towers_bn")


@pytest.mark.parametrize("argv", [
    ["export", TOWERS, "--out", "{tmp}/o.npz"], ["restore-ema", TOWERS, "--out", "{tmp}/o"],
    ["map", TOWERS]], ids=["export", "restore-ema", "map"])
def test_exclude_that_matches_nothing_is_exit_3_naming_it(argv, tmp_path):
    """F10: ``--exclude 'ouy/*'`` (meant ``out/*``) used to export everything with exit 0; the
    README lists an --exclude that selects nothing under exit 3."""
    argv = [a.format(tmp=tmp_path) for a in argv]
    code, out, err = run_cli([*argv, "--exclude", "nomatch*"])
    assert code == 3 and out == "", err
    assert "--exclude 'nomatch*' matches no variable" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "o.npz").exists() and not (tmp_path / "o").exists()
    # a bare word: the glob matches the whole name, so the hint names '*WORD*'
    code, _, err = run_cli([*argv, "--exclude", "Momentum"])
    assert code == 3 and "did you mean --exclude '*Momentum*'" in err, err
    # one that matches still works, beside one that does not: that one is named
    code, _, err = run_cli([*argv, "--exclude", "*/Momentum", "--exclude", "typo"])
    assert code == 3 and "--exclude 'typo'" in err and "*/Momentum'" not in err, err


def test_exclude_that_matches_runs(tmp_path):
    code, _, err = run_cli(["export", TOWERS, "--out", str(tmp_path / "o.npz"),
                            "--exclude", "*/moving_*"])
    assert code == 0, err


@pytest.mark.parametrize("quiet", [[], ["-q"]])
def test_grep_word_hints_the_glob_matches_the_whole_name(quiet):
    """F4: ``--grep WORD`` selects nothing (a whole-name glob): say where ``*WORD*`` would."""
    code, _, err = run_cli(["list", TOWERS, "--grep", "weights", *quiet])
    assert code == 3, err
    assert "did you mean --grep '*weights*'? (a glob matches the whole name)" in err, err
    code, _, err = run_cli(["list", TOWERS, "--grep", "zzz", *quiet])
    assert code == 3 and "did you mean" not in err, err


def test_raw_export_of_a_keras_ema_file_says_the_weights_are_as_stored(tmp_path):
    """F3: the README's way to get a SwapEMAWeights file's averages (``--raw``) said "0 with
    EMA values" and recorded ``"values": "raw"``; the file cannot show which its weights are:
    "as stored", naming when they are the averages. A file without EMA stays "raw"."""
    import json
    import zipfile

    import numpy as np

    truth = np.load(FIXTURES / "keras_ema" / "expected.npz")
    out = tmp_path / "w.npz"
    code, stdout, err = run_cli(["export", str(FIXTURES / "keras_ema" / "model.keras"), "--raw",
                                 "--out", str(out)])
    assert code == 0, err
    assert "6 weights and 2 BN statistics as stored (the averages if ModelCheckpoint saved " \
        "it after SwapEMAWeights)" in stdout and "0 with EMA values" not in stdout, stdout
    record = json.loads(zipfile.ZipFile(out).comment)["ckpt_tools"]
    assert record["values"] == "stored" and "raw" not in record, record
    with np.load(out) as z:  # the file's own weights, bit for bit
        for name in z.files:
            want = truth[f"model:weight/{name}"]
            if want.dtype == np.uint16:  # bfloat16, recorded as its bits; npz widens it
                want = (want.astype(np.uint32) << 16).view(np.float32)
            assert z[name].tobytes() == want.tobytes(), name
    code, stdout, err = run_cli(["export", str(FIXTURES / "keras_ema" / "model.keras"), "--raw",
                                 "--json", "--out", str(tmp_path / "j.npz")])
    assert code == 0 and json.loads(stdout)["stored"].startswith("the averages if"), stdout
    code, stdout, err = run_cli(["export", str(FIXTURES / "keras_ema" / "no_ema.keras"), "--raw",
                                 "--out", str(tmp_path / "n.npz")])
    assert code == 0 and "0 with EMA values" in stdout, stdout
    assert json.loads(zipfile.ZipFile(tmp_path / "n.npz").comment)["ckpt_tools"]["values"] \
        == "raw"


def test_directories_named_like_keras_files_are_no_candidates(tmp_path):
    """F7: ``~/.keras`` (Keras' config directory) made a home directory exit 4, and a
    ``backup.keras/`` folder beside a readable ``ep01.keras`` made the run directory exit 4."""
    import os
    import shutil

    home = tmp_path / "home"
    (home / ".keras").mkdir(parents=True)
    (home / ".keras" / "keras.json").write_text("{}")
    code, _, err = run_cli(["list", str(home)])
    assert code == 3 and "holds no checkpoint" in err, err
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(FIXTURES / "keras_ema" / "model.keras", run / "ep01.keras")
    for name in ("backup.keras", ".keras"):
        (run / name).mkdir()
        os.utime(run / name, (4e9, 4e9))  # newer than the file: it used to be picked
    code, out, err = run_cli(["list", str(run), "--json"])
    assert code == 0, err
    assert "backup.keras" not in err and "not .keras" not in err, err
    code, expected, _ = run_cli(["list", str(run / "ep01.keras"), "--json"])
    assert out.replace("run/ep01.keras", "") == expected.replace("run/ep01.keras", "")


def _slim_names() -> list[str]:
    return [f"resnet_v1_50/block{b}/unit_{u}/bottleneck_v1/conv{c}/{leaf}/"
            "ExponentialMovingAverage" for b in (1, 2) for u in (1, 2) for c in (1, 2)
            for leaf in ("weights", "BatchNorm/beta")]


@pytest.mark.parametrize("width", [40, 34])
def test_tf_slim_names_are_shortened_by_whole_segments_where_they_fit(width):
    """F1 (and review-14 u16 F15): block1/unit_1/…/conv1/weights tells a TF-slim name apart
    in 33 columns, but the names were cut inside segments (``resnet_v1_…k1/…_1/…v1/we…ts``)
    because no form kept four segments from the middle."""
    from ckpt_tools.cli._shorten import ELLIPSIS, shorten_column

    names = _slim_names()
    shown = shorten_column(names, width, lambda t: t, len)
    assert len(set(shown)) == len(names), shown
    for name, text in zip(names, shown, strict=True):
        assert len(text) <= width, text
        parts = text.split("/")
        assert all(p == ELLIPSIS or p in name.split("/") for p in parts), text  # whole ones
        assert name.split("/")[-2] in parts, text  # which variable: weights or beta
    targets = shorten_column(["of " + n.rsplit("/", 1)[0] for n in names], 38, lambda t: t,
                             len, lead="of ")
    for name, text in zip(names, targets, strict=True):
        assert text.endswith("/" + name.split("/")[-2]), text
        assert all(p == ELLIPSIS or p in name.split("/") for p in text[3:].split("/")), text


def test_stats_flagged_with_nothing_flagged_says_so():
    """F5: ``stats --flagged`` printed a bare header: "all clean" read as "nothing read"."""
    code, out, err = run_cli(["stats", TOWERS, "--flagged"])
    assert code == 0, err
    assert "no tensor flagged (" in err and " checked: no NaN/Inf" in err, err
    code, out, err = run_cli(["stats", str(FIXTURES / "linear_v2"), "--flagged"])
    assert code == 0 and "drift" in out and "no tensor flagged" not in err, err


def test_keras_file_and_savedmodel_urls_say_what_they_are(http):
    """F13: an http(s):// .keras was called a "V1 checkpoint" and a SavedModel directory was
    "not found" (exit 3) where docs/remote.md says exit 5 (copy it locally)."""
    pytest.importorskip("aiohttp")
    pytest.importorskip("fsspec")
    for name in ("keras_ema/model.keras", "keras_ema/model.weights.h5"):
        code, _, err = run_cli(["list", f"{http.url}/{name}"])
        assert code == 5, err
        assert "Keras files are not read from URLs" in err and "V1" not in err, err
    for form in ("{}/", "{}"):
        code, _, err = run_cli(["list", form.format(f"{http.url}/savedmodel_keras")])
        assert code == 5 and "a SavedModel" in err and "copy SavedModels locally" in err, err


def test_export_out_dash_is_a_usage_error(tmp_path, monkeypatch):
    """F8: ``--out -`` wrote a file named '-' (conventionally stdout)."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["export", TOWERS, "--out", "-", "--format", "npz"])
    assert code == 2 and "not stdout" in err, err
    assert not (tmp_path / "-").exists()


def test_show_values_fit_the_terminal(monkeypatch):
    """F2: ``show`` printed values up to 100 columns wide on an 80-column terminal, so a
    matrix's rows wrapped into each other; piped, the lines stay as NumPy makes them."""
    from helpers import set_terminal

    set_terminal(monkeypatch, 60)
    keras = str(FIXTURES / "keras_ema" / "no_ema.keras")
    code, out, err = run_cli(["show", keras, "hidden/kernel", "--full"])  # [4,8]
    assert code == 0, err
    values = out[out.index("[["):].splitlines()
    assert max(map(len, values)) <= 60, max(values, key=len)
    set_terminal(monkeypatch, 60, tty=False)
    code, piped, err = run_cli(["show", keras, "hidden/kernel", "--full"])
    assert code == 0 and max(map(len, piped.splitlines())) > 60, err


def test_verify_problem_lines_wrap_on_a_terminal(monkeypatch, tmp_path):
    """F8: verify's problem lines (150 characters) were not wrapped at 80 columns, while the
    error line below them was; piped, each stays one line (for grep)."""
    import shutil

    from helpers import set_terminal

    copy = tmp_path / "towers"
    shutil.copytree(TOWERS, copy)
    data = next(copy.glob("model.ckpt-30.data-*"))
    raw = bytearray(data.read_bytes())
    raw[64] ^= 0xFF
    data.write_bytes(bytes(raw))
    set_terminal(monkeypatch, 80)
    code, out, err = run_cli(["verify", str(copy)])
    assert code == 4 and "✗" in out, (out, err)
    # a word longer than the line (the temporary path) is never cut
    assert all(len(line) <= 80 or " " not in line.strip() for line in out.splitlines()), out
    set_terminal(monkeypatch, 80, tty=False)
    code, piped, err = run_cli(["verify", str(copy)])
    problems = [line for line in piped.splitlines() if line.startswith("✗")]
    assert code == 4 and problems and max(map(len, problems)) > 80, piped


def test_export_counts_a_batch_norms_moving_statistics_by_that_name(tmp_path):
    """s32f (review-33-user-u33 F1): export said "8 weights, 6 with EMA values" of a Keras
    file whose BatchNormalization moving_mean and moving_variance Keras' optimizer never
    averages, where list (since a12ffaf) calls them BN statistics. Truth: the fixture's
    expected.npz, what Keras saved (``model:weight/*``) and averaged (``model:ema/*``)."""
    import numpy as np

    with np.load(FIXTURES / "keras_ema" / "expected.npz") as z:
        weights = [n for n in z.files if n.startswith("model:weight/")]
        averaged = sum(1 for n in z.files if n.startswith("model:ema/"))
    stats = sum(1 for n in weights if n.endswith(("/moving_mean", "/moving_variance")))
    assert stats == 2 and averaged == len(weights) - stats
    code, stdout, err = run_cli(["export", str(FIXTURES / "keras_ema" / "model.keras"),
                                 "--not-swapped", "--out", str(tmp_path / "e.npz")])
    assert code == 0, err
    assert f"): {averaged} weights and {stats} BN statistics, {averaged} with EMA values" \
        in stdout, stdout  # was: "8 weights, 6 with EMA values"
