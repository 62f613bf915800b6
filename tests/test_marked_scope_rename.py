"""An average of a run whose Saver renames the scope without a swap is not marked
(review-30-attack-r110 F8): ``{"net/W": W, "net/W/ExponentialMovingAverage": ema.average(W),
...}`` (porting a model) writes each key's name's own role, yet ``names_mislead`` flagged any
key written from a variable of another name: the average was marked ``names_doubted`` and its
``.index`` + ``.data`` copy refused as "a swapping Saver's graph", though the input's own copy
reads right. A Saver that writes an average's name from another variable's average, or
from another EMA object's average of the same variable (``net/W/fast`` holding ``slow``'s:
review-31-attack-r114 F2), stays marked. Truth: ``sess.run`` at each save of real TF1
Savers (graph mode)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script
from test_marked_outputs import KEY, _copy

SCRIPT = '''
def run(name, crossed):
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        with tf1.variable_scope("model"):
            w = tf1.get_variable("W", [2])
            v = tf1.get_variable("V", [2], initializer=tf1.constant_initializer(0.3))
        loss = tf.reduce_sum(tf.square(w * 2.0 + v - 1.0))
        train = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=gs)
        ema = tf1.train.ExponentialMovingAverage(0.9)
        with tf.control_dependencies([train]):
            step = ema.apply([w, v])
        e = "ExponentialMovingAverage"
        saver = tf1.train.Saver({"global_step": gs, "net/W": w, "net/V": v,
                                 f"net/W/{e}": ema.average(v if crossed else w),
                                 f"net/V/{e}": ema.average(w if crossed else v)},
                                max_to_keep=None)
        with trained(tf, step, 0) as s:
            for i in (1, 2, 3):
                s.run(step)
                saver.save(s, f"{out}/{name}/model.ckpt", global_step=i)
                for k, x in (("W", w), ("V", v)):
                    truth[f"{name}:{i}:avg:net/{k}"] = s.run(ema.average(x))


def two_objects(name, pre):
    # slow's averages saved under fast's names and the reverse: each key's base holds the
    # average's variable, only the EMA name is another object's (review-31-attack-r114 F2)
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        with tf1.variable_scope("model"):
            w = tf1.get_variable("W", [2])
            v = tf1.get_variable("V", [2], initializer=tf1.constant_initializer(0.3))
        loss = tf.reduce_sum(tf.square(w * 2.0 + v - 1.0))
        train = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=gs)
        slow = tf1.train.ExponentialMovingAverage(0.5, name="slow")
        fast = tf1.train.ExponentialMovingAverage(0.9, name="fast")
        with tf.control_dependencies([train]):
            step = tf.group(slow.apply([w, v]), fast.apply([w, v]))
        keys = {"global_step": gs}
        for k, x in (("W", w), ("V", v)):
            keys[f"{pre}/{k}"] = x
            keys[f"{pre}/{k}/fast"] = slow.average(x)
            keys[f"{pre}/{k}/slow"] = fast.average(x)
        saver = tf1.train.Saver(keys, max_to_keep=None)
        with trained(tf, step, 0) as s:
            for i in (1, 2, 3):
                s.run(step)
                saver.save(s, f"{out}/{name}/model.ckpt", global_step=i)
                for k, x in (("W", w), ("V", v)):
                    truth[f"{name}:{i}:fast:{pre}/{k}"] = s.run(fast.average(x))

run("renamed", False)
run("crossed", True)
two_objects("objects_crossed", "model")
two_objects("objects_crossed_renamed", "net")
'''
NAMES = ("net/W", "net/V")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("marked_scope_rename")
    return out, run_tf1_script(SCRIPT, out)


def test_scope_renaming_savers_average_is_not_marked(made, tmp_path):
    out, truth = made
    code, _, err = run_cli(["average", str(out / "renamed/model.ckpt-3"),
                            str(out / "renamed/model.ckpt-2"), "--out", str(tmp_path / "a")])
    assert code == 0, err
    code, listed, err = run_cli(["list", str(tmp_path / "a/model.ckpt-3")])
    assert KEY not in listed  # no mark written (the record key is listed when present)
    ckpt = _copy(tmp_path / "a", "model.ckpt-3", tmp_path / "c", only=(".index", ".data"))
    code, _, err = run_cli(["export", str(ckpt), "--out", str(tmp_path / "c.npz")])
    assert code == 0, err  # was 6: "a swapping Saver's graph ... doubts"
    with np.load(tmp_path / "c.npz") as z:
        for key in NAMES:
            want = ((truth[f"renamed:2:avg:{key}"].astype(np.float64)
                     + truth[f"renamed:3:avg:{key}"]) / 2).astype(np.float32)
            np.testing.assert_array_equal(z[key], want)


@pytest.mark.parametrize("run", ["crossed", "objects_crossed", "objects_crossed_renamed"])
def test_an_average_name_written_from_another_average_stays_marked(made, tmp_path, run):
    out, _ = made
    code, _, err = run_cli(["average", str(out / run / "model.ckpt-3"),
                            str(out / run / "model.ckpt-2"), "--out", str(tmp_path / "a")])
    assert code == 0, err
    ckpt = _copy(tmp_path / "a", "model.ckpt-3", tmp_path / "c", only=(".index", ".data"))
    extra = [] if run == "crossed" else ["--ema-name", "fast"]
    # was exit 0 for the objects' crossing: slow's averages exported as fast's
    code, _, err = run_cli(["export", str(ckpt), "--out", str(tmp_path / "c.npz"), *extra])
    assert code == 6 and KEY in " ".join(err.split()), err
    assert not (tmp_path / "c.npz").exists()


@pytest.mark.parametrize("how", ["restore-ema", "average --ema --bake"])
def test_a_bake_leaving_another_objects_average_under_a_name_is_marked(made, tmp_path, how):
    """restore-ema / average --ema --bake of the crossing Saver write each plain name from
    fast's average but leave ``net/W/fast`` holding slow's: in place the graph beside the
    output reads it right; its .index+.data copy is refused, not read as fast's
    (review-31-attack-r114 F2, F3)."""
    out, truth = made
    run = out / "objects_crossed_renamed"
    cmd = (["restore-ema", str(run / "model.ckpt-3")] if how == "restore-ema" else
           ["average", str(run / "model.ckpt-3"), str(run / "model.ckpt-2"), "--ema", "--bake"])
    code, _, err = run_cli([*cmd, "--ema-name", "fast", "--out", str(tmp_path / "a")])
    assert code == 0, err
    steps = (3,) if how == "restore-ema" else (3, 2)
    code, _, err = run_cli(["export", str(tmp_path / "a/model.ckpt-3"), "--ema-name", "fast",
                            "--out", str(tmp_path / "a.npz")])
    assert code == 0, err
    with np.load(tmp_path / "a.npz") as z:
        for key in NAMES:
            want = sum(truth[f"objects_crossed_renamed:{i}:fast:{key}"].astype(np.float64)
                       for i in steps) / len(steps)
            np.testing.assert_array_equal(z[key], want.astype(np.float32))
    ckpt = _copy(tmp_path / "a", "model.ckpt-3", tmp_path / "c", only=(".index", ".data"))
    # was exit 0: slow's averages exported as fast's
    code, _, err = run_cli(["export", str(ckpt), "--ema-name", "fast",
                            "--out", str(tmp_path / "c.npz")])
    assert code == 6 and KEY in " ".join(err.split()), err
    assert not (tmp_path / "c.npz").exists()


def test_a_rescoped_bake_of_a_marked_crossing_average_stays_marked(made, tmp_path):
    """review-31-attack-r114 F1's lift of a carried mark needs every key to hold what its
    name says: restore-ema --strip-scope of the crossing Saver's marked average leaves
    ``W/fast`` holding slow's average, so the output keeps the mark and is refused, not read
    as fast's."""
    out, _ = made
    run = out / "objects_crossed_renamed"
    code, _, err = run_cli(["average", str(run / "model.ckpt-3"), str(run / "model.ckpt-2"),
                            "--out", str(tmp_path / "a")])
    assert code == 0, err
    code, _, err = run_cli(["restore-ema", str(tmp_path / "a/model.ckpt-3"), "--ema-name",
                            "fast", "--strip-scope", "net/", "--out", str(tmp_path / "r")])
    assert code == 0, err
    code, _, err = run_cli(["export", str(tmp_path / "r/model.ckpt-3"), "--ema-name", "fast",
                            "--out", str(tmp_path / "r.npz")])
    assert code == 6 and KEY in " ".join(err.split()), err
    assert not (tmp_path / "r.npz").exists()
