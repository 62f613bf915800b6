"""A TF1 evaluation graph that restored the RAW weights (``init_from_checkpoint(ckpt,
{"l1/w": w})``, or a restoring ``Saver({"l1/w": w})``) and saved with
``Saver(slow.variables_to_restore())`` was offered ``--averages-only`` ("the file cannot show
that"), which then exported the raw weights as slow's averages, exit 0, though the ``.meta``
records the key the graph restored: the variable's own name (review-33-attack-r130 M1). A
restore op outside the Savers is the variable's initializer (it ran): refused, no offer. A
Saver merely built may not have restored, so the refusal says what it reads and still asks.
Made here by TensorFlow (a subprocess), the truth read from the training session
(``ema.average(v)``)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli, run_script

SCRIPT = r'''
import os
import sys

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()
out = sys.argv[1]
truth = {}
with tf.Graph().as_default():  # training: slow's averages saved beside the raw weight
    gs = tf1.train.get_or_create_global_step()
    w = tf1.get_variable("l1/w", initializer=tf.constant([0.5, 0.25]))
    step = tf1.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(tf.square(w)),
                                                            global_step=gs)
    slow = tf1.train.ExponentialMovingAverage(0.9, name="slow")
    with tf.control_dependencies([step]):
        train_op = slow.apply([w])
    with tf1.Session() as s:
        s.run(tf1.global_variables_initializer())
        s.run(train_op)
        s.run(train_op)
        tf1.train.Saver().save(s, f"{out}/train/model.ckpt", global_step=gs)
        truth["raw"] = s.run(w.read_value())
        truth["slow"] = s.run(slow.average(w).read_value())
ckpt = f"{out}/train/model.ckpt-2"
for kind in ("raw_init", "raw_saver", "ok_init"):  # each: restore, then the EMA Saver saves
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        w = tf1.get_variable("l1/w", [2])
        restoring = tf1.train.Saver({"l1/w": w}) if kind == "raw_saver" else None
        if kind != "raw_saver":
            tf1.train.init_from_checkpoint(
                ckpt, {"l1/w" if kind == "raw_init" else "l1/w/slow": w})
        saver = tf1.train.Saver(tf1.train.ExponentialMovingAverage(
            0.9, name="slow").variables_to_restore())
        os.makedirs(f"{out}/{kind}", exist_ok=True)
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            if restoring is not None:
                restoring.restore(s, ckpt)
            for i in (1, 2) if kind == "ok_init" else (2,):  # ok_init: a series of two
                s.run(tf1.assign(gs, i))
                saver.save(s, f"{out}/{kind}/model.ckpt", global_step=gs)
            truth[kind] = s.run(w.read_value())
with tf.Graph().as_default():  # an embedding's training run, its slow averages saved
    gs = tf1.train.get_or_create_global_step()
    e = tf1.get_variable("E", initializer=tf.reshape(tf.range(6, dtype=tf.float32), [3, 2]))
    step = tf1.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(tf.square(e)),
                                                            global_step=gs)
    slow = tf1.train.ExponentialMovingAverage(0.9, name="slow")
    with tf.control_dependencies([step]):
        train_op = slow.apply([e])
    with tf1.Session() as s:
        s.run(tf1.global_variables_initializer())
        s.run(train_op)
        tf1.train.Saver().save(s, f"{out}/etrain/model.ckpt", global_step=gs)
        truth["E_slow"] = s.run(slow.average(e).read_value())
with open(f"{out}/vocab.txt", "w") as f:
    f.write("a\nb\nc\n")
with tf.Graph().as_default():  # slow's averages warm-started with one OOV row, then saved
    gs = tf1.train.get_or_create_global_step()
    tf1.get_variable("E", [4, 2])
    vocab = tf1.train.VocabInfo(new_vocab=f"{out}/vocab.txt", new_vocab_size=3,
                                num_oov_buckets=1, old_vocab=f"{out}/vocab.txt")
    tf1.train.warm_start(f"{out}/etrain/model.ckpt-1", vars_to_warm_start=["E"],
                         var_name_to_vocab_info={"E": vocab},
                         var_name_to_prev_var_name={"E": "E/slow"})
    saver = tf1.train.Saver(tf1.train.ExponentialMovingAverage(
        0.9, name="slow").variables_to_restore())
    with tf1.Session() as s:
        s.run(tf1.global_variables_initializer())
        s.run(tf1.assign(gs, 1))
        saver.save(s, f"{out}/oov/model.ckpt", global_step=gs)
np.savez(f"{out}/truth.npz", **truth)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_eval_raw_restored")
    return out, run_script(SCRIPT, out)


def _export(path, dst, *opts: str) -> tuple[int, str]:
    """``ckpt export path --ema-name slow opts``; returns (exit code, stderr)."""
    code, _, err = run_cli(["export", str(path), "--ema-name", "slow", *opts,
                            "--out", str(dst)])
    return code, err


def test_raw_weights_restored_by_init_from_checkpoint_refused(made, tmp_path):
    """The graph's checkpoint_initializer read ``l1/w`` (the raw weight) into ``l1/w``: every
    read refuses, none offers ``--averages-only`` (it exported the raw weight, exit 0)."""
    out, truth = made
    assert truth["raw_init"].tobytes() == truth["raw"].tobytes()  # what the keys hold
    assert truth["raw"].tobytes() != truth["slow"].tobytes()
    for opts in ((), ("--averages-only",), ("--no-meta", "--averages-only")):
        dst = tmp_path / f"{len(opts)}.npz"
        code, err = _export(out / "raw_init" / "model.ckpt-2", dst, *opts)
        assert code == 6, (opts, err)
        assert "restores l1/w from the key l1/w outside its Savers" in err, (opts, err)
        assert "pass --averages-only" not in err, (opts, err)
        assert not dst.exists()


def test_raw_weights_a_saver_reads_said(made, tmp_path):
    """A Saver of the raw names beside the EMA Saver may have restored them: the refusal says
    what it reads (the key of the variable's own name) instead of "the file cannot show
    that"."""
    out, truth = made
    assert truth["raw_saver"].tobytes() == truth["raw"].tobytes()
    code, err = _export(out / "raw_saver" / "model.ckpt-2", tmp_path / "e.npz")
    assert code == 6, err
    assert "1 key named as averages was written from its variable, e.g. l1/w/slow" in err, err
    assert "also builds a Saver that reads l1/w from the key l1/w" in err, err
    assert "the file cannot show that;" not in err, err


def test_one_key_said_in_the_singular(made, tmp_path):
    """One key stated to hold an average is said in the singular (review-33-attack-r130 N1:
    "1 key ... are read ... so do these keys")."""
    out, _ = made
    code, err = _export(out / "ok_init" / "model.ckpt-2", tmp_path / "ok.npz", "--averages-only")
    assert code == 0, err
    assert "1 key named as averages (e.g. l1/w/slow) is read as the average of a variable" \
        in err, err
    assert "if that held its raw weight (not the average it restored), so does this key" \
        in err, err


def test_averages_restored_still_read(made, tmp_path):
    """The graph that restored slow's own keys (``l1/w/slow`` into ``l1/w``) is read under
    ``--averages-only`` as before: slow's average bit for bit."""
    out, truth = made
    dst = tmp_path / "ok.npz"
    code, err = _export(out / "ok_init" / "model.ckpt-2", dst, "--averages-only")
    assert code == 0, err
    with np.load(dst) as z:
        assert z["l1/w"].tobytes() == truth["slow"].tobytes()


def test_no_meta_warning_names_the_own_graph(made, tmp_path):
    """``--no-meta`` on model.ckpt-2 of a series warns of model.ckpt-1.meta beside it; what a
    read without ``--no-meta`` reads is model.ckpt-2.meta, whose refusal offers
    ``--averages-only``, not ``--not-swapped`` (review-33-attack-r130 N2)."""
    out, _ = made
    path = out / "ok_init" / "model.ckpt-2"
    code, err = _export(path, tmp_path / "n.npz", "--no-meta", "--averages-only")
    assert code == 0, err
    assert "--no-meta left unread model.ckpt-1.meta beside it" in err, err
    assert "without --no-meta its own model.ckpt-2.meta is read instead" in err, err
    assert "--not-swapped" not in err, err
    code, err = _export(path, tmp_path / "m.npz")
    assert code == 6 and "pass --averages-only" in err and "--not-swapped" not in err, err


def test_warm_start_with_oov_rows_not_called_training(made, tmp_path):
    """warm_start's assign of ``concat([LoadAndRemapMatrix(E/slow), oov_rows])`` is the warm
    start, not "an op training E" (review-33-attack-r130 N3): the graph is read as the
    evaluation re-save it is, and its rows are slow's averages under --averages-only."""
    out, truth = made
    path = out / "oov" / "model.ckpt-1"
    code, err = _export(path, tmp_path / "n.npz")
    assert code == 6 and "an evaluation graph re-saving what it restored" in err, err
    assert "an op training" not in err, err
    code, err = _export(path, tmp_path / "o.npz", "--averages-only")
    assert code == 0, err
    with np.load(tmp_path / "o.npz") as z:
        assert z["E"][:3].tobytes() == truth["E_slow"].tobytes()
