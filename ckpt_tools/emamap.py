"""EMA name maps: which checkpoint key feeds which variable when evaluating with averages.

:func:`ema_map` reproduces ``tf.train.ExponentialMovingAverage.variables_to_restore()`` — shadows
of trainable and moving-average variables replace them, every other global variable maps to
itself — but in *checkpoint keys*, so partitioned variables come out right
(``emb/ExponentialMovingAverage -> emb`` rather than the graph's
``emb/part_0/ExponentialMovingAverage``). Without a ``.meta`` graph it infers the same map from
the keys alone.
"""

from __future__ import annotations

import fnmatch
import os

from . import roles as R
from .checkpoint import Checkpoint, open_checkpoint
from .ema_ambiguous import ambiguous_message
from .ema_apply_order import (
    an_order_pairs,
    lists_decide,
    paired_variables,
    refuse_apply_order,
)
from .ema_missing import (
    LEGACY_SLOTS,
    NO_OPTIMIZER,
    NONE_TO_ALLOW,
    SERVING_EXPORT,
    misfiled_hint,
    missing_hints,
    missing_message,
    refuse_orphans,
)
from .ema_names import choose_averages, from_keys, from_meta, recorded_suffixes, role_from_name
from .ema_proof import refuse_unproven_names, without_slot_names
from .ema_refusals import UnprovenPairingError, file_style, require_keras, suffix_base
from .ema_scopes import scope_hints
from .ema_several import join_maps, split_ema_names
from .ema_updates import offer_objects, owned_averages, refuse_slot_sources, slot_named_hint
from .errors import EmaError
from .formats._record import Frozen, replace
from .formats.objgraph import SLOT_MARK, has_swappable_averages
from .graph_saved import graph_holders
from .listing import natural_key
from .lone_named import unmarked_lone_averages
from .loss_named import loss_named_missing_hint
from .pairing import lists_stated, root_child
from .raw_reasons import expected_raw
from .raw_shadows import lone_averages, settle_lone_averages
from .rescope_clash import refuse_rescope_clash
from .save_op import named_pairs_unproven
from .saved_keys import refuse_renamed_keys
from .saved_swaps import pairs_through_save_op, swapped_pairs
from .slashed_stated import slashed_hint, stated_slashed_shadows
from .tfk_order import recorded_averages

KEEP, DROP = "keep", "drop"


def proven_pairs(checkpoint: str | os.PathLike | Checkpoint, *, ema_name: str | None = None,
                 use_meta: bool = True, apply_order: str | None = None) -> dict[str, str]:
    """The one pairing decision every command uses: variable key -> the key of the average
    to use for it, exactly as :func:`ema_map` (``ckpt map``) pairs them.

    Returns:
        `dict[str, str]`: only variables whose stored average is proven (others are absent).

    Raises:
        UnprovenPairingError: two or more pairings fit (names the option that decides).
        EmaError: a Keras file that holds no averages.
        OptionError: ``apply_order`` given for a Keras file
            (:func:`~.ema_apply_order.refuse_apply_order`).
    """
    m = ema_map(checkpoint, ema_name=ema_name, use_meta=use_meta, apply_order=apply_order,
                non_averaged=DROP, slots=KEEP, allow_missing=True)
    unstored = set(m.missing)  # allow_missing leaves these only where not one is stored
    return {t: s for s, t in m.pairs if s != t and t not in unstored}


