"""TensorFlow ``DataType`` enum values and their NumPy equivalents.

Names follow ``tf.DType.name`` (``float32``, ``bfloat16``, ``string``…) so our listings read the
same as TensorFlow's. ``ml_dtypes`` costs ~0.5 s to import, so it is loaded only when a tensor of
one of its types is actually read; listing never needs it.
"""

from __future__ import annotations

from functools import cache

from ..errors import UnsupportedFormatError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    import numpy as np

# enum value -> (tf name, itemsize in bytes or 0 for variable-size, numpy spec)
# The numpy spec is a numpy dtype string or "ml:<attr>" for ml_dtypes types.
_TYPES: dict[int, tuple[str, int, str]] = {
    1: ("float32", 4, "<f4"),
    2: ("float64", 8, "<f8"),
    3: ("int32", 4, "<i4"),
    4: ("uint8", 1, "u1"),
    5: ("int16", 2, "<i2"),
    6: ("int8", 1, "i1"),
    7: ("string", 0, "O"),
    8: ("complex64", 8, "<c8"),
    9: ("int64", 8, "<i8"),
    10: ("bool", 1, "?"),
    11: ("qint8", 1, "i1"),
    12: ("quint8", 1, "u1"),
    13: ("qint32", 4, "<i4"),
    14: ("bfloat16", 2, "ml:bfloat16"),
    15: ("qint16", 2, "<i2"),
    16: ("quint16", 2, "<u2"),
    17: ("uint16", 2, "<u2"),
    18: ("complex128", 16, "<c16"),
    19: ("float16", 2, "<f2"),
    20: ("resource", 0, ""),
    21: ("variant", 0, ""),
    22: ("uint32", 4, "<u4"),
    23: ("uint64", 8, "<u8"),
    24: ("float8_e5m2", 1, "ml:float8_e5m2"),
    25: ("float8_e4m3fn", 1, "ml:float8_e4m3fn"),
    26: ("float8_e4m3fnuz", 1, "ml:float8_e4m3fnuz"),
    27: ("float8_e4m3b11fnuz", 1, "ml:float8_e4m3b11fnuz"),
    28: ("float8_e5m2fnuz", 1, "ml:float8_e5m2fnuz"),
    29: ("int4", 1, "ml:int4"),
    30: ("uint4", 1, "ml:uint4"),
}
_BY_NAME = {name: enum for enum, (name, _, _) in _TYPES.items()}
# TensorFlow's "_ref" dtypes (TF1 reference variables) are the base value + 100.
_REF_OFFSET = 100

STRING = 7
_ALIASES = {"half": "float16", "float": "float32", "double": "float64"}


def _base(enum: int) -> int:
    return enum - _REF_OFFSET if enum > _REF_OFFSET else enum


def dtype_name(enum: int) -> str:
    """Returns the TensorFlow name of a ``DataType`` enum value, e.g. ``1 -> "float32"``.

    Raises:
        UnsupportedFormatError: for values TensorFlow does not define.
    """
    try:
        return _TYPES[_base(enum)][0]
    except KeyError:
        raise UnsupportedFormatError(f"unknown TensorFlow DataType enum {enum}") from None


def is_known(enum: int) -> bool:
    """Returns whether ``enum`` is a ``DataType`` value TensorFlow defines (as
    :func:`dtype_name` accepts it)."""
    return _base(enum) in _TYPES


def itemsize(enum: int) -> int:
    """Returns bytes per element, or 0 for variable-size types (string, resource, variant)."""
    return _TYPES[_base(enum)][1] if _base(enum) in _TYPES else 0


def enum_of(name: str) -> int:
    """Returns the ``DataType`` enum value for a TensorFlow/NumPy dtype name."""
    try:
        return _BY_NAME[_ALIASES.get(name, name)]
    except KeyError:
        raise UnsupportedFormatError(f"no TensorFlow DataType for dtype {name!r}") from None


@cache
def numpy_dtype(enum: int, big_endian: bool = False) -> np.dtype:
    """Returns the NumPy dtype for a ``DataType`` enum value (strings map to ``object``).

    Raises:
        UnsupportedFormatError: for resource/variant handles, which hold no tensor data.
    """
    import numpy as np  # deferred: listing a checkpoint never needs NumPy

    name, _, spec = _TYPES.get(_base(enum), (None, 0, ""))
    if not spec:
        raise UnsupportedFormatError(
            f"tensors of dtype {name or enum} carry no readable values (resource/variant handle)"
        )
    if spec.startswith("ml:"):
        import ml_dtypes  # deferred: ~0.5 s import, only needed for these types

        return np.dtype(getattr(ml_dtypes, spec[3:]))
    dt = np.dtype(spec)
    return dt.newbyteorder(">") if big_endian and dt.itemsize > 1 else dt


def enum_of_numpy(dtype: np.dtype) -> int:
    """Returns the ``DataType`` enum value for a NumPy dtype (``object``/bytes → string)."""
    import numpy as np

    dtype = np.dtype(dtype)
    if dtype.kind in "OSU":
        return STRING
    name = dtype.name
    return enum_of(name)
