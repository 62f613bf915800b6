"""The tensors of an average, streamed: each input's tensor added into a float64 (complex128)
accumulator piece by piece (:func:`accumulate`), the newest input's copied
(:func:`read_released`), both releasing their mapped pages as they go, and each written in
the newest input's partitioning (:func:`add_tensor`). :mod:`~ckpt_tools.average_write` decides
which key is which."""

from __future__ import annotations

from .checkpoint import Checkpoint
from .formats import dtypes
from .formats.bundle_writer import BundleWriter

# Pieces read per input at a time: the mapped pages of each piece are released as soon as it
# has been added, so resident memory is one float64 accumulator (the tensor being averaged)
# plus one piece per input, whatever the total size of the inputs.
_PIECE = 4 << 20


def accumulate(acc, ckpt: Checkpoint, key: str) -> None:
    """Adds ``ckpt``'s ``key`` to the float64 (complex128) ``acc`` piece by piece, unmapping
    each piece once added (a memory-mapped input otherwise stays resident: 3 x 200 MB ->
    734 MB)."""
    flat = acc.reshape(-1)
    start = 0
    for piece in ckpt.chunks(key, _PIECE, release=True):
        flat[start:start + piece.size] += piece.astype(acc.dtype, copy=False)
        start += piece.size


def read_released(ckpt: Checkpoint, key: str, entry):
    """``ckpt.tensor(key)`` as an owned copy, its mapped pages released piece by piece."""
    import numpy as np

    if entry.dtype == dtypes.STRING or entry.slices:
        return ckpt.tensor(key)  # strings and partitioned tensors are read whole anyway
    out = None
    start = 0
    for piece in ckpt.chunks(key, _PIECE, release=True):
        if out is None:
            out = np.empty(entry.num_elements, piece.dtype)
        out[start:start + piece.size] = piece
        start += piece.size
    if out is None:
        return ckpt.tensor(key)
    return out.reshape(entry.shape)


def add_tensor(writer: BundleWriter, key: str, entry, value) -> int:
    """Writes ``value`` under ``key``, keeping the newest input's partitioning (and the parts
    of a tensor TF1 saved under one key per part each under its own key)."""
    fragments = entry.extra.get("fragments") if key == entry.name else None
    if fragments:
        for s, part in zip(entry.slices, fragments, strict=True):
            writer.add_partitioned(part, entry.dtype, entry.shape, [s], complete=False)
            writer.add_array(part, value[s.index(entry.shape)], slice_of=s)
    elif len(entry.slices) > 1 or (entry.slices and not entry.slices[0].is_full(entry.shape)):
        writer.add_partitioned(key, entry.dtype, entry.shape, list(entry.slices))
        for s in entry.slices:
            writer.add_array(key, value[s.index(entry.shape)], slice_of=s)
    else:
        writer.add_array(key, value)
    return int(value.nbytes) if value.dtype != object else entry.nbytes
