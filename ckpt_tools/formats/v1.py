"""Reader for V1 checkpoints (one table file, TF 0.x and ``Saver(write_version=V1)``).

The ``""`` entry holds ``SavedTensorSliceMeta`` (names, shapes, dtypes, slices); every other key is
an OrderedCode slice key whose value is a ``SavedSlice`` carrying a ``TensorProto`` with the values
in its typed repeated fields.

``Saver(sharded=True, write_version=V1)`` writes one such table per device, named
``<prefix>-00000-of-00002`` …, and records the pattern ``<prefix>-?????-of-00002`` in its state
file; :class:`V1Reader` opened on that pattern (or :func:`shard_pattern` of any one shard) reads
every shard as one checkpoint, and refuses when one is missing.
"""

from __future__ import annotations

import math
import os
import re

from ..errors import CheckpointNotFoundError, CorruptCheckpointError
from . import dtypes
from ._io import close_map, map_file
from .bundle import shape_of
from .entry import TensorEntry
from .slices import TensorSlice, check_partition, encode_key
from .table import Table

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    import numpy as np

    from ._protos import TensorProto

# dtype name -> TensorProto field holding its values
_FIELD = {
    "float32": "float_val", "float64": "double_val", "int64": "int64_val", "bool": "bool_val",
    "string": "string_val", "complex64": "scomplex_val", "complex128": "dcomplex_val",
    "float16": "half_val", "bfloat16": "half_val", "uint32": "uint32_val", "uint64": "uint64_val",
}
_INT_FIELD = "int_val"  # int32, int16, int8, uint8, uint16 and the quantized types
_MAX_FILL_BYTES = 64 << 20  # largest tensor we expand from a single stored value
_SHARD_RE = re.compile(r"^(.*)-(\d{5})-of-(\d{5})$")
_PATTERN_RE = re.compile(r"^(.*)-\?{5}-of-(\d{5})$")


def shard_pattern(path: str) -> str | None:
    """Returns ``<prefix>-?????-of-NNNNN`` when ``path`` is named like one shard of a sharded V1
    checkpoint (``<prefix>-00001-of-00002``) or is such a pattern already, else ``None``."""
    m = _SHARD_RE.match(path)
    if m and int(m.group(2)) < int(m.group(3)):
        return f"{m.group(1)}-?????-of-{m.group(3)}"
    return path if _PATTERN_RE.match(path) else None


def shard_base(pattern: str) -> str:
    """Returns the prefix of a shard pattern (``model.ckpt-7`` for
    ``model.ckpt-7-?????-of-00002``), or ``pattern`` unchanged when it is not one."""
    m = _PATTERN_RE.match(pattern)
    return m.group(1) if m else pattern


def find_shards(prefix: str) -> str | None:
    """Returns the shard pattern of the sharded V1 checkpoint saved at ``prefix`` (shards
    ``<prefix>-NNNNN-of-MMMMM`` beside it), or ``None`` when there is none."""
    directory, base = os.path.split(prefix)
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return None
    totals = sorted({m.group(3) for m in map(_SHARD_RE.match, names)
                     if m and m.group(1) == base})
    return f"{prefix}-?????-of-{totals[-1]}" if totals else None


def shard_files(path: str) -> list[str]:
    """Returns the files of the checkpoint ``path`` names: every shard of a shard pattern, in
    order, or ``[path]`` for a single-file checkpoint.

    Raises:
        CheckpointNotFoundError: a shard of the pattern is missing (named in the message): one
            shard is never taken for the whole checkpoint.
        CorruptCheckpointError: the pattern claims no shard, or more than 99,999.
    """
    m = _PATTERN_RE.match(path)
    if not m:
        return [path]
    total = int(m.group(2))
    if total < 1:
        raise CorruptCheckpointError("shard pattern names 0 shards", path=path)
    files = [f"{m.group(1)}-{i:05d}-of-{total:05d}" for i in range(total)]
    for i, f in enumerate(files):
        if not os.path.exists(f):  # a FIFO or directory is refused when opened, not "missing"
            raise CheckpointNotFoundError(
                f"{f}: shard {i + 1} of {total} of V1 checkpoint {path} is missing")
    return files


