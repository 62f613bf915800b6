"""What a TF checkpoint's EMA pairing rests on by statement, said to a Python caller.

``ckpt`` repeats on every read of a ``restore-ema --averages-only`` output (its
``.restored.json``, or the ``_CKPT_TOOLS_RECORD`` key inside its bundle that travels with an
``.index`` + ``.data`` copy) the statement it was written under: those keys hold averages
only because the input's ``--averages-only`` said so. Python's
:func:`~ckpt_tools.restore_ema`, :func:`~ckpt_tools.export_weights` and
:func:`~ckpt_tools.ema_map` said nothing of it and called the values averaged: a training
run's ``Saver(ema.variables_to_restore())`` wrote its RAW weights under those keys
(review-33-attack-r128 F5). The same for a mark's ``--no-meta``, ``--saver-def-wrote`` and
``--not-swapped``, and for the caller's own ``averages_only=True`` where the ``.meta``'s save
op shows the keys written from their variables (the CLI's warning).

:func:`warn_stated` issues, once per open checkpoint, the Python counterpart of those lines
(:class:`~ckpt_tools.errors.RecordedStatementWarning` for what a record or mark states,
:class:`~ckpt_tools.errors.StatementWarning` for the caller's own statement the file makes
doubtful) and returns the fields the results carry (``RestoreResult.stated``,
``ExportResult.stated``: the names ``ckpt ... --json`` gives them).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .checkpoint import Checkpoint

__all__ = ["recorded_lines", "stated_fields_of", "stated_for", "warn_stated"]


def recorded_lines(ckpt: Checkpoint) -> list[str]:
    """The lines every ``ckpt`` read of ``ckpt`` prints for what a record beside it or the
    mark inside it states (``cli._run.note_recorded``): ``"note: ..."`` / ``"warning: ..."``.

    Returns:
        `list[str]` (``[]``: nothing recorded is stated).
    """
    from .restored_record import averages_only_note, saver_def_record
    from .saver_def_stated import saver_def_note
    from .tools_mark import stated_notes

    lines = [f"note: {saver_def_note(ckpt)}"] if saver_def_record(ckpt) else []
    said = averages_only_note(ckpt)
    if said:
        lines.append(said)
    return lines + stated_notes(ckpt.path, getattr(ckpt, "tools_mark", None))


def _recorded_names(ckpt: Checkpoint) -> tuple[list[str], str | None]:
    """The statements a record or mark states for ``ckpt``, and where (the record's path or
    the mark's key)."""
    from .restored_record import saver_def_record
    from .tools_mark import RECORD_KEY, stated_of

    found = getattr(ckpt, "restored_record", None)
    names: list[str] = []
    where = None
    if saver_def_record(ckpt):
        names.append("saver_def_wrote")
        where = found[0]
    if found and isinstance(found[1].get("averages_only"), dict):
        names.append("averages_only")
        where = where or found[0]
    marked = stated_of(getattr(ckpt, "tools_mark", None))
    for k in ("saver_def_wrote", "not_swapped", "no_meta"):
        if marked.get(k) is True and k not in names:
            names.append(k)
            where = where or f"{ckpt.path}'s {RECORD_KEY} key"
    return names, where


def stated_fields_of(ckpt: Checkpoint, read=None) -> dict:
    """What the pairing of ``ckpt`` (the keys ``read``: ``None``, all it pairs) rests on by
    statement, as ``ckpt``'s ``--json`` names it: the record's or mark's
    (:func:`~ckpt_tools.restored_record.stated_fields`: ``"stated_averages_only"`` with
    ``"averages_only_record"``, ``"written_under"`` with ``"written_under_record"``…) and the
    caller's own ``averages_only`` (``"stated_averages_only": {"pairs": ...,
    "raw_if_trained": [...]}``).

    Returns:
        `dict` (``{}``: nothing rests on a statement).
    """
    from .restored_record import stated_fields
    from .statements import averages_only_said

    return {**stated_fields(ckpt), **averages_only_said(ckpt, read)[1]}


def warn_stated(ckpt: Checkpoint, read=None, stacklevel: int = 3) -> dict:
    """Issues, once per open checkpoint, a
    :class:`~ckpt_tools.errors.RecordedStatementWarning` where a record or mark states what
    the pairing of ``ckpt`` rests on (:func:`recorded_lines`), and a
    :class:`~ckpt_tools.errors.StatementWarning` where the caller's own ``averages_only``
    read keys its ``.meta``'s save op wrote from their variables. A Keras file: the
    statements restore-ema's mark on it records
    (:func:`~ckpt_tools.restored_mark.warn_marked_stated`); what its own pairing assumed or
    was stated is :func:`~ckpt_tools.keras_assumed.warn_assumed`'s.

    Args:
        read: the checkpoint keys the caller's pairing read (``None``: all it pairs).

    Returns:
        `dict`: :func:`stated_fields_of` (``{}``: nothing rests on a statement).
    """
    if getattr(ckpt.reader, "keras", None) is not None:  # restore-ema's mark's (r128 F3)
        from .restored_mark import warn_marked_stated

        return warn_marked_stated(ckpt, stacklevel + 1)
    import warnings

    from .errors import RecordedStatementWarning, StatementWarning
    from .statements import averages_only_said

    first: list[bool] = []
    ckpt.memo(("stated_warned",), lambda: first.append(True))
    lines = recorded_lines(ckpt)
    if lines and first:
        names, where = _recorded_names(ckpt)
        warning = RecordedStatementWarning(
            f"{ckpt.path}: the EMA pairing rests on statements recorded when it was written "
            f"({where}), not on the file: "
            + "; ".join(line.split(": ", 1)[-1] for line in lines))
        warning.stated, warning.record, warning.notes = names, where, lines
        warnings.warn(warning, stacklevel=stacklevel)
    own = averages_only_said(ckpt, read)[0]
    if own.startswith("warning: ") and first:
        warning = StatementWarning(f"{ckpt.path}: averages_only=True: {own[len('warning: '):]}")
        warning.stated, warning.notes = ["averages_only"], [own]
        warnings.warn(warning, stacklevel=stacklevel)
    return stated_fields_of(ckpt, read)


def stated_for(ckpt: Checkpoint, options: dict, read=None) -> dict:
    """:func:`stated_fields_of` the open ``ckpt`` read under the statements in ``options``
    (a function's ``**map_options``: ``averages_only=True``…), as
    :func:`~ckpt_tools.ema_map` reads it (which issued the warnings).

    Returns:
        `dict` (``{}``: nothing rests on a statement).
    """
    from .stated_open import opened_stated, take_statements

    said = take_statements(dict(options))
    if not said:
        return stated_fields_of(ckpt, read)
    opened = opened_stated(ckpt, said)
    stated = opened.__enter__()
    try:
        return stated_fields_of(stated, read)
    finally:
        opened.__exit__()


def not_swapped_decided(ckpt: Checkpoint, read=None) -> bool:
    """Whether ``--not-swapped`` stated on the TF checkpoint ``ckpt`` decided what a bake of it
    reads (``read``: the keys its output's variables were written from; ``None``: all): a
    TF1 Saver's keys, a Keras 3 optimizer's ``use_ema`` copies in a ``tf.train.Checkpoint``
    (or the weights they cover), or average slots (``swap_weights()``): the statement the
    output's mark records, which every read of it repeats. It recorded none for the last two,
    so the copies read as proven averages one command later (review-33-attack-r128 F3).

    Returns:
        `bool` (``False`` for a Keras file: :mod:`~ckpt_tools.restored_mark` records its own).
    """
    if not getattr(ckpt, "not_swapped", False) or getattr(ckpt.reader, "keras", None) is not None:
        return False
    if ckpt.objects is None:  # a TF1 Saver's
        return True
    from .keras_assumed import object_pairs
    from .swap_assumed import slot_pairs
    from .user_ema_swap import reads_swappable

    if slot_pairs(ckpt):
        return True
    return bool(object_pairs(ckpt)) and (read is None or reads_swappable(ckpt, read))
