"""docs/setups.md's console examples on generated inputs print what the page shows
(review-16-user-u18 F7): ``tests/test_readme_examples.py`` runs only those whose input is under
``fixtures/``; the others read ``/tmp/matrix``, ``/tmp/mx``... that a ``$ python
fixtures/make_*.py DIR`` line above them creates, so every message change drifted them unseen.

Here each generator line runs as the page writes it (real TensorFlow / Keras 3 / tf_keras, a
process each, two at a time), writing into a fresh ``/tmp`` directory whose name is as long as
the page's (``/tmp/kp``, ``/tmp/matrix``; removed afterwards), so a message names a path of the
page's length and wraps at 80 columns where the page's does (a link would not do: messages name
a ``.meta`` by its resolved path). Each example of a block then runs, in order, in one
scratch directory, through the real CLI on an 80-column pseudo-terminal
(``test_readme_examples``' runner and comparison: a ``…`` line stands for any number of
lines), with the page's paths in its command line replaced by those directories, and those in
its text replaced back."""

from __future__ import annotations

import os
import random
import shlex
import shutil
import string
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tf_runner import run_python  # noqa: E402
from test_readme_examples import ROOT, examples, matches  # noqa: E402
from test_readme_examples import _run as run_example  # noqa: E402

DOC = ROOT / "docs" / "setups.md"
OUTPUTS = ("/tmp/ro",)  # an example's output directory (must not exist before it)

def _generators() -> list[tuple[str, list[str]]]:
    """``(page root, argv)`` of each ``$ python fixtures/make_*.py DIR`` line."""
    found = []
    for _, block in examples(DOC):
        for _, command, _ in block:
            argv = shlex.split(command, comments=True)
            if argv[:1] == ["python"] and argv[1].startswith("fixtures/make_"):
                root = argv[argv.index("--out") + 1] if "--out" in argv else argv[2]
                found.append((root.rstrip("/"), argv[1:]))
    return found


def _alias(root: str) -> str:
    """A free ``/tmp`` name as long as ``root``'s (letters only: wrapping breaks at none)."""
    parent, _, name = root.rpartition("/")
    for _ in range(1000):
        alias = f"{parent}/" + "".join(random.choices(string.ascii_lowercase, k=len(name)))
        try:
            os.mkdir(alias)
        except FileExistsError:
            continue
        return alias
    raise RuntimeError(f"no free name as long as {root}")


def _generate(argv: list[str]) -> subprocess.CompletedProcess:
    # a process each, forked from one that imported TensorFlow (nothing Keras counts yet)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    return run_python(argv, cwd=ROOT, env=env, timeout=600)


@pytest.fixture(scope="module")
def roots():
    """``{page root: a directory as long}``: each generator line as the page writes it (its
    own process, as a reader runs it: Keras names its layers and optimizers by a per-process
    count), writing there; ``/tmp/ro``, an output path, gets a name only."""
    made = {}
    try:
        jobs = []
        for root, argv in _generators():
            made[root] = _alias(root)
            jobs.append([made[root] if a == root else a for a in argv])
        for root in OUTPUTS:
            made[root] = _alias(root)
            os.rmdir(made[root])
        with ThreadPoolExecutor(2) as pool:
            for argv, done in zip(jobs, pool.map(_generate, jobs), strict=True):
                assert done.returncode == 0, (argv, done.stderr[-3000:])
        yield made
    finally:
        for path in made.values():
            shutil.rmtree(path, ignore_errors=True)


def _blocks():
    return [(f"setups.md:L{start}", block) for start, block in examples(DOC)
            if any(c.startswith("ckpt ") and " /tmp/" in c for _, c, _ in block)]


def _swap(text: str, pairs: dict[str, str]) -> str:
    for old, new in sorted(pairs.items(), key=lambda p: -len(p[0])):
        text = text.replace(old + "/", new + "/").replace(old + " ", new + " ")
        text = text.replace(old + "\n", new + "\n")
        text = text[:-len(old)] + new if text.endswith(old) else text
    return text


@pytest.mark.parametrize("block", [b for _, b in _blocks()], ids=[s for s, _ in _blocks()])
def test_setups_example_prints_what_the_page_shows(block, roots):
    back = {link: root for root, link in roots.items()}
    failures = []
    with tempfile.TemporaryDirectory() as d:
        code = None
        for line, command, shown in block:
            if command.startswith("ckpt "):
                argv = [_swap(a, roots) for a in shlex.split(command, comments=True)]
                code, text = run_example(argv, d)
                got = _swap(text, back).rstrip("\n").split("\n") if text else []
            elif command.strip() == "echo $?" and code is not None:
                got = [str(code)]
            else:
                continue
            if not matches(shown, got):
                failures.append(f"line {line}: $ {command}\n--- the page shows:\n"
                                + "\n".join(shown) + "\n--- the command prints:\n"
                                + "\n".join(got))
    assert not failures, "\n\n".join(failures)


def test_every_generated_input_the_page_reads_is_made_here():
    made = {root for root, _ in _generators()}
    for _, block in examples(DOC):
        for line, command, _ in block:
            argv = shlex.split(command, comments=True)
            if argv[:1] == ["ckpt"] and argv[2].startswith("/tmp/"):
                assert any(argv[2].startswith(r + "/") for r in made), (line, command)
