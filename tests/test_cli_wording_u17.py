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
