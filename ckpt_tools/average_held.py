"""``ckpt average`` of TF2 object checkpoints whose keys hold different variables in different
inputs (review-32-attack-r118 F4).

An object-based checkpoint keys each variable by its path through the saved objects
(``ema/0``, ``model/w``), not by the variable: a list of averages rebuilt in another order
between saves (``ema=[avg(w), avg(b)]``, then ``[avg(b), avg(w)]``), or two EMA objects'
averages swapped between attributes, leaves the same keys holding other variables. Averaged
key by key, ``model/w`` was baked from ck-1's average of ``b`` and ck-2's of ``w``, exit 0.

The object graph records, for every key, the ``full_name`` of the variable saved there
(``w/ExponentialMovingAverage``): the one thing each input proves about what a key holds. A
key is averaged only where every input records the same ``full_name`` for it; otherwise the
inputs are refused (exit 6), naming the first input and key that differ and what each holds.
An optimizer's slot variable is the exception: its key is the object graph's record of its
primary variable (itself compared) and slot name, which proves it whatever its ``full_name``.
Keys are not re-paired by name instead: a ``full_name`` differs as well when a process-wide
counter numbered the same variable otherwise (``w/ExponentialMovingAverage_1`` of an EMA object
made again in one process), and nothing in either file tells that from a second EMA object.

TF1 checkpoints key each variable by a name its Saver chose: where an input's own ``.meta``
shows a key written from another variable, :mod:`~ckpt_tools.average_graphs` compares them.
"""

from __future__ import annotations

from collections.abc import Iterable

from .checkpoint import Checkpoint
from .errors import UnprovenPairingError
from .wording import counted

__all__ = ["refuse_keys_held_otherwise"]

_VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"


def _shown(key: str) -> str:
    """``key`` without the suffix every object checkpoint's variable key carries."""
    return key[:-len(_VALUE)] if key.endswith(_VALUE) else key


def _holds(name: str | None) -> str:
    """What a recorded ``full_name`` says a key holds, in words (escaped)."""
    return "no variable name recorded" if name is None else f"variable {name!r}"


def refuse_keys_held_otherwise(ckpts: list[Checkpoint], keys: Iterable[str]) -> None:
    """Refuses averaging ``keys`` of ``ckpts`` (the newest last) where the inputs' object
    graphs record another variable (``full_name``) under one of them: the mean would mix two
    variables' values. Inputs without an object graph (TF1) are left alone.

    Args:
        ckpts: the inputs, the newest last (its object graph is the output's).
        keys: the newest input's floating-point keys (each averaged, baked over or, where
            proven training state, copied; checked before the ``--bake`` pairing's refusals,
            whose offers this refusal would otherwise refuse again).

    Raises:
        UnprovenPairingError: (exit 6, ``option`` ``None``) naming the first input and key
            that differ, the variable each input records there and how many keys differ.
    """
    newest = ckpts[-1]
    if newest.objects is None:
        return
    keys = sorted(keys)
    want = newest.objects.full_names
    for ckpt in ckpts[:-1]:
        have = ckpt.objects.full_names if ckpt.objects is not None else {}
        slots = ckpt.objects.slots if ckpt.objects is not None else {}
        # a slot variable's key is its optimizer's record of (primary variable, slot name):
        # the same record proves the same slot whatever TF numbered its name (Momentum_1 of
        # an optimizer made again in one process); the primary's own key is compared here
        differ = [k for k in keys if have.get(k) != want.get(k)
                  and not (k in newest.objects.slots and slots.get(k) == newest.objects.slots[k])]
        if not differ:
            continue
        key = differ[0]
        more = f" (and {counted(len(differ) - 1, 'other key')})" if len(differ) > 1 else ""
        raise UnprovenPairingError(
            f"{ckpt.path}: {_shown(key)!r} holds {_holds(have.get(key))} there but "
            f"{_holds(want.get(key))} in {newest.path}{more}, as their object graphs record: "
            "the holders changed between the saves (a list in another order, objects or "
            "attributes swapped), and averaging by key would mix different variables' values: "
            "refused; average only checkpoints whose keys hold the same variables (no option "
            "decides)", option=None)
