"""TF1 keys named as averages whose variable the checkpoint does not store.

Two ``tf.compat.v1.train.Saver`` layouts hold ``w/ExponentialMovingAverage`` and no ``w``:

* a Saver of the averages alone (``Saver({ema.average_name(v): ema.average(v) ...})``, a
  serving export): the keys hold the averages;
* the training graph saved with ``Saver(ema.variables_to_restore())`` (the evaluation mapping,
  used by mistake during training): TF maps ``average_name(v)`` to ``v`` itself, so the keys
  hold the variables' RAW values and no average at all.

The keys are alike; only the ``.meta``'s save op tells them apart (see
:mod:`ckpt_tools.formats.meta_saver`): the first reads each key from the shadow variable, the
second from the model variable. Without that proof such keys are refused, never paired,
unless the caller states that they hold averages (``--averages-only``) where nothing records
which Saver wrote them, or where an evaluation graph's ``Saver(ema.variables_to_restore())``
wrote them (no shadow variables, no ``ema.apply()`` in its graph: the keys hold what it
restored, the averages when it restored a training checkpoint; :func:`evaluation_graph`).
"""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint
from .ema_refusals import UnprovenPairingError
from .formats.meta_saver import LAST_PART
from .lone_named import proposed_lone_averages
from .meta_sibling import stated_offer
from .never_averaged import exclude_text, never_averaged
from .raw_named import (
    evaluation_graph,
    fine_tune_said,
    raw_named_keys,
    saved_from,
)
from .raw_named_said import if_trained
from .resave_objects import crossed_refusal, raw_saver_read
from .resaved_named import stated_resaved
from .save_op import graph_file, graph_named, why_unwritten, written_sources
from .unstored_heads import suspect_weights
from .wording import agreeing, counted


def lone_averages(ckpt: Checkpoint, variables, chosen: dict[str, str]) -> dict[str, str]:
    """Returns average key -> variable key for each TF1 average chosen for a variable the
    checkpoint does not store (``{}`` for TF2 and Keras files).

    Args:
        ckpt: the open checkpoint.
        variables: its variables by key.
        chosen: variable key -> the average chosen for it
            (:func:`~ckpt_tools.ema_names.choose_averages`).
    """
    if ckpt.objects is not None:
        return {}
    stored = ckpt.entries()
    return {s: t for t, s in chosen.items() if t not in stored and s in variables
            and variables[s].role == R.EMA and variables[s].ema_style == "tf1"}


def _sources(ckpt: Checkpoint) -> dict[str, list[str]] | None:
    """Key -> what the ``.meta``'s save op wrote it from, or ``None`` (no ``.meta``, or one
    that does not record the save op that wrote this checkpoint: :mod:`.save_op`)."""
    return written_sources(ckpt)


def _unrecorded(sources, s: str) -> bool:
    """Whether nothing records what key ``s`` was saved from (what ``--averages-only``
    may state)."""
    return not sources or s not in sources


def _statable(ckpt: Checkpoint, sources, s: str, t: str) -> bool:
    """Whether ``--averages-only`` may state that key ``s`` holds ``t``'s average: nothing
    records what wrote it, or a Saver of ``ema.variables_to_restore()`` wrote it from ``t``:
    an evaluation graph's (:func:`evaluation_graph`), or one the graph cannot tell from a
    training graph's (it built ema.apply(), never run; review-23-attack-r70 F1, F2)."""
    return _unrecorded(sources, s) or saved_from(sources.get(s), t)


def _evaluation_refusal(ckpt: Checkpoint, found: list, undecided) -> UnprovenPairingError:
    s, t = found[0]
    graph = graph_named(ckpt)
    # a Saver of the graph reading the raw weights' keys: said, as it may have restored
    # them (review-33-attack-r130 M1); a Saver built is no proof that it ran
    raw = raw_saver_read(ckpt, s[len(t) + 1:]) if s.startswith(t + "/") else None
    shown = ("the file cannot show that" if raw is None else
             f"the {graph} also builds a Saver that reads {raw[1]} from the key {raw[0]} "
             "(its own name: the raw weight in a training checkpoint), and if that Saver "
             "restored the variables the keys hold raw weights; the file cannot show which "
             "restored them")
    return UnprovenPairingError(
        f"{ckpt.path}: {counted(len(found), 'key')} named as averages "
        f"{agreeing(len(found), 'was', 'were')} written from "
        f"{agreeing(len(found), 'its variable', 'their variables')}, e.g. {s} from {t}: the "
        f"{graph}'s saver is a Saver of "
        "ema.variables_to_restore() in a graph with no shadow variables and no ema.apply() "
        "(an evaluation graph re-saving what it restored), so each key holds what that Saver "
        "restored into the variable before saving: the averages if it restored them from a "
        f"training checkpoint, but {shown}; pass --averages-only (Python: "
        "open_checkpoint(path, averages_only=True)) if the keys hold averages restored that "
        "way (then they are paired as the averages)", "--averages-only", undecided)


