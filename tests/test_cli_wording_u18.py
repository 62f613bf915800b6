"""review-16-user-u18: what a new user's commands say.

Truth: ``fixtures/towers_bn`` was written by real TensorFlow (``fixtures/make_fixtures.py``):
a TF1 graph whose keys are ``conv1/...``, ``logits/...``, with its ``.meta``."""

from __future__ import annotations

import pytest
from helpers import FIXTURES, run_cli

import ckpt_tools
from ckpt_tools.errors import VariableNotFoundError

TOWERS = str(FIXTURES / "towers_bn")


@pytest.mark.parametrize("argv", [
    ["restore-ema", TOWERS, "--out", "{tmp}/o"], ["map", TOWERS]], ids=["restore-ema", "map"])
def test_strip_scope_that_matches_nothing_is_exit_3_naming_it(argv, tmp_path):
    """F5: ``--strip-scope nett/`` (meant ``net/``) stripped nothing, exit 0, and restore-ema
    warned "keys were re-scoped" while dropping the ``.meta`` for nothing."""
    argv = [a.format(tmp=tmp_path) for a in argv]
    code, out, err = run_cli([*argv, "--strip-scope", "conv9/"])
    assert code == 3 and out == "", err
    assert "--strip-scope 'conv9/'" in err and "matched nothing" in err, err
    assert "re-scoped, so the .meta" not in err, err
    assert not (tmp_path / "o").exists()


def test_strip_scope_that_matches_still_strips(tmp_path):
    out = tmp_path / "o"
    code, _, err = run_cli(["restore-ema", TOWERS, "--strip-scope", "conv1/", "--out", str(out)])
    assert code == 0, err
    assert "keys were re-scoped" in err, err
    code, text, err = run_cli(["map", TOWERS, "--strip-scope", "conv1/", "-q"])
    assert code == 0 and "\tweights\n" in text + "\n", (text, err)


def test_python_strip_scope_that_matches_nothing_raises():
    with pytest.raises(VariableNotFoundError, match="strip_scope=.*matched nothing"):
        ckpt_tools.ema_map(TOWERS, strip_scope="conv9/")
