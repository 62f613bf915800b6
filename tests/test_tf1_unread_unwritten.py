"""TF1: two EMA objects named ``fast`` (0.5 over ``w``, ``b``; 0.9 over ``c``, its only
apply() inside a control-flow-v2 ``tf.cond``) in a graph calling more functions than
graph_def reads (4096; 0 here), so the cond's branch is left unread (review-28-attack-r103
F5). ``c/fast`` then has no writer in the part read, and the refusal said no apply() writes
it, the .meta may be another graph's, ``ema.average(c)`` is ``None`` there, offering
``--allow-missing``, which exported ``c`` raw beside the averages, exit 0. It now says the
graph was not read whole and offers ``--allow-missing`` only as the caller's statement.
Real TensorFlow."""

from __future__ import annotations

import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r"""
tf1.enable_control_flow_v2()
with tf.Graph().as_default():
    (w, b, c), step, upd = nudged_wbc(tf, use_resource=True)
    e1 = tf1.train.ExponentialMovingAverage(0.5, name="fast")
    e2 = tf1.train.ExponentialMovingAverage(0.9, name="fast")
    with tf.control_dependencies(upd):
        a1 = e1.apply([w, b])
        a2 = tf1.cond(step >= 0, lambda: tf.group(e2.apply([c])), tf.no_op)
    train = tf.group(a1, a2, tf1.assign_add(step, 1))
    with saved_trained(tf, train, os.path.join(out, "two", "model.ckpt")) as (s, _):
        truth = {"w": s.run(e1.average(w)), "c": s.run(e2.average(c))}
"""


@pytest.fixture()
def unread(tmp_path, monkeypatch):
    """The checkpoint, read with no function call of its graph read."""
    pytest.importorskip("tensorflow")
    from ckpt_tools.formats import graph_def

    monkeypatch.setattr(graph_def, "_MAX_CALLS", 0)
    monkeypatch.setattr(graph_def, "_BRANCHES", {})
    run_tf1_script(SCRIPT, tmp_path)
    return tmp_path / "two" / "model.ckpt-1"


def test_functions_left_unread_prove_no_key_unwritten(unread, tmp_path):
    for args in ([], ["--ema-name", "fast"]):
        code, _o, err = run_cli(["export", str(unread), "-o", str(tmp_path / "x.npz"), *args])
        assert code == 6, err
        line = " ".join(err.split())
        assert "c/fast for c; that graph calls more functions than are read" in line, line
        assert "--allow-missing keeps them raw only as your statement" in line, line
        assert "ema.average(v) is None" not in line and "another graph" not in line, line
    assert not (tmp_path / "x.npz").exists()
