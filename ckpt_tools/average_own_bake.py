"""``ckpt average --ema --bake`` of inputs whose OWN graphs disagree on what a key holds
(review-33-attack-r128 M1).

A swapping run's ``restore-ema`` output (its ``.meta``: ``model/W`` written from
``model/W/ExponentialMovingAverage``) beside a plain run's checkpoint (``model/W`` written
from ``model/W``) was refused for ``--ema --bake`` with the plain average's reason ("no mean
of them is what any Saver wrote"). The bake averages the averages, not the keys: read
through its own graph, each input proves which of its keys holds each weight's average, and
the mean of those is what the output writes under every name that graph pairs. Where every
input's own pairing gives an average for each key the newest input's bake writes, the
averages are read per input; otherwise the graphs' refusal stands.
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .errors import CheckpointError, UnprovenPairingError

__all__ = ["graphs_disagree", "own_bake_sources"]


def graphs_disagree(ckpts: list[Checkpoint], bake: bool) -> UnprovenPairingError | None:
    """:func:`~ckpt_tools.average_graphs.refuse_disagreeing_graphs` of ``ckpts``; with
    ``bake`` (``--ema --bake``) its refusal is returned, for :func:`own_bake_sources` to
    raise where the inputs' own pairings do not settle it.

    Raises:
        UnprovenPairingError: without ``bake``, where the inputs' own graphs disagree.
    """
    from .average_graphs import refuse_disagreeing_graphs

    try:
        refuse_disagreeing_graphs(ckpts)
    except UnprovenPairingError as exc:
        if not bake:
            raise
        return exc
    return None


def own_bake_sources(ckpts: list[Checkpoint], source_of: dict[str, str], to_average,
                     pairing: dict | None, keys, refused: Exception) -> list[dict[str, str]]:
    """For each input (the newest last), output key -> the key of that input whose value is
    the average its own graph pairs with that output key, for every output key in ``keys``
    the newest input's plan (``source_of``, ``to_average``) averages.

    Raises:
        ``refused`` (the graphs' refusal, exit 6) where an older input's own bake refuses
        or pairs no average with one of those keys.
    """
    from .average_write import plan_average  # (it imports this module's caller)
    from .save_op import written_sources

    wanted = [k for k in keys if source_of.get(k, k) in to_average]
    out = []
    for ckpt in ckpts[:-1]:
        try:
            mine, averaged, _assumed, _otherwise = plan_average(ckpt, True, True, pairing)
        except CheckpointError:
            raise refused from None
        if any(mine.get(k, k) not in averaged for k in wanted):
            raise refused
        out.append({k: mine.get(k, k) for k in wanted})
    out.append({k: source_of.get(k, k) for k in wanted})
    # each input's key read for an output key must hold the same graph variable (the same
    # shadow) by its own save op: a var_list dict changed between the saves ("a" from w's
    # average, then from b's) is refused, as the plain average refuses it
    held = []
    for ckpt, read in zip(ckpts, out, strict=True):
        sources = written_sources(ckpt)
        if sources is None:
            raise refused
        held.append({k: frozenset(sources.get(src) or ()) for k, src in read.items()})
    if any(not h[k] or h[k] != held[-1][k] for h in held for k in wanted):
        raise refused
    return out
