"""The save op that wrote a TF1 checkpoint, as its graph file records it.

A ``.meta`` (or a TF1 SavedModel's ``saved_model.pb``) records one Saver's save op: which
variable it reads under each key (:mod:`.formats.meta_saver`). That proves what a key holds
only if that Saver wrote this checkpoint: a graph exported by one Saver (``Saver()``) beside
a checkpoint written by another (``Saver(ema.variables_to_restore())``) records keys the
checkpoint lacks. The save op is taken as the writer only where the keys it writes (over
all its save ops: a sharded Saver has one per device) are exactly the checkpoint's keys;
otherwise nothing is proven by it, as if it recorded no save op.

A ``.meta``'s graph may build several Savers and record one: another Saver of the graph
writing exactly the checkpoint's keys is read too (:func:`~.formats.meta_saver.writing_save_ops`:
the only one that does, where it reads a key from another variable than its name's, is the
writer; two that disagree are :data:`CROSSED`, review-25-attack-r85 F2).
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .formats.meta_saver import saved_sources_each, writing_save_ops


def graph_file(ckpt: Checkpoint) -> str | None:
    """The ``.meta`` or ``saved_model.pb`` whose graph is read for this TF1 checkpoint, or
    ``None`` (none read, or a TF2 checkpoint)."""
    if ckpt.objects is not None or ckpt.meta is None:
        return None
    return ckpt.meta_source


def graph_named(ckpt: Checkpoint) -> str:
    """How a message names the graph file read: ``saved_model.pb`` (a SavedModel's, binary or
    text) or ``.meta``."""
    path = graph_file(ckpt) or ""
    return "saved_model.pb" if "saved_model." in path.replace("\\", "/").rpartition("/")[2] \
        else ".meta"


#: :func:`why_unwritten` where the graph file records no save op at all.
NO_SAVE_OP = "does not record the save op that wrote them"
#: :func:`why_unwritten` where several save ops write exactly the checkpoint's keys, from
#: different variables (:func:`crossed_keys`): several graphs' (a SavedModel's) or several
#: Savers' of one graph (a ``.meta``'s).
CROSSED = "records several save ops that wrote these keys from different variables"


def _writer(ckpt: Checkpoint) -> tuple[dict[str, list[str]] | None, str]:
    path = graph_file(ckpt)
    if not path:
        return None, ""
    stored = set(ckpt.entries())
    fits, recorded = _fitting(ckpt)
    if not recorded:
        return None, NO_SAVE_OP
    if fits and all(f == fits[0] for f in fits):
        return fits[0], ""
    if fits:
        return None, CROSSED
    each = saved_sources_each(path)
    extra = sorted(set(each[0]) - stored)
    lacking = sorted(stored - set(each[0]))
    return None, ("records a save op that did not write this checkpoint (it writes "
                  + (f"{extra[0]}, which the checkpoint does not store" if extra else
                     f"no {lacking[0]}, which the checkpoint stores") + ")")


def _fitting(ckpt: Checkpoint) -> tuple[list[dict[str, list[str]]], bool]:
    """:func:`~.formats.meta_saver.writing_save_ops` of the graph file read, once per open
    checkpoint (``([], False)`` where none is read); the ``SaverDef``'s save op alone where
    the user states it wrote the checkpoint (``saver_def_wrote``)."""
    path = graph_file(ckpt)
    if not path:
        return [], False
    return ckpt.memo("meta_writing_save_ops", lambda: writing_save_ops(
        path, ckpt.entries(), saver_def_only=getattr(ckpt, "saver_def_wrote", False)))


def written_sources(ckpt: Checkpoint) -> dict[str, list[str]] | None:
    """Key -> the variables (op names) the save op that wrote ``ckpt`` saved under it.

    Returns:
        `dict[str, list[str]]`, or ``None`` where nothing records it: no graph file read, no
        save op in it, or none whose keys are exactly the checkpoint's keys.

    Raises:
        CheckpointError: the graph file cannot be opened or mapped.
    """
    return ckpt.memo("meta_saved_sources", lambda: _writer(ckpt))[0]


def why_unwritten(ckpt: Checkpoint) -> str:
    """Why :func:`written_sources` is ``None`` where a graph file is read (``"records a save
    op that did not write this checkpoint (...)"``), ``""`` otherwise."""
    return ckpt.memo("meta_saved_sources", lambda: _writer(ckpt))[1]


def crossed_keys(ckpt: Checkpoint) -> tuple[str, list[str], list[str]] | None:
    """``(key, its sources in one save op, in another)`` for the first key two save ops of
    the graph file read write from different variables, where several save ops write exactly
    the checkpoint's keys (:data:`CROSSED`): a TF1 SavedModel's ``Builder`` writes the
    variables with the Saver of ``add_meta_graph_and_variables(saver=...)`` (a swapping Saver)
    and records another Saver for each ``add_meta_graph()`` graph; nothing in the file says
    which of them wrote the variables. ``None`` otherwise."""
    path = graph_file(ckpt)
    if not path or why_unwritten(ckpt) != CROSSED:
        return None
    stored = set(ckpt.entries())
    fits = _fitting(ckpt)[0]
    for key in sorted(stored):
        other = next((f[key] for f in fits[1:] if f[key] != fits[0][key]), None)
        if other is not None:
            return key, fits[0][key], other
    return None


def named_pairs_unproven(ckpt: Checkpoint) -> dict[str, str]:
    """Average key -> variable key, for the stored variables whose stored average the keys'
    names alone pair where the graph file read records no save op (a ``.meta`` written by
    ``export_meta_graph()`` without a saver has no ``SaverDef``): a swapping Saver
    (``{v.op.name: ema.average(v), ema.average_name(v): v}``) would have left each variable's
    average under its name and the raw weight under the average's, which nothing read can
    show (:data:`~ckpt_tools.swap_assumed.SAVER_NOT_SWAPPED`; review-13-attack-r24 F0a).
    Also where several save ops write the keys from different variables (:func:`crossed_keys`:
    a swapping Saver beside a plain one; the pairing is then refused, not assumed).
    The ``.meta``'s update ops do not settle it: they name the variable each shadow
    *variable* averages, not the variable a key was saved from. Also, for a checkpoint saved
    without a ``.meta``, where another checkpoint's graph of its prefix records a save op of
    its keys from other variables than their names (``meta_doubt``: :mod:`.meta_sibling`;
    refused, review-24-attack-r78). ``{}`` where a save op proves the keys, no graph file is
    read and none doubts the names (``--no-meta``: the documented limit), ``--not-swapped``
    states it, or no stored average's variable is stored."""
    if ckpt.objects is not None or ckpt.not_swapped:
        return {}
    if graph_file(ckpt) is None:
        if not ckpt.meta_doubt:
            return {}
    elif written_sources(ckpt) is not None or why_unwritten(ckpt) not in (NO_SAVE_OP,
                                                                          CROSSED):
        return {}
    return stored_pairs(ckpt)


def stored_pairs(ckpt: Checkpoint) -> dict[str, str]:
    """Average key -> variable key, for each stored average whose variable the keys' names
    say is stored beside it, whatever ``--not-swapped`` states and whatever proves the keys.

    Returns:
        `dict[str, str]`, ``{}`` where no such pair is stored.
    """
    entries = ckpt.entries()
    return {v.name: v.ema_of for v in ckpt.variables_unwarned()
            if v.role == "ema" and v.ema_of and v.ema_of in entries}
