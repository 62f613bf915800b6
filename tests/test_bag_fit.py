"""``bag_fit.fit_runs``: which weights each EMA copy can pair with when some sublayers' order
is not recorded and any of them may have been frozen. Pure search over shapes (the Keras-made
cases are in ``tests/test_keras_backbone.py``)."""

from __future__ import annotations

from ckpt_tools.formats.keras import bag_fit

A, B, C, D, E = (((n,), 1) for n in (1, 2, 3, 4, 5))


def test_shapes_no_bag_weight_has_prove_the_head():
    specs = [A, B, C, C, D, E]  # a bag (a backbone, any order) then a seq head
    targets, witnesses = bag_fit.fit_runs([D, E], specs, [("bag", [0, 1, 2, 3]),
                                                          ("seq", [4, 5])])
    assert targets == [(4,), (5,)] and witnesses == [(4, 5)]


def test_equal_shapes_in_a_bag_are_left_open_with_witnesses_that_differ():
    targets, witnesses = bag_fit.fit_runs([A], [A, A, B], [("bag", [0, 1, 2])])
    assert targets == [(0, 1)]
    assert sorted(w[0] for w in witnesses) == [0, 1]


def test_recorded_order_excludes_what_would_need_another():
    runs = [("seq", [0, 1, 2])]
    assert bag_fit.fit_runs([A, B], [A, B, A], runs)[0] == [(0,), (1,)]
    assert bag_fit.fit_runs([B, A], [A, B, A], runs)[0] == [(1,), (2,)]
    # a copy may sit in the bag or in the later run: both are candidates
    targets, _ = bag_fit.fit_runs([C, A], [C, A, A], [("bag", [0, 1]), ("seq", [2])])
    assert targets == [(0,), (1, 2)]


def test_no_fit_and_too_large_a_search_prove_nothing(monkeypatch):
    assert bag_fit.fit_runs([E], [A, B], [("bag", [0, 1])]) is None
    assert bag_fit.fit_runs([], [A], [("seq", [0])]) is None
    monkeypatch.setattr(bag_fit, "_BUDGET", 5)
    assert bag_fit.fit_runs([A, A], [A] * 8, [("bag", list(range(8)))]) is None


def test_runs_of_groups_bags_and_recorded_keys():
    runs = bag_fit.runs_of(["a", "b", "c", "d", "e"], {"b": 0, "c": 0, "e": 1})
    assert runs == [("seq", [0]), ("bag", [1, 2]), ("seq", [3]), ("bag", [4])]