def _stated_offer(ckpt: Checkpoint, keys) -> str:
    """The ``--averages-only`` offer of :func:`raw_refusal` for ``keys``, with ``--exclude``
    of those the graph shows holding a variable no EMA object averages
    (:func:`~ckpt_tools.never_averaged.never_averaged`: raw whichever graph saved them,
    review-29-attack-r108 F1). Returns the clause."""
    held = never_averaged(ckpt)
    never = sorted(k for k in keys if k in held)
    if not never:
        return "pass --averages-only (Python: open_checkpoint(path, averages_only=True)) if so"
    return (f"pass --averages-only {exclude_text(never)} (Python: open_checkpoint(path, "
            f"averages_only=True), exclude=[...]) if so: {never[0]} holds {held[never[0]]}'s "
            "raw value whichever graph saved it (no EMA object of the .meta writes an average "
            "under that name), so it is left out")


def raw_refusal(ckpt: Checkpoint, raw: list, undecided,
                pairs: list | None = None, unread: str | None = None,
                ema_name: str | None = None) -> UnprovenPairingError:
    """Returns the refusal (exit 6) for keys named as averages that the save op wrote from
    their variables: ``raw`` ``(key, variable)`` pairs, first the one the message names;
    every other :func:`raw_named_keys` key is counted and carried too (a never-averaged
    variable's, a partition's: review-20-attack-r50 F3). Where ``pairs`` (the map's
    ``(source, target)``) hold averages of other variables (a ``Saver(ema.
    variables_to_restore([w]))`` over a subset), ``--exclude`` decides: leaving those
    variables out exports the others' averages (review-20-attack-r50 F9); else no option.
    ``unread``: a key of ``raw`` no pair reads as an average (``--ema-name slow`` beside
    ``model/c/ExponentialMovingAverage``, which holds raw ``c`` or another object's average
    of it), which ``--averages-only`` cannot lift: it is then not offered, and the message
    says why (review-28-attack-r106 F1: the advice came back word for word with it given)."""
    s, t = raw[0]
    named = {k for k, _ in raw}  # once, not per key of raw_named_keys
    holds = raw_named_keys(ckpt)
    every = [*raw, *((k, v) for k, v in holds.items() if k not in named)]
    keys = {k for k, _ in every}
    # a variable restored from a real average (slow's, beside the raw-valued keys of a
    # vtr Saver of another object) is not in question: counted, it hid --exclude (u23 F2);
    # a renamed Saver's pair names the key holding it (model/w/ExponentialMovingAverage)
    averaged = {holds.get(b, b) for a, b in pairs or () if a != b and a not in keys}
    raw = [*raw, *((k, v) for k, v in every[len(raw):] if v not in averaged)]
    held = sorted({v for _, v in raw})
    whole = {LAST_PART.sub("", v) for v in held}  # a partition's: its variable's
    others = sorted({holds.get(b, b) for a, b in pairs or () if a != b and a not in keys
                     and LAST_PART.sub("", holds.get(b, b)) not in whole})
    exclude = (f"; --exclude {' --exclude '.join(repr(v) for v in held[:3])}"
               f"{' ...' if len(held) > 3 else ''} (Python: exclude=[...]) leaves "
               f"{'them' if len(held) > 1 else 'it'} out and takes the other "
               + ("variable's average" if len(others) == 1 else f"{len(others)} variables' "
                  "averages")) if others else ""
    # a training graph's Saver wrote the raw weights, an evaluation graph's the averages it
    # restored, and the graph may build ema.apply() either way: --averages-only states the
    # latter, --raw --keys-are-raw the former (review-23-attack-r70 F1, F2); never offered
    # where a partitioned variable's parts are among them: ckpt does not assemble parts
    # saved under separate keys, so the statement is refused there (review-26-attack-r94 F3)
    apart = _parts_apart(ckpt, raw)
    # the graph's variable (b), not the name a renaming Saver gives it (model/b)
    src = (written_sources(ckpt) or {}).get(s) or []
    wrote = src[0] if len(src) == 1 else t
    offer = (f"--averages-only cannot state it here ({apart[1]} is a partitioned variable "
             f"stored under no key of its own, its parts written whole under separate keys, "
             f"e.g. {apart[0]}, which ckpt does not assemble); if so, restore the checkpoint "
             "in the graph imported from the .meta (import_meta_graph(...).restore) and save "
             "it with a plain tf.train.Saver()" if apart else
             f"--averages-only does not lift this refusal: "
             f"{f'under --ema-name {ema_name} ' if ema_name else ''}no pair reads {unread} "
             "as an average, so its variable would get no average from it either way"
             if unread else
             _stated_offer(ckpt, keys))
    return UnprovenPairingError(
        f"{ckpt.path}: {counted(len(raw), 'key')} named as averages "
        f"{if_trained(len(raw))}, e.g. {s}: the "
        f"{graph_named(ckpt)}'s saver "
        f"wrote it from {wrote} itself, as a Saver built from ema.variables_to_restore() does "
        "(it maps each average's name to its variable), so the file proves no average of "
        "them: saved by a training graph, they hold the raw weights, which that Saver "
        "restores into the model (tf.train.load_checkpoint reads them by these names); to "
        "keep the averages, train "
        "with a Saver of all variables (tf.train.Saver()) and use variables_to_restore() "
        "only to evaluate (ckpt export --raw --keys-are-raw writes the raw weights under "
        "their variables' names); if an evaluation graph restored the averages and saved "
        "again with that Saver (it may build ema.apply() too), the keys hold the averages, "
        "which the file cannot show: " + offer + fine_tune_said(ckpt) + exclude,
        "--exclude" if others else None, undecided, raw=tuple(s for s, _ in every))


