"""Ordered, bounded parallel map for per-tensor work (stats, diff).

NumPy's ufuncs and the CRC32C backend release the GIL on large buffers, so per-tensor work
on two threads keeps two cores busy. Results come back in input order, and at most
``2 * workers`` items are in flight, so memory stays at a few tensors' working sets however
many tensors there are.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from .formats.crc import workers as cpu_workers

T = TypeVar("T")
R = TypeVar("R")


def ordered_map(fn: Callable[[T], R], items: Iterable[T], *,
                workers: int | None = None) -> Iterator[R]:
    """Yields ``fn(item)`` for every item, in order, computing up to ``workers`` at a time
    (default: one per CPU core). With one worker nothing runs on another thread.

    Raises:
        whatever ``fn`` raises, when that item's turn comes (later items are cancelled).
    """
    n = cpu_workers() if workers is None else max(1, workers)
    if n == 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="ckpt") as pool:
        pending: deque = deque()
        try:
            for item in items:
                pending.append(pool.submit(fn, item))
                if len(pending) >= 2 * n:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