def is_v1_file(path: str) -> bool:
    """Returns True if ``path`` is a table whose header entry is a V1 ``SavedTensorSliceMeta``."""
    try:
        data = map_file(path)
    except OSError:
        return False
    first = None
    try:
        first = next(Table(data, path, verify=False).items(), None)
        return first is not None and first[0] == b"" and bytes(first[1][:1]) == b"\x0a"
    except Exception:
        return False
    finally:
        del first
        close_map(data)


class V1Reader:
    """Reads a V1 checkpoint file.

    Args:
        path: the checkpoint file.

    Raises:
        CheckpointNotFoundError: if the file does not exist.
        CorruptCheckpointError: if it is not a well-formed V1 table.
    """

    format = "v1"
    keras = None

    def __init__(self, path: str, *, verify: bool = True):
        self.prefix = path
        self.path = path
        self.verify = verify
        self.entries: dict[str, TensorEntry] = {}
        # Values stay memoryviews into the mapping (or the decompressed block): parsed on read.
        self._values: dict[bytes, memoryview] = {}
        self._maps: list = []
        self._size = 0  # bytes of every shard: what a tensor can at most hold
        self._files = shard_files(path)
        try:
            for shard in self._files:
                self._add_shard(shard, verify)
        except BaseException:
            self.close()
            raise

    def _add_shard(self, path: str, verify: bool) -> None:
        """Adds one table's tensors; a tensor split across shards gathers all its slices."""
        try:
            data = map_file(path)
        except FileNotFoundError:
            raise CheckpointNotFoundError(f"{path}: no such file") from None
        self._maps.append(data)
        self._size += len(data)
        items = Table(data, path, verify=verify).items()
        first = next(items, None)
        if first is None or first[0] != b"":
            raise CorruptCheckpointError("V1 checkpoint has no metadata entry", path=path)
        meta = self._parse(first[1], "metadata", path).meta
        from ._protos import text  # V1 files only: protobuf on demand (not for V2 listings)

        for key, value in items:
            self._values[key] = value
        for t in meta.tensor:
            name = text(t.name)
            shape = shape_of(t.shape, name)
            dtypes.dtype_name(t.type)
            slices = tuple(TensorSlice.from_proto(s, len(shape)) for s in t.slice)
            slices = slices or (TensorSlice.full(len(shape)),)
            for tslice in slices:
                self._check_count(name, t.type, shape, tslice, len(data), path)
            known = self.entries.get(name)
            if known is not None:
                if known.dtype != t.type or known.shape != shape:
                    raise CorruptCheckpointError(
                        f"tensor {name!r} is {dtypes.dtype_name(t.type)}{list(shape)} here but "
                        f"{known.dtype_name}{list(known.shape)} in another shard", path=path)
                slices = known.slices + slices
            self.entries[name] = TensorEntry(name=name, dtype=t.type, shape=shape,
                                               slices=slices)

    def _check_count(self, name: str, dtype: int, shape: tuple[int, ...],
                     tslice: TensorSlice, size: int, path: str) -> None:
        """Refuses a slice outside its tensor, or one claiming more elements than its
        ``size``-byte file can hold: every stored value takes at least one byte (a slice stores
        each of its values; see :func:`_values`). Per slice, because a sharded V1 checkpoint
        keeps only some slices of a tensor in each file."""
        try:
            count = math.prod(tslice.shape(shape))
        except CorruptCheckpointError as exc:
            raise CorruptCheckpointError(f"tensor {name!r}: {exc}", path=path) from None
        if count > size:
            raise CorruptCheckpointError(
                f"tensor {name!r} of shape {list(shape)} claims {count} elements, more than the "
                f"{size}-byte file can hold", path=path)

    def _parse(self, value, what: str, path: str | None = None):
        from ._protos import SavedTensorSlices  # V1 files only: protobuf on demand

        try:
            return SavedTensorSlices.FromString(bytes(value))
        except Exception as exc:
            raise CorruptCheckpointError(f"cannot parse {what}: {exc}",
                                         path=path or self.path) from None

    def _slice_values(self, entry: TensorEntry, tslice: TensorSlice, shape) -> np.ndarray:
        # TF writes keys with the slice as given; a full slice may be stored with empty extents
        # or explicit (0, -1) ones, so try both spellings.
        key = encode_key(entry.name, tslice)
        value = self._values.get(key)
        if value is None and all(n == -1 for _, n in tslice.extents):
            value = self._values.get(encode_key(entry.name, TensorSlice(())))
        if value is None:
            raise CorruptCheckpointError(f"no data stored for slice {tslice} of {entry.name!r}",
                                         path=self.path)
        proto: TensorProto = self._parse(value, f"data of {entry.name!r}").data.data
        return _values(proto, entry, shape, self.path)

    def read(self, name: str) -> np.ndarray:
        """Returns the tensor ``name``. Raises KeyError if absent, CorruptCheckpointError if bad."""
        import numpy as np

        entry = self.entries[name]
        if len(entry.slices) == 1 and entry.slices[0].is_full(entry.shape):
            return self._slice_values(entry, entry.slices[0], entry.shape)
        try:
            check_partition(entry.name, entry.shape, entry.slices)
        except CorruptCheckpointError as exc:
            raise CorruptCheckpointError(str(exc), path=self.path) from None
        nbytes = entry.num_elements * (dtypes.itemsize(entry.dtype) or 1)
        if nbytes > self._size + _MAX_FILL_BYTES:  # many slices, each a bounded fill
            raise CorruptCheckpointError(
                f"tensor {entry.name!r} of shape {list(entry.shape)} needs {nbytes} bytes, more "
                f"than the {self._size}-byte file can hold", path=self.path)
        dt = np.dtype(object) if entry.dtype == dtypes.STRING else dtypes.numpy_dtype(entry.dtype)
        # Read every slice before allocating the whole tensor, so a corrupt file claiming an
        # absurd shape fails on its (missing) data instead of allocating gigabytes.
        parts = [(tslice, self._slice_values(entry, tslice, tslice.shape(entry.shape)))
                 for tslice in entry.slices]
        out = np.empty(entry.shape, dtype=dt)
        for tslice, values in parts:
            out[tslice.index(entry.shape)] = values
        return out

    def files(self) -> list[str]:
        """Returns the file a V1 checkpoint is, or every shard of a sharded one."""
        return list(self._files)

    def close(self) -> None:
        self._values.clear()
        while self._maps:
            close_map(self._maps.pop())


