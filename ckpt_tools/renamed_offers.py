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
from .wording import agreeing, counted


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



def mixed_refusal(ckpt: Checkpoint, beside: str) -> str:
    """The rest of the refusal of a Saver writing some keys named as variables from their
    averages beside others holding raw weights (``beside``:
    :func:`~ckpt_tools.raw_beside_averages.mixed_said`). Where the ``.meta``'s update ops show
    several EMA objects each one's averages may all be saved under other keys, so the file
    does hold one set of them, which it said it did not: ckpt pairs none of them, and the
    graph's own Saver restores each key into its variable (review-32-attack-r117 M4).

    Returns:
        `str`: from ``": "`` on."""
    from .ema_objects import object_names  # late: they run the map

    names = sorted({n for each in object_names(ckpt, True).values() for n in each})
    objects = f"{len(names)} EMA objects ({', '.join(names)})" if len(names) > 1 else ""
    return (f": {beside}: "
            + (f"the .meta's update ops show {objects}, and ckpt pairs no one object's "
               "averages with keys mixed so (--ema-name is refused too)" if objects else
               "the file holds neither one set of averages nor one of raw weights")
            + ", and no option of ckpt export makes the averages from it; "
            "ckpt export --raw refuses it too (it writes raw weights only, never an "
            "average), and --raw with --exclude of the keys holding averages writes the "
            "raw values alone" + (
                "; in the graph imported from the .meta its own Saver (tf.compat.v1.train."
                "import_meta_graph(...).restore(sess, path)) restores each key into the "
                "variable it was saved from" if objects else ""))


def evaluation_resave_offer(ckpt: Checkpoint, keys) -> str:
    """What decides a renamed ``variables_to_restore()`` Saver's keys where the save op cannot
    pair them: ``Saver({"model/" + k: v for k, v in ema.variables_to_restore().items()})``
    writes ``model/w/ExponentialMovingAverage`` from ``w``, which holds the raw weight where a
    training graph saved it and the average where an evaluation graph restored the averages
    and saved again (the same graph code, its ``apply()`` built but never run, so the file
    cannot show which); ``--averages-only`` alone was refused with the rest, while
    ``--no-meta --averages-only`` states the latter and reads them by their names
    (review-28-attack-r106 F4). ``keys``: the refused renamed keys that a pairing reads (no
    step or slot).

    Returns:
        `str`: the clause offering ``--no-meta --averages-only`` where every one of ``keys``
        was written from its own variable and that export is accepted, with ``--exclude`` of
        each key the ``.meta`` shows no EMA object averaging (raw whichever graph saved it:
        :func:`~ckpt_tools.never_averaged.never_averaged`, review-29-attack-r108 F1);
        ``""`` otherwise.
    """
    from .never_averaged import exclude_text, never_averaged
    from .offer_probe import works  # late: it runs the export plan
    from .raw_named import named_as_own_average

    own = named_as_own_average(ckpt)
    if not keys or not all(k in own for k in keys):
        return ""
    # a key the graph shows no object averaging holds its variable's raw value whatever
    # graph saved it: the offer leaves it out (review-29-attack-r108 F1)
    held = never_averaged(ckpt)
    never = sorted(k for k in held if k in keys)
    stated = ckpt.reopened(averages_only=True)
    try:
        if len(never) == len(keys) or not works(stated.with_meta(False), exclude=tuple(never)):
            return ""
    finally:
        stated.close()
    k = sorted(set(keys) - set(never))[0]
    left = (f" {exclude_text(never)}" if never else "")
    raw = (f"; {', '.join(never)} holds {held[never[0]]}'s raw value whichever graph saved "
           "it (no EMA object of the .meta writes an average under that name), so that offer "
           "leaves it out") if never else ""
    return (f"; its {counted(len(keys), 'key')} named as averages (e.g. {k}) "
            f"{agreeing(len(keys), 'was', 'were')} written from "
            f"{agreeing(len(keys), 'its own variable', 'their own variables')} "
            f"(e.g. {own[k]}), as a Saver of ema.variables_to_restore() writes "
            "them: the raw weights if a training graph saved them, the averages if an "
            "evaluation graph restored the averages and saved again, which the file cannot "
            "show, and with the .meta nothing pairs them (--averages-only alone is refused): "
            f"if they hold the averages, pass --no-meta --averages-only{left} (Python: "
            "open_checkpoint(path, meta=False, averages_only=True)"
            f"{', exclude=[...]' if never else ''}), which reads them by their "
            f"names{raw}")


def in_graph_offer(ckpt: Checkpoint, ema_name: str | None) -> str:
    """What a refused renamed Saver's keys leave to the graph imported from the ``.meta``:
    :func:`ckpt_tools.restore_ema` where its map of the graph's own variables accepts them
    (probed: it was offered where it refused the same way, a Saver crossing two EMA objects'
    averages: review-32-attack-r117 F7), else the graph's own Saver, which restores each key
    into the variable it was saved from (no option of ckpt decides).

    Returns:
        `str`: a clause to append after "ckpt does not translate such keys".
    """
    import warnings

    from .emamap import ema_map  # late: the map imports the module that refuses
    from .errors import CheckpointError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a probe says nothing
            ema_map(ckpt, ema_name=ema_name, in_graph=True, slots="keep", non_averaged="keep")
    except CheckpointError:
        return ("; no option of ckpt decides: in the graph imported from the .meta its own "
                "Saver (tf.compat.v1.train.import_meta_graph(...).restore(sess, path)) "
                "restores each key into the variable it was saved from, the averages into "
                "ema.apply()'s shadow variables")
    said = "" if ema_name is None else f", ema_name={ema_name!r}"
    return (": restore the averages in the graph imported from the .meta "
            f"(ckpt_tools.restore_ema(sess, path{said})), which pairs the graph's variables")
