"""CRC32C (Castagnoli) with LevelDB/TensorFlow masking, at memory bandwidth.

TensorFlow stores ``Mask(crc32c(data))`` rather than the raw CRC, because computing the CRC of a
string that itself contains CRCs is weak; masking rotates and offsets the value.

Backend: ``fastcrc`` (Rust, AVX-512/VPCLMULQDQ folding where the CPU has it; ~34 GB/s on one
core of the development machine against ~15 GB/s for the ``crc32c`` package and
``google-crc32c``, see ``bench/crc_backends.py``); ``crc32c`` is the fallback when fastcrc is
not installed. Both release the GIL, so :func:`crc32c_parallel` checks the pieces of a large
buffer on every core and joins their CRCs with :func:`combine`.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor


def _load_crc32c_package():
    """Loads crc32c's compiled core without its package ``__init__``, which imports
    ``importlib.metadata`` just to set ``__version__`` (~30 ms of every ``ckpt list``)."""
    import glob
    import importlib.machinery
    import importlib.util

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


def _load():
    """Returns ``(name, fn(data, value) -> int)`` of the fastest installed backend."""
    try:
        from fastcrc import crc32 as _fast  # ~1 ms to import

        iscsi = _fast.iscsi
        if iscsi(b"123456789") == 0xE3069283:  # the CRC-32C check value
            return "fastcrc", lambda data, value=0: iscsi(data, value) if value else iscsi(data)
    except ImportError:
        pass
    return "crc32c", _load_crc32c_package()


BACKEND, _crc32c = _load()
_MASK_DELTA = 0xA282EAD8
_POLY = 0x82F63B78  # CRC-32C, bit-reflected


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


# -- combining CRCs of adjacent pieces (zlib's crc32_combine, for the Castagnoli polynomial) --
def _multmodp(a: int, b: int) -> int:
    """Returns ``a * b`` modulo the CRC polynomial (bit-reflected GF(2) polynomials)."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if not a & (m - 1):
                return p
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1


def _x2n_table() -> list[int]:
    p = 1 << 30  # x^1
    table = []
    for _ in range(32):
        table.append(p)  # x^(2^n)
        p = _multmodp(p, p)
    return table


_X2N = _x2n_table()


def _x8nmodp(nbytes: int) -> int:
    """Returns ``x^(8 * nbytes)`` modulo the polynomial: the shift that appends ``nbytes``."""
    p = 1 << 31  # x^0
    k = 3
    while nbytes:
        if nbytes & 1:
            p = _multmodp(_X2N[k & 31], p)
        nbytes >>= 1
        k += 1
    return p


def combine(crc1: int, crc2: int, len2: int) -> int:
    """Returns the CRC32C of ``A + B`` from ``crc1 = crc32c(A)``, ``crc2 = crc32c(B)`` and
    ``len2 = len(B)``, without touching the data."""
    return _multmodp(_x8nmodp(len2), crc1) ^ crc2


# -- parallel CRC of large buffers -----------------------------------------------------------
PIECE = 8 << 20  # bytes per task: large enough to amortize a thread hand-off (~20 µs)
PARALLEL_MIN = 4 * PIECE  # smaller buffers are checked on the calling thread
_pool: ThreadPoolExecutor | None = None


def workers() -> int:
    """Returns the number of CPU cores this process may use (at least 1)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        from concurrent.futures import ThreadPoolExecutor  # not on the `ckpt list` path

        _pool = ThreadPoolExecutor(max_workers=workers(), thread_name_prefix="crc32c")
    return _pool


def crc32c_parallel(data) -> int:
    """Returns the CRC32C of ``data`` (bytes-like, e.g. a memoryview of a mapped file),
    computed in :data:`PIECE`-sized pieces on every core and joined with :func:`combine`.

    Page faults of a memory-mapped buffer are taken by the threads that read it, so the
    kernel's share of the work is spread over the cores too.
    """
    view = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else data
    n = len(view)
    if n < PARALLEL_MIN or workers() < 2:
        return _crc32c(view, 0)
    pieces = [view[i : i + PIECE] for i in range(0, n, PIECE)]
    crcs = list(_executor().map(_crc32c, pieces))
    shift = _x8nmodp(PIECE)  # every piece but the last has the same length
    out = crcs[0]
    for piece, value in zip(pieces[1:], crcs[1:], strict=True):
        out = _multmodp(shift if len(piece) == PIECE else _x8nmodp(len(piece)), out) ^ value
    return out
