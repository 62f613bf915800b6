"""The named steps :func:`~ckpt_tools.emamap.ema_map` takes, in its order, between opening the
checkpoint and filtering its pairs: refusing averages whose variable stays open
(:func:`refuse_unpaired`), reading which key is each weight's average by the names
(:func:`pair_by_names`) or through a renamed Saver's save op (:func:`pair_through_save_op`),
then the file style the map speaks and the weights left unaveraged (:func:`spoken_style`,
:func:`unaveraged_weights`). Each step keeps the refusals it always raised, in the same order.
"""

from __future__ import annotations

from . import roles as R
from .apply_objects import offer_objects, owned_averages
from .checkpoint import Checkpoint
from .ema_ambiguous import ambiguous_message
from .ema_apply_order import a_path_decides, an_order_pairs, lists_decide, optimizer_decides
from .ema_crossed import refuse_crossed, refuse_mixed_parts, refuse_mixed_writers
from .ema_decays import refuse_two_decays
from .ema_names import choose_averages, from_keys, from_meta, recorded_suffixes
from .ema_objects import (
    refuse_other_named,
    refuse_twin_taken,
    refuse_two_endings,
    refuse_unstated_objects,
)
from .ema_proof import refuse_unproven_names, without_slot_names
from .ema_refusals import UnprovenPairingError, file_style
from .ema_sources import (
    foreign_sources,
    refuse_other_averaged,
    refuse_tensor_sources,
    refuse_unwritten_sources,
    renumbered_averages,
    tensor_sources,
    trained_sources,
    translated_unwritten,
    written_sources,
)
from .ema_updates import refuse_slot_sources, stacked_sources, update_ops
from .formats._record import Record
from .listing import natural_key
from .lone_named import unmarked_lone_averages
from .never_averaged import refuse_never_averaged
from .object_held import off_default
from .other_paired import other_paired
from .pairing import lists_stated, root_child
from .raw_offers import without_raw_names
from .raw_shadows import lone_averages, refuse_raw_paired, settle_lone_averages
from .renamed_stated import refuse_averaged_elsewhere, refuse_stated_unaveraged
from .saved_keys import held_variables
from .scoped_order import within_of
from .stacked_unread import refuse_stacked_unread
from .tfk_order import recorded_averages
from .variable import Variable

_KERAS3_ITERATIONS = "_iterations/.ATTRIBUTES/VARIABLE_VALUE"


class Pairing(Record):
    """What :func:`pair_by_names` or :func:`pair_through_save_op` proved, for the map and its
    hints. A :class:`Record`, not a dataclass: ``ckpt list`` imports this module, and
    ``dataclasses`` would cost every list process ~10 ms (see ``formats/_record.py``)."""

    _fields = ("pairs", "missing", "not_saved", "source", "name", "detected", "suffix")

    def __init__(self, pairs: list[tuple[str, str]], missing: list[str], not_saved: list[str],
                 source: str, name: str, detected: list[str], suffix: dict[str, str]) -> None:
        self.pairs = pairs  # (average key, or the weight's own for raw; weight key)
        self.missing = missing  # weights whose average is missing
        self.not_saved = not_saved  # graph variables the checkpoint does not store
        self.source = source  # "meta" (the .meta's collections / save op) or "keys" (names)
        self.name = name  # the EMA name the map speaks of (EmaMap.ema_name)
        self.detected = detected  # proven_names' names, most used first
        self.suffix = suffix  # recorded_suffixes: the EMA names the file records per weight


def proven_names(variables: dict[str, Variable], by_keys: list[str]) -> list[str]:
    """The EMA names to speak of, most used first: ``by_keys`` (:meth:`Checkpoint.ema_names`)
    unless the proven TF1 shadows use none of them (an EMA name of several parts, whose last
    part alone the keys show); then the names the proven shadows carry after their variable's
    key, or their last part where a scope hides the variable's key."""
    shown: dict[str, int] = {}
    by_keys = without_slot_names(variables, by_keys)  # W/SGDM: the graph shows a slot
    for k, v in variables.items():
        if v.role == R.EMA and v.ema_of and v.ema_style == "tf1":
            part = (k[len(v.ema_of) + 1:] if k.startswith(v.ema_of + "/")
                    else k.rpartition("/")[2])
            shown[part] = shown.get(part, 0) + 1
    if by_keys and (not shown or by_keys[0] in shown):
        return by_keys
    return sorted(shown, key=lambda n: (-shown[n], n != R.DEFAULT_EMA_NAME, n))


