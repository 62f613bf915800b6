"""Where a bake's output need not carry its inputs' ``names_doubted`` mark
(review-31-attack-r114 F1).

An output of ``ckpt average`` over a swapping Saver's run (saved with a ``.meta`` each time)
carries ``names_doubted`` and the SHA-256 of the graph written beside it
(:mod:`~ckpt_tools.own_graph_mark`). Read in place through that graph, each key is read as
the graph's save op says. A bake of it (``restore-ema --strip-scope/--add-scope``, which
writes no graph beside its output; ``average --ema --bake`` of two such outputs) that writes
under every key the average its name says, as that graph proves, leaves no key whose name
misleads: the carried doubt, kept without any graph beside the output, only refused every read
of it with a false reason ("no such graph is beside it now"). It is dropped there, and only
there: each marked input read through the very graph its mark records, that graph showing the
names mislead, and every key of the output holding, by it, what its name says
(:func:`~ckpt_tools.own_graph_mark.misleading_left` over every key). A key still holding
something else (a swapping Saver's average name holding the raw weights, another object's
average under a name: review-31-attack-r114 F2/F3) keeps the mark.
"""

from __future__ import annotations

__all__ = ["carried_disproved", "drop_carried"]


def _read_through_recorded(ckpt) -> bool:
    """Whether the marked ``ckpt`` was read through its own graph file, of the bytes its
    mark's ``graph_sha256`` records, and that graph shows its keys' names mislead
    (:func:`~ckpt_tools.own_graph_doubt.own_graph_doubt`)."""
    from .own_graph_doubt import own_graph_doubt
    from .own_graph_mark import graph_digest
    from .save_op import graph_file
    from .tools_mark import names_doubted

    d = names_doubted(getattr(ckpt, "tools_mark", None)) or {}
    sha = d.get("graph_sha256")
    if not isinstance(sha, str) or getattr(ckpt, "meta_unread", None) \
            or getattr(ckpt, "meta_unknown", None) is not None or getattr(ckpt, "meta_doubt", ()):
        return False
    graph = graph_file(ckpt)
    return graph is not None and graph_digest(graph) == sha \
        and own_graph_doubt([ckpt]) is not None


def carried_disproved(inputs, read, source_of: dict[str, str]) -> bool:
    """Whether the ``names_doubted`` the inputs' marks carry is disproved for an output that
    writes under each key ``k`` the value (or mean) of key ``source_of.get(k, k)`` of the
    inputs: every input whose mark doubts its names (``--not-swapped`` not stated for it)
    was read through the graph its mark records, ``read`` (the input whose graph the
    pairing read: the newest) is one of those, and by that graph every key of the output
    holds what its name says.

    Returns:
        `bool` (``False`` where no input's mark doubts its names).
    """
    from .own_graph_mark import misleading_left
    from .tools_mark import names_doubted

    marked = [c for c in inputs if names_doubted(getattr(c, "tools_mark", None))
              and not getattr(c, "not_swapped", False)]
    if not marked or not all(_read_through_recorded(c) for c in marked):
        return False
    if not _read_through_recorded(read):
        return False
    return not misleading_left(read, source_of, every=True)


def drop_carried(mark: dict | None) -> dict | None:
    """``mark`` without its ``names_doubted`` (:func:`carried_disproved` said so).

    Returns:
        `dict`, or ``None`` where nothing else is left to say."""
    if not mark:
        return mark
    rest = {k: v for k, v in mark.items() if k != "names_doubted"}
    return rest if set(rest) - {"kind", "version"} else None
