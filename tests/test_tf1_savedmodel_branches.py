"""TF1 SavedModel (``tf1.saved_model.Builder`` of the training graph, ``saved_model.pb`` or
``.pbtxt``) and a text-format ``.meta`` (``Saver.export_meta_graph(as_text=True)``): the update
ops in their control-flow-v2 functions are read as a binary ``.meta``'s are
(review-18-attack-r39 F6).

A first moment of ``w0``'s gradient kept as ``w0/ExponentialMovingAverage`` by
``assign_moving_average`` inside a v2 ``tf.cond`` beside a real EMA over ``w1`` was exported as
``w0``'s average, exit 0 under ``--strict``: ``read_branches`` read a ``.meta`` only, and a
``saved_model.pb``'s field 2 is a ``MetaGraphDef``, not its ``GraphDef``; a text-format file's
library was not read at all. ``ema.apply()`` in the same cond stays proven. The graph holds
a 1.2 MB constant, whose ~3 MB ``tensor_content`` line made the text forms refused
(review-25-attack-r81 F5): they are read as the binary ones.

Made by real TensorFlow in a subprocess; truth read at save time.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
from tensorflow.python.training import moving_averages

case = sys.argv[2]
w0 = tf1.get_variable("w0", initializer=tf.ones([3, 2]))
w1 = tf1.get_variable("w1", initializer=tf.zeros([2]))
# a 1.2 MB constant: its tensor_content is one ~3 MB line of the text files, which the text
# bound refused (review-25-attack-r81 F5); its values do not change the loss
table = tf.constant(np.random.RandomState(0).rand(300000).astype(np.float32), name="table")
loss = tf.reduce_sum(tf.square(w0)) + tf.reduce_sum(tf.square(w1 - 2.0)) \
    + 0.0 * tf.reduce_sum(table)
g0 = tf.gradients(loss, [w0])[0]
train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
ema = tf1.train.ExponentialMovingAverage(0.9)
flag = tf1.placeholder_with_default(True, [])
with tf.control_dependencies([train]):
    if case == "moment":
        with tf1.variable_scope("w0"):
            mom = tf1.get_variable(ema.name, initializer=tf.zeros([3, 2]), trainable=False)
        u = tf.cond(flag, lambda: moving_averages.assign_moving_average(
            mom, g0, 0.9, zero_debias=False), lambda: tf.identity(mom))
        upd = tf.group(ema.apply([w1]), u)
    else:  # ema.apply() itself in the cond's branch
        upd = tf.cond(flag, lambda: tf.group(ema.apply([w0, w1])), lambda: tf.no_op())
s = tf1.Session()
s.run(tf1.variables_initializer([w0, w1]))  # a shadow's initializer reads them
s.run(tf1.global_variables_initializer())
for _ in range(3):
    s.run(upd)
assert any(n.op == "StatelessIf" or n.op == "If" for n in s.graph.as_graph_def().node)
for v in (w0, w1):
    truth[f"raw:{v.op.name}"] = s.run(v)
    if ema.average(v) is not None:
        truth[f"ema:{v.op.name}"] = s.run(ema.average(v))
for d, as_text in (("sm", False), ("smtxt", True)):
    b = tf1.saved_model.Builder(f"{out}/{d}")
    b.add_meta_graph_and_variables(s, ["train"])
    b.save(as_text=as_text)
saver = tf1.train.Saver()
saver.save(s, f"{out}/txt/model.ckpt", write_meta_graph=False)
saver.export_meta_graph(f"{out}/txt/model.ckpt.meta", as_text=True)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_sm_branches")
    return out, {c: run_tf1_script(SCRIPT, out / c, c) for c in ("moment", "apply")}


FORMS = {"sm": "sm", "smtxt": "smtxt", "txt": "txt/model.ckpt"}


@pytest.mark.parametrize("form", FORMS)
def test_a_moment_kept_in_a_savedmodels_cond_is_no_average(made, tmp_path, form):
    out, truths = made
    dest, run = tmp_path / "w.npz", out / "moment" / FORMS[form]
    assert "ema:w0" not in truths["moment"]  # TF: ema.average(w0) is None
    code, _, err = run_cli(["export", str(run), "--strict", "--out", str(dest)])
    assert code == 6 and not dest.exists(), err
    assert "w0/ExponentialMovingAverage is no average of w0" in err, err
    code, _, err = run_cli(["export", str(run), "--allow-missing", "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as z:
        assert z["w0"].tobytes() == truths["moment"]["raw:w0"].tobytes()
        assert z["w1"].tobytes() == truths["moment"]["ema:w1"].tobytes()


@pytest.mark.parametrize("form", FORMS)
def test_apply_in_a_savedmodels_cond_is_proven(made, tmp_path, form):
    out, truths = made
    dest = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / "apply" / FORMS[form]), "--strict", "--out",
                            str(dest)])
    assert code == 0, err
    with np.load(dest) as z:
        for v in ("w0", "w1"):
            assert z[v].tobytes() == truths["apply"][f"ema:{v}"].tobytes(), v