def spoken_name(ckpt: Checkpoint, variables: dict[str, Variable],
                ema_name: str | None) -> tuple[list[str], str]:
    """Returns ``(proven_names(...), the EMA name to speak of)``: ``ema_name`` if stated, else
    the most used proven one, else TF's default."""
    # Under a variable_scope no <w>/<name> key shows the EMA name: the proven shadows do;
    # so do they for a name of several parts (W/ema/slow proven W's by the .meta).
    detected = proven_names(variables, ckpt.ema_names())
    return detected, ema_name or (detected[0] if detected else R.DEFAULT_EMA_NAME)


def refuse_unpaired(ckpt: Checkpoint, variables: dict[str, Variable], ema_name: str | None,
                    apply_order: str | list[str] | None, style: str | None) -> None:
    """Refuses averages (of ``style``) still paired with no one variable among their
    candidates, naming the statement that decides where one does.

    Raises:
        UnprovenPairingError: (exit 6) naming the option that decides (``--apply-order``
            and its forms, ``--trainable NAMES --loop-order``), or none where none does.
    """
    unpaired = [v for v in variables.values() if v.role == R.EMA and not v.ema_of
                and v.ema_candidates and style in (None, v.ema_style)]
    if ema_name is not None and ckpt.objects is not None and ema_name in {
            root_child(k) for k, v in variables.items() if v.role == R.EMA}:
        # --ema-name optimizer beside ema=[...]: the other attribute's averages are not
        # used, so their open pairing is not this map's
        unpaired = [v for v in unpaired if root_child(v.name) == ema_name]
    unpaired = off_default(ckpt, unpaired, ema_name)  # m.masks=[...]: r37 F6
    if not unpaired:
        return
    tf2 = any(v.ema_style != "tf1" for v in unpaired)
    spans = any(len({root_child(c) for c in v.ema_candidates}) > 1 for v in unpaired)
    decides = tf2 and not apply_order and not spans
    # averages of only part of a same-named group: an order may place none of them; or every
    # order is refused (Keras 3 Dense layers held by a subclassed model, whose tracking the
    # file does not record: review-24-user-u26 F13): --apply-order is then no way out
    no_order = decides and not an_order_pairs(ckpt, unpaired, ema_name)
    # a list or a dict keyed "0"...: the statement naming which, where it decides
    lists = lists_decide(ckpt, unpaired, ema_name, apply_order) if decides or (
        isinstance(apply_order, str) and not lists_stated(apply_order)) else None
    # a tf_keras optimizer's averages: its recorded order places them, stated
    # (fit(): --apply-order tracked; a custom loop: --trainable --loop-order)
    tfk = {v.name for v in unpaired} <= set(recorded_averages(ckpt.objects)) and all(
        sum(u.ema_candidates == v.ema_candidates for u in unpaired)
        == len(v.ema_candidates) for v in unpaired)  # none frozen: tracked may place
    # a Keras optimizer's _trainable_variables: the one recorded order (u20 F4)
    # (several that disagree: none offered, r44 F5)
    opt, split = (None, ()) if within_of(apply_order) else optimizer_decides(
        ckpt, unpaired, ema_name)
    raise UnprovenPairingError(
        ambiguous_message(ckpt, variables, unpaired, apply_order, no_order=no_order,
                          lists=lists, optimizer=opt, disagree=split),
        "--apply-order tracked or --trainable NAMES --loop-order" if tfk and (
            apply_order is None) else f"--apply-order trainable:{opt}" if opt
        else None if split else lists if lists else
        "--apply-order" if decides and not no_order else None if apply_order
        else a_path_decides(ckpt, unpaired, ema_name),  # trainable:PATH (r33 F9)
        {v.name: tuple(sorted(v.ema_candidates, key=natural_key))
         for v in unpaired})


