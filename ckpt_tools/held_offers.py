"""What a refusal of a model-tracked ``<v>/<name>`` offers (:mod:`~ckpt_tools.object_held`),
probed before it is offered.

The unstated refusal offered ``--ema-name fast`` where ``m.enc.w_avg = fast.average(m.enc.w)``
sits beside a tied weight referenced above its module (``m.head = m.enc.w``): that option, true,
was then refused as "no --ema-name reads it as an average", and nothing read the averages kept
beside their weights' own paths either (review-32-attack-r125 M1). TensorFlow records a tied
weight as one object with two parents, not which one owns it, so the file is byte for byte the
one a module keeping a reference to ``m.head`` beside its own weight named ``tw/fast`` writes
(r123 F1): that key stays refused; an ``--exclude`` of it lets the others be read, and only what
:func:`~ckpt_tools.offer_probe.works` accepts is offered.
"""

from __future__ import annotations

from .offer_probe import option_text, python_text, works


def held_offer(ckpt, name: str, doubt: dict[str, tuple[str, ...]], show,
               alone: bool = True) -> str:
    """The options that read the averages named ``name`` under ``--ema-name name``, probed:
    the name alone, with ``--allow-missing``, else leaving out the ``doubt`` keys (those no
    object tracks beside their weight's own path: key -> the weights they are named after),
    their weights then left out too or written raw. ``show(key)`` is the path typed;
    ``alone=False`` (``--ema-name name`` already refused) probes only the ``--exclude`` ones.

    Returns:
        `str`: ``--ema-name fast --exclude 'model/enc/w_avg' --allow-missing
        (ema_name='fast', ...)``, the first accepted offer with its Python keywords; ``""``
        where none is accepted (no ``--ema-name`` decides)."""
    out = tuple(show(k) for k in doubt)
    heads = tuple(dict.fromkeys(show(h) for hs in doubt.values() for h in hs))
    offers = [(name, (), False), (name, (), True)] if alone else []
    if doubt:
        offers += [(name, out, False), (name, (*out, *heads), False), (name, out, True)]
    # one plan run each, refusal path only; the first accepted is offered
    found = next((o for o in offers if works(ckpt, *o)), None)
    if found is None:
        return ""
    return f"{option_text(*found)} ({python_text(*found)} in Python)"


def second_path(objects, key: str, heads, held) -> tuple[str, str] | None:
    """Where an object tracking ``key`` directly tracks one of ``heads`` too, but not on that
    head's own (first) path (a tied weight referenced above its module): ``(head, the head's
    path through that object)``, ``model/enc/w`` for ``model/head``; else ``None``. ``held``:
    variable key -> the ids of the objects tracking it directly."""
    path = objects.paths.get(key, key)
    for node in held.get(key, frozenset()):
        kids = objects.children.get(node, ())
        mine = next((local for local, kid in kids if objects.node_keys.get(kid) == key), None)
        if mine is None or not path.endswith("/" + mine):
            continue
        for h in heads:
            local = next((loc for loc, kid in kids if objects.node_keys.get(kid) == h), None)
            if local is not None:
                return h, path[: -len(mine)] + local
    return None
