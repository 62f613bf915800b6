"""Pair TF2 ``ema.average(v)`` variables with ``v`` from what TensorFlow recorded, or refuse.

A TF2 checkpoint records each variable's own name (``full_name``). An average is named
``<name of v>/ExponentialMovingAverage``, and when that name is taken TensorFlow appends ``_1``,
``_2``… in the order ``ema.apply()`` created the averages. With distinct variable names the name
alone proves the pairing. Unnamed ``tf.Variable``s are all called ``Variable``, so the name only
narrows the choice to a group; inside a group only dtype and shape can tell the variables apart.
The averages' creation order (``_1``, ``_2``…) follows the order in which ``apply()`` saw the
variables, and that order is not stored: a program may pass any order (``head + body``, a
reversed list, several ``apply()`` calls). So a shadow is paired by default only when exactly one
variable of its group fits it; otherwise it is reported as ambiguous with its candidates, never
tie-broken by key order or by a guessed order. The caller may *state* the order (one of
:data:`APPLY_ORDERS`, derived from the object graph); then the creation order is matched with it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .container_groups import regroup_container
from .formats._record import Frozen
from .formats.objgraph import SLOT_MARK, ObjectGraph
from .keras_graph import keras_holders
from .keras_reassign import layer_orders_open
from .object_slashed import split_slashed
from .pairing_fits import MAX_PAIRINGS, injections, pair_unique_fits
from .scoped_order import APPLY_ORDERS, ScopedOrder, keys_under, parse_order, scope_nodes
from .trainable_order import containers_read_alike as containers_read_alike  # re-exported
from .trainable_order import list_or_dict_paths as list_or_dict_paths  # re-exported
from .trainable_order import open_containers, open_dicts, variable_orders


class NumberedLists(str):
    """An ``apply_order`` (one of :data:`APPLY_ORDERS`) stated together with this: objects whose
    children are named ``0``, ``1``… are lists (visited by index), not dicts keyed ``"0"``…
    (visited sorted as strings: ``0, 1, 10, 11, 2``…). The file cannot tell the two apart
    from eleven entries on; ``--numbered-lists`` states it. Compares equal to the order it
    wraps, so every check of the order holds; :func:`lists_stated` reads the statement."""

    numbered_lists = True

    def __repr__(self) -> str:
        return f"numbered_lists({str.__repr__(self)})"


def numbered_lists(apply_order: str = "trainable") -> NumberedLists | ScopedOrder:
    """``apply_order`` stated with the objects whose children are named ``0``, ``1``… read as
    lists (:class:`NumberedLists`); pass the result as ``apply_order=`` (Python's spelling of
    ``--apply-order ORDER --numbered-lists``; ``ORDER:PATH`` too, review-15-attack-r31 F6).

    Example:
        >>> numbered_lists("trainable") == "trainable"
        True
        >>> numbered_lists("trainable:generator").numbered_lists
        True

    Raises:
        ValueError: ``apply_order`` is not one of :data:`APPLY_ORDERS`, nor ``ORDER:PATH``.
    """
    parsed = parse_order(apply_order, keys=False)
    if isinstance(parsed, ScopedOrder):
        return ScopedOrder(str.__str__(parsed), parsed.within, numbered_lists=True)
    if parsed is None:
        raise ValueError(f"apply_order must be one of {', '.join(APPLY_ORDERS)}")
    return NumberedLists(parsed)


def lists_stated(apply_order) -> bool:
    """Whether ``apply_order`` (or a live order's ``stated``) states numbered children lists."""
    return bool(getattr(apply_order, "numbered_lists", False)
                or getattr(getattr(apply_order, "stated", None), "numbered_lists", False))
_NUMBERED = re.compile(r"^(.*)_(\d+)$")


class ObjectPairing(Frozen):
    """Result of :func:`pair_by_names`.

    Attributes:
        pairs: shadow key -> key of the variable it averages (proven).
        ambiguous: shadow key -> candidate variable keys, for shadows the file cannot place.
        set_aside: shadows of other EMA objects than the one the caller chose, left unpaired
            (see ``container`` in :func:`pair_by_names`).
    """

    pairs: dict[str, str]
    ambiguous: dict[str, tuple[str, ...]]
    set_aside: frozenset[str]
    _fields = ("pairs", "ambiguous", "set_aside")

    def __init__(self, pairs: dict[str, str] | None = None,
                 ambiguous: dict[str, tuple[str, ...]] | None = None,
                 set_aside=frozenset()) -> None:
        self.__dict__.update(pairs={} if pairs is None else pairs,
                             ambiguous={} if ambiguous is None else ambiguous,
                             set_aside=frozenset(set_aside))


def _shadow_index(last: str, names: set[str]) -> int | None:
    """Creation index of an average named ``last`` (``ExponentialMovingAverage_3`` -> 3), or
    ``None`` when ``last`` is not an EMA name."""
    if last in names:
        return 0
    m = _NUMBERED.match(last)
    if m and m.group(1) in names:
        return int(m.group(2))
    return None


def root_child(key: str) -> str:
    """The child of the checkpoint's root that an object-graph key lies under (``g`` for
    ``g/_functional/…``)."""
    return key.split("/", 1)[0]


class LiveOrder(tuple):
    """A live object's ``trainable_variables`` as checkpoint keys, in order, with ``held``: the
    keys of every variable the object holds. A held variable missing from the order is one the
    object proves non-trainable, so ``ema.apply(obj.trainable_variables)`` did not average it.
    ``stated`` (one of :data:`APPLY_ORDERS`, or None): the order read from the file for groups
    of variables the object does not hold.

    Example:
        >>> sorted(LiveOrder(["model/a", "model/c"], held={"model/a", "model/b"}).held)
        ['model/a', 'model/b', 'model/c']
    """

    held: frozenset[str]
    stated: str | None

    def __new__(cls, keys, held=(), stated: str | None = None) -> LiveOrder:
        self = super().__new__(cls, keys)
        self.held = frozenset(held) | frozenset(keys)
        self.stated = stated
        return self

    def __eq__(self, other) -> bool:
        return (isinstance(other, tuple) and tuple.__eq__(self, other)
                and getattr(other, "held", None) == self.held
                and getattr(other, "stated", None) == self.stated)

    def __hash__(self) -> int:
        return hash((tuple(self), self.held, self.stated))


# the dtypes ExponentialMovingAverage.apply() accepts (tf.train / TF1 moving_averages)
_EMA_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})