def decide_pairing(ckpt: Checkpoint, variables: list | None = None, *,
                   ema_name: str | None = None, use_meta: bool = True,
                   apply_order: str | None = None) -> tuple[list, UnprovenPairingError | None]:
    """Every variable with ``ema``/``ema_of`` as :func:`proven_pairs` (``ckpt map``) pairs
    them, for commands that show or use a pairing without refusing outright (list, stats,
    show).

    Args:
        ckpt: an open checkpoint.
        variables: ``ckpt.variables_unwarned()`` (or the caller's copy of them); default: read here.
        ema_name / use_meta / apply_order: decide as for :func:`ema_map`.

    Returns:
        ``(variables, refusal)``. Where the pairing is proven, ``refusal`` is ``None`` and each
        variable's ``ema`` is the average ``ckpt map`` uses (``None`` if it uses none), each
        average's ``ema_of`` its variable. Where it is not, ``refusal`` is the
        :class:`UnprovenPairingError` ``ckpt map`` raises, and every variable and average it
        leaves open has ``ema``/``ema_of`` ``None`` and ``ema_candidates`` set: no pairing the
        file does not prove is ever present. (Averages of several EMA objects keep their
        ``ema_of``: their names prove it; only their variable's ``ema`` is open.)

    Raises:
        OptionError: ``apply_order`` given for a Keras file
            (:func:`~.ema_apply_order.refuse_apply_order`).
    """
    refuse_apply_order(ckpt, apply_order)
    if ckpt.with_meta(use_meta) is not ckpt:  # roles as if no .meta were beside it
        ckpt, variables = ckpt.with_meta(use_meta), None
    variables = list(ckpt.variables_unwarned() if variables is None else variables)
    layout = getattr(ckpt.reader, "keras", None)
    if layout is not None and (layout.use_ema is None or layout.copies_unpaired):
        # a bare .weights.h5 that cannot tell use_ema, or copies no layout places: no
        # average is listed, yet every command that pairs refuses; say so, with the option
        # that decides (--use-ema, --trainable)
        try:
            require_keras(ckpt)
        except UnprovenPairingError as exc:
            return variables, exc
        except EmaError:  # copies no option pairs: nothing is shown paired either
            return variables, None
    by_key = {v.name: v for v in variables}
    if not any(v.role == R.EMA for v in variables) and not unmarked_lone_averages(
            ckpt, by_key, {}, ema_name, use_meta) and not (
            use_meta and swapped_pairs(ckpt, by_key, ema_name)):  # averages as avgW
        return variables, None  # no average: no pairing to show (nor to refuse)
    try:
        pairs = proven_pairs(ckpt, ema_name=ema_name, use_meta=use_meta,
                             apply_order=apply_order)
    except UnprovenPairingError as exc:
        refusal = exc
    except EmaError:  # a Keras file without averages: nothing to pair
        return variables, None
    else:
        shadow_of = {s: t for t, s in pairs.items()}
        out = []
        for v in variables:
            if v.role == R.EMA and pairs.get(v.name, v.name) != v.name:
                # named as an average, holding the weight (the save op proves: saved_swaps)
                v = replace(v, role=R.WEIGHT, ema=pairs[v.name], ema_of=None, ema_candidates=())
            elif v.role == R.EMA:
                of = shadow_of.get(v.name, v.ema_of)
                if of != v.ema_of or (of and v.ema_candidates):
                    v = replace(v, ema_of=of, ema_candidates=() if of else v.ema_candidates)
                elif not of and v.ema_candidates:
                    # Left open and yet the map is proven: another EMA object's average than
                    # the one --ema-name chose (set aside), which nothing here uses.
                    v = replace(v, ema_candidates=())
            elif shadow_of.get(v.name, v.name) != v.name:  # an average no name marks
                v = replace(v, role=R.EMA, ema_of=shadow_of[v.name], ema_style="tf1",
                            ema=None, ema_candidates=())
            elif v.ema != pairs.get(v.name) or v.ema_candidates:
                v = replace(v, ema=pairs.get(v.name), ema_candidates=())
            out.append(v)
        return out, None
    marked: dict[str, tuple[str, ...]] = {}
    # Several EMA objects (--ema-name): each average's name proves its variable; only which
    # one the variable takes is open. Otherwise the other side of each candidate is open too.
    both_sides = refusal.option != "--ema-name"
    # A Keras weight whose own copy the file pairs in every reading (its ema_of) is no
    # candidate of an open copy of its shape: list shows it paired, as the copy says
    # (review-12-user-r13 F3).
    taken = {v.ema_of: v.name for v in variables if layout is not None and v.role == R.EMA
             and v.ema_of and v.name not in refusal.undecided}
    for key, cands in refusal.undecided.items():
        marked[key] = tuple(c for c in cands if c not in taken) or tuple(cands)
    for key in refusal.undecided:
        for cand in marked[key] if both_sides else ():
            if cand not in refusal.undecided and key not in marked.setdefault(cand, ()):
                marked[cand] += (key,)  # every average the variable may take
    out = []
    for v in variables:
        if v.name in taken and v.name not in marked and v.role != R.EMA:
            v = replace(v, ema=taken[v.name], ema_candidates=())
        elif v.name in marked:
            v = (replace(v, ema_of=None, ema_candidates=marked[v.name]) if v.role == R.EMA
                 else replace(v, ema=None, ema_candidates=marked[v.name]))
        out.append(v)
    return out, refusal


_KERAS3_ITERATIONS = "_iterations/.ATTRIBUTES/VARIABLE_VALUE"


