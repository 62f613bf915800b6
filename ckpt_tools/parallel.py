"""Ordered, bounded parallel map for per-tensor work (stats, diff, verified reads).

NumPy's ufuncs and the CRC32C backend release the GIL on large buffers, so per-tensor work
on two threads keeps two cores busy. Results come back in input order. At most
:data:`AHEAD` ``* workers`` tasks are queued or running: only ``workers`` of them hold a working
set (a tensor's chunks), the others are finished results waiting for their turn, so memory
stays bounded however many tensors there are, while a thread that finished its tensor goes on
with later ones instead of idling behind a large tensor on another thread (with a window of
two tasks per thread a 100 MB tensor left the other core idle for most of its time).

A task handed to a thread costs ~15-20 µs of CPU (future, queue, wake-up, result), as much as
reading a 200 KB tensor; a checkpoint is mostly small tensors (biases, norms, slots), so with a
``cost`` (bytes per item) consecutive small items travel as one task of at least
:data:`BATCH_COST`, and large ones alone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from .formats.crc import workers as cpu_workers

T = TypeVar("T")
R = TypeVar("R")

BATCH_COST = 4 << 20  # a task's worth of small items: ~0.3 ms of work at memory speed
AHEAD = 8  # tasks in flight per thread


def _batches(items: Iterable[T], cost: Callable[[T], int], limit: int) -> Iterator[list[T]]:
    """Groups consecutive ``items`` into lists whose cost reaches ``limit`` (an item of
    ``limit`` or more is a list of its own), keeping their order."""
    group: list[T] = []
    total = 0
    for item in items:
        c = cost(item)
        if c >= limit:
            if group:
                yield group
                group, total = [], 0
            yield [item]
            continue
        group.append(item)
        total += c
        if total >= limit:
            yield group
            group, total = [], 0
    if group:
        yield group


def _run(fn: Callable[[T], R], group: list[T]) -> tuple[list[R], BaseException | None]:
    """Runs ``fn`` over ``group`` in order; stops at the first exception and returns it with
    the results before it (the items after it would be cancelled anyway)."""
    out: list[R] = []
    for item in group:
        try:
            out.append(fn(item))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer's thread
            return out, exc
    return out, None


def ordered_map(fn: Callable[[T], R], items: Iterable[T], *, workers: int | None = None,
                cost: Callable[[T], int] | None = None,
                batch_cost: int = BATCH_COST) -> Iterator[R]:
    """Yields ``fn(item)`` for every item, in order, computing up to ``workers`` at a time
    (default: one per CPU core). With one worker nothing runs on another thread.

    ``cost(item)`` (e.g. a tensor's bytes) lets consecutive cheap items share one task of
    at least ``batch_cost``; without it every item is a task.

    Raises:
        whatever ``fn`` raises, when that item's turn comes (later items are cancelled).
    """
    n = cpu_workers() if workers is None else max(1, workers)
    if n == 1:
        yield from map(fn, items)
        return
    groups: Iterable[list[T]] = ([item] for item in items) if cost is None else _batches(
        items, cost, batch_cost)
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="ckpt") as pool:
        pending: deque = deque()
        try:
            for group in groups:
                pending.append(pool.submit(_run, fn, group))
                if len(pending) >= AHEAD * n:
                    yield from _results(pending.popleft())
            while pending:
                yield from _results(pending.popleft())
        finally:
            for future in pending:
                future.cancel()


def _results(future) -> Iterator:
    values, exc = future.result()
    yield from values
    if exc is not None:
        raise exc
