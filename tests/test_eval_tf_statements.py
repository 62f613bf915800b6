"""``ckpt eval`` of a TensorFlow checkpoint the reference trainer wrote: the Keras-file
statements ``--not-swapped`` and ``--fit-order`` are refused (exit 2, as export refuses them,
README's option table) rather than ignored (u16 F6), and a ``.index`` / ``.meta`` /
``.data-*`` file is read as its prefix, as every other command reads it (u16 F7).

The truth for F7: TensorFlow's own ``tf.train.latest_checkpoint`` names the prefix, and eval
of that prefix gives the accuracies the ``.index`` must give.
"""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner


def _ckpt(*args):
    from ckpt_tools.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module", params=["v1", "tf2"])
def run(request, tmp_path_factory):
    train_dir = tmp_path_factory.mktemp(request.param)
    result = _ckpt("train", "--api", request.param, "--train-dir", train_dir, "--max-steps", 4,
                   "--batch-size", 8, "--save-every", 2, "-q")
    assert result.exit_code == 0, result.output
    return str(train_dir)


@pytest.mark.parametrize("option", ["--not-swapped", "--fit-order"])
def test_eval_refuses_keras_statements_on_tf_checkpoints(run, option):
    result = _ckpt("eval", run, "--num-examples", 20, option)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and option in lines[0], result.stderr


@pytest.mark.parametrize("suffix", [".index", ".meta", ".data-00000-of-00001"])
def test_eval_of_a_checkpoint_file_reads_its_prefix(run, suffix):
    import tensorflow as tf

    prefix = tf.train.latest_checkpoint(run)
    if not os.path.exists(prefix + suffix):
        pytest.skip(f"this trainer writes no {suffix}")
    want = _ckpt("eval", prefix, "--num-examples", 20, "--json")
    got = _ckpt("eval", prefix + suffix, "--num-examples", 20, "--json")
    assert want.exit_code == 0, want.output
    assert got.exit_code == 0, got.output
    assert json.loads(got.stdout) == json.loads(want.stdout)