def pair_by_names(ckpt: Checkpoint, variables: dict[str, Variable], ema_name: str | None,
                  use_meta: bool, style: str | None, allow_missing: bool,
                  left_out=None) -> Pairing:
    """Pairs each weight with the average its name (or the graph's update ops) proves, by the
    ``.meta``'s collections where it has them (source ``meta``), else by the keys alone.
    ``left_out(average key, weight key)``: whether the map's filters leave a pair out; a key
    the save op proves raw is then not refused for it (review-20-attack-r50 F9).

    Returns:
        `Pairing`.

    Raises:
        UnprovenPairingError: (an :class:`EmaError`) where the names or the graph prove no
            one object's average (crossed names, several objects, a key written by another op,
            an unwritten key of a training graph...), naming the option that decides.
        EmaError: where :func:`~ckpt_tools.ema_names.choose_averages` or the graph's rules
            refuse otherwise.
    """
    detected, name = spoken_name(ckpt, variables, ema_name)
    suffix = recorded_suffixes(ckpt, variables)
    try:
        chosen = choose_averages(ckpt, variables, suffix, ema_name, style, left_out)
    except UnprovenPairingError as exc:  # the graph's update ops may prove one object's
        chosen = owned_averages(ckpt, variables, ema_name, use_meta, None)
        if chosen is None:
            if exc.option == "--ema-name":  # never offer a crossed name (r39 F2)
                refuse_crossed(ckpt, None, use_meta)
            # never offer a name whose keys hold raw values (review-21-user-u23 F2)
            raise without_raw_names(ckpt, variables, suffix, exc, ema_name) or offer_objects(
                ckpt, variables, use_meta, exc) from None
    else:  # read by the names: a crossed name's keys are two objects' (r39 F2)
        if ema_name is not None:
            refuse_crossed(ckpt, ema_name, use_meta)
    chosen = owned_averages(ckpt, variables, ema_name, use_meta, chosen) or chosen
    if ema_name is not None:  # a/fast and b/fast: --ema-name fast names neither (r53 F1)
        refuse_two_endings(ckpt, ema_name, chosen, use_meta)
    chosen = renumbered_averages(ckpt, variables, ema_name, chosen, use_meta)
    # each key read by the one object's apply(), never another's _N twin (r48 F5)
    refuse_mixed_writers(ckpt, chosen, ema_name, use_meta)
    # w/<name> another apply()'s, not stored: its w/<name>_1 twin is not the named's (r58 F7)
    refuse_twin_taken(ckpt, ema_name, chosen, use_meta)
    refuse_mixed_parts(ckpt, chosen, use_meta)  # one key, two objects' parts (r48 F3)
    refuse_unproven_names(ckpt, variables, suffix, chosen, ema_name)
    graph_pairs = bool(use_meta and style in (None, "tf1") and ckpt.meta is not None
                       and ckpt.meta.collections.get("variables"))
    refuse_slot_sources(ckpt, variables, ema_name, chosen, use_meta, graph_pairs)
    if ema_name is None:  # w0/ExponentialMovingAverage, a slot's running mean
        refuse_other_averaged(ckpt, variables, chosen, use_meta)
    refuse_stacked_unread(ckpt, variables, ema_name, chosen, use_meta)
    # averages of variables not stored that no name marks (w/slow, a scope's): proposed
    unmarked = unmarked_lone_averages(ckpt, variables, chosen, ema_name, use_meta)
    chosen = {**chosen, **{t: s for s, t in unmarked.items()}}
    # an average of another object than the one whose shadows carry the name (r58 F1, F3)
    refuse_other_named(ckpt, ema_name, chosen, use_meta)
    if unmarked and ema_name is None and not detected:  # w/slow: say slow
        name = next(iter(unmarked)).rpartition("/")[2]
    if graph_pairs:
        # a gradient's moment or an EMA of an EMA under W/<name>: W missing its
        # average (r36 F7, F0, F2)
        no_avg = {t: s for t, (s, _x, _o) in [*tensor_sources(
            ckpt, variables, name, chosen, use_meta).items(), *written_sources(
            ckpt, variables, name, chosen, use_meta).items()]}
        ops = update_ops(ckpt)
        # a key nothing writes beside apply()'s updates of others: refused (r41 F1)
        unwritten = refuse_unwritten_sources(ckpt, variables, name, chosen, use_meta,
                                             allow_missing, None, left_out, ema_name)
        no_avg.update(unwritten)
        no_avg.update({t: chosen.get(t) or f"{t}/{ema_name}" for t in [
            *stacked_sources(ckpt, variables, ema_name, chosen, ops),
            *foreign_sources(variables, ema_name, chosen, ops),
            *trained_sources(ckpt, variables, ema_name, chosen, ops)]})
        pairs, missing, not_saved = from_meta(ckpt, variables, name, chosen, no_avg,
                                              stated=ema_name is not None)
        # a weight the graph does not average at all (r45 F8): stated missing too
        missing += [t for t in unwritten if t not in missing]
        source = "meta"
    else:
        refuse_tensor_sources(ckpt, variables, ema_name, chosen, use_meta)
        pairs, missing, not_saved = from_keys(variables, chosen)
        source = "keys"  # a key written by hand (r38 F9): its weight missing
        missing += [t for t, (s, _o, _k) in written_sources(
            ckpt, variables, ema_name, chosen, use_meta).items() if chosen.get(t) == s]
    # TF1: an average whose variable is not stored may hold the raw weight
    pairs = [(s, t) for s, t in pairs if not (s == t and s in unmarked)]
    # and a key the .meta's update ops made 'other' that the graph's collections pair as an
    # average all the same: the save op's proof decides it too (review-25-attack-r88 F2)
    pairs = settle_lone_averages(ckpt, pairs,
                                 {**lone_averages(ckpt, variables, chosen), **unmarked,
                                  **other_paired(ckpt, variables, pairs)}, left_out)
    # --averages-only never pairs a key the graph shows holding a variable no object averages
    refuse_never_averaged(ckpt, pairs, left_out)  # (review-29-attack-r108 F1)
    refuse_raw_paired(ckpt, pairs, left_out, ema_name)  # a partition's, a never-averaged one's
    # averages of one name from apply() calls of different decays: two objects' (r92 F1)
    refuse_two_decays(ckpt, pairs, ema_name, name, use_meta, left_out)
    if ema_name is None:  # the .meta shows several objects averaging a variable (r53 F3)
        refuse_unstated_objects(ckpt, pairs, variables, use_meta)
    return Pairing(pairs, missing, not_saved, source, name, detected, suffix)


def pair_through_save_op(ckpt: Checkpoint, variables: dict[str, Variable], translated,
                         ema_name: str | None, use_meta: bool, allow_missing: bool,
                         left_out=None) -> Pairing:
    """Takes a renamed Saver's ``translated`` pairs (``(pairs, missing, not_saved)`` of
    :func:`~ckpt_tools.saved_swaps.pairs_through_save_op`), with the graph's rules read
    through its save op (r45 F2): a pair the graph does not prove is reported missing (its
    weight raw) where ``allow_missing`` states so. ``left_out(average key, weight key)``: as
    for :func:`pair_by_names`.

    Returns:
        `Pairing` (source ``meta``).

    Raises:
        UnprovenPairingError: (exit 6) such a pair without ``allow_missing``, naming
            ``--no-meta`` and ``--allow-missing``; a key the save op wrote from its variable
            under an average's name, left raw (:func:`~ckpt_tools.raw_shadows.
            refuse_raw_paired`), whatever ``allow_missing``.
    """
    pairs, missing, not_saved = translated
    unwritten = translated_unwritten(ckpt, pairs, use_meta)
    if not allow_missing:  # refused either way: say the apply() that writes it (r80 F2)
        refuse_averaged_elsewhere(ckpt, unwritten, use_meta)
    unproven = refuse_unwritten_sources(ckpt, variables, ema_name, {}, use_meta,
                                        allow_missing, unwritten, left_out, ema_name)
    pairs = [(t, t) if unproven.get(t) == s else (s, t) for s, t in pairs]
    missing = [*missing, *(t for t in unproven if t not in missing)]
    held = held_variables(ckpt) or {}
    if ema_name is None:  # as pair_by_names: several objects averaging one (r58 F5)
        refuse_unstated_objects(ckpt, [(held.get(s) or s, held.get(t) or t) for s, t in pairs],
                                {held.get(k) or k for k in variables}, use_meta)
    else:  # and its stated-name checks, on the variables the keys hold (r58 R3)
        chosen = {held.get(t) or t: held.get(s) or s for s, t in pairs if s != t}
        refuse_two_endings(ckpt, ema_name, chosen, use_meta)
        refuse_twin_taken(ckpt, ema_name, chosen, use_meta)
        refuse_other_named(ckpt, ema_name, chosen, use_meta)
        # each average read by the one object's apply(), as pair_by_names (r80 F3)
        refuse_mixed_writers(ckpt, chosen, ema_name, use_meta)
    # a weight left raw whose variable an apply() (of that name) averaged (r73 F1, F7; r80 F1)
    refuse_stated_unaveraged(ckpt, ema_name, missing, use_meta)
    detected, name = spoken_name(ckpt, variables, ema_name)
    # averages of one name from apply() calls of different decays: two objects' (r92 F1),
    # of the pairs the filters keep, as pair_by_names (s30d: --exclude c was not heeded)
    refuse_two_decays(ckpt, pairs, ema_name, name, use_meta, left_out)
    # a key named as an average the save op wrote from its variable, left raw with no other
    # key's average restoring that variable: raw only if a training graph saved it, as
    # pair_by_names refuses it (a prefixed vtr Saver's --ema-name slow wrote it, exit 0: s28a)
    refuse_never_averaged(ckpt, pairs, left_out)
    refuse_raw_paired(ckpt, pairs, left_out, ema_name)
    suffix = recorded_suffixes(ckpt, variables)
    return Pairing(pairs, missing, not_saved, "meta", name, detected, suffix)


