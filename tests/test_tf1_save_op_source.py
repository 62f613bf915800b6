"""The save op that proves what a TF1 key holds must be the one that wrote the checkpoint
(review-12-attack-r20 F4, F11, F12).

- F4: a ``.meta`` exported by another Saver of the same graph (``Saver()``) beside a checkpoint
  written by ``Saver(ema.variables_to_restore())``: its save op writes keys the checkpoint
  lacks (``W``), so it proves nothing about this file; the raw weights under the averages'
  names were exported as averages, exit 0. Now refused as without a ``.meta`` (naming
  ``--averages-only``); the reverse (a ``Saver()`` checkpoint beside the vtr Saver's ``.meta``)
  is paired by names instead of refused.
- F11: a TF1 SavedModel written with a swapping Saver records the swap in ``saved_model.pb``'s
  save op, which was not read: raw weights exported as the EMA. Now read as a ``.meta``'s
  (and, since r20 F1, paired through: tests/test_tf1_swap_some.py).
- F12: a text-format ``.meta``'s save op was not read either.

Made here by TensorFlow (a subprocess); truth read from the session at save time.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli, run_script

SCRIPT = r'''
import os
import shutil
import sys

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()
out = sys.argv[1]
truth = {}
CASES = ("vtr_meta_other", "plain_meta_vtr", "sm_swap", "sm_vtr", "sm_avgonly", "sm_plain",
         "txt_swap", "txt_vtr", "sharded_plain")
for case in CASES:
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        x = tf1.placeholder(tf.float32, [None, 3], name="x")
        W = tf1.get_variable("W", [3, 2])
        V = tf1.get_variable("V", [3, 2])
        vs = [W, V]
        y = tf.matmul(x, W) + tf.reduce_sum(V)
        loss = tf.reduce_sum(W ** 2) + tf.reduce_sum((V - 1) ** 2)
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
        ema = tf1.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([train]):
            step = ema.apply(vs)
        plain = tf1.train.Saver(sharded=case == "sharded_plain")
        vtr = tf1.train.Saver(ema.variables_to_restore())
        swap = tf1.train.Saver({**{v.op.name: ema.average(v) for v in vs},
                                **{ema.average_name(v): v for v in vs}, "global_step": gs})
        avgonly = tf1.train.Saver({ema.average_name(v): ema.average(v) for v in vs})
        saver = {"vtr_meta_other": vtr, "plain_meta_vtr": plain, "sm_swap": swap,
                 "sm_vtr": vtr, "sm_avgonly": avgonly, "sm_plain": None, "txt_swap": swap,
                 "txt_vtr": vtr, "sharded_plain": plain}[case]
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            for _ in range(4):
                sess.run(step)
            for v in vs:
                truth[f"{case}:raw:{v.op.name}"] = sess.run(v.read_value())
                truth[f"{case}:avg:{v.op.name}"] = sess.run(ema.average(v).read_value())
            d = os.path.join(out, case)
            if case.startswith("sm_"):
                b = tf1.saved_model.Builder(d)
                sig = tf1.saved_model.predict_signature_def({"x": x}, {"y": y})
                b.add_meta_graph_and_variables(sess, ["serve"], saver=saver,
                                               signature_def_map={"serving_default": sig})
                b.save()
                continue
            os.makedirs(d)
            p = os.path.join(d, "model.ckpt")
            saver.save(sess, p, write_meta_graph=False)
            if case == "vtr_meta_other":
                plain.export_meta_graph(p + ".meta")
            elif case == "plain_meta_vtr":
                vtr.export_meta_graph(p + ".meta")
            else:
                saver.export_meta_graph(p + ".meta", as_text=case.startswith("txt_"))
np.savez(os.path.join(out, "truth.npz"), **truth)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_save_op")
    return out, run_script(SCRIPT, out)


def _exported(path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _cmd(args, out):
    return [a.replace("OUT", str(out)) for a in args]


COMMANDS = [["map"], ["export", "--out", "OUT/x.npz"], ["restore-ema", "--out", "OUT/r"]]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_meta_of_another_saver_proves_nothing(made, tmp_path, args):
    """F4: the .meta's Saver() writes W, V; the checkpoint (the vtr Saver's) holds neither:
    the keys named as averages (raw W, V) are refused as without a .meta, never exported."""
    out, _ = made
    code, _, err = run_cli([args[0], str(out / "vtr_meta_other"), *_cmd(args[1:], tmp_path)])
    assert code == 6, err
    assert "--averages-only" in err and "did not write this checkpoint" in " ".join(err.split())
    assert not list(tmp_path.iterdir())
    code, _, err = run_cli(["export", str(out / "vtr_meta_other"), "--strict",
                            "--out", str(tmp_path / "s.npz")])
    assert code == 6, err


def test_python_meta_of_another_saver_refused(made):
    import ckpt_tools

    out, _ = made
    with pytest.raises(ckpt_tools.EmaError, match="averages-only"):
        ckpt_tools.ema_map(str(out / "vtr_meta_other"))


def test_plain_checkpoint_beside_vtr_meta_is_paired_by_names(made, tmp_path):
    """The reverse: a Saver() checkpoint beside the vtr Saver's .meta (whose save op writes
    only the averages' keys) holds the averages under their names: exported bit for bit."""
    out, truth = made
    code, _, err = run_cli(["export", str(out / "plain_meta_vtr"), "--out",
                            str(tmp_path / "x.npz")])
    assert code == 0, err
    got = _exported(tmp_path / "x.npz")
    for v in ("W", "V"):
        assert got[v].tobytes() == truth[f"plain_meta_vtr:avg:{v}"].tobytes(), v


