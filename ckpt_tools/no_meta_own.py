"""``--no-meta`` over a checkpoint whose OWN graph shows its keys' names mislead
(review-30-attack-r110 F6).

``ckpt restore-ema swap/model.ckpt-3 --no-meta`` of a swapping Saver's checkpoint
(``{v.op.name: ema.average(v), ema.average_name(v): v}``) saved with its ``.meta`` wrote the
keys named as averages (the raw weights) under the plain names, exit 0, recording nothing
where no other graph of its prefix doubted it, and ``average --ema --bake --no-meta`` baked
the mean of the raw weights as "EMA shadows" -- although the graph ckpt reads without
``--no-meta`` (the ``.meta`` beside it) shows the swap and reads the averages right.

Where ``--no-meta`` leaves unread the checkpoint's own ``.meta`` (readable: a graph too large
or not a graph is what ``--no-meta`` exists for, read as before) and that graph's save op
proves that a key's name says another role than it holds -- a plain name written from a
proven average (``ema.apply()``'s shadow variable: a swapping Saver), or an average's name
written from another variable's average (crossed), or from another EMA object's average of
its variable (``model/W/fast`` from ``slow``'s: review-32-attack-r117 F4) -- every
pairing by names is refused (exit 6, :func:`refuse_own_graph_swap`): ``ema_map`` (``map``,
``export``, ``restore-ema``) and ``average --ema --bake`` (each input).
``export --raw --no-meta`` (the keys as stored) stays; its warning says what the graph shows
(:func:`raw_warning`). A copy of the checkpoint without that ``.meta`` still reads by names:
the documented limit of ``--no-meta`` (nothing in the files then shows the swap).

Not refused here: an average's name written from its own variable (a Saver of
``ema.variables_to_restore()``: the raw weights where a training graph saved, the averages
where an evaluation graph restored and saved again, ``ema.apply()`` built or not; the graph
cannot tell, and the pairing by names asks ``--averages-only`` there as for its copy), a
scope-renaming Saver (``net/W`` from ``model/W``, its average under ``net/W``'s average
name), tower-prefixed keys, and several save ops (which one wrote it is not known).
"""

from __future__ import annotations

import os

from .errors import CheckpointError, UnprovenPairingError

__all__ = ["own_graph_swap", "raw_warning", "refuse_own_graph_swap", "refuse_strict_mark"]

_EMA = "ExponentialMovingAverage"


def own_graph_swap(ckpt) -> tuple[str, str, str, bool] | None:
    """What the own ``.meta`` of the TF1 checkpoint ``ckpt`` (read with ``--no-meta``:
    ``meta=False`` or a ``with_meta(False)`` view), which ``--no-meta`` left unread, proves
    of a key whose name misleads (see the module docstring). Asked once per open
    checkpoint.

    Returns:
        ``(graph file name, key, the variable its save op wrote into it, swapped)``
        (``swapped``: some plain name holds an average, as a swapping Saver writes), or
        ``None``: read with its graph, no ``.meta`` of its own, one that cannot be read, a
        marked output's graph of other bytes than recorded (refused as such without
        ``--no-meta``), or nothing proven to mislead.
    """
    if not getattr(ckpt, "graph_declined", False) or ckpt.objects is not None \
            or getattr(ckpt.reader, "keras", None) is not None:
        return None
    return ckpt.memo("own_graph_swap", lambda: _swap_shown(ckpt))


def _swap_shown(ckpt) -> tuple[str, str, str, bool] | None:
    from .tools_mark import names_doubted

    view = ckpt.own_graph()
    if view is None:
        return None
    path = view.meta_source
    if names_doubted(ckpt.tools_mark):
        from .own_graph_mark import refuse_foreign_graph

        if refuse_foreign_graph(ckpt.path, path, ckpt.tools_mark) is not None:
            return None  # not the graph it was written with: read with it, it is refused
    try:
        found = _misleading(view)
    except CheckpointError:  # its save op cannot be read: nothing shown
        return None
    if found is None:
        return None
    key, source, swapped = found
    return os.path.basename(path), key, source, swapped


def _misleading(view) -> tuple[str, str, bool] | None:
    """The first key (sorted) whose name the graph of ``view`` proves misleading, the
    variable written into it, and whether some plain name holds a proven average."""
    from .meta_shadows import update_ops_of
    from .own_graph_mark import renamed_keys
    from .save_op import written_sources
    from .saved_keys import PART

    sources = written_sources(view)
    if not sources:
        return None
    renamed = renamed_keys(sources)
    if not renamed:
        return None
    ops = update_ops_of(view.meta)
    averages = {} if ops is None else ops[0].averages
    owner = {PART.sub("", s): PART.sub("", v) for s, (v, _) in averages.items()}
    if not owner:  # no average the graph proves (an evaluation graph's re-save)
        return None
    suffixes = {_EMA} | {s[len(o) + 1:] for s, o in owner.items() if s.startswith(o + "/")}
    written = {k: {PART.sub("", v) for v in vs} for k, vs in sources.items()}
    found: list[tuple[str, str, bool]] = []
    for key, vs in sorted(renamed.items()):
        if len(vs) != 1:
            continue
        (src,) = vs
        of = owner.get(src)
        base = next((key[:-len(x) - 1] for x in suffixes if key.endswith("/" + x)), None)
        if of is not None and base is None:  # a plain name holding an average
            found.append((key, src, True))
        elif of is not None and not (base == of or written.get(base) == {of}):
            found.append((key, src, False))  # another variable's average
        elif of is not None and src.startswith(of + "/") \
                and key[len(base) + 1:] != src[len(of) + 1:]:
            # another EMA object's average of that variable: model/W/fast written from
            # model/W/slow (review-32-attack-r117 F4; own_graph_mark.misleads says so too)
            found.append((key, src, False))
    if not found:
        return None
    swapped = any(s for _, _, s in found)
    key, src, _ = found[0]
    return key, src, swapped