def _parts_apart(ckpt: Checkpoint, raw: list) -> tuple[str, str] | None:
    """``(key, variable)`` for the first of ``raw`` (``(key, variable)`` pairs) whose variable
    the graph records as a part of a partitioned variable (its save-slice info) that no key
    holds: ``(W/part_0/ExponentialMovingAverage, W)``; ``None`` where none is."""
    graph = ckpt.meta.variables if ckpt.meta is not None else {}
    stored = ckpt.entries()
    for key, var in raw:
        part = getattr(graph.get(var), "partition", None)
        if part is not None and part.full_name != var and part.full_name not in stored:
            return key, part.full_name
    return None


def refuse_raw_paired(ckpt: Checkpoint, pairs: list, left_out=None,
                      ema_name: str | None = None) -> None:
    """Refuses a TF1 pairing (``(average key, variable key)`` pairs) that would read a key
    the save op proves holds its variable's RAW value (:func:`raw_named_keys`) as an
    average, or leave out the variable whose raw value only such a key holds (not stored,
    restored from no other average): a training ``Saver(ema.variables_to_restore())`` of a
    partitioned variable (``w/part_0/ExponentialMovingAverage`` from ``w/part_0``) or of one
    never averaged (``c/ExponentialMovingAverage`` from ``c``), which the lone-average proof
    (:func:`settle_lone_averages`) does not see (review-20-attack-r50 F3); also the pairs of
    a renamed Saver (``Saver({"model/" + k: v ...})`` of ``variables_to_restore()``), whose
    targets are the keys holding the variables: ``--ema-name slow`` took ``b``'s key,
    raw only if a training graph saved it, as its raw weight, exit 0 without
    ``--allow-missing``, which the same Saver without the prefix refuses (s28a).

    ``left_out(key, variable)``: whether the caller's filters leave that pair out (never
    exported nor restored: its raw value cannot be taken for an average). ``ema_name``: the
    name the caller stated, said where ``--averages-only`` cannot lift the refusal.

    Raises:
        UnprovenPairingError: (exit 6) as :func:`raw_refusal`.
    """
    named = raw_named_keys(ckpt)
    held = {k: t for k, t in named.items() if left_out is None or not left_out(k, t)}
    if not held:
        return
    stored = ckpt.entries()
    # a renamed Saver's pairs (pair_through_save_op) name the key holding the variable, not
    # the variable: (model/w/slow, model/w/ExponentialMovingAverage) restores the model/w
    # that key holds (review-27-attack-r96 s27i "Left")
    restored = {named.get(t, t) for s, t in pairs if s != t and s in stored}
    # --averages-only states that such keys hold averages (an evaluation graph's re-save)
    averages = {s for s, t in pairs if s != t} if not ckpt.averages_only else set()
    # keys whose variable no pair restores from another key: --averages-only cannot lift
    # them, so the refusal never offers it there (review-28-attack-r106 F1)
    unread = [k for k, t in held.items()
              if t not in stored and LAST_PART.sub("", t) not in stored
              and t not in restored and LAST_PART.sub("", t) not in restored]
    bad = [(k, t) for k, t in held.items() if k in averages or k in unread]
    if bad:
        raise raw_refusal(ckpt, bad, {k: (t,) for k, t in bad}, pairs,
                          unread[0] if unread else None, ema_name)


