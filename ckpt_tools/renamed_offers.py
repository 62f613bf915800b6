"""The ``--ema-name`` offers of a refused renamed TF1 Saver whose graph holds several EMA
objects: ``Saver({"model/" + v.op.name: v for v in tf.compat.v1.global_variables()})``
beside ``first.apply([w, b])`` and ``slow.apply([w, b])`` pairs no average until one object is
named, and the refusal said "ckpt does not translate such keys" while ``--ema-name slow`` and
``--ema-name ExponentialMovingAverage`` each export that object's averages through the save
op (review-28-attack-r106 F3). Each offer is probed (:func:`~ckpt_tools.offer_probe.accepted`)
before it is named.
"""

from __future__ import annotations

from .checkpoint import Checkpoint


def renamed_object_offers(ckpt: Checkpoint) -> tuple[list[str], str]:
    """The ``--ema-name`` options (as typed) that the export accepts for ``ckpt``, where its
    ``.meta``'s update ops show several EMA objects, and a phrase naming them.

    Returns:
        ``(offers, objects)``: ``([], "")`` where the graph shows fewer than two objects or
        no name is accepted (the refusal then offers none).
    """
    from .ema_objects import object_names  # late: they run the map
    from .offer_probe import accepted, option_text

    names = sorted({n for each in object_names(ckpt, True).values() for n in each})
    if len(names) < 2:
        return [], ""
    offers = [option_text(n, (), a) for n, a in accepted(ckpt, names)]
    return offers, f"{len(names)} EMA objects ({', '.join(names)})" if offers else ""
