"""``ckpt list``'s rows for keys a renaming TF1 Saver wrote from ``ema.apply()`` shadows that
the names read as something else.

A fine-tune with two own EMA objects saved with ``Saver({"model/" + k: v for k, v in
ExponentialMovingAverage(0.5).variables_to_restore().items()})`` writes
``model/fc/b/ExponentialMovingAverage`` from the default object's shadow and
``model/fc/b/ema_slow`` from ``ema_slow``'s: both averages of ``fc/b``. By their names the
first read as a tensor's average and the second as a weight, each "? (1 average)", while
``export --ema-name ema_slow`` names the first "another EMA object's averages of those
variables" (:func:`~ckpt_tools.tensor_averages.shadow_averages_left_out`) and the same graph
without the prefix lists both "of fc/b" (review-27-attack-r96 F3, s27i "Left"). The save op
(:func:`~ckpt_tools.raw_dropped.shadow_written_keys`) decides here, as it does for export.
"""

from __future__ import annotations

from .checkpoint import Checkpoint, Variable
from .formats._record import replace

_PART = "/part_"


def shadow_marked(ckpt: Checkpoint, variables: list[Variable],
                  raw_named) -> tuple[list[Variable], set[str]]:
    """Returns the variables with each key the ``.meta``'s save op wrote from the shadows of
    one graph variable (its parts' shadows count as its own) shown as that variable's average
    (role ``ema``, ``ema_of`` the graph's variable, no candidates), and the keys so shown.

    Only a row nothing else reads is changed: one that no pairing gave an average or a
    variable (``ema``, ``ema_of`` unset), not marked raw (``raw_named``), whose key is no
    graph variable (a swapping Saver's ``w`` holding ``w``'s average stays a weight row:
    export reads it so) and not the shadow's own name (a plain Saver's keys are named
    already).

    Args:
        ckpt: the open checkpoint.
        variables: the rows as listed so far.
        raw_named: the keys shown as holding raw values (a container answering ``in``).
    """
    if ckpt.objects is not None or ckpt.meta is None:
        return variables, set()
    candidates = [v for v in variables if v.ema is None and v.ema_of is None
                  and v.name not in raw_named and v.role in ("weight", "tensor_average",
                                                             "other", "ema")]
    if not candidates:
        return variables, set()
    from .raw_dropped import shadow_written_keys
    from .save_op import written_sources

    sources = written_sources(ckpt)
    written = shadow_written_keys(ckpt, sources) if sources else set()
    if not written:
        return variables, set()
    from .ema_updates import shadow_owners

    owners = shadow_owners(ckpt) or {}
    graph = {v.checkpoint_key for v in ckpt.meta.variables.values()}
    marked: dict[str, str] = {}
    for v in candidates:
        src = sources.get(v.name) or []
        if v.name not in written or v.name in graph or v.name in src:
            continue
        of = {_whole(owners.get(s) or "") for s in src}
        if len(of) == 1 and "" not in of:
            marked[v.name] = of.pop()
    if not marked:
        return variables, set()
    marked = {k: _stored_as(of, sources, variables) for k, of in marked.items()}
    return [replace(v, role="ema", ema_of=marked[v.name], ema=None, ema_candidates=(),
                    ema_style="tf1") if v.name in marked else v for v in variables], set(marked)


def _stored_as(var: str, sources: dict[str, list[str]], variables: list[Variable]) -> str:
    """The key ``var`` (a graph variable) is stored under: the one weight row the save op
    wrote from ``var`` alone (its parts count as it), as ``list`` names a shadow's variable
    ("of model/b", review-29-attack-r108 F3: a renamed plain Saver's ``model/b`` was "b (not
    stored)"); ``var`` itself where no such row, or several, hold it (a training
    ``Saver(ema.variables_to_restore())`` stores it raw under an average's name only).

    Returns:
        the checkpoint key, or ``var``.
    """
    weights = {v.name for v in variables if v.role == "weight"}
    keys = [k for k, src in sources.items()
            if k in weights and src and {_whole(s) for s in src} == {var}]
    return keys[0] if len(keys) == 1 else var


def _whole(name: str) -> str:
    """The variable a partition's name is of (``fc/w`` of ``fc/w/part_0``)."""
    head, sep, tail = name.rpartition(_PART)
    return head if sep and tail.isdigit() else name
