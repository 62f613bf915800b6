"""The streaming writers of ``ckpt export``: NumPy ``.npz``, safetensors and Keras HDF5.

Each fills the temporary file :func:`ckpt_tools.export.export_weights` hands it, tensor by
tensor, each tensor in parts of :data:`_PART` bytes, so resident memory stays at one part plus
the writer's own buffers whatever the model's size. The tables here say which dtypes each
format holds natively, and which it holds widened (exactly) with the original recorded.
"""

from __future__ import annotations

import json
import math
import os
import struct
import zipfile

import numpy as np

from .checkpoint import Checkpoint
from .errors import OutputError
from .export_h5_layers import h5_layers
from .export_record import npz_comment, safetensors_metadata
from .formats.dtypes import numpy_dtype
from .restored_mark import MARK_ATTR

SAFETENSORS_DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64",
    "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "uint16": "U16",
    "uint32": "U32", "uint64": "U64", "bool": "BOOL", "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
}
# NumPy's .npy has no bfloat16, float8 or int4 (np.load would return opaque |V2 records):
# such tensors are widened exactly, and the archive comment records their original dtype.
NPZ_WIDEN = {"bfloat16": "float32", "float8_e5m2": "float32", "float8_e4m3fn": "float32",
              "float8_e4m3fnuz": "float32", "float8_e4m3b11fnuz": "float32",
              "float8_e5m2fnuz": "float32", "int4": "int8", "uint4": "uint8"}
# HDF5 (and Keras' legacy loader) has no bfloat16: stored as float32 (exact) with a
# dtype="bfloat16" attribute, which Keras 3 honours and the legacy loader casts back to.
H5_WIDEN = {"bfloat16": "float32"}
H5_NATIVE = frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "int64",
                        "uint8", "uint16", "uint32", "uint64", "bool"})


# One tensor at a time, each in chunks of _PART bytes, so resident memory
# stays at one chunk plus the writer's own buffers whatever the model's size. The output path,
# temporary name and rename are export_weights' business; these only fill the file they get.
_PART = 8 << 20


def _parts(ckpt: Checkpoint, src: str):
    """The flat values of ``src`` in chunks, CRC-checked as consumed, pages released after."""
    return ckpt.chunks(src, _PART, release=True)


def _as_bytes(part: np.ndarray) -> np.ndarray:
    """A chunk as a flat uint8 array (a buffer any file accepts, for every dtype; no copy for
    the contiguous views chunks are)."""
    return np.ascontiguousarray(part).reshape(-1).view(np.uint8)


def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> dict:
    header = np.lib.format.header_data_from_array_1_0(np.empty(0, dtype))
    header["shape"] = tuple(shape)
    return header


def _write_npz(ckpt: Checkpoint, plan: dict[str, str], tmp: str, progress,
               record: dict | None = None) -> int:
    total = 0
    widened: dict[str, str] = {}
    # ZIP_STORED + one member at a time, each written chunk by chunk (np.savez would hold
    # every array): memory stays at one chunk.
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, src in plan.items():
            entry = ckpt.entry(src)
            dtype = numpy_dtype(entry.dtype)
            wide = NPZ_WIDEN.get(entry.dtype_name)
            if wide:  # .npy has no bfloat16/float8/int4: widened exactly, recorded below
                widened[name] = entry.dtype_name
                dtype = np.dtype(wide)
            with zf.open(name + ".npy", "w", force_zip64=True) as member:
                header = _npy_header(dtype, entry.shape)
                try:
                    np.lib.format.write_array_header_1_0(member, header)
                except ValueError:  # header over 64 KiB: format 2.0, as write_array would
                    np.lib.format.write_array_header_2_0(member, header)
                for part in _parts(ckpt, src):
                    if wide:
                        part = part.astype(wide)
                    member.write(_as_bytes(part))
                    total += part.nbytes
                    if progress:
                        progress(part.nbytes)
        # EMA or raw values (ckpt_tools.export_record), and the dtypes widened
        zf.comment = npz_comment(record or {}, widened)
    return total


