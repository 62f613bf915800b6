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
from collections.abc import Iterator, Sequence

from .container_groups import regroup_container
from .formats._record import Frozen
from .formats.objgraph import SLOT_MARK, ObjectGraph
from .keras_graph import (
    attribute_names,
    child_position,
    keras_holders,
    parting_chains,
    shortest_tree,
    tf_keras_models,
)
from .keras_reassign import layer_orders_open
from .object_slashed import split_slashed
from .pairing_fits import MAX_PAIRINGS, injections, pair_unique_fits
from .scoped_order import APPLY_ORDERS, ScopedOrder, keys_under, parse_order, scope_nodes


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


def _is_list(children: list[tuple[str, int]]) -> bool:
    return bool(children) and sorted(n for n, _ in children) == sorted(
        str(i) for i in range(len(children)))


def root_child(key: str) -> str:
    """The child of the checkpoint's root that an object-graph key lies under (``g`` for
    ``g/_functional/…``)."""
    return key.split("/", 1)[0]


_MAX_LIST_OR_DICT = 6  # nodes read both ways; beyond that the trainable order is unknown


def _list_or_dict(children: list[tuple[str, int]]) -> bool:
    """Children named ``0``…``n-1`` with ``n > 10``: a tracked list (``tf.Module`` visits it by
    index) or a dict with those keys (visited sorted as strings: ``0, 1, 10, 11, 2``…). Both
    write the same object graph, and the two orders differ only from eleven entries on."""
    return len(children) > 10 and _is_list(children)


def list_or_dict_paths(objects: ObjectGraph) -> dict[str, int]:
    """Object paths (``model/blocks``) of the nodes that may be a list or a dict with digit
    keys (see :func:`_list_or_dict`), each with its node id; the shortest path from the root,
    as TensorFlow names keys."""
    kids = objects.children
    out: dict[str, int] = {}
    path_of = {0: ""}
    queue = [0]
    while queue:
        node = queue.pop(0)
        if _list_or_dict(kids.get(node, [])):
            out[path_of[node]] = node
        for name, child in kids.get(node, []):
            if child not in path_of:
                path_of[child] = f"{path_of[node]}/{name}" if path_of[node] else name
                queue.append(child)
    return out