def settle_lone_averages(ckpt: Checkpoint, pairs: list, lone: dict[str, str],
                         left_out=None) -> list:
    """Returns ``pairs`` (``(average key, variable key)``) with the ``lone`` averages (see
    :func:`lone_averages`) paired where the ``.meta``'s save op proves each was read from the
    shadow variable itself (a Saver of the averages alone), or, where nothing records it,
    the caller stated so (``ckpt.averages_only``, ``--averages-only``).
    ``left_out(key, variable)``: as for :func:`refuse_raw_paired`; such a pair the save op
    proves raw is not refused (the caller's filters drop it).

    Raises:
        UnprovenPairingError: (exit 6) the save op wrote some from their variable itself (a
            Saver of ``ema.variables_to_restore()``: raw values; ``--exclude`` decides where
            others are averaged, :func:`raw_refusal`), or nothing proves which Saver wrote
            them (no ``.meta``, or one that does not record its save op: ``--averages-only``
            decides): both Savers write these keys alike.
    """
    if not lone:
        return pairs
    meta = graph_file(ckpt)
    sources = _sources(ckpt)
    undecided = {s: (t,) for s, t in lone.items()}
    at = {s: i for i, (s, _) in enumerate(pairs)}  # named as the graph orders them
    ordered = sorted(lone.items(), key=lambda st: (at.get(st[0], len(at)), st[0]))
    raw = [(s, t) for s, t in ordered if sources and saved_from(sources.get(s), t)]
    evaluated = [(s, t) for s, t in raw if evaluation_graph(ckpt, s)]
    crossed = crossed_refusal(ckpt, evaluated) if evaluated else None
    if crossed is not None:  # Savers of two EMA objects: whose averages? (r115 F1)
        raise crossed
    raw = [st for st in raw if st not in evaluated]
    # stated to hold averages: whose? a graph restoring another object's (or variable's) keys
    # into them outside its Savers answers (a vocabulary warm start, a staging variable's
    # hop: review-33-attack-r126 F2)
    crossed = crossed_refusal(ckpt, raw) if raw and ckpt.averages_only else None
    if crossed is not None:
        raise crossed
    # a pair the caller's filters leave out (--exclude w): kept for them to drop and count
    unused = {st for st in raw if left_out is not None and left_out(*st)}
    ordered = [st for st in ordered if st not in unused]
    raw = [st for st in raw if st not in unused]
    if raw and not ckpt.averages_only:  # stated: they hold averages (restored, saved again)
        raise raw_refusal(ckpt, raw, undecided, pairs)
    if evaluated and not ckpt.averages_only:
        raise _evaluation_refusal(ckpt, evaluated, undecided)
    unproven = [(s, t) for s, t in ordered
                if not (sources and saved_from(sources.get(s), s))
                and not (ckpt.averages_only and _statable(ckpt, sources, s, t))]
    if unproven:
        s, t = unproven[0]
        stated = _unrecorded(sources, s)
        graph = graph_named(ckpt)
        why = ("--no-meta leaves no .meta" if not meta and ckpt.meta_unread else
               "it has no .meta" if not meta else
               f"its {graph} {why_unwritten(ckpt)}" if not sources else
               f"its {graph}'s saver did not write {s}" if s not in sources else
               f"its {graph}'s saver wrote {s} from neither {t} nor a variable named {s}")
        # weights no stored key averages (a hand-made batch norm's beta beside its moments'
        # averages): --averages-only alone refuses them (review-23-attack-r72 F1)
        # averages-only or not, unless one may be a second object's average (c/slow: r75 F4)
        averaged = {v.ema_of for v in ckpt.variables_unwarned() if v.role == R.EMA}
        bare = " --allow-missing" if any(
            v.role in (R.WEIGHT, R.BN_STAT) and v.name not in averaged
            for v in ckpt.variables_unwarned()) and not suspect_weights(
                ckpt, {v.name: v for v in ckpt.variables_unwarned()}) else ""
        raise UnprovenPairingError(
            f"{ckpt.path}: {counted(len(unproven), 'key')} named as averages "
            f"{agreeing(len(unproven), 'has', 'have')} no variable stored "
            f"beside them (e.g. {s}, and no {t}): a Saver of the averages alone "
            "(Saver({ema.average_name(v): ema.average(v)})) holds averages there, but a "
            "Saver of ema.variables_to_restore() writes the variables' RAW values under "
            f"these names, and {why} to tell which wrote them; "
            + (stated_offer(ckpt) or "keep the training .meta (model.ckpt.meta, written by "
               "saver.save) beside the checkpoint")  # a sibling's layout: r81 F9
            + (f", or pass --averages-only{bare} (Python: open_checkpoint(path, "
               f"averages_only=True){', allow_missing=True' if bare else ''}) if you know "
               "the keys hold averages" if stated else ""),
            "--averages-only" if stated else None, undecided)
    have = {s for s, _ in pairs}
    return [*pairs, *((s, t) for s, t in lone.items() if s not in have)]