def refuse_own_graph_swap(ckpt) -> None:
    """Refuses pairing ``ckpt``'s keys by their names under ``--no-meta`` where its own
    graph proves a name misleads (:func:`own_graph_swap`).

    Raises:
        UnprovenPairingError: (exit 6) naming the graph and the key; ``option`` ``None``
            (no option decides: leaving out ``--no-meta`` has the graph read the keys).
    """
    crossed = resave_crossed(ckpt)
    if crossed is not None:
        raise crossed
    shown = own_graph_swap(ckpt)
    if shown is None:
        return
    graph, key, source, swapped = shown
    # every pairing the names make is left open (list marks them '?')
    undecided = {v.name: (v.ema_of,) for v in ckpt.variables_unwarned()
                 if v.role == "ema" and v.ema_of}
    who = ("a swapping Saver wrote it ({v.op.name: ema.average(v), ema.average_name(v): v})"
           if swapped else "its Saver wrote keys named as averages from other variables' "
           "averages or another EMA object's")
    raise UnprovenPairingError(
        f"{ckpt.path}: --no-meta pairs its keys by their names, but its own graph {graph} "
        f"beside it (the one read without --no-meta) shows {who}: its save op wrote {key} "
        f"from {source}, so the names do not say what the keys hold; drop --no-meta to read "
        "the keys through that graph (the averages are then read right)", option=None,
        undecided=undecided)


def resave_crossed(ckpt):
    """The refusal of an evaluation graph's re-save of two EMA objects' names
    (:func:`~ckpt_tools.resave_objects.crossed_refusal`) its own graph, left unread by
    ``--no-meta``, shows: ``--no-meta --averages-only`` read fast's averages as slow's, exit 0,
    where the graph read refuses it (review-32-attack-r124 F3).

    Returns:
        `UnprovenPairingError`, or ``None``."""
    if not getattr(ckpt, "graph_declined", False) or ckpt.objects is not None \
            or getattr(ckpt.reader, "keras", None) is not None:
        return None
    view = ckpt.own_graph()
    if view is None:
        return None
    from .resave_objects import crossed_refusal
    from .save_op import CROSSED, crossed_keys, graph_named, why_unwritten, written_sources

    try:
        sources = written_sources(view) or {}
        crossed = crossed_keys(view) if not sources and why_unwritten(view) == CROSSED \
            else None
    except CheckpointError:  # its save op cannot be read: nothing shown
        return None
    if crossed is not None:  # Savers of the graph disagree: the read refuses (r126 F4)
        key, one, other = crossed
        return UnprovenPairingError(
            f"{ckpt.path}: --no-meta reads the keys by their names, but the "
            f"{graph_named(view)} beside it, left unread, builds save ops that write {key} "
            f"from {', '.join(one)} in one and from {', '.join(other)} in another, and "
            "nothing records which wrote the checkpoint: the names do not say what the keys "
            "hold; drop --no-meta to read them through that graph", option=None)
    evaluated = [(k, vs[0]) for k, vs in sources.items()
                 if len(vs) == 1 and vs[0] != k and k.startswith(vs[0] + "/")]
    return crossed_refusal(view, evaluated) if evaluated else None


def refuse_strict_mark(ckpt) -> None:
    """Refuses pairing by names under ``--no-meta`` the keys of an output whose mark's
    doubt is strict (:func:`~ckpt_tools.doubt_refusal.strict_doubt`): a bake's output whose
    mark says the bake wrote one EMA object's averages over keys its input's graph says hold
    another's, or of a graph proving several EMA objects (r117 F9 reads it in place), or an
    output of inputs whose Saver crossed averages (r119 F3b-F7): no graph says what those
    keys hold now, so their names say nothing either; read in place or copied, ``--no-meta``
    exported another variable's average, exit 0 (review-32-attack-r117 F10).
    ``export --raw --no-meta`` (no pairing) stays.

    Raises:
        UnprovenPairingError: (exit 6, no option decides).
    """
    from .doubt_refusal import names_doubted_refusal, strict_doubt

    mark = getattr(ckpt, "tools_mark", None)
    if strict_doubt(mark):
        raise names_doubted_refusal(ckpt.path, mark)


def raw_warning(ckpt) -> str | None:
    """The warning of ``export --raw --no-meta`` of ``ckpt`` where its own graph
    (:func:`own_graph_swap`) shows what its keys named as variables hold, in place of
    :data:`~ckpt_tools.export_said.NO_META_RAW_WARNING`'s either-or.

    Returns:
        `str`, or ``None`` where that graph shows nothing.
    """
    shown = own_graph_swap(ckpt)
    if shown is None:
        return None
    graph, key, source, swapped = shown
    held = ("some of the keys named as variables hold averages, not raw weights" if swapped
            else "keys named as averages hold other variables' or other EMA objects' averages")
    return (f"exporting the keys named as variables as stored (--raw --no-meta): its own "
            f"graph {graph}, which --no-meta left unread, shows its save op wrote {key} from "
            f"{source}: {held}; drop --no-meta to read the keys through that graph")
