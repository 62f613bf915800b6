"""Whether a same-prefix ``.meta``'s save op reads a checkpoint's keys as their names say
(:mod:`~ckpt_tools.meta_sibling`): the one comparison of what such a graph records with the
names, which may only add doubt.

A key agrees with its source variable only where it is that variable's name, or its name with
a scope added or stripped (``{"model/" + v.op.name: v}``, or ``model/`` dropped), and, where the
source is a shadow or slot ``<X><v>/<rest>`` of a graph variable ``v`` (after any scope ``X``:
an ``ExponentialMovingAverage(name="avg")`` made in ``variable_scope("model")`` names its shadow
``model/model/w/avg``), the key keeps its ``/<rest>`` and the key it names as that variable (if
saved) is read from ``v``. Anything else reads the key otherwise than its name: a swapping
Saver keying an average under its variable's name, with or without the variable's scope
(``{v.op.name[len("model/"):]: ema.average(v)}``, review-25-attack-r87 F1), or a
``Saver(ema.variables_to_restore())`` keying a weight under its average's name.
"""

from __future__ import annotations

from .formats.meta_saver import PART

__all__ = ["against_names", "is_variable", "names_another_variable"]

_VARIABLE_OPS = frozenset({"VariableV2", "Variable", "VarHandleOp"})


def is_variable(nodes, name: str, parts: bool = True) -> bool:
    """Whether ``name`` is a variable of the graph (``parts``: or a partitioned one's name,
    ``name/part_0`` a variable).

    Returns:
        `bool`.
    """
    names = (name, f"{name}/part_0") if parts else (name,)
    return any(nodes.op(n) in _VARIABLE_OPS for n in names if n in nodes)


def _owner(name: str, nodes) -> tuple[str, str] | None:
    """``(variable, rest)`` where ``name`` is ``<X><variable>/<rest>`` for a variable of the
    graph after any scope ``X`` (a shadow or slot of it; the shortest ``rest``, then the
    longest variable); ``None`` where no proper part of ``name`` is a variable."""
    parts = name.split("/")
    for end in range(len(parts) - 1, 0, -1):
        for start in range(end):
            head = "/".join(parts[start:end])
            if is_variable(nodes, head, parts=False):
                return head, "/".join(parts[end:])
    return None


def _renamed(name: str, source: str) -> bool:
    """Whether ``name`` is ``source`` with a scope added or stripped (``/``-aligned)."""
    return name.endswith("/" + source) or source.endswith("/" + name)


def against_names(sources: dict[str, list[str]], nodes) -> tuple[str, list[str]] | None:
    """The first key (sorted) that ``sources`` (key -> the variables a save op wrote it from)
    saves otherwise than its name says, with its sources.

    ``/part_N`` is dropped anywhere (a part's shadow ``<v>/part_N/<ema>`` is saved under
    ``<v>/<ema>``). A key contradicts its source where it is read from several variables, where
    it names another variable of the graph, where it is not the source's name with a scope
    added or stripped (a swapping Saver's key named as the variable holds ``<X><v>/<ema>``,
    whatever scope it drops: review-25-attack-r87 F1), or where the source is a shadow or slot
    ``<X><v>/<rest>`` and the key it names as ``v`` (if saved) is read from another variable.
    A Saver keying each variable under a scope added or stripped agrees
    (review-25-attack-r83 F3).

    Args:
        sources: a save op's key -> the graph variables it read the key from.
        nodes: the nodes of the graph that save op is in.

    Returns:
        ``(key, sources)``, or ``None`` where every key reads as its name.
    """
    read = {k: {PART.sub("", s) for s in of} for k, of in sources.items()}
    for key in sorted(sources):
        name = PART.sub("", key)
        if len(read[key]) != 1:
            return key, sources[key]
        source = next(iter(read[key]))
        if source == name:
            continue
        if is_variable(nodes, name) or not _renamed(name, source):
            return key, sources[key]
        owned = _owner(sources[key][0], nodes)
        if owned is None:
            continue
        parent, rest = (PART.sub("", f"/{p}")[1:] for p in owned)
        owner = name[:-len(rest) - 1]
        if not name.endswith(f"/{rest}") or owner in read and read[owner] != {parent}:
            return key, sources[key]
    return None


def names_another_variable(key: str, sources: list[str], nodes) -> bool:
    """Whether a save op wrote ``key`` from a variable its name does not name at all: not the
    source, nor its shadow's or slot's variable, with a scope added or stripped, nor an
    average's name of one of those (a ``var_list`` dict ``{"a": w}``, review-32-attack-r121
    F4). A swapping Saver's key (``w`` from ``w/ExponentialMovingAverage``, ``w/EMA`` from
    ``w``) names its variable and is ``False``; so is a key read from several variables.

    Returns:
        `bool`.
    """
    name = PART.sub("", key)
    read = {PART.sub("", s) for s in sources}
    if len(read) != 1:
        return False  # (against_names doubts these; no one variable to compare)
    source = next(iter(read))
    owned = _owner(sources[0], nodes)
    named = {source} | ({PART.sub("", f"/{owned[0]}")[1:]} if owned is not None else set())
    parts = name.split("/")
    stems = {"/".join(parts[:i]) for i in range(1, len(parts) + 1)}
    return not any(a == b or _renamed(a, b) for a in stems for b in named)
