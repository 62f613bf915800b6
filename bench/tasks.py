"""Child-process tasks of the benchmark: ``python bench/tasks.py TASK ARGS...``.

Every measurement runs in a fresh process so that peak RSS and import costs of one tool never
leak into another. Read tasks (``read-* PASSES PATH...``) time only their read loop (imports
excluded), reopening the checkpoint for each pass, and print one JSON object on stdout
(``{"seconds": best pass, "pass_s": [...], "bytes": ..., "checksum": ...}``). TensorFlow is
imported only by the tasks that need it (``read-tf``, ``bake-tf``, ``make-meta``).
"""

from __future__ import annotations

import json
import mmap
import os
import sys
import time

import numpy as np

_CHUNK = 8 * 1024 * 1024
_CRC_PIECE = 1 << 20  # the chunk size Checkpoint.chunks uses in read-ours-stream
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


def _passes(read_once, passes: int) -> None:
    """Runs ``read_once() -> (bytes, checksum)`` ``passes`` times; prints each pass's time."""
    times, cpu = [], []
    for _ in range(passes):
        start, cpu_start = time.perf_counter(), time.process_time()
        total, acc = read_once()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)  # all threads: robust to a busy machine
    _emit(seconds=min(times), pass_s=times, cpu_s=cpu, bytes=total, checksum=acc)


def read_ours(prefix: str, verify: bool) -> tuple[int, int]:
    """Reads and touches every tensor with ``ckpt_tools.open_checkpoint(...).tensor``."""
    from ckpt_tools import open_checkpoint

    total = acc = 0
    with open_checkpoint(prefix, verify=verify, meta=False) as ckpt:
        for name in ckpt.keys():
            array = ckpt.tensor(name)
            acc ^= touch(array)
            total += array.nbytes
            del array
    return total, acc


def read_ours_stream(prefix: str) -> tuple[int, int]:
    """The one-pass verified read: ``Checkpoint.chunks`` (each chunk CRC-checked just before
    it is consumed, from cache), tensors on a thread per core, every byte touched."""
    from ckpt_tools import open_checkpoint
    from ckpt_tools.parallel import ordered_map

    with open_checkpoint(prefix, meta=False) as ckpt:
        def one(name: str) -> tuple[int, int]:
            total = acc = 0
            for part in ckpt.chunks(name):  # CHUNK_BYTES, as stats and diff read
                acc ^= touch(part)
                total += part.nbytes
            return total, acc

        total = acc = 0
        for n, a in ordered_map(one, ckpt.keys(),  # as stats/diff: small tensors batched
                                cost=lambda name: ckpt.entry(name).stored_bytes):
            total += n
            acc ^= a
    return total, acc


def stats_ours(prefix: str, histogram: bool = False) -> tuple[int, int]:
    """``checkpoint_stats`` over every tensor (CRC on, as ``ckpt stats`` runs it; with
    ``histogram`` as ``ckpt stats --histogram``)."""
    from ckpt_tools import open_checkpoint
    from ckpt_tools.stats import checkpoint_stats

    with open_checkpoint(prefix, meta=False) as ckpt:
        total = sum(e.stored_bytes for e in ckpt.entries().values())
        records = list(checkpoint_stats(ckpt, strict=True, histogram=histogram))
    return total, len(records)


def diff_ema_ours(prefix: str) -> tuple[int, int]:
    """``diff_ema``: every weight against its shadow (CRC on, as ``ckpt diff --ema``)."""
    from ckpt_tools import open_checkpoint
    from ckpt_tools.diff import diff_ema

    with open_checkpoint(prefix) as ckpt:
        report = diff_ema(ckpt)
        total = sum(ckpt.entry(t.name).stored_bytes + ckpt.entry(t.other).stored_bytes
                    for t in report.tensors)
    return total, len(report.tensors)


def read_tf(prefix: str) -> tuple[int, int]:
    """Reads and touches every tensor with ``tf.train.load_checkpoint(...).get_tensor``."""
    import tensorflow as tf

    total = acc = 0
    reader = tf.train.load_checkpoint(prefix)
    for name in sorted(reader.get_variable_to_shape_map()):
        array = reader.get_tensor(name)
        acc ^= touch(np.ascontiguousarray(array))
        total += array.nbytes
        del array
    return total, acc


