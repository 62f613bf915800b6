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

With a ``cost``, a free thread starts the costliest task waiting in the window, not the oldest
(longest-first scheduling; results still come back in input order): large tensors start as
soon as they enter the window and the small ones fill in around them, so the last tasks of
a run are small and both cores finish together. In input order, a checkpoint ending in three
100 MB tensors (an embedding, its average and its slot) left one core idle for most of the
third one (~4 ms of a ~55 ms verified read of 1 GB on two cores). The window (:data:`AHEAD`
tasks per thread, ~64 MB of small tensors on two) is what there is to fill in with.
"""

from __future__ import annotations

import heapq
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from .formats.crc import workers as cpu_workers

T = TypeVar("T")
R = TypeVar("R")

BATCH_COST = 4 << 20  # a task's worth of small items: ~0.3 ms of work at memory speed
AHEAD = 16  # tasks in flight per thread (queued, running or waiting for their turn)


def _batches(items: Iterable[T], cost: Callable[[T], int], limit: int) -> Iterator[list[T]]:
    """Groups consecutive ``items`` into lists whose cost reaches ``limit`` (an item of
    ``limit`` or more is a list of its own), keeping their order."""
    for group, _ in _costed_batches(items, cost, limit):
        yield group


def _costed_batches(items: Iterable[T], cost: Callable[[T], int],
                    limit: int) -> Iterator[tuple[list[T], int]]:
    """:func:`_batches`, each group with its total cost."""
    group: list[T] = []
    total = 0
    for item in items:
        c = cost(item)
        if c >= limit:
            if group:
                yield group, total
                group, total = [], 0
            yield [item], c
            continue
        group.append(item)
        total += c
        if total >= limit:
            yield group, total
            group, total = [], 0
    if group:
        yield group, total


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
    groups: Iterable[tuple[list[T], int]] = (([item], 0) for item in items) if cost is None \
        else _costed_batches(items, cost, batch_cost)
    waiting: list = []  # heap of (-cost, sequence, group, future): tasks not started yet
    lock = threading.Lock()

    def start_costliest() -> None:
        """One pool job: runs the costliest waiting task (the oldest among equals)."""
        with lock:
            _, _, group, future = heapq.heappop(waiting)
        if future.set_running_or_notify_cancel():  # False: cancelled, nothing to run
            future.set_result(_run(fn, group))

    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="ckpt") as pool:
        pending: deque = deque()
        try:
            for seq, (group, group_cost) in enumerate(groups):
                future: Future = Future()
                with lock:
                    heapq.heappush(waiting, (-group_cost, seq, group, future))
                pending.append(future)
                pool.submit(start_costliest)  # one job per task: each task runs once
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
