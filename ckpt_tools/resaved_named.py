"""Why a TF1 re-save of an EMA object named by hand has no ``<v>/ExponentialMovingAverage``:
its keys are ``<v>/<name>``, written from ``v`` by the ``.meta``'s save op.

``Saver(ExponentialMovingAverage(decay, name="fast").variables_to_restore())`` (or
``name="tower/ExponentialMovingAverage"``) saves ``fc/w`` under ``fc/w/fast``
(``fc/w/tower/ExponentialMovingAverage``). Read without ``--ema-name``, such a file was
refused with "no EMA shadow is stored at all: the Saver probably saved only
tf.trainable_variables() ... or training never ran ema.apply()" (s32a "Left"): false, the
keys are there, under the name the graph's save op shows. :func:`resaved_hint` says what the
save op shows, and the option that reads them, probed.
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .wording import counted

#: How :func:`resaved_hint` begins (the missing refusal gives it as the likely cause).
RESAVED = "the keys are named as averages under another EMA name: "


def resaved_hint(ckpt: Checkpoint, missing) -> str | None:
    """Where the ``.meta``'s save op wrote keys ``<v>/<name>`` from the ``missing`` variables
    ``v`` themselves, one ``<name>`` for all (a Saver of ``ema.variables_to_restore()`` of an
    EMA named so): the words saying so, naming ``--ema-name <name>`` with the
    ``--averages-only`` statement where the export accepts only that (an evaluation graph's
    re-save: the keys hold what it restored), each probed; ``None`` otherwise (TF2, no save
    op read, no such key, several names).

    Returns:
        `str` or ``None``."""
    if ckpt.objects is not None or ckpt.meta is None or not missing:
        return None
    from .raw_named import evaluation_graph  # they read the graph: imported late
    from .save_op import graph_named, written_sources

    sources = written_sources(ckpt)
    if not sources:
        return None
    lacking = set(missing)
    found = sorted((k, src[0]) for k, src in sources.items()
                   if len(src) == 1 and src[0] in lacking and k.startswith(src[0] + "/"))
    names = {k[len(t) + 1:] for k, t in found}
    if len(names) != 1:
        return None
    name = names.pop()
    k, t = found[0]
    evaluated = evaluation_graph(ckpt, k)
    said = (f"{RESAVED}the {graph_named(ckpt)}'s saver wrote {counted(len(found), 'key')} "
            f"<variable>/{name} from the variables themselves (e.g. {k} from {t}), as a Saver "
            f"of ema.variables_to_restore() of an ExponentialMovingAverage named {name!r} "
            "writes them" + (", in a graph with no ema.apply() (an evaluation graph "
                             "re-saving what it restored: the averages if it restored them "
                             "from a training checkpoint, which the file cannot show)"
                             if evaluated else ""))
    return said + _offer(ckpt, name)


def _offer(ckpt: Checkpoint, name: str) -> str:
    """``; pass --ema-name NAME [--averages-only] ...``: the first of the two the export
    accepts (probed), or ``""``."""
    from .offer_probe import works  # it runs the map: imported late

    if works(ckpt, name):
        return f"; pass --ema-name {name} (Python: ema_name={name!r}) to read them"
    if ckpt.averages_only:
        return ""
    stated = ckpt.reopened(averages_only=True)
    try:
        if not works(stated, name):
            return ""
    finally:
        stated.close()
    return (f"; pass --ema-name {name} --averages-only (Python: ema_name={name!r}, "
            "open_checkpoint(path, averages_only=True)) only if they hold averages restored "
            "that way")


def stated_resaved(ckpt: Checkpoint) -> dict[str, str]:
    """Under ``--averages-only``, the keys whose name alone reads as a tensor's average
    (``fc/w/tower/ExponentialMovingAverage``, role ``tensor_average``) that the ``.meta``'s
    save op wrote from a variable the checkpoint does not store (``fc/w``): average key ->
    that variable, paired only by the statement, so that it is noted and recorded as the
    other keys it pairs are (:func:`~ckpt_tools.raw_shadows.stated_lone_averages`).

    Returns:
        `dict`: ``{}`` without the statement, for TF2, or where no save op is read."""
    if not ckpt.averages_only or ckpt.objects is not None or ckpt.meta is None:
        return {}
    from . import roles as R
    from .save_op import written_sources  # it reads the graph: imported late

    sources = written_sources(ckpt) or {}
    stored = ckpt.entries()
    named = {v.name for v in ckpt.variables_unwarned() if v.role == R.TENSOR_AVERAGE}
    return {s: src[0] for s, src in sources.items() if s in named and len(src) == 1
            and src[0] not in stored and s.startswith(src[0] + "/")}


def resaved_no_shadow(ckpt: Checkpoint) -> str | None:
    """Why ``ckpt average --ema`` finds no shadow to average where the ``.meta``'s save op
    wrote keys ``<v>/<name>`` from variables ``v`` the checkpoint does not store (a Saver of
    ``ema.variables_to_restore()`` re-saving what it restored): the keys are named as
    averages and may hold them, so "average the raw weights" is wrong there
    (review-33-attack-r126 N3). ``None`` where no save op shows such keys.

    Returns:
        `str`: the words, with the way that reads them (a plain average, then
        ``--averages-only`` on its output)."""
    if ckpt.objects is not None or ckpt.meta is None:
        return None
    from .raw_named import evaluation_graph  # they read the graph: imported late
    from .save_op import graph_named, written_sources

    sources = written_sources(ckpt) or {}
    stored = ckpt.entries()
    found = sorted((k, src[0]) for k, src in sources.items() if len(src) == 1
                   and src[0] not in stored and k.startswith(src[0] + "/"))
    names = {k[len(t) + 1:] for k, t in found}
    if len(names) != 1:
        return None
    name, (k, t) = names.pop(), found[0]
    held = ("in a graph with no ema.apply() (an evaluation graph re-saving what it restored: "
            "the averages if it restored them from a training checkpoint, which the file "
            "cannot show)" if evaluation_graph(ckpt, k) else
            "so each holds what its variable held when saved")
    return (f"the {graph_named(ckpt)}'s saver wrote {counted(len(found), 'key')} named as "
            f"averages from the variables themselves (e.g. {k} from {t}), {held}, and no raw "
            f"weight is stored beside them for --bake; ckpt average without --ema averages "
            f"these keys as stored, and ckpt export --ema-name {name} --averages-only of its "
            "output reads them as the averages only if they hold them")
