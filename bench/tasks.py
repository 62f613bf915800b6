"""Child-process tasks of the benchmark: ``python bench/tasks.py TASK ARGS...``.

Every measurement runs in a fresh process so that peak RSS and import costs of one tool never
leak into another. Read tasks time only their read loop (imports excluded) and print one JSON
object on stdout (``{"seconds": ..., "bytes": ...}``). TensorFlow is imported only by the tasks
that need it (``read-tf``, ``bake-tf``, ``make-meta``).
"""

from __future__ import annotations

import json
import mmap
import os
import sys
import time

import numpy as np

_CHUNK = 8 * 1024 * 1024
_EMA = "ExponentialMovingAverage"


def touch(buf) -> int:
    """Reads every byte of ``buf`` (an array or buffer); returns the XOR of all its bytes.

    Words are XOR-reduced at memory speed, then folded to one byte, so the result does not
    depend on alignment: tensor-by-tensor and whole-file readers must agree on it.
    """
    u8 = buf.reshape(-1).view(np.uint8) if isinstance(buf, np.ndarray) else np.frombuffer(
        buf, dtype=np.uint8)
    acc = 0
    for word in (np.uint64, np.uint32):
        size = np.dtype(word).itemsize
        if u8.ctypes.data % size == 0 and len(u8) >= size:
            head = len(u8) // size * size
            acc = int(np.bitwise_xor.reduce(u8[:head].view(word)))
            u8 = u8[head:]
            break
    if len(u8):
        acc ^= int(np.bitwise_xor.reduce(u8))
    folded = 0
    while acc:
        folded ^= acc & 0xFF
        acc >>= 8
    return folded


def _emit(**fields) -> None:
    print(json.dumps(fields))


def read_ours(prefix: str, verify: bool) -> None:
    """Reads and touches every tensor with ``ckpt_tools.open_checkpoint(...).tensor``."""
    from ckpt_tools import open_checkpoint

    start = time.perf_counter()
    total = acc = 0
    with open_checkpoint(prefix, verify=verify, meta=False) as ckpt:
        for name in ckpt.keys():
            array = ckpt.tensor(name)
            acc ^= touch(array)
            total += array.nbytes
            del array
    _emit(seconds=time.perf_counter() - start, bytes=total, checksum=acc)


def read_tf(prefix: str) -> None:
    """Reads and touches every tensor with ``tf.train.load_checkpoint(...).get_tensor``."""
    import tensorflow as tf

    start = time.perf_counter()
    total = acc = 0
    reader = tf.train.load_checkpoint(prefix)
    for name in sorted(reader.get_variable_to_shape_map()):
        array = reader.get_tensor(name)
        acc ^= touch(np.ascontiguousarray(array))
        total += array.nbytes
        del array
    _emit(seconds=time.perf_counter() - start, bytes=total, checksum=acc)


def read_physical(mode: str, files: list[str]) -> None:
    """The physical limit: sequential ``readinto`` (8 MiB buffer) or ``mmap`` of the files."""
    start = time.perf_counter()
    total = acc = 0
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    for path in files:
        with open(path, "rb", buffering=0) as f:
            if mode == "read":
                while n := f.readinto(buf):
                    acc ^= touch(view[:n])
                    total += n
            elif mode == "mmap":
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                arr = np.frombuffer(mm, dtype=np.uint8)
                acc ^= touch(arr)
                total += len(arr)
                del arr
                mm.close()
            else:
                raise ValueError(f"unknown mode {mode!r}: expected 'read' or 'mmap'")
    _emit(seconds=time.perf_counter() - start, bytes=total, checksum=acc)