def test_sharded_saver_meta_still_proves(made, tmp_path):
    """A sharded Saver(): the union of its save ops is the checkpoint's keys: paired."""
    out, truth = made
    code, _, err = run_cli(["export", str(out / "sharded_plain"), "--out",
                            str(tmp_path / "x.npz")])
    assert code == 0, err
    got = _exported(tmp_path / "x.npz")
    for v in ("W", "V"):
        assert got[v].tobytes() == truth[f"sharded_plain:avg:{v}"].tobytes(), v


@pytest.mark.parametrize("case", ["sm_swap", "txt_swap"])
@pytest.mark.parametrize("raw", [False, True], ids=["ema", "raw"])
def test_swapping_saver_recorded_outside_a_binary_meta_pairs_through_it(made, tmp_path, case,
                                                                        raw):
    """F11/F12: the swap recorded in saved_model.pb / a text .meta is read: each variable is
    exported from the key holding its average (``--raw``: the key holding it), bit for bit."""
    out, truth = made
    code, _, err = run_cli(["export", str(out / case), *(["--raw"] if raw else []), "--out",
                            str(tmp_path / "x.npz")])
    assert code == 0, err
    got = _exported(tmp_path / "x.npz")
    assert sorted(got) == ["V", "W"], sorted(got)
    for v in ("W", "V"):
        assert got[v].tobytes() == truth[f"{case}:{'raw' if raw else 'avg'}:{v}"].tobytes(), v


@pytest.mark.parametrize("case", ["sm_vtr", "txt_vtr"])
@pytest.mark.parametrize("stated", [[], ["--averages-only"]], ids=["plain", "stated"])
def test_vtr_saver_recorded_outside_a_binary_meta_is_refused(made, tmp_path, case, stated):
    """F11/F12: the vtr Saver's raw values are refused whatever is stated."""
    out, _ = made
    code, _, err = run_cli(["export", str(out / case), *stated, "--out",
                            str(tmp_path / "x.npz")])
    assert code == 6, err
    assert "raw values" in err and "variables_to_restore()" in err, err


@pytest.mark.parametrize("case", ["sm_avgonly", "sm_plain"])
def test_savedmodel_averages_proven_by_its_save_op(made, tmp_path, case):
    """The averages-only Saver's SavedModel needs no statement; the builder's default
    (sharded) Saver is paired as before."""
    out, truth = made
    code, _, err = run_cli(["export", str(out / case), "--out", str(tmp_path / "x.npz")])
    assert code == 0, err
    got = _exported(tmp_path / "x.npz")
    for v in ("W", "V"):
        assert got[v].tobytes() == truth[f"{case}:avg:{v}"].tobytes(), v
        assert got[v].tobytes() != truth[f"{case}:raw:{v}"].tobytes(), v


IN_GRAPH = r'''
import sys

import numpy as np
import tensorflow as tf

import ckpt_tools

tf1 = tf.compat.v1
tf1.disable_eager_execution()
made, out = sys.argv[2], sys.argv[1]
refused = {}
for case in ("sm_swap", "sm_vtr", "vtr_meta_other"):
    with tf.Graph().as_default(), tf1.Session() as sess:
        if case.startswith("sm_"):
            tf1.saved_model.loader.load(sess, ["serve"], f"{made}/{case}")
            path = f"{made}/{case}"
        else:
            path = f"{made}/{case}/model.ckpt"
            tf1.train.import_meta_graph(path + ".meta")
        try:
            ckpt_tools.restore_ema(sess, path)
            refused[case] = np.array(False)
            for v in tf1.global_variables():
                refused[f"{case}:got:{v.op.name}"] = sess.run(v.read_value())
        except ckpt_tools.EmaError:
            refused[case] = np.array(True)
np.savez(f"{out}/truth.npz", **refused)
'''


def test_restore_ema_in_the_loaded_graph_refuses_or_pairs_through_the_save_op(made, tmp_path):
    """restore_ema(sess, path) in the graph imported from the other Saver's .meta, or loaded
    from the vtr Saver's SavedModel: refused, never the raw values restored as averages. In
    the graph loaded from the swapping Saver's SavedModel its save op proves every key: each
    variable gets its own average (review-13-attack-r24 F1; this was refused)."""
    out, truth = made
    got = run_script(IN_GRAPH, tmp_path, str(out))
    assert bool(got["sm_vtr"]) and bool(got["vtr_meta_other"]), got
    assert not bool(got["sm_swap"]), got
    for v in ("W", "V"):
        assert got[f"sm_swap:got:{v}"].tobytes() == truth[f"sm_swap:avg:{v}"].tobytes(), v
        assert got[f"sm_swap:got:{v}"].tobytes() != truth[f"sm_swap:raw:{v}"].tobytes(), v