def variable_orders(objects: ObjectGraph, lists: bool = False,
                    starts: tuple[int, ...] | None = None) -> dict[str, list[dict[str, int]]]:
    """Returns, per hypothesis of :data:`APPLY_ORDERS`, the variable orderings it allows, each
    as checkpoint key -> position.

    ``trainable`` yields several orderings where the graph cannot tell a dict of variables
    (flattened in place by ``tf.Module``) from a sub-module (visited after the module's own
    variables), or a list from a dict with digit keys (``"0"``…``"11"``, which
    ``tf.Module`` visits sorted as strings); each such node is read both ways. With more
    than :data:`_MAX_LIST_OR_DICT` of the latter, one ordering is empty: the order is unknown,
    so nothing is paired by it. With ``lists`` (stated: :class:`NumberedLists`) such nodes
    are read as lists only. ``starts``: the objects whose variables ``apply()`` got, in that
    order (``--apply-order trainable:g,d``): each one's order, concatenated; default the root.
    """
    starts = (0,) if starts is None else starts
    kids = objects.children
    keys = objects.node_keys
    models = tf_keras_models(objects)

    def tracked() -> dict[str, int]:
        # Keras' trainable_variables: a layer's own variables first, in the order it tracked
        # them, then each sublayer's, depth first (Keras 3 Layer.variables:
        # _trainable_variables + _non_trainable_variables, then each of _layers; tf_keras
        # alike) - not the order the attributes were assigned, which puts a sublayer made
        # in __init__ before a weight made in build() (a ConvNeXt layer-scale gamma).
        # A tf_keras functional model lists its layers' variables before its own
        # (Model.trainable_weights), its layers in model.layers order (layer-N).
        order: dict[str, int] = {}
        seen = set(starts)
        stack: list[tuple[int, str | None]] = [(s, None) for s in reversed(starts)]
        while stack:
            node, key = stack.pop()
            if key is not None:
                order.setdefault(key, len(order))
                continue
            own, subs = [], []
            for _, child in kids.get(node, []):
                if child in seen:
                    continue
                seen.add(child)
                (own if child in keys else subs).append(child)
            todo = [(c, None) for c in subs]
            if node in models:
                todo += [(c, keys[c]) for c in own]
            else:
                for c in own:
                    order.setdefault(keys[c], len(order))
            stack.extend(reversed(todo))
        return order

    def module_flatten(inline_dicts: bool, as_dict: frozenset[int]) -> dict[str, int]:
        order: dict[str, int] = {}
        visited: set[int] = set()

        def leafy(node: int) -> bool:  # holds only variables (maybe through lists)
            ch = kids.get(node, [])
            return bool(ch) and all(c in keys or (_is_list(kids.get(c, [])) and leafy(c))
                                    for _, c in ch)

        def inline(node: int, subs: list[int], depth: int = 0) -> None:
            if node in keys:
                order.setdefault(keys[node], len(order))
            elif depth < 64 and _is_list(kids.get(node, [])):
                # A list by index; read as a dict with digit keys, sorted as strings.
                by = (lambda nc: nc[0]) if node in as_dict else (lambda nc: int(nc[0]))
                for _, c in sorted(kids[node], key=by):
                    inline(c, subs, depth + 1)
            elif depth < 64 and (inline_dicts or not attribute_names(kids.get(node, []))) and (
                    leafy(node)):  # children no module attribute could be named: a dict
                for _, c in sorted(kids[node]):
                    inline(c, subs, depth + 1)
            else:
                subs.append(node)

        for start in starts:  # each object's trainable_variables, concatenated
            queue: list[int] = [start] if start == 0 else []  # the root: a module
            if start:
                inline(start, queue)  # a variable, a list or dict of them, or a module
            while queue:
                node = queue.pop(0)
                if node in visited:
                    continue
                visited.add(node)
                subs: list[int] = []
                for _, child in sorted(kids.get(node, [])):
                    inline(child, subs)
                queue[0:0] = subs  # sub-modules right after this module, depth first
        return order

    either = [] if lists else sorted(list_or_dict_paths(objects).values())
    if len(either) > _MAX_LIST_OR_DICT:
        readings = [frozenset()]
        unknown = [{}]
    else:
        readings = [frozenset(n for i, n in enumerate(either) if mask >> i & 1)
                    for mask in range(1 << len(either))]
        unknown = []
    trainable = [module_flatten(inline, r) for inline in (False, True) for r in readings]
    return {"trainable": trainable + unknown, "tracked": [tracked()]}


def open_containers(objects: ObjectGraph, variables: list[str], alike,
                    strict: bool = False, lists: bool = False) -> list[str]:
    """Object paths of the containers whose type decides, under ``"trainable"``, which of two
    variables ``alike`` (same dtype and shape) comes first; empty when every reading agrees.

    ``tf.Module.trainable_variables`` flattens a dict (or list) in place, in sorted key order,
    but visits a sub-module's variables after its parent's own; the object graph records no
    types. So of two variables below the same node, the one sorting first comes second when a
    container on its path is a tf.Module and the other's path holds only dicts and lists
    (``{"b": v, "c": {"x": v}}`` beside ``w``: ``b, x, w`` as dicts, ``w, b, x`` as
    modules). Containers with the same children (names, and which are variables) are read
    alike (the blocks of one list); a node whose children are a list's, or a dict's keyed
    ``"0"``… (visited sorted as strings from eleven on), is never a module. With ``strict``,
    containers with the same children are not read alike (see :func:`containers_read_alike`).
    ``lists``: nodes with children ``0``… are stated lists (:class:`NumberedLists`).
    """
    parent, local = shortest_tree(objects)
    kids = objects.children

    def sig(node: int) -> tuple:
        return tuple(sorted((n, c in objects.node_keys) for n, c in kids.get(node, [])))

    def modular(node: int) -> bool:
        return (node not in objects.node_keys and not _is_list(kids.get(node, []))
                and attribute_names(kids.get(node, [])))

    found: list[str] = []
    for _x, _y, cx, cy, d, firsts in _diverging_pairs(objects, parent, local, variables,
                                                      alike, lists):
        if len(firsts) > 1:
            found.append(_path(cx[:d], local))
        for x_first in firsts:
            early, late = (cx, cy) if x_first else (cy, cx)
            late_sigs = {sig(n) for n in late[d:-1] if modular(n)}
            found.extend(_path(early[:j + 1], local) for j in range(d, len(early) - 1)
                         if modular(early[j]) and (strict or sig(early[j]) not in late_sigs))
        if found:
            return list(dict.fromkeys(found))
    return []