def bake_tf(prefix: str, out_prefix: str) -> None:
    """The TensorFlow way to bake EMA weights into a checkpoint (the parent times the process).

    ``import_meta_graph``; restore with a ``Saver`` whose ``var_list`` is
    ``ema.variables_to_restore()``'s map written in checkpoint keys (weights from their
    shadows, every other global as stored); copy each weight into its shadow variable in memory
    so the shadows keep their values, as ``ckpt restore-ema`` keeps them; a plain
    ``Saver().save``. Each tensor is read once and written once.

    ``ema.variables_to_restore()`` itself cannot be used here: once ``import_meta_graph`` has
    put the shadow variables in the graph, ``average_name`` uniquifies against them and asks
    for ``<var>/ExponentialMovingAverage_1``, which the checkpoint does not have.
    """
    t0 = time.perf_counter()
    import tensorflow as tf

    v1 = tf.compat.v1
    phases = {"import_tf": time.perf_counter() - t0}
    t = time.perf_counter()
    with tf.Graph().as_default():
        v1.train.import_meta_graph(prefix + ".meta", clear_devices=True)
        by_name = {v.op.name: v for v in v1.global_variables()}
        averaged = {v.op.name: v for v in
                    v1.moving_average_variables() + v1.trainable_variables()}
        var_list = {f"{name}/{_EMA}": v for name, v in averaged.items()}
        var_list.update({name: v for name, v in by_name.items()
                         if name not in averaged and name not in var_list})
        restorer = v1.train.Saver(var_list=var_list)
        copy = tf.group(*[by_name[f"{name}/{_EMA}"].assign(v) for name, v in averaged.items()])
        saver = v1.train.Saver()
        phases["build_graph"] = time.perf_counter() - t
        with v1.Session() as sess:
            t = time.perf_counter()
            restorer.restore(sess, prefix)
            phases["restore"] = time.perf_counter() - t
            t = time.perf_counter()
            sess.run(copy)
            phases["copy_shadows"] = time.perf_counter() - t
            t = time.perf_counter()
            saver.save(sess, out_prefix)
            phases["save"] = time.perf_counter() - t
    _emit(seconds=time.perf_counter() - t0, phases=phases)


def make_meta(layout_path: str, meta_path: str) -> None:
    """Writes a ``.meta`` graph of the generated checkpoint's variables (zeros initializers).

    Weights are trainable and in ``moving_average_variables`` (what ``ema.apply`` records);
    their ``<var>/ExponentialMovingAverage`` shadows and ``<var>/Momentum`` slots are
    non-trainable globals. The EMA and optimizer update ops are left out: they take seconds to
    build and only make ``import_meta_graph`` slower, which would flatter ckpt_tools.
    """
    import tensorflow as tf

    v1 = tf.compat.v1
    with open(layout_path, encoding="utf-8") as f:
        layout = json.load(f)
    zeros = v1.zeros_initializer()
    with tf.Graph().as_default():
        v1.train.get_or_create_global_step()
        for w in layout:
            var = v1.get_variable(w["name"], shape=w["shape"], dtype=tf.float32,
                                  initializer=zeros)
            v1.add_to_collection(v1.GraphKeys.MOVING_AVERAGE_VARIABLES, var)
            for suffix in ("ExponentialMovingAverage", "Momentum"):
                v1.get_variable(f"{w['name']}/{suffix}", shape=w["shape"], dtype=tf.float32,
                                initializer=zeros, trainable=False)
        v1.train.Saver().export_meta_graph(meta_path)
        count = len(v1.global_variables())
    _emit(meta=meta_path, variables=count)


def main(argv: list[str]) -> None:
    task, args = argv[0], argv[1:]
    if task == "read-ours":
        read_ours(args[0], verify=True)
    elif task == "read-ours-noverify":
        read_ours(args[0], verify=False)
    elif task == "read-tf":
        read_tf(args[0])
    elif task in ("read-phys-read", "read-phys-mmap"):
        read_physical(task.rsplit("-", 1)[1], args)
    elif task == "bake-tf":
        bake_tf(args[0], args[1])
    elif task == "make-meta":
        make_meta(args[0], args[1])
    else:
        raise SystemExit(f"unknown task {task!r}")


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    main(sys.argv[1:])
