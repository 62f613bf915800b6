"""Every docstring example in the package runs and prints what it shows (the brief: "a short
example that runs"). Examples read the committed fixtures, so they run from the repository
root; those needing a model or a training directory are marked ``+SKIP`` line by line."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import ckpt_tools

ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted(m.name for m in pkgutil.walk_packages(ckpt_tools.__path__, "ckpt_tools.")
                 if not m.name.endswith("__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in doctest.DocTestFinder().find(module, name):
        runner.run(test)
    failed, attempted = runner.summarize(verbose=False)
    assert failed == 0, f"{name}: {failed} of {attempted} example(s) failed (output above)"


def test_examples_are_found():
    """The finder sees the package's examples (a walk that found nothing would pass)."""
    found = sum(len([t for t in doctest.DocTestFinder().find(importlib.import_module(n), n)
                     if t.examples]) for n in ("ckpt_tools.verify", "ckpt_tools.restore_problems"))
    assert found >= 2