def read_physical(mode: str, files: list[str]) -> tuple[int, int]:
    """The physical limit: sequential ``readinto`` (8 MiB buffer) or ``mmap`` of the files.

    ``mmap-crc`` is the one-core floor of a verified read: the mapped files CRC32C-checked in
    large pieces with the fastest installed backend, then touched, with no per-tensor work.
    """
    from ckpt_tools.formats.crc import crc32c  # imported before the clock starts

    total = acc = 0
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    for path in files:
        with open(path, "rb", buffering=0) as f:
            if mode == "read":
                while n := f.readinto(buf):
                    acc ^= touch(view[:n])
                    total += n
            elif mode in ("mmap", "mmap-crc"):
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                arr = np.frombuffer(mm, dtype=np.uint8)
                if mode == "mmap-crc":  # each piece CRC'd (faulting it in), then touched
                    for start in range(0, len(arr), _CRC_PIECE):
                        piece = arr[start : start + _CRC_PIECE]
                        crc32c(piece)
                        acc ^= touch(piece)  # the XOR fold is linear: same checksum
                    del piece
                else:
                    acc ^= touch(arr)
                total += len(arr)
                del arr
                mm.close()
            else:
                raise ValueError(f"unknown mode {mode!r}: expected 'read', 'mmap' or 'mmap-crc'")
    return total, acc


def read_views(prefix: str) -> tuple[int, int]:
    """Per-tensor physical limit: a raw ``mmap`` view of each tensor, in index order.

    The same access pattern as a tensor-by-tensor reader (many small tensors, keys alternating
    between shards), without parsing, checks or CRC; the index is parsed before the clock.
    """
    total = acc = 0
    maps = []
    for path in _VIEW_PLAN["files"]:
        with open(path, "rb") as f:
            maps.append(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    for shard, offset, size in _VIEW_PLAN["entries"]:
        view = np.frombuffer(maps[shard], dtype=np.uint8, count=size, offset=offset)
        acc ^= touch(view)
        total += size
        del view
    for mm in maps:
        mm.close()
    return total, acc


_VIEW_PLAN: dict = {}


def _plan_views(prefix: str) -> None:
    from ckpt_tools.formats.bundle import BundleReader

    reader = BundleReader(prefix, verify=False)
    _VIEW_PLAN["files"] = reader.data_files()
    _VIEW_PLAN["entries"] = [(e.shard_id, e.offset, e.stored_bytes)
                             for e in reader.entries.values()]
    reader.close()


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
    if task.startswith("read-"):
        passes, args = int(args[0]), args[1:]
        if task == "read-tf":
            import tensorflow  # noqa: F401 - imported before the clock starts
        if task == "read-phys-views":
            _plan_views(args[0])
        readers = {
            "read-ours": lambda: read_ours(args[0], verify=True),
            "read-ours-noverify": lambda: read_ours(args[0], verify=False),
            "read-ours-stream": lambda: read_ours_stream(args[0]),
            "read-tf": lambda: read_tf(args[0]),
            "read-phys-read": lambda: read_physical("read", args),
            "read-phys-mmap": lambda: read_physical("mmap", args),
            "read-phys-mmap-crc": lambda: read_physical("mmap-crc", args),
            "read-phys-views": lambda: read_views(args[0]),
            "read-stats": lambda: stats_ours(args[0]),
            "read-stats-hist": lambda: stats_ours(args[0], histogram=True),
            "read-diff-ema": lambda: diff_ema_ours(args[0]),
        }
        if task not in readers:
            raise SystemExit(f"unknown task {task!r}")
        _passes(readers[task], passes)
    elif task == "bake-tf":
        bake_tf(args[0], args[1])
    elif task == "make-meta":
        make_meta(args[0], args[1])
    else:
        raise SystemExit(f"unknown task {task!r}")


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    main(sys.argv[1:])
