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


def crossed_unpaired(ckpt: Checkpoint) -> tuple[str, list[str], list[str]] | None:
    """``(key, its sources in one save op, in another)`` where the graph file's Savers write
    exactly the checkpoint's keys with different readings
    (:func:`~ckpt_tools.save_op.crossed_keys`) and no stored pair brings the refusal of
    :func:`~ckpt_tools.swap_assumed.saver_assumptions` (which drops the pairs whose variable
    equals its average: a frozen variable's pair beside a key the Savers disagree on, whose
    average ``--raw`` wrote as its raw weight, exit 0: review-27-attack-r97 F2); ``None``
    otherwise, and where ``--not-swapped`` states the keys hold what their names say.

    Returns:
        `tuple[str, list[str], list[str]]` or ``None``.

    Raises:
        CheckpointError: the graph file cannot be opened or mapped.
    """
    from .save_op import crossed_keys
    from .swap_assumed import saver_assumptions

    if ckpt.objects is not None or ckpt.not_swapped:
        return None
    crossed = crossed_keys(ckpt)
    if crossed is None or any(a.refused for a in saver_assumptions(ckpt)):
        return None  # a stored pair whose values differ: saver_assumptions refuses it all
    # no stored pair, or only pairs of equal values, which saver_assumptions drops: the key
    # the Savers disagree on need not be one of them (review-27-attack-r97 F2)
    return crossed


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
