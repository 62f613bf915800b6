"""What ``ckpt list`` says a listed pairing rests on that was stated, not read from the file:
the caller's statements (``--not-swapped``, ``--fit-order``, ``--trainable``...) and those a
record makes (``ckpt train``'s run record, restore-ema's record, ``--saver-def-wrote``, a mark
inside the bundle), in the words and ``--json`` fields ``export`` and ``map`` give them: the
same :func:`~ckpt_tools.statements.stated_notes` call (review-33-user-u33 F7: ``list --json``
of a ``ckpt train --api keras`` file left out the ``stated_*`` and ``*_record`` fields its
``export --json`` has).
"""

from __future__ import annotations

from .checkpoint import Checkpoint


def statements_listed(ckpt: Checkpoint, stated: bool, apply_order: str | None,
                      ema_name: str | None) -> tuple[list[str], dict]:
    """The notes and ``--json`` fields of what the pairing of ``ckpt`` rests on by statement.

    Args:
        ckpt: the open checkpoint, as the listing reads it (``--no-meta``: its view).
        stated: whether the caller stated anything (``not_swapped``, ``fit_order``,
            ``trainable``, ``use_ema``, ``optimizer``, ``averages_only``, ``apply_order``,
            ``saver_def_wrote``).
        apply_order / ema_name: as the listing decides the pairing with them.

    Returns:
        `tuple[list[str], dict]`: the notes (each a line as it is printed, ``note: `` or
        ``warning: `` first) and the fields, as :func:`~ckpt_tools.statements.stated_notes`
        gives them; ``([], {})`` where nothing is stated, without importing it (the keys-only
        listing of a plain checkpoint stays as cheap as it was).
    """
    recorded = getattr(ckpt, "not_swapped_record", None) or getattr(
        ckpt, "fit_order_record", None) or getattr(ckpt, "saver_def_wrote", False) or getattr(
        ckpt, "restored_record", None) or getattr(ckpt, "tools_mark", None)
    if not stated and not recorded:
        return [], {}
    from .statements import stated_notes

    return stated_notes(ckpt, apply_order, ema_name)
