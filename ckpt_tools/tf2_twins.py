"""One reading, per TF2 checkpoint, of every variable whose recorded name reads ``<v>/<x>``:
is it a variable or an average? (review-16-attack-r33, r34, r35; the policy of note16).

TensorFlow names a TF2 average ``<v>/<EMA name>`` and records only its default EMA name
(``<v>/ExponentialMovingAverage``, ``_N`` where taken). A stored ``<v>/<x>`` with another
``x`` (``v`` a stored variable of its float dtype and shape, ``x`` not TF's default nor a
slot's, step counter's or batch norm statistic's name) may be the model's own variable (a
sub-module named like a weight: ``block/w/proj/kernel``; trainable deltas ``k0/delta``;
pruning masks ``w0/mask``) or an average of an EMA the user named (``w0/fast``). Nothing in
the file tells them apart but where the object graph keeps it. :func:`twins` reads every such
key once (cached on the object graph) into a :class:`Twin`: the fitting ``v`` keys
(``heads``), ``x``, the evidence and ONE outcome. Every consumer reads the outcome:
:func:`~ckpt_tools.object_roles.pair_object_shadows` (never a shadow unless stated),
:func:`~ckpt_tools.object_roles.classify_objects`,
:func:`~ckpt_tools.object_held.stated_held_shadows`, :func:`~ckpt_tools.object_held.held_hint`
and :func:`~ckpt_tools.raw_unproven.unproven_keys` (what ``export`` writes as stored).

Decision table, first row that applies:

==========================================  ==================  ======================
evidence                                    example             outcome
==========================================  ==================  ======================
:data:`SELF_NAMED_AVERAGE`: the key         ``dense/kernel/     :data:`VARIABLE`: never
``<w>/<N>``'s own average under ``N``       fast`` beside       ``<w>``'s average,
(``<w>/<N>/<N>``) is stored, and one        ``…/fast/fast``     whatever ``--ema-name``
model holds it with a fitting ``<w>``       (also TF's default) says (r38 F2, F4)
:data:`OWN_AVERAGE`: the key's own          ``k0/delta`` beside :data:`VARIABLE`: never
``<name>/ExponentialMovingAverage`` is      ``k0/delta/Expo…``  an average, whatever
stored (``ema.apply()`` got it)                                 ``--ema-name`` says
:data:`CONTAINER`: every parent is a list   ``ema=[...]``,      :data:`CANDIDATE`
or dict ALL of whose elements are such      ``m.avg=[...]``     (paired by name; a
twins (``apart``: no fitting ``v`` under                        raw export leaves out
the key's child of the root)                                    those kept apart)
:data:`SAME_MODEL`: a fitting ``v`` under   ``enc/gate/kernel`` :data:`AVERAGE_IF_STATED`:
the key's child of the root, or on the      beside ``enc/w``;   a weight unless
root (the model being the root)             ``Checkpoint(m)``   ``--ema-name x``
:data:`APART`: fitting ``v`` only under     ``Checkpoint(       :data:`CANDIDATE`
other children of the root                  model=m, a=w_avg)``
==========================================  ==================  ======================

A :data:`CANDIDATE` or a stated :data:`AVERAGE_IF_STATED` is an average only as far as
nothing but a name of the user's proves it: a raw export writes those no pairing uses as
stored, with a warning (:mod:`~ckpt_tools.raw_unproven`), unless kept in a container apart.
"""

from __future__ import annotations

from collections.abc import Mapping

from . import roles as R
from .formats._record import Frozen
from .formats.entry import TensorEntry
from .formats.objgraph import SLOT_MARK, ObjectGraph
from .pairing import root_child

#: Outcomes.
VARIABLE = "variable"
AVERAGE_IF_STATED = "average-if-stated"
CANDIDATE = "candidate"
#: Evidence.
OWN_AVERAGE = "own default-named average stored"
CONTAINER = "list or dict of only twins"
SAME_MODEL = "same model as a fitting variable"
APART = "saved apart from every fitting variable"
SELF_NAMED_AVERAGE = "own average under its own last name stored, same model"


class Twin(Frozen):
    """The reading of one key named ``<v>/<x>``: ``heads`` (the fitting ``v`` keys, sorted as
    stored), ``x`` (the name after ``v``'s, ``_N`` kept), ``evidence``, ``outcome`` and, for
    a :data:`CONTAINER`, whether it is kept ``apart`` from every fitting ``v``'s model."""

    _fields = ("key", "heads", "x", "evidence", "outcome", "apart")

    def __init__(self, key: str, heads: tuple[str, ...], x: str, evidence: str,
                 outcome: str, apart: bool = False) -> None:
        self.__dict__.update(key=key, heads=heads, x=x, evidence=evidence, outcome=outcome,
                             apart=apart)

    @property
    def head(self) -> str:
        """The one fitting ``v``, or ``""`` where none or several fit."""
        return self.heads[0] if len(self.heads) == 1 else ""

    def named(self, ema_name: str) -> bool:
        """Whether ``x`` is ``ema_name`` (``_N`` aside)."""
        return ema_name in (self.x, R.UNIQUIFIED.sub("", self.x))