def stated_lone_averages(ckpt: Checkpoint) -> dict[str, str]:
    """Returns average key -> variable key for the TF1 averages whose variable is not stored
    that are paired only because the caller stated ``averages_only`` (``--averages-only``):
    no ``.meta`` records which Saver wrote them. ``{}`` without the statement."""
    if not ckpt.averages_only or ckpt.objects is not None:
        return {}
    stored = ckpt.entries()
    sources = _sources(ckpt)
    found = {v.name: v.ema_of for v in ckpt.variables_unwarned()
             if v.role == R.EMA and v.ema_style == "tf1" and v.ema_of
             and v.ema_of not in stored and _statable(ckpt, sources, v.name, v.ema_of)}
    # w/slow under a stated --ema-name slow, that no name marks as an average
    found.update({s: t for s, t in proposed_lone_averages(ckpt).items()
                  if t not in stored and _statable(ckpt, sources, s, t)})
    # a fine-tune's keys, which its optimizer's write of the variable makes 'other' by role,
    # are paired only by the statement all the same (review-24-attack-r77 F5)
    other = {v.name for v in ckpt.variables_unwarned() if v.role == R.OTHER}
    found.update({s: t for s, t in raw_named_keys(ckpt).items()
                  if s in other and t not in stored and _statable(ckpt, sources, s, t)})
    found.update(stated_resaved(ckpt))  # fc/w/tower/ExponentialMovingAverage from fc/w
    # Savers of two EMA objects (or restores of another's keys) in the graph: no statement
    # pairs them (r115 F1, review-33-attack-r126 F2)
    evaluated = [(s, t) for s, t in found.items() if saved_from((sources or {}).get(s), t)]
    if evaluated and crossed_refusal(ckpt, evaluated) is not None:
        return {s: t for s, t in found.items() if (s, t) not in evaluated}
    return found


def raw_named_warning(keys: dict[str, str], graph: str, meta: bool) -> str:
    """restore-ema's warning (without ``warning:``) for the :func:`raw_named_keys` ``keys``
    it left out of its output; ``meta``: a ``.meta`` graph was beside the input."""
    k, t = next(iter(keys.items()))
    return (f"{counted(len(keys), 'key')} named as averages "
            f"{agreeing(len(keys), 'holds', 'hold')} their variables' raw values and were "
            f"not written, e.g. {k}: the {graph}'s saver wrote it from {t} itself, as a "
            "training Saver(ema.variables_to_restore()) does; beside the restored variables "
            "nothing would tell them from averages"
            + (", so the .meta graph was not copied either: its Saver restores them and "
               "would fail on the output" if meta else ""))
