"""The storage record every format reader produces for one stored tensor."""

from __future__ import annotations

import math

from . import dtypes
from ._record import Frozen
from .slices import TensorSlice


class TensorEntry(Frozen):
    """Where and how one tensor is stored.

    Built by the format readers (``BundleEntryProto`` for V2, ``SavedSliceMeta`` for V1, an HDF5
    dataset for Keras files); user-facing listings use :class:`ckpt_tools.Variable` instead.
    """

    name: str  # checkpoint key
    dtype: int  # TensorFlow DataType enum value
    shape: tuple[int, ...]
    shard_id: int = 0  # data file index (V2); 0 elsewhere
    offset: int = 0  # byte offset in the data file (V2)
    stored_bytes: int = 0  # bytes on disk (V2, Keras); 0 when unknown
    crc32c: int | None = None  # masked CRC32C of the stored bytes (V2)
    slices: tuple[TensorSlice, ...] = ()  # non-empty for partitioned variables
    extra: dict  # reader-private data (not compared, not shown); default: a new empty dict

    _fields = ("name", "dtype", "shape", "shard_id", "offset", "stored_bytes", "crc32c",
               "slices", "extra")
    _compare = _repr = _fields[:-1]

    def __init__(self, name: str, dtype: int, shape: tuple[int, ...], shard_id: int = 0,
                 offset: int = 0, stored_bytes: int = 0, crc32c: int | None = None,
                 slices: tuple[TensorSlice, ...] = (), extra: dict | None = None) -> None:
        self.__dict__.update(name=name, dtype=dtype, shape=shape, shard_id=shard_id,
                             offset=offset, stored_bytes=stored_bytes, crc32c=crc32c,
                             slices=slices, extra={} if extra is None else extra)

    @property
    def dtype_name(self) -> str:
        return dtypes.dtype_name(self.dtype)

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of tensor data (for strings: the stored size including lengths)."""
        item = dtypes.itemsize(self.dtype)
        return item * self.num_elements if item else self.stored_bytes


_new = object.__new__


def bundle_entry(name: str, dtype: int, shape: tuple[int, ...], shard_id: int, offset: int,
                 stored_bytes: int, crc32c: int | None,
                 slices: tuple[TensorSlice, ...]) -> TensorEntry:
    """Returns ``TensorEntry(name=name, ...)`` (every field given, ``extra`` empty), built
    without ``__init__``'s keyword handling: one entry per tensor, 100,000 of them in a large
    ``ckpt list``."""
    entry = _new(TensorEntry)
    entry.__dict__.update(name=name, dtype=dtype, shape=shape, shard_id=shard_id, offset=offset,
                          stored_bytes=stored_bytes, crc32c=crc32c, slices=slices, extra={})
    return entry