def averaged_variables(full: dict[str, str]) -> set[str]:
    """Keys whose own average under TF's default name is stored (``<name>/
    ExponentialMovingAverage``, ``_N`` aside): ``ema.apply()`` got them, so they are
    variables, never another variable's average, whatever their name reads like (trainable
    deltas ``k0/delta`` beside a frozen ``k0``: review-16-attack-r35 F0, F0b, F3).

    Example:
        >>> sorted(averaged_variables({"a": "k", "b": "k/delta",
        ...                            "c": "k/delta/ExponentialMovingAverage"}))
        ['b']
    """
    heads = {f.rpartition("/")[0] for f in full.values()
             if "/" in f and R.UNIQUIFIED.sub("", f.rpartition("/")[2]) == R.DEFAULT_EMA_NAME}
    return {k for k, f in full.items() if f in heads}


def _fits(entries, a: str, b: str) -> bool:
    return entries[a].dtype == entries[b].dtype and entries[a].shape == entries[b].shape


def _nearest_fitting(key: str, f: str, by_name, entries) -> tuple[str, tuple[str, ...]]:
    """``(head, fitting keys)`` for the nearest stored name ``head`` that ``key``'s recorded
    name ``f`` extends and under which a key of its dtype and shape is stored, or ``("", ())``
    where none is."""
    head = f
    while "/" in head:
        head = head.rpartition("/")[0]
        fit = tuple(v for v in by_name.get(head, ()) if v != key and _fits(entries, v, key))
        if fit:
            return head, fit
    return "", ()


def _container_heads(key: str, full, by_name, entries, averaged) -> tuple[str, ...] | None:
    """The fitting ``v`` keys of ``key`` read as a twin of any stored name it extends (the
    nearest that has one), or ``None``: not a twin."""
    f = full.get(key or "")
    if f is None or key in averaged or entries[key].dtype_name not in R._FLOAT:
        return None
    return _nearest_fitting(key, f, by_name, entries)[1] or None


def averages_kept(objects: ObjectGraph, full: dict[str, str],
                  entries: Mapping[str, TensorEntry], averaged: set[str],
                  by_name: Mapping[str, list[str]]) -> dict[str, tuple[str, ...]]:
    """Keys every parent of which is a list or dict (children numbered ``0..n-1`` or named as
    no Python attribute can be, ``w0:0``) ALL of whose elements are stored variables named
    ``<v>/<x>`` (``v`` stored alike): an averages container (``m.avg = [ema.average(v) ...]``,
    ``ema=[slow...] + [fast...]``), not a module's own variables (review-16-attack-r33 F12,
    F14; r34 F1): key -> its fitting ``v`` keys (``averaged``: :func:`averaged_variables`;
    ``by_name``: recorded name -> its keys)."""
    parents: dict[int, list[int]] = {}
    for node, kids in objects.children.items():
        for _local, kid in kids:
            parents.setdefault(kid, []).append(node)
    keys = objects.node_keys
    kept: dict[str, tuple[str, ...]] = {}
    for node, key in keys.items():
        if key not in full or not parents.get(node):
            continue
        if all(objects.children[p] and all(
                not local.isidentifier()
                and _container_heads(keys.get(kid), full, by_name, entries, averaged)
                for local, kid in objects.children[p]) for p in parents[node]):
            kept[key] = _container_heads(key, full, by_name, entries, averaged) or ()
    return kept


def reach(objects: ObjectGraph) -> dict[str, frozenset[str]]:
    """Key -> the children of the root through which the object graph reaches it, by EVERY
    path: a checkpoint stores each variable under one key, the first path found breadth-first,
    so a model's weight a Keras 3 optimizer also tracks is stored as
    ``optimizer/_trainable_variables/0`` while the model reaches it too (review-17-attack-r37
    F2, F4); the key alone would put it outside its model."""
    out: dict[str, set[str]] = {}
    for local, top in objects.children.get(0, ()):
        seen, todo = {top}, [top]
        while todo:
            node = todo.pop()
            key = objects.node_keys.get(node)
            if key is not None:
                out.setdefault(key, set()).add(local)
            for _name, kid in objects.children.get(node, ()):
                if kid not in seen and kid != 0:
                    seen.add(kid)
                    todo.append(kid)
    return {k: frozenset(v) for k, v in out.items()}


