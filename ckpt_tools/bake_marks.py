"""What restore-ema's output says of itself: the mark (:mod:`~ckpt_tools.tools_mark`) its
bundle carries (the statements it was read under, the input's own mark and graph doubt, that
its keys named as the variables hold their averages) and the keys it is written from, for
:mod:`ckpt_tools.bake` and its streamed upload (:mod:`ckpt_tools.emaout`).
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .emamap import EmaMap, rescope
from .restored_record import recorded_statements
from .tools_mark import graph_written, names_doubted, output_mark


def left_raw(ckpt: Checkpoint, m: EmaMap, strip: str | None = None,
             add: str | None = None, source_of: dict[str, str] | None = None) -> list[str]:
    """The output keys of variables the filters of ``m`` left as stored although their
    averages are stored (``--exclude model/b``: ``model/b``), and of the weights a Keras 3
    optimizer's ``use_ema`` copies cover written as stored (``source_of``: each key -> the key
    whose value it gets), raw as ``--not-swapped`` stated (review-33-attack-r132 C1),
    re-scoped as written."""
    from .user_ema_swap import stored_covered

    entries = ckpt.entries()
    kept = {k for k in m.filtered_averages if k in entries}
    kept |= set(stored_covered(ckpt, source_of)) if source_of is not None else set()
    return sorted(rescope(k, strip, add) if strip or add else k for k in kept)


def read_keys(source_of: dict[str, str]) -> frozenset[str]:
    """The keys a bake writes its variables from (``source_of``: key -> the key whose value
    it gets), those it copies as they are left out."""
    return frozenset(s for t, s in source_of.items() if s != t)


def own_doubt(ckpt: Checkpoint, source_of: dict[str, str], unwritten=()) -> dict | None:
    """What restore-ema's output of ``ckpt`` (each key written from ``source_of``) says of
    the input's own graph where it shows the keys' names mislead and the bake leaves a key so
    (:func:`~ckpt_tools.own_graph_mark.misleading_left`): ``net/W/fast`` still holding
    ``slow``'s average of ``W``, which a copy without the graph reads as ``fast``'s
    (review-31-attack-r114 F3). A swapping Saver's keys, each rewritten with its variable's
    average, say what they hold: no doubt; nor do keys the output leaves out (``unwritten``:
    a training vtr Saver's raw-valued averages' names).

    Returns:
        `dict` for :func:`~ckpt_tools.tools_mark.mark_doc`'s ``doubted``, or ``None``.
    """
    from .own_graph_doubt import own_graph_doubt
    from .own_graph_mark import misleading_left

    doubt = own_graph_doubt([ckpt])
    return doubt if doubt and misleading_left(ckpt, source_of, unwritten=unwritten) else None


def written_mark(ckpt: Checkpoint, read=None, unread: str | None = None,
                 graph: str | None = None, own: dict | None = None,
                 source_of: dict[str, str] | None = None, raw=(),
                 ema_name: str | None = None) -> dict | None:
    """:func:`said_mark` of restore-ema's output of ``ckpt``, saying too that its keys named
    as the variables hold their averages (except ``raw``: the keys named as variables the
    filters left as stored although their averages are), wherever ``read`` (the keys written
    from others) is not empty: a TF checkpoint shows it nowhere else, and ``ckpt average``
    of the output with a raw checkpoint averaged averages with raw weights, ``export --raw``
    labelled the averages raw (review-33-attack-r128 F1); ``ema_name``: the EMA object's
    name they are the averages of.

    Returns:
        `dict`, or ``None`` where there is nothing to say.
    """
    from .weights_mark import with_weights

    mark = said_mark(ckpt, read, unread, graph, own, source_of)
    return with_weights(mark, "ckpt restore-ema", raw, ema_name) if read else mark


def said_mark(ckpt: Checkpoint, read=None, unread: str | None = None,
              graph: str | None = None, own: dict | None = None,
              source_of: dict[str, str] | None = None) -> dict | None:
    """The mark (:mod:`~ckpt_tools.tools_mark`) restore-ema's output of ``ckpt`` carries in
    its bundle: the statements it was read under (``--averages-only``, ``--saver-def-wrote``,
    ``--not-swapped`` stated by the user; ``--no-meta`` where it left ``unread``
    (:func:`~ckpt_tools.no_meta_mark.silenced`) a graph or mark deciding or doubting its
    names: review-29-attack-r107 F3) and the input's own mark, which a sidecar record
    loses with any copy, rename or upload (review-28-attack-r105 F4, F5). Its
    ``names_doubted`` keeps the SHA-256 of ``graph``, the graph written beside the output as
    its own (the input's, read through the SHA-256 its mark records), so that the output is
    read in place as its input was; none where no graph was written.

    Args:
        read: the keys the output's variables were written from (:func:`read_keys`): the
            ``--averages-only`` keys stated are those (``None``: all it pairs).
        unread: what ``--no-meta`` left unread (:func:`~ckpt_tools.no_meta_mark.silenced`).
        graph: the graph file written beside the output as its own (``None``: none).
        own: the input's own graph's doubt the output keeps (:func:`own_doubt`).
        source_of: each key -> the key whose value it gets: where the input, read through
            the graph its mark records, shows every key of the output then holds what its
            name says, the carried ``names_doubted`` is dropped
            (:func:`~ckpt_tools.doubt_lifted.carried_disproved`: review-31-attack-r114 F1).

    Returns:
        `dict`, or ``None`` where there is nothing to say.
    """
    stated = recorded_statements(ckpt, read)
    from .stated_python import not_swapped_decided
    from .user_ema_swap import stored_covered

    # a TF1 Saver's, a Keras optimizer's copies (r128 F3), or the weights they cover written
    # as stored, raw by the statement alone (r132 C1)
    kept = stored_covered(ckpt, source_of) if source_of is not None and read is not None else []
    if not_swapped_decided(ckpt, read if not kept else {*read, *kept}):
        stated["not_swapped"] = True
    if unread:
        stated["no_meta"] = True
    # a statement the reading needed (--averages-only, --not-swapped) is the output's record
    # of what its keys hold, not the graph's doubt
    mark = output_mark([ckpt], stated, None if stated else own, "ckpt restore-ema")
    if names_doubted(mark) is None:
        return mark
    from .doubt_lifted import carried_disproved, drop_carried

    if source_of is not None and not own and carried_disproved([ckpt], ckpt, source_of):
        return drop_carried(mark)
    from .own_graph_doubt import bake_proved
    from .own_graph_mark import graph_digest

    return graph_written(mark, graph_digest(graph) if graph else None,
                         proved=bake_proved(ckpt, source_of or {}))  # a graph copied or not
