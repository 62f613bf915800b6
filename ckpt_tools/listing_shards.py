"""The data files of a V2 checkpoint and what each stores, as ``ckpt list`` names them: where
``Saver(sharded=True)`` put each device's variables (moved out of :mod:`ckpt_tools.listing`).
"""

from __future__ import annotations

import os

from .checkpoint import Checkpoint
from .formats.bundle import data_path


def data_shards(ckpt: Checkpoint) -> list[dict]:
    """The data files of a V2 checkpoint and what each stores (empty for other formats).

    Returns:
        One ``{"file", "tensors", "bytes"}`` per shard, in shard order; a partitioned
        variable counts once per stored slice, in the shard that holds the slice.
    """
    reader = ckpt.reader
    num = getattr(reader, "num_shards", None)
    if reader.format != "v2" or not num:
        return []
    shards = [{"file": os.path.basename(data_path(reader.prefix, i, num)), "tensors": 0,
               "bytes": 0} for i in range(num)]
    for name, entry in reader.entries.items():
        parts = [sub for _, sub in reader.slice_entries(name)] if entry.slices else [entry]
        for sub in parts:
            if 0 <= sub.shard_id < num:
                shards[sub.shard_id]["tensors"] += 1
                shards[sub.shard_id]["bytes"] += sub.stored_bytes
    return shards
