"""``ckpt show --full`` writes every value as it is formatted, part by part, so memory stays
bounded and a closed pipe ends it (review-29-user-u31 F2: 1M values took ~55 s and 530 MB
before printing anything, 64M went past 16 GB). The streamed text is NumPy's whole-array text
(``format_values(full=True)``), here with parts of a few elements on TensorFlow-written
tensors; the memory bound on a large tensor is a bench/run.py matter, not a unit test."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import FIXTURES, run_script

from ckpt_tools import open_checkpoint
from ckpt_tools.cli.values_stream import stream_values
from ckpt_tools.cli.values_text import format_values

ROOT = FIXTURES.parent


@pytest.mark.parametrize("part", [1, 5, 7, 64])
@pytest.mark.parametrize("case", ["dtypes", "towers_bn", "partitioned", "tf2_object"])
def test_streamed_text_is_numpys_whole_array_text(case, part):
    with open_checkpoint(str(FIXTURES / case)) as ckpt:
        for key in ckpt.entries():
            value = ckpt.tensor(key)
            for width, precision in ((100, 4), (37, 8)):
                want = format_values(value, full=True, precision=precision, width=width)
                got = "".join(stream_values(value, precision=precision, width=width,
                                            part=part))
                assert got == want, (case, key, part, width)


WIDE = r"""
import sys
import numpy as np
import tensorflow as tf

out = sys.argv[1]
w = tf.Variable(tf.random.normal([300, 300], seed=3), name="w")
m = tf.Module()
m.w = w
tf.train.Checkpoint(model=m).save(out + "/run/ckpt")
np.savez(out + "/truth.npz", w=w.numpy())
"""


def test_full_through_a_closed_pipe_exits_quietly(tmp_path):
    """90,000 values (about 1 MB of text, past any pipe buffer): the reader takes one line and
    goes away, and the command ends with exit 0 and nothing on stderr, as ``| head`` does."""
    run_script(WIDE, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("TTY_COMPATIBLE", None)
    proc = subprocess.Popen([sys.executable, "-m", "ckpt_tools", "show", str(tmp_path / "run"),
                             "model/w", "--full"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdout.readline().startswith(b"model/w")
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and not err, err.decode()
