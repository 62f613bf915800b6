"""What other messages say about crossed Savers of a ``.meta`` with no stored pair that
differs.

A ``.meta``'s graph may build several Savers whose save ops write exactly the checkpoint's
keys from different variables (:data:`~ckpt_tools.save_op.CROSSED`), where no key named as
an average is stored beside its variable, or each that is holds its variable's values
(:func:`~ckpt_tools.crossed_unpaired.crossed_without_differing_pair`, which
:mod:`.crossed_unpaired` refuses every use of). Two places spoke of them as of any other file:

* with ``--not-swapped`` stated, the keys read as the raw weights with no shadow, and the
  "no EMA shadow" refusal said "the raw weights are usable as they are (ckpt export --raw
  writes them)", while ``export --raw`` is refused there (``--raw --not-swapped`` is a usage
  error): :func:`crossed_raw_route` says what exports them (leftover of s26n);
* ``ckpt list`` showed the keys as plain weights with no word: :func:`crossed_listed` gives
  its ``ema_unproven`` (leftover of s26n).
"""

from __future__ import annotations

from .checkpoint import Checkpoint


def crossed_raw_route(ckpt: Checkpoint) -> str | None:
    """What a refusal that would point at ``export --raw`` says instead where crossed Savers
    with no stored pair that differs make ``--raw`` refused (:func:`~ckpt_tools.crossed_unpaired.
    refuse_crossed_unpaired`; ``--not-swapped`` cannot go with ``--raw``), beginning with
    :data:`~ckpt_tools.unstored_heads.RAW_REFUSED`.

    Returns:
        `str`, or ``None`` where it is not so.

    Raises:
        CheckpointError: the graph file cannot be opened or mapped.
    """
    from .crossed_unpaired import crossed_without_differing_pair

    # a stored pair of equal values counts as none here too (review-27-attack-r97 F2)
    crossed = crossed_without_differing_pair(ckpt)
    if crossed is None:
        return None
    from .save_op import graph_named
    from .unstored_heads import RAW_REFUSED

    key, one, other = crossed
    return (f"{RAW_REFUSED} (its {graph_named(ckpt)}'s graph builds Savers whose save ops "
            f"write exactly these keys from different variables, key {key} from "
            f"{', '.join(one)} in one, from {', '.join(other)} in another, and nothing records "
            "which wrote the checkpoint): ckpt export --raw --no-meta exports the keys as "
            "stored, whichever Saver wrote them")


def crossed_listed(ckpt: Checkpoint) -> dict | None:
    """``ckpt list``'s ``ema_unproven`` (``{"option", "reason", "crossed"}``) where crossed
    Savers with no stored pair leave the keys unproven (``crossed``: the key they disagree
    on, its sources in each, and whether ``--saver-def-wrote`` is offered: the checkpoint's
    own ``.meta`` records one of the Savers' ``SaverDef``); ``None`` otherwise and where
    ``--not-swapped`` states the keys hold what their names say.

    Raises:
        CheckpointError: the graph file cannot be opened or mapped.
    """
    from .crossed_unpaired import crossed_unpaired
    from .errors import UnprovenPairingError

    crossed = crossed_unpaired(ckpt)
    if crossed is None:
        return None
    from .crossed_unpaired import refuse_crossed_unpaired

    try:
        refuse_crossed_unpaired(ckpt)
    except UnprovenPairingError as exc:
        from .saver_def_stated import saver_def_offer

        key, one, other = crossed
        return {"option": exc.option, "reason": str(exc),
                "crossed": {"key": key, "sources": [one, other],
                            "saver_def_wrote": bool(saver_def_offer(ckpt))}}
    return None
