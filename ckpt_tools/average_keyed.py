"""``ckpt average`` of TF2 averages that the user's own holder key names (session 33, note32
Open item 2): averages named after a name several variables share (unnamed ``tf.Variable``\\ s,
all ``Variable``; Keras layers' ``bias``) are numbered ``_N`` in the order each process's
``ema.apply()`` got them, so their names prove nothing across saves
(:mod:`~ckpt_tools.average_shared`). Where they sit in the object graph can:

- a dict keyed by the weights' paths, ``ema={"dense/bias": ema.average(m.dense.bias)}``
  (``ema/dense.Sbias``; or the same paths as nested dicts or attributes), beside
  ``model/dense/bias``: the key is the user's text naming the weight, written by the same
  code in every process whatever order ``apply()`` got;
- an attribute beside its weight, ``m.enc.w_avg = ema.average(m.enc.w)``: the module holding
  the average holds exactly one variable of the name its average is named after, and the
  attribute's own name is that weight's attribute name plus a suffix (``w_avg``, ``w_ema``).
  One weight of that name nearby proves nothing alone: a loop's ``m.a0``, ``m.a1`` set in
  ``apply()``'s order beside ``m.w`` (the other ``Variable`` in ``m.sub``) name no weight, and
  ``a0`` held w's average in one save and sub.w's in the next (review-33-attack-r129 C1).

A key is proven here only where its recorded ``full_name`` is ``<S>/<one part>`` and the
weight its place names records ``S`` with the key's dtype and shape: the file's own record
that the key holds an average of a variable of that name, and the user's key saying which one.
A list (``ema=[...]`` built in ``apply()``'s order, ``ema/0``) or a dict keyed ``"0"``... (the
file cannot tell them apart) is never proven: its places follow the order the code iterated
in, which may change on resume (review-32-attack-r121 F3).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable

from .checkpoint import Checkpoint

__all__ = ["keyed_owners", "keyed_alike"]


def _edges(ckpt: Checkpoint) -> dict[str, tuple[str, ...]]:
    """Variable key -> the local names (unescaped) of the object graph's first path to it, as
    TensorFlow builds keys (breadth first from the root)."""
    objects = ckpt.objects
    path: dict[int, tuple[str, ...]] = {0: ()}
    queue = deque([0])
    while queue:
        node = queue.popleft()
        for name, child in objects.children.get(node, ()):
            if child not in path:
                path[child] = (*path[node], name)
                queue.append(child)
    return {k: path[n] for n, k in objects.node_keys.items() if n in path}


def _fits(ckpt: Checkpoint, a: str, b: str) -> bool:
    """Whether keys ``a`` and ``b`` are stored with one dtype and shape."""
    entries = ckpt.entries()
    return a in entries and b in entries and (
        entries[a].dtype_name, entries[a].shape) == (entries[b].dtype_name, entries[b].shape)


def _names_weight(local: str, weight: str) -> bool:
    """Whether the attribute name ``local`` is the attribute name ``weight`` plus a suffix that
    starts with a separator and holds no counter (``w_avg``, ``w_ema``; not ``w_1``, ``w0``,
    ``a0`` beside ``a``, nor ``w_ema_0``: a loop's counter after a word, set in apply()
    order, review-33-attack-r134 C1): the user's word that the attribute holds that weight's
    average."""
    rest = local[len(weight):] if local.startswith(weight) else ""
    return len(rest) > 1 and not rest[0].isalnum() and any(ch.isalpha() for ch in rest) \
        and not any(ch.isdigit() for ch in rest)


def keyed_owners(ckpt: Checkpoint, keys: Iterable[str]) -> dict[str, str]:
    """Of ``keys`` (averages of ``ckpt``), those the holder's own key proves the average of
    one weight: key -> that weight's key (see the module docstring); ``{}`` where ``ckpt``
    has no object graph."""
    keys = list(keys)
    if ckpt.objects is None or not keys:
        return {}
    full = ckpt.objects.full_names
    edges = _edges(ckpt)
    by_name: dict[str, list[str]] = {}
    for w in edges:
        if w in full:
            by_name.setdefault(full[w], []).append(w)
    out: dict[str, str] = {}
    for key in keys:
        head, _, tail = (full.get(key) or "").rpartition("/")
        mine = edges.get(key)
        if not head or not tail or not mine or mine[-1].isdigit():
            continue  # no average's name, or a list's (or "0" dict key's) place
        named = [w for w in by_name.get(head, ()) if w != key and _fits(ckpt, w, key)]
        # beside: the object holding the average holds one variable of that name, and the
        # key's own name is that weight's attribute name plus a suffix (review-33-attack-r129 C1)
        beside = [w for w in named if edges[w][:-1] == mine[:-1]
                  and _names_weight(mine[-1], edges[w][-1])]
        # a mirror of the weight's path under another root (a dict keyed "dense/bias"), no
        # place of it a list's
        rest = "/".join(mine[1:])
        mirror = [] if any(e.isdigit() for e in mine[1:]) else [
            w for w in named if edges[w][0] != mine[0] and "/".join(edges[w][1:]) == rest]
        if len(beside) == 1 and not mirror:
            out[key] = beside[0]
        elif len(mirror) == 1 and not beside:
            out[key] = mirror[0]
    # two keys read as one weight's average prove neither (review-33-attack-r134 C1)
    owners = Counter(out.values())
    return {k: w for k, w in out.items() if owners[w] == 1}


def keyed_alike(ckpts: list[Checkpoint], keys: Iterable[str]) -> set[str]:
    """Of ``keys``, those every one of ``ckpts`` proves (:func:`keyed_owners`) the average
    of the same weight key."""
    keys = list(keys)
    alike: set[str] | None = None
    first: dict[str, str] = {}
    for ckpt in ckpts:
        owners = keyed_owners(ckpt, keys)
        if alike is None:
            first, alike = owners, set(owners)
        else:
            alike = {k for k in alike if owners.get(k) == first[k]}
    return alike or set()
