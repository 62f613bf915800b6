"""Crossed Savers of a ``.meta`` where the checkpoint stores no (variable, average) pair that
differs (whose refusal :func:`~ckpt_tools.swap_assumed.saver_assumptions` brings).

A ``.meta``'s graph may build several Savers whose save ops write exactly the checkpoint's
keys from different variables (:data:`~ckpt_tools.save_op.CROSSED`): e.g. ``Saver([W, V])``
beside ``Saver({v.op.name: ema.average(v)})``, or two Savers of two EMA objects' averages
under the variables' names. Where a key named as an average is stored beside its variable
and differs from it, :func:`~ckpt_tools.swap_assumed.saver_assumptions` refuses the pairing.
Where none is, the keys' names alone read every key as its variable's raw value, and
``export --raw`` wrote the averages as the raw weights, exit 0 (review-26-attack-r94 F1); so
too where every stored pair holds equal values (a frozen variable's), which
``saver_assumptions`` drops, while the Savers disagree on another key (review-27-attack-r97
F2). :func:`refuse_crossed_unpaired` refuses it: the default export, ``--raw``, ``map`` and
``restore-ema`` alike, naming the statements that decide.
"""

from __future__ import annotations

from .checkpoint import Checkpoint


def crossed_without_differing_pair(ckpt: Checkpoint) -> tuple[str, list[str],
                                                                 list[str]] | None:
    """``(key, its sources in one save op, in another)`` where the graph file's Savers write
    exactly the checkpoint's keys with different readings
    (:func:`~ckpt_tools.save_op.crossed_keys`) and no stored (variable, average) pair differs,
    whatever ``--not-swapped`` states; ``None`` otherwise. A pair that differs brings the
    refusal of :func:`~ckpt_tools.swap_assumed.saver_assumptions`, which names the crossed
    Savers; a pair of equal values (a frozen variable's) proves nothing about the key the
    Savers disagree on, so it counts as none (review-27-attack-r97 F2: its average was written
    as its raw weight by ``--raw``, exit 0). The one answer to "is a pair stored" for
    :func:`crossed_unpaired` and :mod:`~ckpt_tools.crossed_routes`.

    Returns:
        `tuple[str, list[str], list[str]]` or ``None``.

    Raises:
        CheckpointError: the graph file cannot be opened or mapped.
    """
    from .save_op import crossed_keys, stored_pairs
    from .swap_assumed import same_values

    if ckpt.objects is not None:
        return None
    crossed = crossed_keys(ckpt)
    if crossed is None:
        return None
    pairs = stored_pairs(ckpt)
    if pairs and not same_values(ckpt, pairs):
        return None  # saver_assumptions refuses the file unless --not-swapped states it
    return crossed


def crossed_unpaired(ckpt: Checkpoint) -> tuple[str, list[str], list[str]] | None:
    """:func:`crossed_without_differing_pair`, where ``--not-swapped`` does not state that
    the keys hold what their names say; ``None`` where it does.

    Returns:
        `tuple[str, list[str], list[str]]` or ``None``.

    Raises:
        CheckpointError: the graph file cannot be opened or mapped.
    """
    return None if ckpt.not_swapped else crossed_without_differing_pair(ckpt)


def refuse_crossed_unpaired(ckpt: Checkpoint) -> None:
    """Refuses any use of the keys where :func:`crossed_unpaired` finds Savers disagreeing:
    nothing in the file records which of them wrote the checkpoint, so neither the raw weights
    nor the averages are proven (review-26-attack-r94 F1; which Saver is the plain one is not
    claimed: r94 F6).

    Raises:
        UnprovenPairingError: (exit 6) naming the file, the key the Savers disagree on, and
            ``--not-swapped`` / ``--raw --no-meta``.
    """
    crossed = crossed_unpaired(ckpt)
    if crossed is None:
        return
    from .errors import UnprovenPairingError
    from .save_op import graph_file, graph_named
    from .saver_def_stated import saver_def_offer

    key, one, other = crossed
    offer = saver_def_offer(ckpt)
    raise UnprovenPairingError(
        f"{ckpt.path}: its {graph_named(ckpt)} ({graph_file(ckpt)}) builds Savers whose save "
        f"ops write exactly these keys from different variables (key {key} from "
        f"{', '.join(one)} in one, from {', '.join(other)} in another), and nothing in the "
        "file records which of them wrote the checkpoint, so the keys may hold raw weights or "
        "averages: if each key holds what its name says, pass --not-swapped (Python: "
        "not_swapped=True); to export the keys as stored whichever Saver wrote them (raw "
        "weights or averages, as it saved them), pass --raw --no-meta"
        + (f"; {offer}" if offer else ""), option="--not-swapped")