class EmaMap(Frozen):
    """A restore map in checkpoint keys, with what was (not) averaged.

    Attributes:
        mapping: source key in the checkpoint -> target variable key (like the dict
            ``variables_to_restore()`` returns, with names instead of variables).
        ema_name: the EMA suffix used (``ExponentialMovingAverage``, ``avg``…).
        averaged: targets that receive an average.
        raw: targets restored from their own (raw) value.
        missing: targets that should receive an average whose shadow is not stored.
        unaveraged: weights with no shadow while others have one (keys-only inference).
        not_saved: raw targets the graph has but the checkpoint does not store.
        dropped: checkpoint keys deliberately left out (optimizer slots, filters).
        debias: zero-debias helpers (``…/biased``, ``…/local_step``) found.
        loss_averages: averages of loss tensors found (``total_loss/avg``).
        source: ``"meta"`` (from the graph's collections) or ``"keys"`` (inferred).
        assumed: what the pairing takes for granted that the file cannot prove
            (``"fit_order"``, ``"not_swapped"``: :mod:`~ckpt_tools.keras_assumed`); empty
            where the file proves it or you stated it.
    """

    checkpoint: str
    ema_name: str
    mapping: dict[str, str]
    averaged: tuple[str, ...]
    raw: tuple[str, ...]
    missing: tuple[str, ...]
    unaveraged: tuple[str, ...]
    not_saved: tuple[str, ...]
    dropped: tuple[str, ...]
    debias: tuple[str, ...]
    loss_averages: tuple[str, ...]
    source: str
    file_style: str  # "tf1" (name-based), "tf2" (object graph) or "keras": for messages
    assumed: tuple[str, ...]
    pairs: tuple[tuple[str, str], ...]  # (source, input target); not in repr
    hints: tuple[str, ...]  # not in repr
    # key -> the name `ckpt list` shows (TF2 object path), so messages name variables alike;
    # neither compared nor in repr.
    names: dict[str, str]
    # unaveraged key -> why the file expects it raw (raw_reasons.FROZEN...); not compared
    expected_raw: dict[str, str]
    # in_graph: key -> the variable the save op wrote under it, where the keys are not their
    # variables' names and are paired through it (graph_saved); not compared
    held: dict[str, str]
    _fields = ("checkpoint", "ema_name", "mapping", "averaged", "raw", "missing", "unaveraged",
               "not_saved", "dropped", "debias", "loss_averages", "source", "file_style",
               "assumed", "pairs", "hints", "names", "expected_raw", "held")
    _compare = _fields[:-3]
    _repr = _fields[:-5]

    def __init__(self, checkpoint: str, ema_name: str, mapping: dict[str, str],
                 averaged: tuple[str, ...] = (), raw: tuple[str, ...] = (),
                 missing: tuple[str, ...] = (), unaveraged: tuple[str, ...] = (),
                 not_saved: tuple[str, ...] = (), dropped: tuple[str, ...] = (),
                 debias: tuple[str, ...] = (), loss_averages: tuple[str, ...] = (),
                 source: str = "keys", file_style: str = "tf1", assumed: tuple[str, ...] = (),
                 pairs: tuple[tuple[str, str], ...] = (), hints: tuple[str, ...] = (),
                 names: dict[str, str] | None = None,
                 expected_raw: dict[str, str] | None = None,
                 held: dict[str, str] | None = None) -> None:
        self.__dict__.update(
            checkpoint=checkpoint, ema_name=ema_name, mapping=mapping, averaged=averaged,
            raw=raw, missing=missing, unaveraged=unaveraged, not_saved=not_saved,
            dropped=dropped, debias=debias, loss_averages=loss_averages, source=source,
            file_style=file_style, assumed=assumed, pairs=pairs, hints=hints,
            names={} if names is None else names,
            expected_raw={} if expected_raw is None else expected_raw,
            held={} if held is None else held)

    def shown(self, key: str) -> str:
        """Returns the name ``ckpt list`` shows for ``key`` (its object path, or the key)."""
        return self.names.get(key) or key

    def to_json(self) -> dict[str, str]:
        """Returns ``{"ema_key": "target_key", …}``, the ``ckpt map --json`` document."""
        return dict(self.mapping)

    def sources(self) -> dict[str, str]:
        """Returns target key -> source key (the inverse of :attr:`mapping`)."""
        return {t: s for s, t in self.mapping.items()}

    def unaveraged_warning(self, keys=None) -> str | None:
        """Returns the warning for weights with no average that keep their raw values (those
        of ``keys`` where given), in the file's style, or None where every weight has one or
        the file explains why it has none (:meth:`unaveraged_note`).

        Example:
            >>> ema_map("fixtures/linear_v1").unaveraged_warning() is None
            True
        """
        keys = [k for k in self.unaveraged if (keys is None or k in keys)
                and k not in self.expected_raw]
        if not keys:
            return None
        # Speak the file's style: a Keras optimizer keeps EMA copies, TF2 ema.average(v)s.
        what = {"keras": "EMA copy in the optimizer (use_ema=True: it was not built with "
                         "them)",
                "tf2": "average (ema.average(v)) in the checkpoint"}.get(
            self.file_style, f"'{self.ema_name}' shadow")
        return (f"{len(keys)} weight(s) have no {what} and keep their raw values: "
                f"{', '.join(self.shown(k) for k in keys[:5])}"
                + (" ..." if len(keys) > 5 else ""))

    def unaveraged_note(self, keys=None) -> str | None:
        """Returns the note for weights with no average whose raw value the file explains
        (a ``.keras`` whose config.json records them frozen or non-trainable), those of
        ``keys`` where given, or None."""
        from .raw_reasons import expected_raw_note

        return expected_raw_note({k: r for k, r in self.expected_raw.items()
                                  if keys is None or k in keys}, self.shown)

    def require_complete(self, left_out=()) -> EmaMap:
        """Returns self, or raises :class:`EmaError` explaining which shadows are missing.

        ``left_out``: target keys the caller's filters leave out (never exported nor
        restored), whose missing average cannot matter; the refusal names only the others.
        """
        skip = set(left_out) & set(self.missing)
        if len(skip) < len(self.missing):
            kept = self if not skip else EmaMap(**{
                **{f: getattr(self, f) for f in self._fields},
                "missing": tuple(t for t in self.missing if t not in skip),
                "averaged": tuple(t for t in self.averaged if t not in skip)})
            raise EmaError(missing_message(kept))
        return self


