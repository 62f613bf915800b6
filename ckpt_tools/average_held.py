"""``ckpt average`` of inputs whose keys hold different variables in different inputs: TF2
object checkpoints and TF1 Savers whose var_list changed (review-32-attack-r118 F4).

An object-based checkpoint keys each variable by its path through the saved objects
(``ema/0``, ``model/w``), not by the variable: a list of averages rebuilt in another order
between saves (``ema=[avg(w), avg(b)]``, then ``[avg(b), avg(w)]``), or two EMA objects'
averages swapped between attributes, leaves the same keys holding other variables. Averaged
key by key, ``model/w`` was baked from ck-1's average of ``b`` and ck-2's of ``w``, exit 0.

The object graph records, for every key, the ``full_name`` of the variable saved there
(``w/ExponentialMovingAverage``): the one thing each input proves about what a key holds. A
key is averaged only where every input records the same ``full_name`` for it, or, where the
two inputs record different sets of names, names another process numbered on in the same order
and no EMA pairing either input proves differs (:mod:`~ckpt_tools.average_renumbered`);
otherwise the inputs are refused (exit 6), naming the first input and key that differ and what
each holds.
An optimizer's slot variable is the exception: its key is the object graph's record of its
primary variable (itself compared) and slot name, which proves it whatever its ``full_name``.
Keys are not re-paired by name instead. Equal names prove nothing where a name repeats
(two modules' ``w``) or where another process gave a second object's averages the first's
names: the files are then identical but for values (docs/averaging.md).

TF1 checkpoints key each variable by a name its Saver chose, and a ``Saver`` whose
``var_list`` dict changed between saves (``{"a": w, "c": b}``, then ``{"a": b, "c": w}``)
leaves the same keys holding other variables too: where each input's own ``.meta`` records the
save op that wrote it, every floating-point key must be written from the same graph
variables in each (``/part_N`` aside); keys whose names mislead are compared, with their
wording, by :mod:`~ckpt_tools.average_graphs` first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .average_keyed import keyed_alike
from .average_renumbered import pairing_fault, renumbering_fault
from .average_shared import DROP_OFFER, droppable, refuse_unproven_shared, shared_name_keys
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


def _both(have: dict, want: dict, key: str, newest: Checkpoint) -> str:
    """What ``key`` holds in an older input (``have``) and the newest, in words: the one name
    once where both record the same."""
    if have.get(key) == want.get(key):
        return f"{_holds(have.get(key))} in both"
    return f"{_holds(have.get(key))} there and {_holds(want.get(key))} in {newest.path}"


def refuse_keys_held_otherwise(ckpts: list[Checkpoint], keys: Iterable[str],
                               pairing: dict | None = None, bake: bool = False, *,
                               plain: bool = False, drop: bool = False) -> list[str]:
    """Refuses averaging ``keys`` of ``ckpts`` (the newest last) where the inputs' object
    graphs record another variable (``full_name``) under one of them: the mean would mix two
    variables' values; TF1 inputs (no object graph) where two inputs' own graphs record a key
    written from different graph variables (:func:`_refuse_sources_differing`).

    Args:
        ckpts: the inputs, the newest last (its object graph is the output's).
        keys: the newest input's floating-point keys (each averaged, baked over or, where
            proven training state, copied; checked before the ``--bake`` pairing's refusals,
            whose offers this refusal would otherwise refuse again).
        pairing: the command's pairing statements (``ema_name``, ``not_swapped``...), under
            which each input's own EMA map is built where names were numbered otherwise or
            are named after a name several variables share
            (:func:`~ckpt_tools.average_shared.refuse_unproven_shared`).
        bake: whether the command bakes (its pairing then refuses an unbuildable map).
        plain: a plain average (no ``--ema``): a refusal that ``drop`` would lift offers it.
        drop: leave out, rather than refuse, the averages named after a shared name that
            nothing proves alike (:func:`~ckpt_tools.average_shared.droppable`); the other
            keys are checked as always.

    Returns:
        the keys left out (``drop``), sorted; ``[]`` otherwise.

    Raises:
        UnprovenPairingError: (exit 6, ``option`` ``None``) naming the first input and key
            that differ, the variable each input records there and how many keys differ.
    """
    newest = ckpts[-1]
    keys = sorted(keys)
    if newest.objects is None:
        _refuse_sources_differing(ckpts, keys)
        return []
    every = keys
    dropped = droppable(ckpts, keys, pairing) if drop else []
    # averages whose holders' own keys name the same weight in every input (a dict keyed by
    # the weights' paths): TF's _N on their names follows apply() order, their place does not
    alike = keyed_alike(ckpts, [k for c in ckpts for k in shared_name_keys(c, keys)])
    keys = [k for k in keys if k not in alike and k not in dropped]
    try:
        _refuse_held(ckpts, keys, pairing)
    except UnprovenPairingError as exc:
        # a plain average refused for averages --drop-unproven-averages leaves out: offered
        # where the other keys then pass (probed), as the shared-name refusal offers it
        left = droppable(ckpts, every, pairing) if plain and not drop else []
        if not left:
            raise
        try:
            _refuse_held(ckpts, [k for k in keys if k not in left], pairing)
        except UnprovenPairingError:
            raise exc from None
        raise UnprovenPairingError(f"{exc}{DROP_OFFER}", option=None) from None
    # equal names under a name several variables share prove nothing (r121 F3)
    refuse_unproven_shared(ckpts, [k for k in every if k not in dropped], pairing, bake,
                           offer=plain)
    return dropped


def _refuse_held(ckpts: list[Checkpoint], keys: list[str], pairing: dict | None) -> None:
    """The TF2 half of :func:`refuse_keys_held_otherwise`: refuses where an older input's
    object graph records another ``full_name`` than the newest's under one of ``keys``
    (numbered on by another process: :func:`_refuse_renumbered`).

    Raises:
        UnprovenPairingError: (exit 6, ``option`` ``None``), as
            :func:`refuse_keys_held_otherwise`.
    """
    newest = ckpts[-1]
    want = newest.objects.full_names
    for ckpt in ckpts[:-1]:
        have = ckpt.objects.full_names if ckpt.objects is not None else {}
        slots = ckpt.objects.slots if ckpt.objects is not None else {}
        # a slot variable's key is its optimizer's record of (primary variable, slot name):
        # the same record proves the same slot whatever TF numbered its name (Momentum_1 of
        # an optimizer made again in one process); the primary's own key is compared here
        differ = [k for k in keys if have.get(k) != want.get(k)
                  and not (k in newest.objects.slots and slots.get(k) == newest.objects.slots[k])]
        if differ and {have.get(k) for k in keys} != {want.get(k) for k in keys}:
            # another process numbered the names on (review-32-attack-r120 F3): accepted
            # where only an order-keeping renumbering and no proven pairing tells them apart
            _refuse_renumbered(ckpt, newest, have, want, keys, differ, pairing)
            continue
        _refuse_first_differing(
            ckpt, newest.path, have, want, differ, _holds,
            "their object graphs record: the holders changed between the saves (a list in "
            "another order, objects or attributes swapped)", shown=_shown)


def _refuse_renumbered(ckpt: Checkpoint, newest: Checkpoint, have: dict, want: dict,
                       keys: list[str], differ: list[str], pairing: dict | None) -> None:
    """Refuses where ``ckpt``'s and ``newest``'s names (different sets) differ by more than
    TF's / Keras' ``_N`` counters kept in order, or where their own EMA maps prove a key
    differing in name to be the average of another weight in each
    (:mod:`~ckpt_tools.average_renumbered`).

    Raises:
        UnprovenPairingError: (exit 6, ``option`` ``None``) naming the input, the key and what
            each records or proves there.
    """
    found = renumbering_fault(have, want, differ)
    if found is None:
        found = renumbering_fault(have, want, keys)  # the order among unchanged names too
    if found is not None:
        key, other = found
        if other is None:
            what = (f"{_shown(key)!r} holds {_holds(have.get(key))} there but "
                    f"{_holds(want.get(key))} in {newest.path}, as their object graphs record: "
                    "more than TF's or Keras' _N numbering of another process differs (a name "
                    "of its own, or the numbers in another order: a list rebuilt otherwise, "
                    "objects swapped)")
        else:  # both keys' names, in each input: one of them may hold the same name in both
            # (review-32-attack-r123 M1: "'ema/2' holds X there but X in ...")
            what = (f"{_shown(other)!r} holds {_both(have, want, other, newest)}, while "
                    f"{_shown(key)!r} holds {_both(have, want, key, newest)}, as their object "
                    "graphs record: their _N numbers are in another order in each, more "
                    "than another process's numbering changes (a list rebuilt otherwise, "
                    "objects swapped)")
        raise UnprovenPairingError(
            f"{ckpt.path}: {what}, and averaging by key could mix different variables' values: "
            "refused; average only checkpoints whose keys hold the same variables (no option "
            "decides)", option=None)
    fault = pairing_fault(ckpt, newest, differ, pairing)
    if fault is not None:
        key, theirs, ours = fault
        raise UnprovenPairingError(
            f"{ckpt.path}: {_shown(key)!r} is the EMA average of {_shown(theirs)!r} there but "
            f"of {_shown(ours)!r} in {newest.path}, as each one's own EMA map proves (their "
            "names differ by TF's or Keras' _N numbering only): averaging by key would mix "
            "different variables' averages: refused; average only checkpoints whose keys hold "
            "the same variables (no option decides)", option=None)


def _sources(ckpt: Checkpoint) -> dict[str, set[str]] | None:
    """Key -> the graph variables (without ``/part_N``) the save op recorded in ``ckpt``'s
    own graph wrote under it; ``None`` where no graph of its own is read or it records no one
    save op that wrote it (several Savers, none: :mod:`~ckpt_tools.average_graphs` and the
    pairing refuse those as they must)."""
    from .own_graph_mark import renamed_keys
    from .save_op import graph_file, written_sources

    if (getattr(ckpt, "meta_doubt", ()) or getattr(ckpt, "meta_unknown", None) is not None
            or getattr(ckpt, "meta_unread", None) or graph_file(ckpt) is None):
        return None
    sources = written_sources(ckpt)
    return None if sources is None else renamed_keys(sources, every=True)


def _refuse_sources_differing(ckpts: list[Checkpoint], keys: list[str]) -> None:
    """The TF1 half of :func:`refuse_keys_held_otherwise`: refuses where two inputs' own
    graphs record a key written from different graph variables (the newest's graph first).

    Raises:
        UnprovenPairingError: (exit 6, ``option`` ``None``) naming both inputs, the first key
            and the variables each graph's save op wrote under it.
    """
    read = [(c, said) for c in reversed(ckpts) if (said := _sources(c)) is not None]
    if len(read) < 2:
        return
    first, want = read[0]
    for ckpt, have in read[1:]:
        _refuse_first_differing(
            ckpt, first.path, have, want, [k for k in keys if have.get(k) != want.get(k)],
            _written, "the save op of each one's own graph records: the Saver's var_list "
            "changed between the saves")


def _refuse_first_differing(ckpt: Checkpoint, newest: str, have: Mapping, want: Mapping,
                            differ: list[str], describe: Callable[[Any], str], recorded: str,
                            shown: Callable[[str], str] = str) -> None:
    """Refuses ``ckpt`` where ``differ``, its keys whose record in ``have`` (key -> what the
    key holds there) is not the one in ``want`` (the same, in the input ``newest`` names), is
    not empty: the first of them, said with ``shown``, what each input records there in
    ``describe``'s words, and ``recorded``, what records it and why they may differ. The
    TF2 (object graphs' ``full_name``) and TF1 (save ops' sources) comparisons alike.

    Raises:
        UnprovenPairingError: (exit 6, ``option`` ``None``) naming ``ckpt``, the first key,
            what each input holds there and how many keys differ.
    """
    if not differ:
        return
    key = differ[0]
    more = f" (and {counted(len(differ) - 1, 'other key')})" if len(differ) > 1 else ""
    raise UnprovenPairingError(
        f"{ckpt.path}: {shown(key)!r} holds {describe(have.get(key))} there but "
        f"{describe(want.get(key))} in {newest}{more}, as {recorded}, and averaging by key "
        "would mix different variables' values: refused; average only checkpoints whose keys "
        "hold the same variables (no option decides)", option=None)


def _written(names: set[str] | None) -> str:
    """The graph variables a save op wrote under a key, in words (escaped)."""
    if not names:
        return "no variable its save op records"
    return "the value of variable " + " + ".join(repr(n) for n in sorted(names))
