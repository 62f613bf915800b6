"""``ckpt average`` of inputs whose OWN graphs disagree on what a key holds
(review-30-attack-r110 F5).

A run resumed with another Saver (steps 1-3 by ``Saver()``, steps 4-5 by a swapping Saver
``{v.op.name: ema.average(v), ema.average_name(v): v}``, a ``.meta`` at every save), or a
"soup" of a swapping run's and a plain run's checkpoints, was averaged key by key under its own
name and given the newest input's graph: read through it, the mean of one input's RAW weights
and another's averages exported as the "EMA values", exit 0 (and ``--ema --bake`` baked the
same mix). Each input read through its own graph is right; their mean is nothing any Saver
wrote. Such inputs are refused (exit 6) naming each input and what its graph says the key
holds; no option decides (``--no-meta`` would state that the swapped names hold what they say,
which their own graph denies): average the checkpoints each Saver wrote separately.
"""

from __future__ import annotations

import os

from .checkpoint import Checkpoint
from .errors import UnprovenPairingError

__all__ = ["refuse_disagreeing_graphs"]


def _said(ckpt: Checkpoint) -> tuple[str, dict[str, frozenset[str]] | str]:
    """How ``ckpt``'s keys are read: ``(where, key -> the variables its save op wrote under
    it)`` where its own graph's save op shows a key's name misleads; ``(where, {})`` (each key
    holds what its name says) where its graph shows none, or no graph of its own is read;
    ``(where, digest)`` where the graph records several Savers writing its keys from different
    variables (only a graph of the same bytes reads it the same way)."""
    from .own_graph_mark import graph_digest, names_mislead, renamed_keys
    from .save_op import graph_file, written_sources

    path = graph_file(ckpt)
    if path is None or getattr(ckpt, "meta_unread", None) or not names_mislead(ckpt):
        where = (f"its graph {os.path.basename(str(path).rstrip('/'))} shows no key's name "
                 "misleads") if path else "no graph of its own: its keys' names say what they hold"
        return where, {}
    where = f"its graph {os.path.basename(str(path).rstrip('/'))}"
    sources = written_sources(ckpt)
    if sources is None:  # several save ops, crossed: only these bytes read it this way
        return where + " records several Savers writing its keys", graph_digest(path) or path
    return where, {k: frozenset(vs) for k, vs in renamed_keys(sources).items()}


def refuse_disagreeing_graphs(ckpts: list[Checkpoint]) -> None:
    """Refuses averaging ``ckpts`` where their own graphs say the same key holds different
    things (one input's key written from its variable, another's from that variable's
    average). Inputs whose names another checkpoint's graph doubts, or whose other graphs are
    unknown, are left to :mod:`~ckpt_tools.average_doubt` and
    :mod:`~ckpt_tools.average_unknown` (which refuse them beside an input with a graph of its
    own).

    Raises:
        UnprovenPairingError: (exit 6) naming two inputs, a key and what each graph says it
            holds; ``option`` ``None`` (average them separately).
    """
    read = [(c, *_said(c)) for c in ckpts if not getattr(c, "meta_doubt", ())
            and getattr(c, "meta_unknown", None) is None]
    if not any(said for _, _, said in read):
        return
    first, where0, said0 = read[-1]  # the newest (its graph is the output's)
    for other, where1, said1 in read[:-1]:
        if said1 == said0:
            continue
        if isinstance(said0, str) or isinstance(said1, str):
            what = "its keys hold"
            holds0 = holds1 = "what that graph alone reads them as"
        else:
            key = sorted(k for k in {*said0, *said1} if said0.get(k) != said1.get(k))[0]
            what = f"{key!r} holds"
            holds0 = _holds(key, said0)
            holds1 = _holds(key, said1)
        raise UnprovenPairingError(
            f"{first.path} ({where0}: {what} {holds0}) and {other.path} ({where1}: "
            f"{what} {holds1}): their own graphs say the same key holds different "
            "things (a Saver changed between them), so no mean of them is what any Saver "
            "wrote, and the output's one graph would read every input as one of them: "
            "refused. Average the checkpoints each Saver wrote separately (no option decides: "
            "--no-meta would state their names hold what they say, which a graph denies)",
            option=None)


def _holds(key: str, said: dict[str, frozenset[str]]) -> str:
    """What ``said`` (:func:`_said`'s) says ``key`` holds, in words."""
    sources = said.get(key)
    if sources is None:
        return f"variable {key!r}, as its name says"
    return "the value of variable " + " + ".join(repr(s) for s in sorted(sources))
