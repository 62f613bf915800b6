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


@pytest.mark.parametrize("part", [1, 2, 5, 64])
@pytest.mark.parametrize("case", ["dtypes", "towers_bn", "partitioned", "tf2_object"])
def test_streamed_json_values_are_the_whole_documents(case, part):
    """``show --full --json``'s values, written part by part (s29g: the whole document was
    built first), read back as the document ``values_json`` gives, for every tensor."""
    import json

    from ckpt_tools.cli._output import Output
    from ckpt_tools.cli.values_json_stream import stream_values_json
    from ckpt_tools.cli.values_text import values_json

    with open_checkpoint(str(FIXTURES / case)) as ckpt:
        for key in ckpt.entries():
            value = ckpt.tensor(key)
            got = "".join(stream_values_json(value, Output.json_text, part=part))
            want = values_json(value, full=True)["values"]
            assert json.loads(got) == want, (case, key, part)
            assert json.loads(got) == json.loads(Output.json_text(want)), (case, key, part)


@pytest.mark.parametrize("case", ["dtypes", "towers_bn", "partitioned"])
def test_full_json_document_is_the_whole_one(case, capsys, monkeypatch):
    """The command's streamed document equals the one built whole: checkpoint, each tensor's
    statistics and values, the warnings (the values in parts of 3, so every tensor over 3
    values is cut)."""
    import json

    from _corpus import run_cli

    from ckpt_tools.cli import values_json_stream
    from ckpt_tools.cli.values_text import values_json

    with open_checkpoint(str(FIXTURES / case)) as ckpt:
        keys = {k: ckpt.tensor(k) for k in ckpt.entries()}
    args = ["show", str(FIXTURES / case), *keys, "--json"]
    code, whole, err = run_cli(args, capsys)  # not --full: each tensor's statistics
    assert code == 0, err
    want = json.loads(whole)
    for doc in want["tensors"]:
        doc.update(values_json(keys[doc["name"]], full=True))
    real = values_json_stream.stream_values_json
    monkeypatch.setattr(values_json_stream, "stream_values_json",
                        lambda a, d, part=3: real(a, d, part))
    code, streamed, err = run_cli([*args, "--full"], capsys)
    assert code == 0, err
    assert json.loads(streamed) == want
    assert streamed.count("\n") == 1  # one compact line when piped, as every --json


def test_full_json_through_a_closed_pipe_exits_quietly(tmp_path):
    """The streamed document's first bytes reach the reader, which goes away: exit 0, nothing
    on stderr (90,000 values, past any pipe buffer)."""
    run_script(WIDE, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop("TTY_COMPATIBLE", None)
    proc = subprocess.Popen([sys.executable, "-m", "ckpt_tools", "show", str(tmp_path / "run"),
                             "model/w", "--full", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdout.read(14) == b'{"checkpoint":'
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and not err, err.decode()


@pytest.mark.parametrize("cells", [1, 3, 10])
@pytest.mark.parametrize("case", ["dtypes", "towers_bn", "partitioned"])
def test_cells_formatted_a_few_at_a_time_keep_the_text(case, cells, monkeypatch):
    """A part's elements are formatted ``CELLS`` at a time, each time beside the witnesses
    (NumPy's one-line text of a 64K part cost the square of its length: 1M values took 142 s):
    the text is still NumPy's whole-array text."""
    from ckpt_tools.cli import values_stream

    monkeypatch.setattr(values_stream, "CELLS", cells)
    with open_checkpoint(str(FIXTURES / case)) as ckpt:
        for key in ckpt.entries():
            value = ckpt.tensor(key)
            want = format_values(value, full=True, precision=4, width=100)
            got = "".join(stream_values(value, precision=4, width=100, part=64))
            assert got == want, (case, key, cells)


@pytest.mark.parametrize("case", ["dtypes", "towers_bn", "tf2_object"])
def test_fast_cells_and_lines_are_numpys(case):
    """Real-number tensors skip ``np.array2string`` (task s31h: 1M float32 took 51 s as text,
    6.8 s as JSON): their cells and lines, laid out at several widths and depths, are NumPy's
    text of the same tensor, and every float or integer tensor takes that path."""
    import numpy as np

    from ckpt_tools.cli import values_stream
    from ckpt_tools.cli.values_fast import cell_formatter, layout

    taken = 0
    with open_checkpoint(str(FIXTURES / case)) as ckpt:
        for key in ckpt.entries():
            value = ckpt.tensor(key)
            if value.dtype.kind not in "fiu" or value.size == 0 or value.ndim == 0:
                continue
            witnesses = values_stream.witnesses_of(value, 4, 64)
            cells = cell_formatter(witnesses.astype(value.dtype), 4)
            assert cells is not None, (case, key)
            for width, depth in ((100, 0), (37, 2)):
                want = np.array2string(value, precision=4, separator=", ",
                                       threshold=sys.maxsize, max_line_width=width - depth,
                                       prefix=" " * depth)
                assert layout(value.shape, cells(value.reshape(-1)), width, depth) == want
            taken += 1
    assert taken
