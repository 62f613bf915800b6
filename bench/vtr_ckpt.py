"""Write a TF1 "vtr" checkpoint of many small variables with TensorFlow (a child process).

The graph: ``variables`` small trainable variables (``layer_NNNN/w``, shape ``[2]``), a
``global_step``, plain SGD, ``tf.train.ExponentialMovingAverage(0.99).apply`` over every
weight (shadows ``<var>/ExponentialMovingAverage``), a training ``Saver()`` and a
``Saver(ema.variables_to_restore())`` beside it. ``--writer`` picks which of the two writes
the checkpoint (and the ``.meta`` beside it, whose ``saver_def`` is the writer's): ``vtr``
(the default: the evaluation mapping used by mistake during training, raw weights under the
shadows' keys) or ``train`` (every weight and its shadow). One training step runs first so
the weights and shadows differ. Imports TensorFlow: run it as a child (``bench/run.py`` does).

Example::

    python bench/vtr_ckpt.py /tmp/vtr-2000 --variables 2000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def write_vtr(directory: str, variables: int, writer: str = "vtr") -> str:
    """Builds the graph, runs one step, saves with the ``writer`` Saver; returns the prefix."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf

    v1 = tf.compat.v1
    v1.disable_eager_execution()
    os.makedirs(directory, exist_ok=True)
    with tf.Graph().as_default():
        gs = v1.train.get_or_create_global_step()
        weights = [v1.get_variable(f"layer_{i:04d}/w", [2],
                                   initializer=v1.constant_initializer(float(i)))
                   for i in range(variables)]
        x = tf.constant(np.ones(2, "float32"))
        loss = tf.add_n([tf.reduce_sum(w * x) for w in weights])
        train = v1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
        ema = v1.train.ExponentialMovingAverage(0.99)
        with tf.control_dependencies([train]):
            step = ema.apply(weights)
        train_saver = v1.train.Saver(max_to_keep=None)
        vtr_saver = v1.train.Saver(ema.variables_to_restore(), max_to_keep=None)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            sess.run(step)
            saver = vtr_saver if writer == "vtr" else train_saver
            return saver.save(sess, os.path.join(directory, "model.ckpt"), global_step=gs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--variables", type=int, default=2000)
    parser.add_argument("--writer", choices=["vtr", "train"], default="vtr")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    prefix = write_vtr(args.directory, args.variables, args.writer)
    print(json.dumps({"prefix": prefix, "seconds": time.perf_counter() - start}))


if __name__ == "__main__":
    main(sys.argv[1:])
