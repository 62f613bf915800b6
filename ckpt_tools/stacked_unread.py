"""A stated TF1 EMA name of several parts whose key may be an EMA of an EMA, read with the
``.meta`` set aside (review-17-attack-r36 F2).

``ExponentialMovingAverage(name="ema/fast")`` writes ``w0``'s average as ``w0/ema/fast``; so does
``ExponentialMovingAverage(name="fast").apply([ema.average(w0)])`` (``fast``'s average of
``w0/ema``, an EMA of an EMA), and a hand-written ``assign_moving_average`` kept under
``variable_scope("w0/ema")`` as ``fast``. Where ``w0/ema`` is stored beside ``w0/ema/fast`` the
keys fit both readings; the ``.meta``'s update ops tell them apart (:mod:`.ema_updates`). Under
``--no-meta``, with that ``.meta`` beside the checkpoint, ``--ema-name ema/fast`` wrote ``fast``'s
average of ``w0/ema`` as ``w0``'s (exit 0, ``--strict``), although ``ema/fast`` (a real object,
over ``w1`` only) never averaged ``w0``: refused, naming the ``.meta``.
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .ema_refusals import UnprovenPairingError


def refuse_stacked_unread(ckpt: Checkpoint, variables, ema_name: str | None,
                          chosen: dict[str, str], use_meta: bool) -> None:
    """Refuses ``W <- W/<a>/<b>`` for ``--ema-name a/b`` where ``W/<a>`` is stored too and the
    ``.meta`` beside the checkpoint is set aside (``--no-meta``).

    Raises:
        UnprovenPairingError: (exit 6, ``--no-meta``) naming both readings and the ``.meta``.
    """
    if ema_name is None or "/" not in ema_name or ckpt.objects is not None:
        return
    unread = ckpt.meta_unread or (not use_meta and ckpt.meta is not None)
    if not unread:
        return
    parts = ema_name.split("/")
    named = {t: f"{t}/{ema_name}" for t in variables if f"{t}/{ema_name}" in variables}
    for target, source in sorted({**named, **chosen}.items()):
        if source != f"{target}/{ema_name}":
            continue
        for i in range(1, len(parts)):
            inner, outer = "/".join(parts[:i]), "/".join(parts[i:])
            if f"{target}/{inner}" not in variables:
                continue
            raise UnprovenPairingError(
                f"{ckpt.path}: --ema-name {ema_name} with --no-meta: {source} is either an "
                f"average of {target} kept by an EMA named {ema_name!r}, or the average of "
                f"{target}/{inner} (stored beside it) kept by an EMA named {outer!r} "
                f"({outer}.apply([{inner}.average({target})]), an EMA of an EMA); the keys "
                f"alone do not tell which, and the training graph's .meta beside the "
                f"checkpoint does (its update ops): drop --no-meta",
                "--no-meta", {target: (source,)})
