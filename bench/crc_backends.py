"""Measure CRC32C packages on this machine: ``python bench/crc_backends.py [MiB]``.

Compares every installed, maintained CRC32C implementation on one buffer (in memory, so the
numbers are the instruction's throughput, not page faults), single-threaded and on every core
in 8 MiB pieces, and checks each against the standard check value. Packages that are not
installed are skipped; install them into a scratch directory to compare
(``pip install --target /tmp/crc google-crc32c anycrc`` then ``PYTHONPATH=/tmp/crc``).
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor


def _backends() -> dict:
    out = {}
    try:
        from fastcrc import crc32

        out["fastcrc"] = crc32.iscsi
    except ImportError:
        pass
    try:
        import crc32c

        out["crc32c"] = crc32c.crc32c
    except ImportError:
        pass
    try:
        import google_crc32c

        out["google-crc32c"] = lambda b: google_crc32c.value(bytes(b) if not isinstance(
            b, bytes) else b)
    except ImportError:
        pass
    try:
        import anycrc

        model = anycrc.Model("CRC32-ISCSI")
        out["anycrc"] = model.calc
    except ImportError:
        pass
    return out


def main() -> None:
    import numpy as np

    from ckpt_tools.formats.crc import workers

    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    data = np.random.default_rng(0).integers(0, 256, mib << 20, dtype=np.uint8).tobytes()
    pieces = [data[i : i + (8 << 20)] for i in range(0, len(data), 8 << 20)]
    pool = ThreadPoolExecutor(workers())
    for name, fn in _backends().items():
        assert fn(b"123456789") == 0xE3069283, name
        one = min(_timed(lambda fn=fn: fn(data)) for _ in range(3))
        par = min(_timed(lambda fn=fn: list(pool.map(fn, pieces))) for _ in range(3))
        print(f"{name:15s} {len(data) / one / 1e9:6.1f} GB/s one thread, "
              f"{len(data) / par / 1e9:6.1f} GB/s on {workers()} threads")


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