def match_any(name: str, patterns: list[str] | None) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns or ())


def rescope(key: str, strip_scope: str | None, add_scope: str | None) -> str:
    if strip_scope and key.startswith(strip_scope):
        key = key[len(strip_scope):]
    return (add_scope or "") + key


def ema_map(
    checkpoint: str | os.PathLike | Checkpoint,
    *,
    ema_name: str | None = None,
    use_meta: bool = True,
    non_averaged: str = KEEP,
    slots: str = DROP,
    include: list[str] | None = None,
    exclude: list[str] | None = None,
    strip_scope: str | None = None,
    add_scope: str | None = None,
    allow_missing: bool = False,
    style: str | None = None,
    apply_order: str | None = None,
    strict: bool = False,
    in_graph: bool = False,
    not_swapped: bool = False,
) -> EmaMap:
    """Builds the EMA restore map of a checkpoint, in checkpoint keys.

    Args:
        checkpoint (`str` or `Checkpoint`): path or open checkpoint.
        ema_name (`str`, *optional*): the name of the ``ExponentialMovingAverage`` object whose
            averages to use (``avg``, ``ExponentialMovingAverage_1``…: the last part of the
            average's name); default: detected. Required when a variable has averages of
            several EMA objects (otherwise :class:`EmaError` names them). Several names,
            comma-separated (``"wavg,ExponentialMovingAverage"``), take the averages of EMA
            objects that averaged different variables; a variable two of them averaged is
            refused.
        use_meta (`bool`, defaults to `True`): follow the ``.meta`` graph's collections, exactly
            like ``variables_to_restore()``; otherwise (or with no ``.meta``) infer from keys.
        non_averaged (`"keep"` or `"drop"`): map variables without an average to themselves,
            or leave them out.
        slots (`"drop"` or `"keep"`): optimizer slots are dropped by default (evaluation never
            needs them); ``"keep"`` gives TensorFlow's exact map.
        include / exclude (`list[str]`): globs on target keys; ``include`` also keeps a pair
            whose average's key matches (a filter naming a shadow selects its pair).
        strip_scope / add_scope (`str`): rewrite target keys, e.g. strip ``tower_0/``.
        allow_missing (`bool`): restore raw values where a shadow is missing instead of
            recording it in :attr:`EmaMap.missing`, beside stored averages: where not one is
            stored every weight stays missing (the refusal says to ask for raw weights).
        style (`str`, *optional*): use only averages kept this way (``tf1``, ``object``,
            ``keras``, ``slot``; see :data:`ckpt_tools.roles.EMA_STYLES`) when a checkpoint holds
            several kinds.
        apply_order (`str`, *optional*): TF2 averages of same-named, same-shaped variables
            (unnamed ``tf.Variable``s are all ``Variable``) can only be paired by the order
            ``ema.apply()`` got the variables in, which the checkpoint does not record; state it:
            ``"trainable"`` (``module.trainable_variables`` of a ``tf.Module``) or
            ``"tracked"`` (the order the variables were tracked: the order their attributes were
            assigned, which the checkpoint records, as Keras' ``model.trainable_variables``;
            not creation order: blocks created in one order and assigned in another are
            tracked in the second). Without it
            such averages are refused. Or the order itself, as checkpoint keys in the order
            ``apply()`` got their variables (``apply_ema`` passes a live module's
            ``trainable_variables`` so).
        strict (`bool`, defaults to `False`): refuse a pairing that rests on a Keras file's
            ``fit()`` build order too (:mod:`~ckpt_tools.keras_assumed`), as ``--strict``;
            otherwise it is assumed (and warned).
        not_swapped (`bool`, defaults to `False`): state that a Keras 3 file (or a checkpoint
            of ``average`` slots) was not saved swapped (``SwapEMAWeights(swap_on_epoch=True)``
            before ``ModelCheckpoint``; an EMA optimizer's ``swap_weights()``), as
            ``--not-swapped``; on an open checkpoint it is stated on it. Without it a file
            whose weights differ from their averages is refused (exit 6): nothing in it shows
            which they are; if it was swapped its own weights are the averages.
        in_graph (`bool`, defaults to `False`): the targets are the variables of the graph
            (``restore_ema``/``ema_saver``), not checkpoint keys: a TF1 key the ``.meta``'s
            save op wrote from a variable of another name is refused only where it is an
            average's key (:func:`~ckpt_tools.saved_keys.refuse_renamed_keys`).

    Returns:
        `EmaMap`. Where its pairing rests on an assumption (:attr:`EmaMap.assumed`), an
        :class:`~ckpt_tools.errors.AssumptionWarning` says so, as ``ckpt map``'s note.

    Raises:
        EmaError: if an average cannot be paired with one variable from what the file records
            (its candidates and the option that decides are named), or a variable has averages
            of several EMA objects and ``ema_name`` picks none, or (``strict``) the pairing
            rests on an assumption.
        UnprovenPairingError: (an :class:`EmaError`) a Keras 3 file's weights (or a
            checkpoint's variables) differ from their averages and ``not_swapped`` is not
            stated: option ``--not-swapped``.
        OptionError: ``apply_order`` given for a Keras file, where it cannot apply.
        CheckpointError: if the checkpoint cannot be read. Missing shadows are *reported* in
        ``missing``; call :meth:`EmaMap.require_complete` to turn them into an :class:`EmaError`.

    Example:
        >>> m = ema_map("fixtures/linear_v2")  # doctest: +SKIP
        >>> m.mapping
        {'W/ExponentialMovingAverage': 'W', 'b/ExponentialMovingAverage': 'b'}
    """
    if non_averaged not in (KEEP, DROP) or slots not in (KEEP, DROP):
        raise ValueError("non_averaged and slots must be 'keep' or 'drop'")
    if style is not None and style not in R.EMA_STYLES:
        raise ValueError(f"style must be one of {', '.join(R.EMA_STYLES)}, got {style!r}")
    names = split_ema_names(ema_name)
    # use_meta=False: the checkpoint as if no .meta were beside it, for every step below
    if not_swapped and isinstance(checkpoint, Checkpoint):
        checkpoint.not_swapped = True  # the statement, on the caller's open checkpoint
    ckpt = checkpoint.with_meta(use_meta) if isinstance(checkpoint, Checkpoint) \
        else open_checkpoint(checkpoint, meta=use_meta, not_swapped=not_swapped)
    if not_swapped:
        ckpt.not_swapped = True  # its meta-less view too
    if len(names) > 1:  # EMA objects that averaged different variables: each one's map, joined
        try:
            maps = [ema_map(ckpt, ema_name=n, use_meta=use_meta, non_averaged=KEEP, slots=slots,
                            include=include, exclude=exclude, strip_scope=strip_scope,
                            add_scope=add_scope, style=style, apply_order=apply_order,
                            strict=strict, in_graph=in_graph)
                    for n in names]
        finally:
            if not isinstance(checkpoint, Checkpoint):
                ckpt.close()
        return join_maps(ckpt.path, names, maps, keep_raw=non_averaged == KEEP,
                         allow_missing=allow_missing)
    ema_name = names[0] if names else None
    assumed: list = []
    asked = False
    try:
        refuse_apply_order(ckpt, apply_order)
        if style in (None, "keras"):
            require_keras(ckpt)
        if style in (None, "keras", "slot") and (strict or getattr(
                ckpt.reader, "keras", None) is not None or has_swappable_averages(
                ckpt.objects)) or style == "tf1" and strict or style in (None, "tf1") and (
                named_pairs_unproven(ckpt)):  # TF1 without a save op: saver_not_swapped
            from .keras_assumed import keras_assumptions, refuse_assumed
            from .swap_assumed import of_style

            # a Keras file, or a Keras 3 optimizer's copies or average slots in a TF
            # checkpoint (keras_assumed, swap_assumed: no import else)
            assumed = of_style(keras_assumptions(ckpt), style)
            asked = True  # refused below, once the file's own pairing is proven
        variables = stated_slashed_shadows(ckpt, paired_variables(ckpt, apply_order, ema_name),
                                           ema_name)  # --ema-name ema/slow, no .meta
        # keys that are not their variables' names: paired through the .meta's save op, or
        # refused where it cannot be (restore_ema's targets are the graph's own variables,
        # which the keys' variables are: graph_saved)
        translated = held = None
        if use_meta and style in (None, "tf1"):
            held = graph_holders(ckpt, variables) if in_graph else {}
            translated = None if held is None else pairs_through_save_op(ckpt, variables,
                                                                          ema_name)
            if translated is None:
                held = None
                refuse_renamed_keys(ckpt, variables, in_graph=in_graph)
        if translated is None:
            refuse_orphans(ckpt, variables)
            unpaired = [v for v in variables.values() if v.role == R.EMA and not v.ema_of
                        and v.ema_candidates and style in (None, v.ema_style)]
            if ema_name is not None and ckpt.objects is not None and ema_name in {
                    root_child(k) for k, v in variables.items() if v.role == R.EMA}:
                # --ema-name optimizer beside ema=[...]: the other attribute's averages are not
                # used, so their open pairing is not this map's
                unpaired = [v for v in unpaired if root_child(v.name) == ema_name]
            if unpaired:
                tf2 = any(v.ema_style != "tf1" for v in unpaired)
                spans = any(len({root_child(c) for c in v.ema_candidates}) > 1 for v in unpaired)
                decides = tf2 and not apply_order and not spans
                # averages of only part of a same-named group: an order may place none of them
                part = len({c for v in unpaired for c in v.ema_candidates}) > len(unpaired)
                no_order = decides and part and not an_order_pairs(ckpt, unpaired, ema_name)
                # a list or a dict keyed "0"...: the statement naming which, where it decides
                lists = lists_decide(ckpt, unpaired, ema_name, apply_order) if decides or (
                    isinstance(apply_order, str) and not lists_stated(apply_order)) else None
                # a tf_keras optimizer's averages: its recorded order places them, stated
                # (fit(): --apply-order tracked; a custom loop: --trainable --loop-order)
                tfk = {v.name for v in unpaired} <= set(recorded_averages(ckpt.objects)) and all(
                    sum(u.ema_candidates == v.ema_candidates for u in unpaired)
                    == len(v.ema_candidates) for v in unpaired)  # none frozen: tracked may place
                raise UnprovenPairingError(
                    ambiguous_message(ckpt, variables, unpaired, apply_order, no_order=no_order,
                                      lists=lists),
                    "--apply-order tracked or --trainable NAMES --loop-order" if tfk and (
                        apply_order is None) else lists if lists else
                    "--apply-order" if decides and not no_order else None,
                    {v.name: tuple(sorted(v.ema_candidates, key=natural_key))
                     for v in unpaired})
            # Under a variable_scope no <w>/<name> key shows the EMA name: the proven shadows do;
            # so do they for a name of several parts (W/ema/slow proven W's by the .meta).
            detected = proven_names(variables, ckpt.ema_names())
            name = ema_name or (detected[0] if detected else R.DEFAULT_EMA_NAME)
            suffix = recorded_suffixes(ckpt, variables)
            try:
                chosen = choose_averages(ckpt, variables, suffix, ema_name, style)
            except UnprovenPairingError as exc:  # the graph's update ops may prove one object's
                chosen = owned_averages(ckpt, variables, ema_name, use_meta, None)
                if chosen is None:
                    raise offer_objects(ckpt, variables, use_meta, exc) from None
            chosen = owned_averages(ckpt, variables, ema_name, use_meta, chosen) or chosen
            refuse_unproven_names(ckpt, variables, suffix, chosen, ema_name)
            refuse_slot_sources(ckpt, variables, ema_name, chosen, use_meta)
            # averages of variables not stored that no name marks (w/slow, a scope's): proposed
            unmarked = unmarked_lone_averages(ckpt, variables, chosen, ema_name, use_meta)
            chosen = {**chosen, **{t: s for s, t in unmarked.items()}}
            if unmarked and ema_name is None and not detected:  # w/slow: say slow
                name = next(iter(unmarked)).rpartition("/")[2]
            if (use_meta and style in (None, "tf1") and ckpt.meta is not None
                    and ckpt.meta.collections.get("variables")):
                pairs, missing, not_saved = from_meta(ckpt, variables, name, chosen)
                source = "meta"
            else:
                pairs, missing, not_saved = from_keys(variables, chosen)
                source = "keys"
            # TF1: an average whose variable is not stored may hold the raw weight
            pairs = [(s, t) for s, t in pairs if not (s == t and s in unmarked)]
            pairs = settle_lone_averages(ckpt, pairs,
                                         {**lone_averages(ckpt, variables, chosen), **unmarked})
        else:
            pairs, missing, not_saved = translated
            source = "meta"
            detected = proven_names(variables, ckpt.ema_names())
            name = ema_name or (detected[0] if detected else R.DEFAULT_EMA_NAME)
            suffix = recorded_suffixes(ckpt, variables)
        if asked:  # not_swapped: always refused; fit_order: under strict
            refuse_assumed(ckpt, assumed, strict=strict)
    finally:
        if not isinstance(checkpoint, Checkpoint):
            ckpt.close()

    speaks = file_style(ckpt)
    if speaks == "tf2" and {v.ema_style for v in variables.values()
                            if v.role == R.EMA and v.ema_style} == {"keras"}:
        speaks = "keras"  # a Keras 3 optimizer's use_ema copies in a tf.train.Checkpoint
    elif speaks == "tf2" and not any(v.role == R.EMA for v in variables.values()) and any(
            k.endswith(_KERAS3_ITERATIONS) for k in variables):
        # No average at all beside a Keras 3 optimizer (Checkpoint(model=, optimizer=)): the
        # averages a Keras user expects are its use_ema copies, so say use_ema=False.
        speaks = "keras"
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
            # (frozen, a target network): raw is what Keras evaluates them with.
            missing = [*missing, *unaveraged]
            unaveraged = []
    elif source == "keys" and not missing:
        # Not one average stored: every weight misses one (BN statistics count only when
        # some have shadows, as in `ckpt list`'s "none of N weights has a shadow").
        missing = [t for s, t in pairs if variables.get(t) is not None
                   and variables[t].role in expected_roles]

    # --allow-missing restores raw values beside stored averages (a weight ema.apply() left
    # out); with not one stored it would only hand back raw weights: refused, --raw says so.
    none_stored = bool(allow_missing and missing and all(s == t or s not in variables
                                                          for s, t in pairs))
    if none_stored:
        allow_missing = False
    mapping: dict[str, str] = {}
    kept: list[tuple[str, str]] = []
    averaged, raw, dropped = [], [], []
    missing_set = set(missing)
    for src, tgt in pairs:
        role = variables[tgt].role if tgt in variables else role_from_name(tgt)
        # A filter naming the shadow selects its pair, as it does the shadow's row in `list`.
        selected = not include or match_any(tgt, include) or (
            src != tgt and match_any(src, include))
        if src != tgt and tgt in missing_set and allow_missing:
            src = tgt
        keep = True
        if src == tgt and non_averaged == DROP:
            keep = False
        if role == R.OPTIMIZER_SLOT and slots == DROP:
            keep = False
        if not selected or match_any(tgt, exclude):
            keep = False
        if not keep:
            dropped.append(tgt)
            continue
        mapping[src] = rescope(tgt, strip_scope, add_scope)
        kept.append((src, tgt))
        (averaged if src != tgt else raw).append(tgt)
    refuse_rescope_clash(ckpt.path, ((t if t in missing_set else s, t,  # no average: raw
                                      rescope(t, strip_scope, add_scope)) for s, t in kept),
                         strip_scope)
    if allow_missing:
        missing = []
    graph_keys = ({v.checkpoint_key for v in ckpt.meta.variables.values()}
                  if source == "meta" else set())
    unsaved = [f"{t}/{name}" for t in missing
               if f"{t}/{name}" in graph_keys and f"{t}/{name}" not in variables]
    hints = missing_hints(variables, name, detected, missing, unsaved)
    slashed = slashed_hint(ckpt, variables, missing)
    if slashed:  # W/ema/slow without the .meta: not 'no shadow stored at all'
        hints.insert(0, slashed)
    loss_said = loss_named_missing_hint(ckpt, variables, missing)
    if loss_said:  # total_loss/lossavg without the .meta: maybe a tensor's average
        hints.append(loss_said)
    slotted = slot_named_hint(ckpt, variables, name, ema_name is not None, missing)
    if slotted:
        hints.insert(0, slotted)
    if none_stored:
        hints.append(NONE_TO_ALLOW)
    if speaks == "keras" and missing and not any(v.role == R.EMA for v in variables.values()) \
            and any(SLOT_MARK in k for k in variables):
        hints.append(LEGACY_SLOTS)  # slot variables: a TF2 slot optimizer, no use_ema
    if speaks == "tf2" and missing and not any(
            v.role in (R.EMA, R.OPTIMIZER_SLOT) or R.OPTIMIZER_PATH.search(k)
            for k, v in variables.items()):
        hints.append(NO_OPTIMIZER)  # not "use_ema=False": no optimizer was saved at all
    if speaks == "tf1" and missing and ckpt.location.saved_model \
            and not any(v.role == R.EMA for v in variables.values()):
        hints.append(SERVING_EXPORT)  # maybe the averages already (inception_saved_model.py)
    lacking = set(missing)
    filed = {s: t for s, t in pairs if s != t}  # the save op may file t's under another name
    elsewhere = {v.ema_of: k for k, v in variables.items()
                 if v.role == R.EMA and v.ema_of in lacking
                 and filed.get(k, v.ema_of) == v.ema_of}
    misfiled = misfiled_hint(ckpt, filed, missing, name)
    if misfiled:
        hints.insert(0, misfiled)
    if elsewhere:
        # their averages are stored, under another EMA object's name: saying they were left
        # out of ema.apply() (and steering to raw values) would be false
        t, k = next(iter(elsewhere.items()))
        other = suffix_base(suffix.get(k) or k.rpartition("/")[2])
        hints.insert(0, f"another EMA object averaged {len(elsewhere)} of them ({t} has "
                        f"{k}): --ema-name {name},{other} takes both objects' averages, "
                        "while --allow-missing would restore these raw although an average of "
                        "theirs is stored")
    scoped = scope_hints(ckpt, name, missing) if ema_name and use_meta else None
    hints = hints if scoped is None else scoped  # --ema-name gen/ExponentialMovingAverage
    kinds = sorted({v.ema_style for v in variables.values() if v.role == R.EMA and v.ema_style})
    if style is not None and missing and style not in kinds and kinds:
        hints.insert(0, f"no averages kept as {style!r} here; this checkpoint keeps them as "
                        f"{', '.join(kinds)} (drop --style, or pass --style {kinds[0]})")
    return EmaMap(
        checkpoint=ckpt.path, ema_name=name, mapping=mapping, averaged=tuple(averaged),
        raw=tuple(raw), missing=tuple(t for t in missing if t not in set(dropped)),
        unaveraged=tuple(unaveraged), not_saved=tuple(not_saved), dropped=tuple(dropped),
        debias=tuple(k for k, v in variables.items() if v.role == R.EMA_DEBIAS),
        loss_averages=tuple(k for k, v in variables.items() if v.role == R.LOSS_AVERAGE),
        source=source, file_style=speaks, pairs=tuple(kept), hints=tuple(hints),
        names={k: v.path for k, v in variables.items() if v.path},
        expected_raw=expected_raw(ckpt, unaveraged), assumed=_warned(ckpt, assumed),
        held=held or {})


def _warned(ckpt: Checkpoint, assumed: list) -> tuple[str, ...]:
    """Issues :class:`~ckpt_tools.errors.AssumptionWarning` for what the map assumes (once
    per open checkpoint) and returns the names, :attr:`EmaMap.assumed`."""
    if assumed:
        from .keras_assumed import warn_assumed

        warn_assumed(ckpt, assumed, stacklevel=4)
    return tuple(a.name for a in assumed)


def proven_names(variables, by_keys: list[str]) -> list[str]:
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