def pair_by_names(entries, objects: ObjectGraph, names: set[str],
                  apply_order: str | Sequence[str] | None = None,
                  container: str | None = None, not_shadows=frozenset()) -> ObjectPairing:
    """Pairs TF2 averages with their variables through the recorded names and the object graph.

    Args:
        entries: checkpoint key -> entry (dtype and shape must match within a pair).
        objects: the checkpoint's object graph.
        names: EMA names to recognise (``ExponentialMovingAverage``, ``avg``…).
        apply_order: one of :data:`APPLY_ORDERS` to state the order ``apply()`` received
            same-named variables in, or that order itself as checkpoint keys (``apply_ema``
            reads it from the live module's ``trainable_variables``, which the file cannot
            tell); default: pair a shadow only when one variable of its group has its dtype
            and shape.
        container: with ``apply_order``, the root attribute the caller chose the averages
            of (``--ema-name fast`` for ``tf.train.Checkpoint(fast=[...], slow=[...])``). Two
            default-named EMA objects number their averages with one counter
            (``Variable/ExponentialMovingAverage`` to ``_5`` for three variables), so a group
            then holds more averages than variables and no single order fits; the chosen
            attribute's averages alone are one object's, in its ``apply()`` order. Used only
            for such groups; the other attributes' averages there are ``set_aside``.
        not_shadows: keys never read as averages (the model's own variables named like
            one: :func:`ckpt_tools.object_held.model_held`).

    Returns:
        :class:`ObjectPairing`.
    """
    apply_order = parse_order(apply_order)
    scope = scope_nodes(objects, apply_order)  # trainable:model/generator (r25 F5, r31 F4)
    under = None if scope is None else keys_under(objects, scope)
    given = None if apply_order is None or isinstance(apply_order, str) else {
        k: i for i, k in enumerate(apply_order)}
    held = getattr(apply_order, "held", None)  # a LiveOrder: the others are not trainable
    if given is None and apply_order is not None and apply_order not in APPLY_ORDERS:
        raise ValueError(f"apply_order must be one of {', '.join(APPLY_ORDERS)}")
    full = {k: objects.full_names[k] for k in entries
            if k in objects.full_names and SLOT_MARK not in k}
    # One group per variable name and EMA name: TF's _N counts each full name apart
    # (Variable/fast, Variable/fast_1 beside Variable/slow, Variable/slow_1), so two EMA
    # objects' averages of same-named variables are ordered each among their own.
    groups: dict[tuple[str, str], list[tuple[int, str]]] = {}
    shadow_keys = set()
    stored = set(full.values())
    for k, f in full.items():
        # name="ema/fast": w0/ema/fast is w0's, not a w0/ema's (review-15-attack-r31 F8)
        head, last = split_slashed(f, names, stored) or f.rpartition("/")[::2]
        idx = _shadow_index(last, names) if head and k not in not_shadows else None
        if idx is not None:
            base = last if last in names else _NUMBERED.match(last).group(1)
            groups.setdefault((head, base), []).append((idx, k))
            shadow_keys.add(k)
    if container is not None and apply_order is not None:
        regroup_container(groups, full, container)  # name="ema" beside "ema_1": F2c
    by_name: dict[str, list[str]] = {}
    for k, f in full.items():
        if k not in shadow_keys:
            by_name.setdefault(f, []).append(k)

    def fits(s: str, v: str) -> bool:
        return entries[s].dtype == entries[v].dtype and entries[s].shape == entries[v].shape

    result = ObjectPairing()
    aside: set[str] = set()
    orders = None
    for (head, _base), members in groups.items():
        # ema.apply() averages only half, bfloat16, float and double variables (TypeError
        # else): an int64 step TF also names "Variable" is none of the group's candidates,
        # and counting it left every stated order incomplete (review-32-attack-r121 F2)
        variables = [v for v in by_name.get(head, []) if entries[v].dtype_name in _EMA_DTYPES]
        scoped = under is not None and any(v in under for v in variables)
        if scoped:
            variables = [v for v in variables if v in under]  # the statement
        if not variables:
            continue  # a tensor's average (a loss), or the variable was not saved
        members.sort()
        shadows = [k for _, k in members]
        if len(variables) == 1:
            for s in shadows:
                if fits(s, variables[0]):
                    result.pairs[s] = variables[0]
            continue
        if apply_order is None:
            # The order apply() got the variables in is not in the file: only a shadow that
            # fits one variable of its group (dtype and shape) is proven.
            pair_unique_fits(result, shadows, variables, fits)
            continue
        # A live order covers the groups its objects hold; the others are read from the file.
        stated = apply_order if held is None or any(v in held for v in variables) else (
            getattr(apply_order, "stated", None))
        if stated is None:
            pair_unique_fits(result, shadows, variables, fits)
            continue
        if not scoped and len({root_child(v) for v in variables}) > 1:
            # Same-named variables under different children of the root (two models both
            # called "net", a GAN's G and D): the object graph lists the root's children by
            # attribute name (tf.train.Checkpoint sorts its arguments), not in the order the
            # objects were created or passed to apply(), so no stated order decides between
            # them; only a unique dtype/shape fit is proven.
            pair_unique_fits(result, shadows, variables, fits)
            continue
        if stated == "trainable" and keras_holders(objects, variables):
            # tf.Module.trainable_variables walks a Keras object's Python attributes (a
            # tf_keras functional model's _output_layers first), which the file does not
            # record: no order is read from it (a live object's own order, given as keys,
            # is not "trainable" and is used below).
            for s in shadows:
                result.ambiguous[s] = tuple(sorted(v for v in variables if fits(s, v))) or (
                    tuple(sorted(variables)))
            continue
        chosen = (stated,) if isinstance(stated, str) else ("given",)
        if orders is None or chosen[0] not in orders:
            orders = {"given": [given]} if given is not None else {}
            orders.update(variable_orders(objects, lists_stated(stated), scope)
                          if isinstance(stated, str) else {})
        if container is not None and len(shadows) > len(variables):
            mine = [s for s in shadows if root_child(s) == container]
            if mine and len(mine) < len(shadows):
                aside.update(s for s in shadows if s not in mine)
                members = [(i, k) for i, k in members if k in mine]
                shadows = mine
        distinct_idx = len({i for i, _ in members}) == len(members)
        found: set[tuple[str, ...]] = set()
        for hyp in chosen:
            for order in orders[hyp]:
                seq = sorted((v for v in variables if v in order), key=order.__getitem__)
                complete = len(seq) == len(variables) or (
                    held is not None and all(v in held for v in variables))
                if distinct_idx and complete:
                    # The order places every variable of the group: averages of only some of
                    # them (an EMA of a sub-module) say nothing of which (review F23).
                    found.update(injections(shadows, seq, fits) if len(seq) == len(shadows)
                                 else ())
                else:  # creation order unknown: any fitting variable is possible
                    found.add(())
        if (stated == "trainable" and () not in found
                and open_containers(objects, variables, lambda a, b: fits(a, b),
                                    lists=lists_stated(stated), starts=scope)):
            found.add(())  # the order rests on container types the file does not record
        if (stated == "tracked" and () not in found
                and open_dicts(objects, variables, lambda a, b: fits(a, b),
                               lists=lists_stated(stated))):
            found.add(())  # a dict (sorted by key) or a layer (assignment order)?
        if (isinstance(stated, str) and () not in found
                and layer_orders_open(objects, variables, fits, stated, scope)):
            found.add(())  # Keras tracks a re-assigned sublayer last; a tf.Module sorts
        found_list = sorted(found)
        if len(found_list) == 1 and found_list[0]:
            result.pairs.update(zip(shadows, found_list[0], strict=True))
            continue
        if not found_list:
            # The stated order contradicts the dtypes and shapes: the statement is wrong, so
            # nothing of this group rests on it (refused, not paired by shape alone).
            for s in shadows:
                fitting = tuple(sorted(v for v in variables if fits(s, v))) or tuple(
                    sorted(variables))
                result.ambiguous[s] = fitting
            continue
        for i, s in enumerate(shadows):
            fitting = {v for v in variables if fits(s, v)}
            if () in found or not found_list or len(found_list) > MAX_PAIRINGS:
                cands = fitting
            else:
                cands = {p[i] for p in found_list}
            if len(cands) == 1:  # every fitting explanation agrees on this one
                result.pairs[s] = cands.pop()
            elif cands:
                result.ambiguous[s] = tuple(sorted(cands))
    if aside:
        result = ObjectPairing(result.pairs, result.ambiguous, aside)
    return result
