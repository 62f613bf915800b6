"""CRC32C (Castagnoli) with LevelDB/TensorFlow masking.

TensorFlow stores ``Mask(crc32c(data))`` rather than the raw CRC, because computing the CRC of a
string that itself contains CRCs is weak; masking rotates and offsets the value.
"""

from __future__ import annotations

import crc32c as _crc32c

_MASK_DELTA = 0xA282EAD8


def crc32c(data, value: int = 0) -> int:
    """Returns the CRC32C of ``data``, continuing from ``value`` (0 starts a new CRC)."""
    return _crc32c.crc32c(data, value)


def mask(crc: int) -> int:
    """Returns TensorFlow's masked form of a CRC32C value."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def unmask(masked: int) -> int:
    """Inverts :func:`mask`."""
    rot = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF
