"""TF1 averages of one EMA name that two objects with different decays wrote
(review-26-attack-r92 F1).

``ExponentialMovingAverage(0.5, name="fast").apply([w, b])`` then a second object
``ExponentialMovingAverage(0.9, name="fast").apply([c])`` stores ``w/fast``, ``b/fast`` and
``c/fast``: TF1 numbers an average per variable, and ``c`` had none yet. The names read as one
object's, and so does a second object applied under ``variable_scope("s")`` (``s/c/fast``),
which one object applied twice also writes. The ``.meta`` tells them apart where the names
cannot: each ``apply()`` builds its decay in its own scope (``fast/decay``, ``fast_1/decay``),
and one object gives every ``apply()`` the same decay: the same constant, or the very same
tensor or variable node where the decay is one (:mod:`.formats.meta_decay`; two nodes, which
may hold equal values, prove nothing either way and are refused). Averages whose
``apply()`` calls use different decays
(:attr:`~ckpt_tools.formats.meta_updates.UpdateOps.decays`) are two objects', so exporting
them together gives each weight its own object's average beside another object's: refused,
naming each object's keys and what picks one. Equal decays prove nothing either way (one
object applied twice, or two alike): read as before. Without a ``.meta`` the
names are all there is (``--no-meta``, the documented limit).
"""

from __future__ import annotations

import glob

from .checkpoint import Checkpoint
from .decays_shown import LOOPED
from .ema_holders import refuse_split_holders
from .ema_refusals import UnprovenPairingError, suffix_base
from .ema_updates import part_update_ops
from .formats._record import Frozen
from .offer_probe import option_text, works
from .saved_keys import held_variables


class Decay(Frozen):
    """An ``apply()``'s decay as the ``.meta`` gives it, a key of :func:`apply_decays`.

    Attributes:
        value: the constant, as the update ops spell it (``"0.5"``), or the node a tensor or
            variable decay is read from (``"tensor 'dc5'"``, ``"variable 'decay'"``:
            :attr:`~ckpt_tools.formats.meta_updates.UpdateOps.decays`); ``None`` where the
            ``.meta`` does not show it (an ``apply()`` in a function): unknown, it proves
            nothing equal to another ``apply()``'s (review-27-attack-r100 F1, F3).
        unread_of: with ``value`` None, the ``apply()`` it is of (as ``UpdateOps.applies``
            labels it), so each unknown decay is its own; ``""`` for a read one, which equal
            decays share.
        looped: with ``value`` None, whether that ``apply()`` runs in a ``tf.while_loop``'s
            body (:attr:`~ckpt_tools.formats.meta_updates.UpdateOps.looped`): why it is
            unknown.
    """

    _fields = ("value", "unread_of", "looped")

    def __init__(self, value: str | None, unread_of: str = "", looped: bool = False) -> None:
        self.__dict__.update(value=value, unread_of=unread_of, looped=looped)

    @classmethod
    def of(cls, value: str | None, label: str, looped: bool = False) -> Decay:
        """Returns ``apply()`` ``label``'s decay: ``value`` where read (non-empty), else its
        own unknown one (``looped``: in a ``tf.while_loop``'s body)."""
        return cls(value, "") if value else cls(None, label, looped)

    def __lt__(self, other: Decay) -> bool:  # read ones by value, then unknown by apply()
        return ((self.value is None, self.value or "", self.unread_of)
                < (other.value is None, other.value or "", other.unread_of))

    @property
    def constant(self) -> bool:
        """Whether it is a number the graph holds, not the node a tensor or variable decay is
        read from (``tensor 'dc5'``, quoted: :func:`.formats.meta_decay.decay_source`) nor
        unknown."""
        return self.value is not None and "'" not in self.value

    def said(self) -> str:
        """How a refusal names it: ``decay 0.5``, ``decay tensor 'dc5'``, or that the
        ``.meta`` does not show it."""
        if self.value is None and self.looped:
            return LOOPED
        return "a decay the .meta does not show" if self.value is None else \
            f"decay {self.value}"


NAMELESS = ""  # the family of averages a renaming Saver stored under keys carrying no name


def _family(label: str, key: str, weight: str, stored: tuple[str, str] | None) -> str:
    """The EMA name an average carries, numbering dropped (``fast`` of ``c/fast_1``), or its
    ``apply()`` scope's last part where the key does not extend its weight's (``s/c/fast``).
    ``stored``: the ``(average, weight)`` keys the checkpoint stores them under; where a
    renaming ``Saver`` stored the average under a key that does not extend its weight's
    (``avg/w`` for ``w/slow``, ``avg/c`` for ``c/fast``), the keys carry no EMA name and the
    map reads them as one set whatever the graph names them: :data:`NAMELESS`, one family,
    so their decays are compared (review-28-attack-r103 F2). ``None``: the names read are
    stated, each its own family."""
    if stored is not None and stored[0] != key and not stored[0].startswith(stored[1] + "/"):
        return NAMELESS
    name = key[len(weight) + 1:] if key.startswith(weight + "/") else \
        label.partition(" in ")[0].rpartition("/")[2]
    return suffix_base(name)


def _named(family: str) -> str:
    """How a refusal names the averages of ``family``."""
    return f"the averages named {family}" if family != NAMELESS else \
        "the averages the Saver stored under keys carrying no EMA name"


def apply_decays(ckpt: Checkpoint, pairs, use_meta: bool, left_out=None,
                 stated: bool = False) -> dict[str, dict[Decay, tuple[str, list[tuple[str, str]]]]]:
    """EMA name -> :class:`Decay` -> ``(apply() scope, [(weight, average key), ...])`` of the pairs
    (``(average key, weight key)``) the ``.meta``'s update ops show an ``apply()`` of a read
    decay writing, ``left_out(average, weight)`` leaving a pair out (the map's filters). A
    key a renaming Saver wrote (``model/c/fast``) is read as the variable it holds. A pair
    whose weight is another pair's average (a second object averaging the first's averages,
    ``w/fast/fast``) is left out: each target then takes its own average. Averages a
    renaming Saver stored under keys carrying no EMA name form one family unless ``stated``
    (``--ema-name`` names the names the map reads, ``slow,fast`` stating a mix).

    Returns:
        `dict`: ``{}`` without a ``.meta`` read (or with ``use_meta`` false).
    """
    if not use_meta or ckpt.objects is not None:
        return {}
    found = part_update_ops(ckpt)
    if found is None:
        return {}
    ops, key = found
    writers: dict[str, dict[str, Decay]] = {}  # average key -> {apply(): its decay}
    for shadow, (_var, scope) in ops.averages.items():
        label = ops.applies.get(shadow, scope)
        # a decay the .meta does not show (an apply() in a function) counts as its own (r100
        # F1, F3); a tensor or variable decay is the node it is read from, which one object's
        # apply() calls share (read through a v1 cond's Switch: another node)
        writers.setdefault(key(shadow), {})[label] = Decay.of(ops.decays.get(label), label,
                                                              label in ops.looped)
    held = held_variables(ckpt) or {}
    averages = {a for a, w in pairs if a != w}
    out: dict[str, dict[Decay, tuple[str, list[tuple[str, str]]]]] = {}
    for average, weight in sorted(pairs):
        if average == weight or weight in averages or (
                left_out is not None and left_out(average, weight)):
            continue  # an average of an average is its own object's: no weight takes it
        var, avg = held.get(weight) or weight, held.get(average) or average
        for label, decay in sorted(writers.get(avg, {}).items()):
            by_decay = out.setdefault(_family(label, avg, var, None if stated else (
                average, weight)), {})
            by_decay.setdefault(decay, (label, []))[1].append((weight, average))
    return out


def refuse_two_decays(ckpt: Checkpoint, pairs, ema_name: str | None, name: str | None,
                      use_meta: bool, left_out=None) -> None:
    """Refuses the pairs (``(average key, weight key)``) where averages of one EMA name come
    from ``apply()`` calls of different decays (:func:`apply_decays`): two objects. ``name``:
    the EMA name the map reads (the stated ``ema_name``, or the one it found), tried first
    in the offers.

    Raises:
        UnprovenPairingError: naming each object's keys and decay, the ``--ema-name`` /
            ``--exclude`` options that export one object's averages where the export accepts
            them, and ``--raw`` (exit 6).
    """
    # TF2: averages of one name tracked apart, the decay unrecorded (review-28-attack-r103 F4)
    refuse_split_holders(ckpt, pairs, ema_name, left_out)
    mixed = {f: groups for f, groups in apply_decays(ckpt, pairs, use_meta, left_out,
                                                      ema_name is not None).items()
             if len(groups) > 1}
    if not mixed:
        return
    family, groups = sorted(mixed.items())[0]
    shows = "; ".join(f"apply() {label!r} ({decay.said()}) writes "
                      f"{', '.join(a for _w, a in taken)}"
                      for decay, (label, taken) in sorted(groups.items()))
    unread = not all(d.constant for d in groups)  # a tensor may hold what a constant does
    offers = _offers(ckpt, ema_name or name, groups, pairs)
    offer = (f"{' or '.join(offers)} exports one object's averages; " if offers else
             "no --ema-name or --exclude picks one object's averages here; ")
    of_name = " of that name" if family != NAMELESS else ""
    raise UnprovenPairingError(
        f"{ckpt.path}: " + (f"--ema-name {ema_name}: " if ema_name is not None else "")
        + (f"{_named(family)} are not proven one EMA object's: the .meta's update "
           f"ops show {shows}, and only equal constant decays (with num_updates, one "
           f"counter), or one decay tensor or variable node read by each, show one object's "
           f"apply() calls, so these may be two objects{of_name} and each weight would take "
           f"its own object's average beside the other's; " if unread else
           f"{_named(family)} are not one EMA object's: the .meta's update ops show "
           f"{shows}, and one object gives each of its apply() calls the same decay, so these "
           f"are two objects{of_name} and each weight would take its own object's average "
           f"beside the other's; ") + f"{offer}ckpt export --raw exports the raw weights "
        "instead (give each EMA object its own name when training: "
        "ExponentialMovingAverage(decay, name='fast'))",
        None, {w: (a,) for _label, taken in groups.values() for w, a in taken})


def _offers(ckpt: Checkpoint, name: str | None, groups, pairs=()) -> list[str]:
    """The options (as typed) exporting one group's averages alone that the export accepts
    (:func:`~ckpt_tools.offer_probe.works`): ``--ema-name`` of ``name`` or of the group's
    ``apply()`` scope, with ``--exclude`` of the other groups' weights, ``--allow-missing``
    where it is needed; at most one per group. An offer is typed beside the refused
    command's own filters, and probed with them; where those leave out a pair by its
    average's key alone (``--exclude avg/w`` keeps ``w``, which the group's name does not
    average), the ``--exclude`` of every other weight of ``pairs`` (``(average, weight)``)
    is tried before ``--allow-missing``, which would write that weight raw (note s30j: an
    offer was dropped, and "no --ema-name or --exclude picks one" said, under the caller's
    ``--exclude``).

    Returns:
        `list`: the offers' texts, ``[]`` where none is accepted."""
    averages = {a for a, w in pairs if a != w}
    offers: list[str] = []
    for decay, (label, taken) in sorted(groups.items()):
        exclude = tuple(sorted(glob.escape(w) for d, (_l, others) in groups.items()
                               if d != decay for w, _a in others))
        own = {w for w, _a in taken}
        every = tuple(sorted({*exclude, *(glob.escape(w) for a, w in pairs if a != w
                                          and w not in averages and w not in own)}))
        names = dict.fromkeys([name, label.partition(" in ")[0]])
        tries = [(n, e, m) for m in (False, True) for e in dict.fromkeys((exclude, every))
                 for n in names if n]
        for each, excluded, missing in tries:
            if works(ckpt, each, excluded, missing):
                offers.append(option_text(each, excluded, missing))
                break
    return offers