def _write_safetensors(ckpt: Checkpoint, plan: dict[str, str], tmp: str, progress,
                       record: dict | None = None) -> int:
    # The checkpoint's name, not its path: the file is made to be shared, and the local
    # directory layout (user names) should not travel with it.
    source = os.path.basename(ckpt.path.rstrip("/\\")) or ckpt.path
    header: dict[str, object] = {"__metadata__": {"format": "tf", "source": source,
                                                  **safetensors_metadata(record or {})}}
    offset = 0
    for name, src in plan.items():
        entry = ckpt.entry(src)
        code = SAFETENSORS_DTYPES.get(entry.dtype_name)
        if code is None:
            raise OutputError(f"{src}: dtype {entry.dtype_name} cannot be stored in safetensors")
        size = entry.nbytes
        header[name] = {"dtype": code, "shape": list(entry.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # keep tensor data 8-byte aligned, as safetensors does
    written = 0
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for src in plan.values():
            for part in _parts(ckpt, src):
                part = part.astype(part.dtype.newbyteorder("<"), copy=False)
                f.write(_as_bytes(part))
                written += part.nbytes
                if progress:
                    progress(part.nbytes)
    if written != offset:
        raise OutputError(f"{tmp}: wrote {written} tensor bytes, the header promised {offset}")
    return offset


def read_order(plan: dict[str, str], fmt: str, ckpt: Checkpoint,
               weights: dict[str, str] | None = None) -> list[str]:
    """The source keys in the order the ``fmt`` writer reads them (each once).

    Raises:
        UnsupportedFormatError: as :func:`~ckpt_tools.export_h5_layers.h5_layers`, for
            ``fmt="h5"``.
    """
    if fmt == "h5":
        order = [plan[n] for names in h5_layers(plan, ckpt, weights).values() for n in names]
        return list(dict.fromkeys(order))
    return list(plan.values())


def written_bytes(ckpt: Checkpoint, plan: dict[str, str], fmt: str,
                  weights: dict[str, str] | None = None) -> int:
    """The tensor bytes the ``fmt`` writer writes, and so counts to its ``progress``: each
    tensor of ``plan`` (once per layer holding it in ``.h5``), widened where the format widens
    it; the raw weights, slots and counters export leaves unread are not counted
    (review-29-user-u31 F1: the bar stopped at the selected share of the file).

    Returns:
        `int`: the bytes, as :class:`~ckpt_tools.export.ExportResult`'s ``nbytes``.

    Raises:
        UnsupportedFormatError: as :func:`read_order`, for ``fmt="h5"``.
    """
    if fmt == "safetensors":
        return sum(ckpt.entry(src).nbytes for src in plan.values())
    if fmt == "h5":
        wide = H5_WIDEN
        srcs = [plan[n] for names in h5_layers(plan, ckpt, weights).values() for n in names]
    else:
        wide, srcs = NPZ_WIDEN, list(plan.values())
    total = 0
    for src in srcs:
        entry = ckpt.entry(src)
        dtype = np.dtype(wide.get(entry.dtype_name) or numpy_dtype(entry.dtype))
        total += math.prod(int(d) for d in entry.shape) * dtype.itemsize
    return total


def _write_h5(ckpt: Checkpoint, plan: dict[str, str], tmp: str, progress,
              weights: dict[str, str] | None = None, record: dict | None = None) -> int:
    """Keras' legacy HDF5 weights layout, each layer's weights where ``load_weights`` fills
    them (:func:`~ckpt_tools.export_h5_layers.h5_layers`; a weight two layers hold, as tied
    weights are, is written in both), and ``record`` (:mod:`~ckpt_tools.export_record`) as
    the root attribute ``ckpt_tools``, which Keras' loaders ignore."""
    import h5py

    layers = h5_layers(plan, ckpt, weights)
    total = 0
    with h5py.File(tmp, "w") as f:
        if record:
            f.attrs[MARK_ATTR] = json.dumps(record, sort_keys=True)
        # Keras' legacy weights layout: root lists layers, each layer lists its weight names.
        f.attrs["layer_names"] = [n.encode("utf-8") for n in layers]
        f.attrs["backend"] = b"tensorflow"
        f.attrs["keras_version"] = b"2.15.0"
        for layer, names in layers.items():
            group = f.require_group(layer)
            group.attrs["weight_names"] = [(n + ":0").encode("utf-8") for n in names]
            for name in names:
                nbytes = _write_dataset(ckpt, group, name + ":0", plan[name], progress)
                total += nbytes
    return total


def _write_dataset(ckpt: Checkpoint, group, key: str, src: str, progress) -> int:
    """Creates dataset ``key`` and fills it by runs of whole rows (first-axis slices)."""
    entry = ckpt.entry(src)
    dtype = numpy_dtype(entry.dtype)
    # HDF5 has no bfloat16: float32 (exact) with a dtype attribute, which Keras 3 honours and
    # its legacy loader casts back to bfloat16 without loss.
    wide = H5_WIDEN.get(entry.dtype_name)
    shape = tuple(entry.shape)
    ds = group.create_dataset(key, shape=shape, dtype=np.dtype(wide) if wide else dtype)
    if wide:
        ds.attrs["dtype"] = entry.dtype_name
    row = math.prod(shape[1:]) if shape else 1
    rows = max(1, _PART // max(1, row * dtype.itemsize))
    written = done = 0
    parts = ckpt.chunks(src, rows * row * dtype.itemsize, release=True)
    for part in parts:
        if wide:
            part = part.astype(wide)
        if not shape:
            ds[()] = part[0]
        elif row:
            n = part.size // row
            ds[done : done + n] = part.reshape((n, *shape[1:]))
            done += n
        written += part.nbytes
        if progress:
            progress(part.nbytes)
    return written


WRITERS = {"npz": _write_npz, "safetensors": _write_safetensors, "h5": _write_h5}
