"""Shared pytest fixtures: TensorFlow itself and scratch copies of the committed fixtures."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from helpers import FIXTURES  # noqa: E402


@pytest.fixture(scope="session")
def tf():
    """TensorFlow, imported once per session (tests that cross-check against it)."""
    import tensorflow

    return tensorflow


@pytest.fixture()
def fixture_copy(tmp_path):
    """Returns a function copying a fixture case into tmp_path (for tests that modify files)."""

    def copy(case: str) -> Path:
        dst = tmp_path / case
        shutil.copytree(FIXTURES / case, dst)
        return dst

    return copy
