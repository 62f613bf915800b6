"""ordered_map: results in input order, errors at their item's turn, cheap items batched."""

from __future__ import annotations

import threading

import pytest

from ckpt_tools import parallel
from ckpt_tools.parallel import _batches, ordered_map


def test_batches_group_consecutive_cheap_items_and_keep_large_ones_alone():
    costs = {"a": 1, "b": 1, "big": 10, "c": 2, "d": 3, "e": 1}
    groups = list(_batches(list(costs), costs.__getitem__, 4))
    assert groups == [["a", "b"], ["big"], ["c", "d"], ["e"]]
    assert [x for g in groups for x in g] == list(costs)


@pytest.mark.parametrize("cost", [None, lambda i: 1, lambda i: 100 if i % 7 == 0 else 3])
def test_results_come_in_input_order(cost):
    out = list(ordered_map(lambda i: i * i, range(200), workers=2, cost=cost, batch_cost=10))
    assert out == [i * i for i in range(200)]


def test_batched_items_run_on_worker_threads_in_few_tasks(monkeypatch):
    submitted = []
    real = parallel._run

    def spy(fn, group):
        submitted.append(len(group))
        return real(fn, group)

    monkeypatch.setattr(parallel, "_run", spy)
    names = set()
    out = list(ordered_map(lambda i: names.add(threading.current_thread().name) or i,
                           range(100), workers=2, cost=lambda i: 1, batch_cost=25))
    assert out == list(range(100)) and submitted == [25, 25, 25, 25]
    assert all(n.startswith("ckpt") for n in names)


def test_an_error_is_raised_at_its_items_turn_after_the_results_before_it():
    def fn(i):
        if i == 13:
            raise ValueError("thirteen")
        return i

    seen = []
    with pytest.raises(ValueError, match="thirteen"):
        for value in ordered_map(fn, range(40), workers=2, cost=lambda i: 1, batch_cost=5):
            seen.append(value)
    assert seen == list(range(13))


def test_a_free_thread_goes_on_past_a_slow_item():
    """While one thread is busy with a large item, the other works through the following
    ones (results wait for their turn) instead of idling once a couple are done."""
    later_done = threading.Event()
    done = []

    def fn(i):
        if i == 0:  # the large tensor: finishes only once the other thread did 10 more
            return later_done.wait(timeout=20)
        done.append(i)
        if len(done) == 10:
            later_done.set()
        return i

    out = list(ordered_map(fn, range(12), workers=2))
    assert out[0] is True and out[1:] == list(range(1, 12))  # not a timeout
    assert parallel.AHEAD * 2 > 10


def test_a_free_thread_starts_the_costliest_waiting_task_first():
    """Longest first: a large tensor later in the window starts before the small ones queued
    ahead of it (they fill in around it), so the run does not end on one large tensor while
    the other core idles. Results still come in input order."""
    gate = threading.Event()
    starts = []

    def fn(i):
        starts.append(i)
        if i in (0, 1):  # both threads busy until every task is in the window
            gate.wait(timeout=20)
        return i

    timer = threading.Timer(0.3, gate.set)
    timer.start()
    out = list(ordered_map(fn, range(10), workers=2, cost=lambda i: 100 if i == 5 else 1,
                           batch_cost=1))
    timer.join()
    assert out == list(range(10))
    assert sorted(starts[:2]) == [0, 1] and starts[2] == 5
    assert sorted(starts[3:]) == [2, 3, 4, 6, 7, 8, 9]
