"""The tensors :mod:`~ckpt_tools.bake` (and ``restore-ema``'s stream,
:mod:`~ckpt_tools.emaout`) writes: each key of the input with its shadow's value, stored
bytes copied as they are, the keys named as averages that hold raw values left out, and the
bytes that counts to its progress.
"""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint
from .emamap import rescope
from .formats import dtypes
from .formats.bundle import data_path
from .formats.bundle_writer import BundleWriter
from .raw_shadows import raw_named_keys


def raw_left_out(ckpt: Checkpoint, source_of: dict[str, str],
                 kept=()) -> dict[str, str]:
    """Returns the keys a bake leaves out (key -> the variable whose raw value it holds):
    those named as averages that the save op proves hold their variables' RAW values
    (:func:`~ckpt_tools.raw_shadows.raw_named_keys`), e.g. a training
    ``Saver(ema.variables_to_restore())``'s keys beside a second EMA object's averages
    restored with ``--ema-name``. Copied beside the restored variables, without the ``.meta``
    whose save op proves what they hold, they would be read as averages
    (review-20-attack-r50 F8). ``kept``: the keys of the variables the name filters left out
    of the map (:attr:`~ckpt_tools.ema_result.EmaMap.filtered_averages`), copied as they are:
    a Saver restoring ``model/W`` from ``model/W/fast`` keeps it there, with the ``.meta``
    that says so (``--exclude model/W``: review-32-attack-r117 F5)."""
    used = {k for t, s in source_of.items() if s != t for k in (t, s)}  # t: s = t copies
    used |= set(kept)
    return {k: t for k, t in raw_named_keys(ckpt).items() if k not in used}


def write_baked(ckpt: Checkpoint, writer: BundleWriter, source_of: dict[str, str],
                verify: bool, drop_slots: bool, progress, strip=None, add=None, *,
                leave_out=()):
    """Adds every tensor of the baked checkpoint to ``writer``, in the input's key order:
    the value of ``source_of[key]`` (its shadow) under each key, stored bytes copied as they
    are; the keys of ``leave_out`` (:func:`raw_left_out`) are not written. Returns
    ``(replaced, copied, dropped, nbytes)`` (see :class:`~ckpt_tools.bake.BakeResult`).

    Raises:
        CorruptCheckpointError: a checksum mismatch (``verify``), a slice out of range.
    """
    writes, dropped = _baked_writes(ckpt, source_of, drop_slots, leave_out)
    replaced = {}
    copied = nbytes = 0
    renamed = bool(strip or add)
    for key, src in writes:
        out_key = rescope(key, strip, add) if renamed else key
        fragments = ckpt.entry(key).extra.get("fragments") if src == key else None
        if fragments:  # stored again as TensorFlow saved it: one key per part
            out_key = tuple(rescope(m, strip, add) if renamed else m for m in fragments)
        nbytes += _copy_tensor(ckpt, writer, src, out_key, verify, progress)
        if src != key:
            replaced[out_key] = src
        else:
            copied += 1
    return replaced, copied, dropped, nbytes


def _baked_writes(ckpt: Checkpoint, source_of: dict[str, str], drop_slots: bool,
                  leave_out) -> tuple[list[tuple[str, str]], list[str]]:
    """What :func:`write_baked` writes, in order: ``(key, key whose value it gets)`` for each
    tensor of the input not left out, then each variable not stored whose average is (a
    Saver of the averages alone, proven by its ``.meta``: written under the variable's name,
    as a Saver of the model reads it).

    Returns:
        `tuple`: the writes and the keys left out (``leave_out``, dropped slots).
    """
    variables = {v.name: v for v in ckpt.variables_unwarned()}
    writes, dropped = [], []
    for key in ckpt.entries():
        if key in leave_out or (drop_slots and variables[key].role == R.OPTIMIZER_SLOT):
            dropped.append(key)
        else:
            writes.append((key, source_of.get(key, key)))
    writes += [(key, src) for key, src in source_of.items()
               if src != key and key not in variables and src in variables]
    return writes, dropped


def baked_bytes(ckpt: Checkpoint, source_of: dict[str, str], drop_slots: bool,
                leave_out=()) -> int:
    """The bytes :func:`write_baked` copies, and so counts to its ``progress``: the stored
    bytes of each tensor written (every part of a partitioned one), the slots it drops and
    the keys it leaves out not counted (s29g: the input's stored bytes stopped the bar short
    with ``--slots drop``, and past its end on partitioned variables, whose whole-tensor
    entry stores nothing).

    Returns:
        `int`: the bytes, as :func:`write_baked`'s ``nbytes``.
    """
    writes, _ = _baked_writes(ckpt, source_of, drop_slots, leave_out)
    reader = ckpt.reader
    total = 0
    for _, src in writes:
        entry = ckpt.entry(src)
        if reader.format != "v2":  # written from the array read: its nbytes
            total += entry.nbytes
        elif entry.slices:
            total += sum(sub.stored_bytes for _, sub in reader.slice_entries(src))
        else:
            total += entry.stored_bytes
    return total


def _copy_tensor(ckpt: Checkpoint, writer: BundleWriter, src: str, out_key: str | tuple,
                 verify: bool, progress) -> int:
    """Copies ``src`` to ``out_key``; a tuple ``out_key`` names each slice's own key (the
    parts of a tensor TF1 saved under one key per part, written back that way)."""
    entry = ckpt.entry(src)
    reader = ckpt.reader
    if reader.format == "v2":  # stored bytes can be copied as they are
        parts = [(entry, None, out_key)]
        if entry.slices and isinstance(out_key, tuple):
            parts = [(sub, s, key) for (s, sub), key in zip(reader.slice_entries(src), out_key,
                                                            strict=True)]
        elif entry.slices:
            parts = [(sub, s, out_key) for s, sub in reader.slice_entries(src)]
        if (entry.dtype == dtypes.STRING and verify) or any(not sub.crc32c
                                                            for sub, _, _ in parts):
            # A string entry's CRC covers its decoded lengths, not its stored bytes: let the
            # reader check it, then copy the bytes as they are. An entry without a CRC32C is
            # refused as TensorFlow refuses it, --no-verify or not (formats.bundle.NO_CRC): a
            # copy must never give it a CRC it never had.
            ckpt.tensor(src)
            verify = verify and entry.dtype != dtypes.STRING
        if entry.slices and isinstance(out_key, tuple):
            for _, s, key in parts:
                writer.add_partitioned(key, entry.dtype, entry.shape, [s], complete=False)
        elif entry.slices:
            writer.add_partitioned(out_key, entry.dtype, entry.shape, list(entry.slices))
        total = 0
        for sub, tslice, key in parts:
            path = data_path(reader.prefix, sub.shard_id, reader.num_shards)
            writer.add_stream(key, sub.dtype, sub.shape, path, sub.offset, sub.stored_bytes,
                              sub.crc32c, slice_of=tslice, verify=verify, progress=progress,
                              source=src)
            total += sub.stored_bytes
        return total
    array = ckpt.tensor(src)
    writer.add_array(out_key, array)
    if progress:
        progress(array.nbytes)
    return array.nbytes