def spoken_style(ckpt: Checkpoint, variables: dict[str, Variable]) -> str:
    """Returns the file style the map's words speak (:func:`~.ema_refusals.file_style`),
    ``keras`` for a TF2 checkpoint of a Keras 3 optimizer's copies or with no average beside
    one."""
    speaks = file_style(ckpt)
    if speaks == "tf2" and {v.ema_style for v in variables.values()
                            if v.role == R.EMA and v.ema_style} == {"keras"}:
        speaks = "keras"  # a Keras 3 optimizer's use_ema copies in a tf.train.Checkpoint
    elif speaks == "tf2" and not any(v.role == R.EMA for v in variables.values()) and any(
            k.endswith(_KERAS3_ITERATIONS) for k in variables):
        # No average at all beside a Keras 3 optimizer (Checkpoint(model=, optimizer=)): the
        # averages a Keras user expects are its use_ema copies, so say use_ema=False.
        speaks = "keras"
    return speaks


def unaveraged_weights(variables: dict[str, Variable], pairs: list[tuple[str, str]],
                       missing: list[str], source: str,
                       speaks: str) -> tuple[list[str], list[str]]:
    """Where the keys alone paired the map: the weights left without an average that are no
    missing one, and the missing weights with those a TF1 ``ema.apply()`` left out added
    (or every weight, where not one average is stored).

    Returns:
        ``(unaveraged, missing)``.
    """
    unaveraged = []
    # BN statistics count only when some have shadows: TF1 trainers average them, Keras not.
    expected_roles = (R.WEIGHT, R.BN_STAT) if any(
        variables[t].role == R.BN_STAT for s, t in pairs if s != t and t in variables) else (
        R.WEIGHT,)
    if source == "keys" and any(s != t for s, t in pairs):
        unaveraged = [t for s, t in pairs if s == t and variables.get(t) is not None
                      and variables[t].role in expected_roles]
        if speaks != "keras":
            # A weight left out of ema.apply() while others were averaged: TF's own
            # variables_to_restore() looks for its average and fails, and evaluating it raw
            # beside averaged ones is not what was asked: missing (--allow-missing keeps it
            # raw). A Keras optimizer's unaveraged weights are those it was not built with
            # (frozen, a target network): raw is what Keras evaluates them with. An integer
            # weight (a hand-quantized w_q) never has one: apply() takes float variables only.
            missing = [*missing, *(t for t in unaveraged if variables[t].dtype in R._FLOAT)]
            unaveraged = [t for t in unaveraged if variables[t].dtype not in R._FLOAT]
    elif source == "keys" and not missing:
        # Not one average stored: every weight misses one (BN statistics count only when
        # some have shadows, as in `ckpt list`'s "none of N weights has a shadow").
        missing = [t for s, t in pairs if variables.get(t) is not None
                   and variables[t].role in expected_roles]
    return unaveraged, missing