def together(objects: ObjectGraph, a: str, b: str) -> bool:
    """Whether the keys ``a`` (a variable) and ``b`` lie in one model: one child of the root
    reaches both (:func:`reach`), or ``a`` sits on the root itself, the model being the root,
    so that every list on it may be its own (``Checkpoint(root=m)`` writes ``m.masks`` as it
    writes ``masks=[...]`` beside it: review-17-attack-r37 F5)."""
    cached = objects.__dict__.get("_reach")
    if cached is None:
        on_root = frozenset(objects.node_keys.get(kid) for _l, kid in objects.children.get(0, ()))
        cached = objects.__dict__["_reach"] = (reach(objects), on_root)
    paths, on_root = cached
    return a in on_root or bool(paths.get(a, frozenset({root_child(a)}))
                                & paths.get(b, frozenset({root_child(b)})))


def _self_named(key: str, f: str, by_name, named_under, entries,
                objects: ObjectGraph) -> Twin | None:
    """The :data:`SELF_NAMED_AVERAGE` reading of ``key`` (recorded name ``<w>/<N>``), or
    ``None``: its own average under the EMA name ``N`` would read it as (``<w>/<N>/<N>``,
    ``_N`` aside) is stored and one model holds it with a fitting ``<w>``. ``<w>/<N>`` can be
    ``<w>``'s average only under an EMA named ``N``, which then averaged ``<w>/<N>`` too: a
    variable of the model's (a delta ``dense/kernel/fast`` beside a frozen ``dense/kernel``),
    whatever ``--ema-name`` says (review-17-attack-r38 F2, F4). Saved apart from ``<w>`` (an
    EMA of an EMA looks the same) it is left to the other rows."""
    if "/" not in f or entries[key].dtype_name not in R._FLOAT:
        return None
    n = R.UNIQUIFIED.sub("", f.rpartition("/")[2])
    if n not in named_under.get(f, ()):
        return None
    head, fitting = _nearest_fitting(key, f, by_name, entries)
    if any(together(objects, v, key) for v in fitting):
        return Twin(key, fitting, f[len(head) + 1:], SELF_NAMED_AVERAGE, VARIABLE)
    return None


def _read(entries, objects: ObjectGraph) -> dict[str, Twin]:
    full = {k: objects.full_names[k] for k in entries
            if k in objects.full_names and SLOT_MARK not in k}
    by_name: dict[str, list[str]] = {}
    for k, f in full.items():
        by_name.setdefault(f, []).append(k)
    averaged = averaged_variables(full)
    kept = averages_kept(objects, full, entries, averaged, by_name)
    named_under: dict[str, set[str]] = {}
    for f in full.values():
        if "/" in f:
            parent, _, last = f.rpartition("/")
            named_under.setdefault(parent, set()).add(R.UNIQUIFIED.sub("", last))
    out: dict[str, Twin] = {}
    for k, f in full.items():
        if k in kept:
            heads = kept[k]
            name = full[heads[0]] if heads else ""
            out[k] = Twin(k, heads, f[len(name) + 1:] if name else "", CONTAINER, CANDIDATE,
                          apart=not any(together(objects, v, k) for v in heads))
            continue
        entry = entries[k]
        last = f.rpartition("/")[2]
        own = _self_named(k, f, by_name, named_under, entries, objects)
        if own is not None:
            out[k] = own
            continue
        if (entry.dtype_name not in R._FLOAT or R.SLOT_RE.match(last)
                or last in R._STEP_NAMES or last in R._BN_NAMES
                or R.UNIQUIFIED.sub("", last) in (R.DEFAULT_EMA_NAME, "biased", "local_step")):
            continue
        head = f
        while "/" in head:
            head = head.rpartition("/")[0]
            if head in by_name:
                break
        else:
            continue
        fitting = tuple(v for v in by_name[head] if v != k and _fits(entries, v, k))
        x = f[len(head) + 1:]
        if k in averaged:
            out[k] = Twin(k, fitting, x, OWN_AVERAGE, VARIABLE)
        elif any(together(objects, v, k) for v in fitting):
            out[k] = Twin(k, fitting, x, SAME_MODEL, AVERAGE_IF_STATED)
        elif fitting:
            out[k] = Twin(k, fitting, x, APART, CANDIDATE)
    return out


def twins(entries: Mapping[str, TensorEntry], objects: ObjectGraph) -> dict[str, Twin]:
    """Every key of ``entries`` whose recorded name reads ``<v>/<x>`` -> its :class:`Twin`
    (see the module's decision table); computed once per ``entries`` and object graph."""
    cached = objects.__dict__.get("_twins")
    if cached is not None and cached[0] is entries:
        return cached[1]
    out = _read(entries, objects)
    objects.__dict__["_twins"] = (entries, out)
    return out


def ckpt_twins(ckpt) -> dict[str, Twin]:
    """:func:`twins` of a checkpoint (empty without an object graph)."""
    return {} if ckpt.objects is None else twins(ckpt.entries(), ckpt.objects)
