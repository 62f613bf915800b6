"""The ``?`` that marks a Keras optimizer variable's shown name where only fit()'s build order
names it (``sgd/bn_gamma_average?``: the name Keras gives the copy of the weight that order
pairs it with, which the file cannot prove; :mod:`~ckpt_tools.formats.keras.keras3_layout`).

The mark is display, not the name: ``list --json`` gives the path without it and says the
doubt in a field of its own (review-33-user-u33 F2), and every name filter (``--grep``,
``--exclude``, ``show NAME``) takes the name with or without it (F6), so nobody has to type
the ``?`` (a glob's wildcard) to select one. Only the keys the layout marked are read so: a
name that ends in ``?`` of its own is left as it is.
"""

from __future__ import annotations

MARK = "?"


def marked_paths(ckpt) -> dict[str, str]:
    """``{key: path without the mark}`` for each key whose shown path carries the ``?`` mark
    (``{}`` for any file but a Keras 3 layout with such names; no tensor read).

    Args:
        ckpt: an open :class:`~ckpt_tools.checkpoint.Checkpoint`.

    Returns:
        `dict[str, str]`: checkpoint key -> its name without the mark.
    """
    layout = getattr(getattr(ckpt, "reader", None), "keras", None)
    marked = getattr(layout, "order_marked", None)
    if not marked:
        return {}
    paths = layout.paths
    return {k: paths[k][:-len(MARK)] for k in marked if paths.get(k, "").endswith(MARK)}



def with_marked(ckpt, globs: list[str] | None) -> list[str] | None:
    """``globs`` plus, for each marked key a glob selects by its name without the mark, its
    shown name (``?`` escaped): for library arguments matched on the shown names (``export``'s
    ``exclude=``), so ``--exclude adam/b_average`` leaves out what ``--exclude
    'adam/b_average?'`` does (review-33-user-u33 F6).

    Returns:
        `list[str] | None`: ``globs`` as given where none is added.
    """
    if not globs:
        return globs
    import fnmatch
    import glob

    added = [glob.escape(bare + MARK) for bare in marked_paths(ckpt).values()
             if any(fnmatch.fnmatchcase(bare, g) for g in globs)]
    return [*globs, *added] if added else globs
