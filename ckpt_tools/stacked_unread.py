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

The one-part form (review-17-attack-r38 F3, F6): under the name ``N`` (stated, or TF's default)
``w0/N`` beside a stored ``w0/N/N`` is either ``w0``'s average (and ``w0/N/N`` the same EMA's
average of that average) or a variable of the model named ``w0/N`` (a frozen ``w0``'s trained
delta) whose own average ``w0/N/N`` is, ``w0`` having none. Read without a ``.meta`` (none beside
the checkpoint, or ``--no-meta``), ``--ema-name fast`` wrote the delta's raw values as ``w0`` and
dropped it (exit 0, ``--strict``): refused, naming the ``.meta`` (with it the answer is proven).
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
    if ckpt.objects is not None:
        return
    refuse_doubled_unread(ckpt, variables, ema_name, chosen, use_meta)
    if ema_name is None or "/" not in ema_name:
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


def refuse_doubled_unread(ckpt: Checkpoint, variables, ema_name: str | None,
                          chosen: dict[str, str], use_meta: bool) -> None:
    """Refuses ``W <- W/<N>`` where ``W/<N>/<N>`` is stored too and no ``.meta`` is read (none
    beside the checkpoint, or ``--no-meta``): ``W/<N>`` may be a variable whose own average
    ``W/<N>/<N>`` is (review-17-attack-r38 F3, F6).

    Raises:
        UnprovenPairingError: (exit 6) naming both readings and what decides (the ``.meta``).
    """
    if use_meta and ckpt.meta is not None:
        return
    for target, source in sorted(chosen.items()):
        name = source[len(target) + 1:] if source.startswith(f"{target}/") else None
        if not name or (ema_name is not None and name != ema_name) or (
                f"{source}/{name}" not in variables):
            continue
        beside = ("the training graph's .meta beside the checkpoint does (which variables "
                  "it holds, its update ops): drop --no-meta" if ckpt.meta_unread else
                  "the training graph's .meta does (which variables it holds, its update "
                  "ops): put model.ckpt.meta (Saver.save(..., write_meta_graph=True)) beside "
                  "the checkpoint")
        raise UnprovenPairingError(
            f"{ckpt.path}: under the EMA name {name!r}, {source} is either the average of "
            f"{target} (and {source}/{name} the same EMA's average of that average), or a "
            f"variable of the model (a frozen {target}'s trained delta) whose own average "
            f"{source}/{name} is, {target} having none; the keys alone do not tell which, "
            f"and {beside}; or export the raw values with --raw",
            "--no-meta" if ckpt.meta_unread else None, {target: (source,)})
