"""``--no-meta`` reads a TF1 checkpoint as if no ``.meta`` were beside it; its outputs
(``restore-ema``, ``average --ema --bake``, ``bake_ema(use_meta=False)``) now leave the
``.meta`` out as well: copied beside the output it would claim collections, a save op and
update ops that were chosen not to be read -- often another run's graph, the case
``--no-meta`` exists for, which the next ``ckpt`` run on the output would then follow.
Without ``--no-meta`` the input's own ``.meta`` is still copied byte for byte. The values
written are the averages TensorFlow recorded at save time (``ema.average(v)``)."""

from __future__ import annotations

import shutil

import pytest
from _tf_runner import run_python
from helpers import run_cli
from helpers_tf1 import run_tf1_script

import ckpt_tools

SCRIPT = r'''
with tf.Graph().as_default():
    w = tf1.get_variable("w", [3], initializer=tf1.ones_initializer())
    b = tf1.get_variable("b", [2], initializer=tf1.zeros_initializer())
    ema = tf1.train.ExponentialMovingAverage(0.5)
    step = tf.group(w.assign_add(tf.ones([3])), b.assign_add(2 * tf.ones([2])))
    with tf.control_dependencies([step]):
        update = ema.apply([w, b])
    saver = tf1.train.Saver(max_to_keep=5)
    with trained(tf, update, 0) as s:
        for i in range(2):
            s.run(update)
            saver.save(s, f"{out}/run/model.ckpt", global_step=i + 1)
        for v in (w, b):
            truth[v.op.name] = s.run(ema.average(v))
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("no_meta_out")
    truth = run_tf1_script(SCRIPT, out)
    return out / "run", truth


def _check(out_dir, truth, meta_copied: bool, src_meta):
    metas = sorted(out_dir.glob("*.meta"))
    assert bool(metas) == meta_copied, metas
    if meta_copied:
        assert metas[0].read_bytes() == src_meta.read_bytes()
    with ckpt_tools.open_checkpoint(str(out_dir), meta=False) as c:
        for var, value in truth.items():
            assert c.tensor(var).tobytes() == value.tobytes(), var


@pytest.mark.parametrize("no_meta", [False, True], ids=["meta", "no_meta"])
def test_restore_ema_copies_the_meta_only_where_it_was_read(made, tmp_path, no_meta):
    run, truth = made
    prefix = str(run / "model.ckpt-2")
    out = tmp_path / "baked"
    code, _, err = run_cli(["restore-ema", prefix, "--out", str(out),
                            *(["--no-meta"] if no_meta else [])])
    assert code == 0, err
    _check(out, truth, not no_meta, run / "model.ckpt-2.meta")
    api = tmp_path / "api"
    ckpt_tools.bake_ema(prefix, str(api), use_meta=not no_meta)
    _check(api, truth, not no_meta, run / "model.ckpt-2.meta")


@pytest.mark.parametrize("no_meta", [False, True], ids=["meta", "no_meta"])
def test_average_bake_copies_the_meta_only_where_it_was_read(made, tmp_path, no_meta):
    run, _ = made
    out = tmp_path / "avg"
    code, _, err = run_cli(["average", str(run), "--last", "2", "--ema", "--bake", "--out",
                            str(out), *(["--no-meta"] if no_meta else [])])
    assert code == 0, err
    assert bool(sorted(out.glob("*.meta"))) == (not no_meta), sorted(out.iterdir())


def test_another_runs_meta_is_not_carried_into_the_output(made, tmp_path):
    """The case --no-meta exists for: a .meta of another graph (here one with no averages)
    beside the checkpoint; the output carries none, so reading it again needs no --no-meta."""
    run, truth = made
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    (copy / "checkpoint").unlink()

    run_python(["-c", "import tensorflow as tf; tf1 = tf.compat.v1; tf1.disable_eager_execution(); "
        "tf1.get_variable('w', [3]); tf1.get_variable('b', [2]); "
        f"tf1.train.export_meta_graph({str(copy / 'model.ckpt-2.meta')!r})"], check=True)
    out = tmp_path / "baked"
    code, _, err = run_cli(["restore-ema", str(copy / "model.ckpt-2"), "--no-meta", "--out",
                            str(out)])
    assert code == 0, err
    _check(out, truth, False, None)
    code, _, err = run_cli(["list", str(out), "--json"])
    assert code == 0, err
