"""The mark of an average of TF1 SavedModels saved by a swapping Saver records the graph it
was written with (task s30b item 3b, s29h "Seen").

``ckpt average`` of two SavedModels whose ``saved_model.pb`` records a swapping Saver
(``{v.op.name: ema.average(v), ema.average_name(v): v}``, ``Builder(saver=)``) marks its
output ``names_doubted`` (review-29-attack-r107 F1) but recorded no ``graph_sha256`` for a
SavedModel output: read in place, through the very ``saved_model.pb`` it copied, it was
refused (exit 6). The digest of that ``saved_model.pb`` is now recorded (and kept by
restore-ema's SavedModel output, which copies it too): in place, the averages; its
``variables/`` copied without the graph, still refused. Truth: ``sess.run(ema.average(v))``
and ``sess.run(v)`` at each save of a real TF1 swapping Saver."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script
from test_marked_outputs import KEY, NAMES

SCRIPT = '''
with tf.Graph().as_default():
    gs = tf1.train.get_or_create_global_step()
    with tf1.variable_scope("model"):
        w = tf1.get_variable("W", [4, 2])
        v = tf1.get_variable("V", [2], initializer=tf1.constant_initializer(0.3))
    loss = tf.reduce_sum(tf.square(tf.matmul(tf.ones([3, 4]), w) + v - 1.0))
    train = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=gs)
    ema = tf1.train.ExponentialMovingAverage(0.9)
    with tf.control_dependencies([train]):
        step = ema.apply(tf1.trainable_variables())
    tv = tf1.trainable_variables()
    keys = {x.op.name: ema.average(x) for x in tv}
    keys.update({ema.average_name(x): x for x in tv})
    keys["global_step"] = gs
    saver = tf1.train.Saver(keys)
    with trained(tf, step, 0) as s:
        for i in (1, 2):
            s.run(step)
            b = tf1.saved_model.Builder(f"{out}/sm{i}")
            b.add_meta_graph_and_variables(s, ["serve"], saver=saver)
            b.save()
            for x in tv:
                truth[f"{i}:avg:{x.op.name}"] = s.run(ema.average(x))
                truth[f"{i}:raw:{x.op.name}"] = s.run(x)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("marked_saved_model")
    return out, run_tf1_script(SCRIPT, out)


def test_average_of_swapping_saved_models_reads_in_place(made, tmp_path):
    out, truth = made
    code, _, err = run_cli(["average", str(out / "sm1"), str(out / "sm2"),
                            "--out", str(tmp_path / "avg")])
    assert code == 0, err
    code, _, err = run_cli(["restore-ema", str(tmp_path / "avg"), "--out", str(tmp_path / "r")])
    assert code == 0, err
    for sm in ("avg", "r"):
        code, _, err = run_cli(["export", str(tmp_path / sm), "--out", str(tmp_path / "e.npz"),
                                "--force"])
        assert code == 0, (sm, err)  # was 6: no digest recorded for the saved_model.pb
        with np.load(tmp_path / "e.npz") as z:
            for key in NAMES:
                want = np.mean([truth[f"{i}:avg:{key}"].astype(np.float64) for i in (1, 2)], 0)
                np.testing.assert_allclose(z[key], want, rtol=1e-5)
    shutil.copytree(tmp_path / "avg/variables", tmp_path / "copy")  # without saved_model.pb
    code, _, err = run_cli(["export", str(tmp_path / "copy/variables"),
                            "--out", str(tmp_path / "c.npz")])
    assert code == 6 and KEY in " ".join(err.split()), err
    assert not (tmp_path / "c.npz").exists()


def test_no_meta_over_a_swapping_saved_models_own_graph_is_refused(made, tmp_path):
    """review-32-attack-r124 F2: --no-meta (and open_checkpoint(meta=False)) over a TF1
    SavedModel whose saved_model.pb records the swapping Saver read the names alone, exit 0,
    the raw weights as the averages; the same Saver's .meta is refused (r110 F6). The
    SavedModel's own graph is asked too."""
    from ckpt_tools import UnprovenPairingError, export_weights, open_checkpoint

    out, _ = made
    code, _, err = run_cli(["export", str(out / "sm2"), "--no-meta",
                            "--out", str(tmp_path / "e.npz")])
    assert code == 6 and "drop --no-meta" in " ".join(err.split()), err
    assert not (tmp_path / "e.npz").exists()
    with open_checkpoint(str(out / "sm2"), meta=False) as ckpt, \
            pytest.raises(UnprovenPairingError):
        export_weights(ckpt, str(tmp_path / "e.npz"))
