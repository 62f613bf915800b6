"""``list -g`` with a name pasted from the table, where ``list`` showed a control character
escaped (``model/vs/a\\nb``): ``show`` said how to type it back, ``list -g`` said only that
the filters select nothing (review-32-user-u34 MINOR). The checkpoint is TensorFlow's own
(``tf.train.Checkpoint`` of a module holding a dict whose key has a newline)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from helpers import FIXTURES, run_cli


@pytest.fixture(scope="module")
def newline_key(tf, tmp_path_factory):
    out = tmp_path_factory.mktemp("nl")
    m = tf.Module()
    m.vs = {"a\nb": tf.Variable([1.0, 2.0]), "c": tf.Variable([3.0])}
    tf.train.Checkpoint(model=m).write(str(out / "ckpt"))
    return out / "ckpt"


def test_grep_of_a_pasted_escaped_name_says_how_to_type_it(newline_key):
    code, out, err = run_cli(["list", str(newline_key), "-q"])
    assert code == 0 and "model/vs/a\\nb" in out.splitlines(), out  # as the table shows it
    code, _, err = run_cli(["list", str(newline_key), "-g", "model/vs/a\\nb"])
    text = " ".join(err.split())
    assert code == 3, err
    assert "did you mean --grep $'model/vs/a\\nb'?" in text, text
    if shutil.which("bash"):  # the suggestion typed back selects the variable
        suggestion = text.rsplit("did you mean ", 1)[1].rstrip("?")
        done = subprocess.run(["bash", "-c", f"'{sys.executable}' -m ckpt_tools list "
                               f"'{newline_key}' -q {suggestion}"],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(FIXTURES.parent)})
        assert done.returncode == 0 and done.stdout.splitlines() == ["model/vs/a\\nb"], done