def containers_read_alike(objects: ObjectGraph, entries, variables) -> list[str]:
    """Object paths of the containers that ``"trainable"`` orders ``variables`` (checkpoint
    keys it paired) by reading as one type with a container holding the same children (the
    blocks of one list: all tf.Modules or all dicts); empty when no pairing rests on that.

    The file records no types: a list mixing a tf.Module and a dict with the same children
    (``[Block(), {"w": v, "b": v}]``) writes the same graph, and ``trainable_variables``
    flattens the dict before the module's variables, so such a pairing is the caller's
    reading, worth saying."""
    full = objects.full_names

    def alike(a: str, b: str) -> bool:
        return (full.get(a) == full.get(b) and entries[a].dtype == entries[b].dtype
                and entries[a].shape == entries[b].shape)

    loose = set(open_containers(objects, variables, alike))
    return [p for p in open_containers(objects, variables, alike, strict=True)
            if p not in loose]


def open_dicts(objects: ObjectGraph, variables: list[str], alike,
               lists: bool = False) -> list[str]:
    """Object paths of the nodes whose type decides, under ``"tracked"``, which of two
    variables ``alike`` (same dtype and shape) comes first; empty when every reading agrees.

    Keras (tf_keras ``_flatten_layers``, Keras 3 ``tree.flatten``) visits a dict's values in
    sorted key order, but a layer's attributes in the order they were assigned, which is the
    order the object graph records for both: ``{"zeta": fc, "alpha": fc}`` and ``self.zeta,
    self.alpha`` write the same graph and train ``alpha, zeta`` and ``zeta, alpha``. A node
    whose children are a list's is a list or a dict keyed ``"0"``… (sorted as strings from
    eleven entries on; ``lists``: a list, stated by :class:`NumberedLists`)."""
    parent, local = shortest_tree(objects)
    tracked = variable_orders(objects)["tracked"][0]
    found = [_path(cx[:d], local) for x, y, cx, _cy, d, readings in _diverging_pairs(
        objects, parent, local, [v for v in variables if v in tracked], alike, lists)
        if readings != {tracked[x] < tracked[y]}]
    return list(dict.fromkeys(found))


def _diverging_pairs(objects: ObjectGraph, parent: dict[int, int], local: dict[int, str],
                     variables: list[str], alike, lists: bool = False) -> Iterator[tuple]:
    """For each two of ``variables`` that are ``alike`` and part below a common object other
    than the root: ``(x, y, chain of x, chain of y, depth they part at, readings)``, chains
    being node paths from the root and ``readings`` the orders (``x`` first: True/False) the
    common object allows: by index for a list, also as strings for a list that may be a dict
    keyed ``"0"``… (unless ``lists`` states it is a list), else by name. ``x`` sorts before
    ``y``."""
    kids = objects.children
    models = tf_keras_models(objects)
    for x, y, cx, cy, d in parting_chains(objects, parent, variables, alike):
        lca, nx, ny = cx[d - 1], local[cx[d]], local[cy[d]]
        if lca in models:  # a tf_keras model's layers: model.layers order, recorded
            readings = {child_position(objects, lca, nx) < child_position(objects, lca, ny)}
        elif _is_list(kids.get(lca, [])):
            readings = {int(nx) < int(ny)} | (
                {nx < ny} if _list_or_dict(kids[lca]) and not lists else set())
        else:
            readings = {nx < ny}
        yield x, y, cx, cy, d, readings


def _path(chain: list[int], local: dict[int, str]) -> str:
    return "/".join(local[n] for n in chain if n in local)


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


def pair_by_names(entries, objects: ObjectGraph, names: set[str],
                  apply_order: str | Sequence[str] | None = None,
                  container: str | None = None) -> ObjectPairing:
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
        idx = _shadow_index(last, names) if head else None
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
        variables = by_name.get(head, [])
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
                                    lists=lists_stated(stated))):
            found.add(())  # the order rests on container types the file does not record
        if (stated == "tracked" and () not in found
                and open_dicts(objects, variables, lambda a, b: fits(a, b),
                               lists=lists_stated(stated))):
            found.add(())  # a dict (sorted by key) or a layer (assignment order)?
        if (isinstance(stated, str) and () not in found
                and layer_orders_open(objects, variables, fits, stated)):
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
