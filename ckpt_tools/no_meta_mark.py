"""``--no-meta`` over a doubted input, recorded in the output it wrote (review-29-attack-r107
F3).

``ckpt restore-ema swap/model.ckpt-3 --no-meta`` of a swapping Saver's run saved without its
own ``.meta`` (refused without a statement: ``model.ckpt-1.meta`` beside it records the swap)
wrote the keys named as averages (the raw weights) under the plain names, exit 0, and recorded
nothing: every read of its output then said "EMA values", as if no graph had ever doubted it.
``--not-swapped``, the equivalent statement, is kept in the output's ``_CKPT_TOOLS_RECORD``
and repeated by every read. ``--no-meta`` over a graph that doubts (or may doubt) the input's
names is a statement too: :func:`silenced` says what it left unread, the writers record
``"no_meta"`` among the statements of the output's mark
(:func:`~ckpt_tools.tools_mark.stated_notes` repeats it, ``--json`` has it in
``written_under``) and warn when writing (:func:`written_warning`).

What ``--no-meta`` silences: a graph of its prefix that doubts its names
(:func:`~ckpt_tools.meta_sibling.doubting`: asked here, as an input opened without its graph
never computes that doubt; with or without a ``.meta`` of its own, since ``--no-meta`` reads a
checkpoint as its copy without that ``.meta``), or its own mark's ``names_doubted`` (an output
ckpt_tools wrote from doubted inputs).

A command whose output carries no mark (``export`` to ``.npz``/``.safetensors``/``.h5``,
``map``, ``diff``, the Python API handing back arrays, a map or restored variables) records
no statement: under ``--no-meta`` it read the keys named as averages of a ``.index`` +
``.data`` copy of a marked output -- the swapping Saver's raw weights -- as the EMA values,
exit 0, with no warning (task s32l). Its mark is the file's own record that its names are
doubted, so the pairing by names is refused there (:func:`refuse_unrecorded`); only the
writers that record ``--no-meta`` in their output's mark (``restore-ema``, ``average --ema
--bake``: inside :func:`recorded`) still write it.

A checkpoint with no mark whose names only a graph of its prefix doubts (a swapping Saver's
run saved with its graph at the first save only: ``swap/model.ckpt-3`` beside
``model.ckpt-1.meta``) is read by names under ``--no-meta``, as its copy without that graph
is (the documented limit of ``--no-meta``), but no longer silently: such a command warns
(:func:`read_warning`; task s33c).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

__all__ = ["read_warning", "recorded", "refuse_unrecorded", "silenced", "written_warning"]

# whether the pairing being planned is a writer's that records --no-meta in its output's mark
_RECORDED: contextvars.ContextVar[bool] = contextvars.ContextVar("ckpt_tools_no_meta_recorded",
                                                                 default=False)


@contextlib.contextmanager
def recorded() -> Iterator[None]:
    """Within it, :func:`refuse_unrecorded` refuses nothing: the pairing planned is a
    writer's whose output's mark records what ``--no-meta`` left unread
    (:func:`silenced`) and which every read of it repeats (``restore-ema``'s bundle,
    ``average --ema --bake``'s)."""
    token = _RECORDED.set(True)
    try:
        yield
    finally:
        _RECORDED.reset(token)


def refuse_unrecorded(ckpt) -> None:
    """Refuses pairing by names alone the keys of ``ckpt``, read under ``--no-meta``, whose
    mark records ``names_doubted`` (a swapping Saver's graph doubted its inputs' names),
    where no statement decides (``--not-swapped``) and the caller records none in an output
    (outside :func:`recorded`). A strict mark (:func:`~ckpt_tools.doubt_refusal.strict_doubt`)
    is refused by :func:`~ckpt_tools.no_meta_own.refuse_strict_mark`, writers too.

    Raises:
        UnprovenPairingError: (exit 6, ``--not-swapped``) naming the mark and what decides.
    """
    from .tools_mark import names_doubted

    mark = getattr(ckpt, "tools_mark", None)
    if _RECORDED.get() or not names_doubted(mark) or getattr(ckpt, "not_swapped", False):
        return
    from .doubt_refusal import no_meta_doubted_refusal

    # every pairing the names make is left open (list marks them '?')
    raise no_meta_doubted_refusal(ckpt.path, mark, {
        v.name: (v.ema_of,) for v in ckpt.variables_unwarned() if v.role == "ema" and v.ema_of})


def silenced(ckpt) -> str | None:
    """What the caller's ``--no-meta`` (``use_meta=False``, ``meta=False``) left unread of
    the open checkpoint ``ckpt`` that doubts what its keys' names hold.

    Returns:
        `str`, a phrase naming it (``"model.ckpt-1.meta beside it, whose save op wrote
        model/V from model/V/ExponentialMovingAverage"``), or ``None`` where the graph was
        read, or ``--no-meta`` left nothing unread that speaks of its keys.
    """
    if not getattr(ckpt, "graph_declined", False):
        return None
    from .tools_mark import RECORD_KEY, names_doubted

    if names_doubted(getattr(ckpt, "tools_mark", None)):
        return f"its {RECORD_KEY} key's doubt of its keys' names"
    # its own graph unread is not asked: --no-meta reads it as the copy without that graph
    # (tests/test_tf1_no_meta_view.py), whose doubt is its prefix's other graphs'
    if getattr(ckpt.reader, "keras", None) is not None or ckpt.location.saved_model \
            or ckpt.objects is not None:
        return None
    from .errors import CheckpointError
    from .meta_sibling import doubt_files, doubting

    try:  # only the doubt: the same-prefix graphs' save ops, bounded as on opening
        doubt = doubting(ckpt.path, ckpt.entries())
    except CheckpointError:  # whether a graph doubts it cannot be known: as if one did
        return "the graphs of its prefix, which could not all be read"
    if not doubt:
        return None
    _, key, sources = doubt[0]
    return (f"{doubt_files(doubt)} beside it, whose save op wrote {key} from "
            f"{', '.join(sources)}")


def written_warning(what: str) -> str:
    """The warning a writer gives for an output it wrote from an input whose ``what``
    (:func:`silenced`) ``--no-meta`` left unread.

    Returns:
        `str`: the warning's text (without ``"warning: "``).
    """
    from .tools_mark import RECORD_KEY

    return (f"--no-meta: not read: {what}; so nothing proved which keys hold the "
            "averages (a swapping Saver's keys named as averages hold the raw weights): the "
            "output's plain names hold what its input's keys named as averages held; its "
            f"{RECORD_KEY} key records that --no-meta decided this, and every read of it "
            "repeats it")


def read_warning(ckpt) -> str | None:
    """The warning of a command that pairs the keys of ``ckpt`` (read under ``--no-meta``)
    by their names and records no statement in an output (``export``, ``map``, ``list``'s
    EMA column, ``diff --ema``) where ``--no-meta`` left unread a graph of its prefix that
    doubts those names (:func:`silenced`): a swapping Saver's keys named as averages hold the
    raw weights, which such a read takes for the averages, exit 0 (s32l "Left"). Nothing
    where ``--not-swapped`` states its Saver (that statement decides), where its mark doubts
    it (refused: :func:`refuse_unrecorded`) or inside :func:`recorded` (a writer's own
    warning says it: :func:`written_warning`).

    Returns:
        `str`: the warning's text (without ``"warning: "``), or ``None``.
    """
    from .tools_mark import names_doubted

    if _RECORDED.get() or getattr(ckpt, "not_swapped", False) \
            or names_doubted(getattr(ckpt, "tools_mark", None)):
        return None
    what = silenced(ckpt)
    if what is None:
        return None
    own = getattr(ckpt, "meta_unread", None)
    # its own graph, not the prefix's other one, is what a read without --no-meta reads:
    # that one decides, with its own refusal's option (review-33-attack-r130 N2)
    then = (f"without --no-meta its own {own.replace(chr(92), '/').rpartition('/')[2]} is "
            "read instead and what its save op wrote decides the pairing" if own else
            "without --no-meta that graph is read and the pairing is refused unless "
            "--not-swapped states its Saver")
    return (f"{ckpt.path}: --no-meta left unread {what}: its keys are paired by their names "
            "alone, and if a swapping Saver wrote it, its keys named as averages hold the raw "
            f"weights, not the averages ({then})")
