"""Write small checkpoints with real TensorFlow for the verify/show/diff and hostile-input tests.

Run as a script (TensorFlow is imported only here, in a subprocess, never by the test process)::

    python tests/_make_corpus.py OUT_DIR

Layout written under OUT_DIR:

- ``v2/``: graph-mode ``Saver`` (V2) with EMA shadows, a partitioned variable, a string
  variable, int/bool/float16/bfloat16 variables, a ``.meta`` graph and a ``checkpoint`` state
  file; two steps (``model.ckpt-1``, ``model.ckpt-2``) with different values.
- ``sharded/``: ``Saver(sharded=True)`` over two CPU devices (two data shards).
- ``v1/``: the same kind of graph saved as a V1 checkpoint (``write_version=V1``).
- ``strings/``: eager ``tf.raw_ops.SaveV2`` of a string tensor and a NaN/Inf float tensor.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

v1 = tf.compat.v1


def _graph_case(out: str, *, version, sharded: bool = False) -> None:
    os.makedirs(out, exist_ok=True)
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(1)
        with tf.device("/cpu:0"):
            w = v1.get_variable("W", initializer=np.arange(12, dtype=np.float32).reshape(3, 4))
            b = v1.get_variable("b", initializer=np.array([0.5, -1.0, 2.0], np.float32))
            emb = v1.get_variable("emb", shape=[6, 2], dtype=tf.float32,
                                  initializer=v1.constant_initializer(1.5),
                                  partitioner=v1.fixed_size_partitioner(3))
        with tf.device("/cpu:1" if sharded else "/cpu:0"):
            steps = v1.get_variable("counts", initializer=np.array([1, 2, 3], np.int32),
                                    trainable=False)
            flag = v1.get_variable("flag", initializer=np.array([True, False]), trainable=False)
            half = v1.get_variable("half", initializer=np.array([1.0, 2.5], np.float16))
            words = v1.get_variable("words", initializer=tf.constant([b"hello", b"", b"ckpt"]),
                                    trainable=False)
        gstep = v1.train.get_or_create_global_step()
        ema = v1.train.ExponentialMovingAverage(0.5)
        ema_op = ema.apply([w, b])
        add = [w.assign_add(tf.ones_like(w)), b.assign_sub(tf.ones_like(b)),
               gstep.assign_add(1)]
        kwargs = {"write_version": version, "save_relative_paths": True}
        if sharded:
            kwargs["sharded"] = True
        saver = v1.train.Saver(**kwargs)
        config = v1.ConfigProto(device_count={"CPU": 2})
        with v1.Session(graph=graph, config=config) as sess:
            sess.run(v1.global_variables_initializer())
            for step in (1, 2):
                sess.run(add)
                sess.run(ema_op)
                saver.save(sess, os.path.join(out, "model.ckpt"), global_step=step,
                           write_meta_graph=not sharded or step == 2)
    del half, flag, steps, emb, words


def _eager_case(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    names = ["bad", "text", "zeros"]
    tensors = [tf.constant([1.0, np.nan, np.inf, -2.0], tf.float32),
               tf.constant([b"a", b"bb", b"\xff\x00z"]),
               tf.zeros([0, 3], tf.float32)]
    tf.raw_ops.SaveV2(prefix=os.path.join(out, "model"), tensor_names=names,
                      shape_and_slices=[""] * len(names), tensors=tensors)


def main(out: str) -> None:
    """Writes every case under ``out``."""
    _graph_case(os.path.join(out, "v2"), version=v1.train.SaverDef.V2)
    _graph_case(os.path.join(out, "sharded"), version=v1.train.SaverDef.V2, sharded=True)
    _graph_case(os.path.join(out, "v1"), version=v1.train.SaverDef.V1)
    _eager_case(os.path.join(out, "strings"))


if __name__ == "__main__":
    main(sys.argv[1])
