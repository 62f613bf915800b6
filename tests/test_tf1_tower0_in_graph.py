"""tf_cnn_benchmarks' tower-0 Saver (``v0/`` stripped from the keys) in the graph imported from
its ``.meta`` (review-13-attack-r22 F5): ``restore_ema``/``ema_saver`` refuse (the graph
restores by key, and no graph variable is named like the keys), and the advice said
``use_meta=False`` alone, which fails on the other tower's variables. The refusal now gives
the one call that works, and that call restores the averages bit for bit. Made here by
TensorFlow (a subprocess); the truth is ``sess.run(ema.average(v))`` at save time."""

from __future__ import annotations

from helpers_tf1 import run_tf1_script

SCRIPT = r'''
import ckpt_tools

with tf.Graph().as_default():
    gs = tf1.train.get_or_create_global_step()
    _, loss = cnn_towers(tf)
    step = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=gs)
    ema = tf1.train.ExponentialMovingAverage(0.6, num_updates=gs)
    v0 = [v for v in tf1.trainable_variables() if v.op.name.startswith("v0/")]
    with tf.control_dependencies([step]):
        train_op = ema.apply(v0)
    keys = {}
    for v in tf1.global_variables():
        n = v.op.name
        if n.startswith("v0/"):
            keys[n[3:]] = v
        elif not n.startswith("v1/"):
            keys[n] = v
    with trained(tf, train_op, 4) as s:
        prefix = tf1.train.Saver(keys).save(s, f"{out}/run/model.ckpt", global_step=gs)
        for v in v0:
            truth["ema:" + v.op.name] = s.run(ema.average(v).read_value())
            truth["raw:" + v.op.name] = s.run(v.read_value())
for how in ("restore_ema", "ema_saver"):
    with tf.Graph().as_default(), tf1.Session() as s:
        tf1.train.import_meta_graph(prefix + ".meta")
        s.run(tf1.global_variables_initializer())
        try:
            if how == "restore_ema":
                ckpt_tools.restore_ema(s, f"{out}/run")
            else:
                ckpt_tools.ema_saver(checkpoint=f"{out}/run").restore(s, prefix)
            raise SystemExit(how + " paired a layout the graph's keys do not name")
        except ckpt_tools.UnprovenPairingError as e:
            truth["said:" + how] = np.array(str(e))
with tf.Graph().as_default(), tf1.Session() as s:  # the call the refusal gives
    tf1.train.import_meta_graph(prefix + ".meta")
    s.run(tf1.global_variables_initializer())
    ckpt_tools.restore_ema(s, f"{out}/run", use_meta=False, add_scope="v0/", var_list=[
        v for v in tf1.global_variables() if v.op.name.startswith("v0/")])
    model = {v.op.name: v for v in tf1.global_variables()}
    for n in ("v0/cg/conv0/kernel", "v0/cg/conv0/bias"):
        truth["got:" + n] = s.run(model[n].read_value())
'''


def test_refusal_gives_the_call_that_restores_the_averages(tmp_path):
    truth = run_tf1_script(SCRIPT, tmp_path)
    call = ("restore_ema(sess, path, use_meta=False, add_scope='v0/', var_list=[v for v in "
            "tf.compat.v1.global_variables() if v.op.name.startswith('v0/')])")
    for how in ("restore_ema", "ema_saver"):
        said = str(truth["said:" + how])
        assert call in said, said
    for n in ("v0/cg/conv0/kernel", "v0/cg/conv0/bias"):
        assert truth["got:" + n].tobytes() == truth["ema:" + n].tobytes(), n
        assert truth["ema:" + n].tobytes() != truth["raw:" + n].tobytes(), n