def _values(proto, entry: TensorEntry, shape, path: str) -> np.ndarray:
    """Converts the typed value fields of a TensorProto slice into an array of ``shape``."""
    import numpy as np

    name = entry.dtype_name
    count = math.prod(shape)
    dt = np.dtype(object) if entry.dtype == dtypes.STRING else dtypes.numpy_dtype(entry.dtype)
    if proto.tensor_content:
        if dt.kind == "O" or len(proto.tensor_content) % dt.itemsize:
            raise CorruptCheckpointError(
                f"tensor {entry.name!r}: {len(proto.tensor_content)} bytes of tensor_content do "
                f"not hold {entry.dtype_name} values", path=path)
        arr = np.frombuffer(proto.tensor_content, dtype=dt)
    elif name == "string":
        arr = np.array(list(proto.string_val), dtype=object)
    else:
        raw = list(getattr(proto, _FIELD.get(name, _INT_FIELD)))
        if name in ("complex64", "complex128"):
            if len(raw) % 2:
                raise CorruptCheckpointError(
                    f"tensor {entry.name!r}: odd number ({len(raw)}) of complex components",
                    path=path)
            pairs = np.asarray(raw, dtype=np.float64).reshape(-1, 2)
            arr = (pairs[:, 0] + 1j * pairs[:, 1]).astype(dt)
        elif name in ("float16", "bfloat16"):
            # half_val holds the 16 bits in an int32; keep the low 16 like TensorFlow's cast.
            arr = np.asarray(raw, dtype=np.int64).astype(np.uint16).view(dt)
        else:
            arr = np.asarray(raw).astype(dt)
    if arr.size == count:
        return arr.reshape(shape)
    # No one-value "fill" as in a .meta constant's TensorProto: TensorFlow's slice writer stores
    # every element, and its reader refuses any other count ("Error copying slice data").
    raise CorruptCheckpointError(
        f"tensor {entry.name!r} slice has {arr.size} values, expected {count}", path=path)
