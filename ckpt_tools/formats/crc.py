"""CRC32C (Castagnoli) with LevelDB/TensorFlow masking.

TensorFlow stores ``Mask(crc32c(data))`` rather than the raw CRC, because computing the CRC of a
string that itself contains CRCs is weak; masking rotates and offsets the value.
"""

from __future__ import annotations

import glob
import importlib.machinery
import importlib.util
import os


def _load_extension():
    """Loads crc32c's compiled core without its package ``__init__``, which imports
    ``importlib.metadata`` just to set ``__version__`` (~30 ms of every ``ckpt list``)."""
    spec = importlib.util.find_spec("crc32c")  # finds the package without executing it
    for location in (spec.submodule_search_locations or []) if spec else []:
        for path in glob.glob(os.path.join(location, "_crc32c*")):
            if path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
                loader = importlib.machinery.ExtensionFileLoader("crc32c._crc32c", path)
                ext_spec = importlib.util.spec_from_file_location("crc32c._crc32c", path,
                                                                  loader=loader)
                module = importlib.util.module_from_spec(ext_spec)
                loader.exec_module(module)
                return module.crc32c
    import crc32c as package  # unusual layouts: the documented import

    return package.crc32c


_crc32c = _load_extension()
_MASK_DELTA = 0xA282EAD8


def crc32c(data, value: int = 0) -> int:
    """Returns the CRC32C of ``data``, continuing from ``value`` (0 starts a new CRC)."""
    return _crc32c(data, value)


def mask(crc: int) -> int:
    """Returns TensorFlow's masked form of a CRC32C value."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def unmask(masked: int) -> int:
    """Inverts :func:`mask`."""
    rot = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF
