"""Two TF1 runs saving the graph at the first save only (``write_meta_graph=(i == 1)``), for
the tests of sibling ``.meta`` doubt over URLs and of ``average --force`` (run with
:func:`helpers_tf1.run_tf1_script`): ``swap`` (a swapping Saver: each variable's name holds
its average) and ``plain`` (a default ``Saver()``); ``truth["<run>:<step>:avg|raw:<name>"]``
from ``sess.run`` at each save. :data:`V1_SCRIPT` writes ``v1swap``: the swapping run saved by
a V1 sharded Saver (``model.ckpt-N-00000-of-00001`` beside ``model.ckpt-1.meta``);
:data:`NOMETA_SCRIPT` ``plainnm``: the plain run saved with ``write_meta_graph=False`` at every
save (no ``.meta`` at all); ``run(..., every=True)`` writes the graph at every save."""

RUN = r'''
def run(name, swap, v1=False, graph=True, every=False):
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
        keys = None
        if swap:  # a swapping Saver: each variable's name holds its average
            keys = {x.op.name: ema.average(x) for x in tv}
            keys.update({ema.average_name(x): x for x in tv})
            keys["global_step"] = gs
        opts = {}
        if v1:
            import os

            from tensorflow.core.protobuf import saver_pb2

            os.makedirs(f"{out}/{name}", exist_ok=True)  # (a V1 Saver does not create it)
            opts = {"sharded": True, "write_version": saver_pb2.SaverDef.V1}
        saver = tf1.train.Saver(keys, max_to_keep=None, **opts)
        with trained(tf, step, 0) as s:
            for i in (1, 2, 3):
                s.run(step)
                saver.save(s, f"{out}/{name}/model.ckpt", global_step=i,
                           write_meta_graph=graph and (every or i == 1))
                for x in tv:
                    truth[f"{name}:{i}:avg:{x.op.name}"] = s.run(ema.average(x))
                    truth[f"{name}:{i}:raw:{x.op.name}"] = s.run(x)
'''

SCRIPT = RUN + '''
run("swap", True)
run("plain", False)
'''

V1_SCRIPT = RUN + '''
run("v1swap", True, True)
'''

NOMETA_SCRIPT = RUN + '''
run("plainnm", False, graph=False)
'''
