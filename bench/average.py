"""Benchmark ``ckpt average`` against the tensor2tensor-style TensorFlow script, side by side.

The TensorFlow baseline is what ``avg_checkpoints.py`` does: ``tf.train.load_checkpoint`` each
input, sum every float tensor into NumPy, divide, build one ``tf.Variable`` per tensor in a
graph and ``Saver.save``. Both run as fresh child processes (wall time and each one's own peak
RSS, via ``launch.py``) on the same generated checkpoints, and their outputs are compared.

Example::

    python bench/average.py --size 256M --count 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from make_ckpt import parse_size, write_checkpoint  # noqa: E402
from measure import child_env, machine_info, run_child  # noqa: E402

_T2T = r'''
import sys, numpy as np, tensorflow as tf
out, inputs = sys.argv[1], sys.argv[2:]
readers = [tf.train.load_checkpoint(p) for p in inputs]
shapes = readers[0].get_variable_to_shape_map()
dtypes = readers[0].get_variable_to_dtype_map()
values = {}
for name in shapes:
    if dtypes[name].is_floating and name != "global_step":
        acc = np.zeros(shapes[name], np.float64)
        for r in readers:
            acc += r.get_tensor(name)
        values[name] = (acc / len(readers)).astype(dtypes[name].as_numpy_dtype)
    else:
        values[name] = readers[-1].get_tensor(name)
v1 = tf.compat.v1
with tf.Graph().as_default():
    tf_vars = [v1.get_variable(n, shape=v.shape, dtype=v.dtype) for n, v in values.items()]
    phs = [v1.placeholder(v.dtype.base_dtype, v.shape) for v in tf_vars]
    assigns = [v.assign(p) for v, p in zip(tf_vars, phs)]
    saver = v1.train.Saver(v1.global_variables())
    with v1.Session() as sess:
        sess.run(v1.global_variables_initializer())
        sess.run(assigns, dict(zip(phs, values.values())))  # one run, as avg_checkpoints.py
        saver.save(sess, out)
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="256M", help="bytes per checkpoint (e.g. 64M, 1G)")
    parser.add_argument("--count", type=int, default=5, help="checkpoints to average")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    env = child_env()
    with tempfile.TemporaryDirectory(dir=args.workdir) as work:
        # Steps 1000, 2000, ...: the last input is the newest, for both tools.
        inputs = [write_checkpoint(os.path.join(work, f"in{i}"), parse_size(args.size), seed=i,
                                   step=1000 * (i + 1)) for i in range(args.count)]
        script = os.path.join(work, "t2t_avg.py")
        with open(script, "w") as f:
            f.write(_T2T)
        ours = run_child([sys.executable, "-m", "ckpt_tools", "average", *inputs,
                          "--out", os.path.join(work, "ours"), "--quiet"], env)
        theirs = run_child([sys.executable, script, os.path.join(work, "tf", "avg"), *inputs],
                           env)
        same = _same(os.path.join(work, "ours"), os.path.join(work, "tf", "avg"))
        report = {
            "machine": machine_info(work), "load_average": os.getloadavg(),
            "python": platform.python_version(), "size_per_checkpoint": args.size,
            "checkpoints": args.count,
            "ckpt_average": {"seconds": round(ours.wall_s, 2), "peak_rss_mb": round(
                ours.maxrss_mb)},
            "tensorflow_t2t_style": {"seconds": round(theirs.wall_s, 2),
                                     "peak_rss_mb": round(theirs.maxrss_mb)},
            "speedup": round(theirs.wall_s / ours.wall_s, 1),
            "outputs_equal": same,
        }
    print(json.dumps(report, indent=2))


def _same(ours: str, theirs: str) -> bool:
    from ckpt_tools import open_checkpoint

    with open_checkpoint(ours) as a, open_checkpoint(theirs) as b:
        return set(a.keys()) == set(b.keys()) and all(
            np.array_equal(a.tensor(k), b.tensor(k)) for k in a.keys())


if __name__ == "__main__":
    main()
