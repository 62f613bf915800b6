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
import re

from . import roles as R
from .checkpoint import Checkpoint, open_checkpoint
from .errors import EmaError, OptionError
from .formats._record import Frozen, replace
from .formats.objgraph import readable_name
from .pairing import list_or_dict_paths, open_containers, root_child, variable_orders

KEEP, DROP = "keep", "drop"


class UnprovenPairingError(EmaError):
    """The file does not prove which average goes with which variable (exit 6).

    Attributes:
        option: the command-line option that decides (``--ema-name``, ``--apply-order``,
            ``--no-meta``, ``--use-ema/--no-use-ema``), or ``None`` when no option can.
        undecided: key -> candidate keys: a variable and the averages it may take, or an
            average and the variables it may belong to.
    """

    def __init__(self, message: str, option: str | None = None,
                 undecided: dict[str, tuple[str, ...]] | None = None):
        super().__init__(message)
        self.option = option
        self.undecided = dict(undecided or {})


def refuse_apply_order(ckpt: Checkpoint, apply_order: str | None) -> None:
    """Refuses ``apply_order`` given for a Keras file, where it cannot apply.

    ``apply_order`` states the order ``ema.apply()`` got a TF2 object checkpoint's variables
    in. A Keras optimizer averages the model's weights in the model's order, which the file
    records (or ``trainable=``/``--trainable`` states), so the option would silently change
    nothing.

    Raises:
        OptionError: ``apply_order`` is given and ``ckpt`` is a Keras file (exit 2).
    """
    if apply_order is not None and getattr(ckpt.reader, "keras", None) is not None:
        raise OptionError(
            f"{ckpt.path}: --apply-order (Python: apply_order=) states the order "
            "ema.apply() got a TF2 checkpoint's variables in; it does not apply to Keras "
            "files, whose optimizer averages the model's weights in the model's order "
            "(recorded in the file, or stated with --trainable): omit it")


def proven_pairs(checkpoint: str | os.PathLike | Checkpoint, *, ema_name: str | None = None,
                 use_meta: bool = True, apply_order: str | None = None) -> dict[str, str]:
    """The one pairing decision every command uses: variable key -> the key of the average
    to use for it, exactly as :func:`ema_map` (``ckpt map``) pairs them.

    Returns:
        `dict[str, str]`: only variables whose stored average is proven (others are absent).

    Raises:
        UnprovenPairingError: two or more pairings fit (names the option that decides).
        EmaError: a Keras file that holds no averages.
        OptionError: ``apply_order`` given for a Keras file (:func:`refuse_apply_order`).
    """
    m = ema_map(checkpoint, ema_name=ema_name, use_meta=use_meta, apply_order=apply_order,
                non_averaged=DROP, slots=KEEP, allow_missing=True)
    return {t: s for s, t in m.pairs if s != t}


def decide_pairing(ckpt: Checkpoint, variables: list | None = None, *,
                   ema_name: str | None = None, use_meta: bool = True,
                   apply_order: str | None = None) -> tuple[list, UnprovenPairingError | None]:
    """Every variable with ``ema``/``ema_of`` as :func:`proven_pairs` (``ckpt map``) pairs
    them, for commands that show or use a pairing without refusing outright (list, stats,
    show).

    Args:
        ckpt: an open checkpoint.
        variables: ``ckpt.variables()`` (or the caller's copy of them); default: read here.
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
        OptionError: ``apply_order`` given for a Keras file (:func:`refuse_apply_order`).
    """
    refuse_apply_order(ckpt, apply_order)
    variables = list(ckpt.variables() if variables is None else variables)
    if not any(v.role == R.EMA for v in variables):
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
            if v.role == R.EMA:
                of = shadow_of.get(v.name, v.ema_of)
                if of != v.ema_of or (of and v.ema_candidates):
                    v = replace(v, ema_of=of, ema_candidates=() if of else v.ema_candidates)
            elif v.ema != pairs.get(v.name) or v.ema_candidates:
                v = replace(v, ema=pairs.get(v.name), ema_candidates=())
            out.append(v)
        return out, None
    marked: dict[str, tuple[str, ...]] = {}
    # Several EMA objects (--ema-name): each average's name proves its variable; only which
    # one the variable takes is open. Otherwise the other side of each candidate is open too.
    both_sides = refusal.option != "--ema-name"
    for key, cands in refusal.undecided.items():
        marked[key] = tuple(cands)
    for key, cands in refusal.undecided.items():
        for cand in cands if both_sides else ():
            if cand not in refusal.undecided and key not in marked.setdefault(cand, ()):
                marked[cand] += (key,)  # every average the variable may take
    out = []
    for v in variables:
        if v.name in marked:
            v = (replace(v, ema_of=None, ema_candidates=marked[v.name]) if v.role == R.EMA
                 else replace(v, ema=None, ema_candidates=marked[v.name]))
        out.append(v)
    return out, refusal


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
    pairs: tuple[tuple[str, str], ...]  # (source, input target); not in repr
    hints: tuple[str, ...]  # not in repr
    # key -> the name `ckpt list` shows (TF2 object path), so messages name variables alike;
    # neither compared nor in repr.
    names: dict[str, str]
    _fields = ("checkpoint", "ema_name", "mapping", "averaged", "raw", "missing", "unaveraged",
               "not_saved", "dropped", "debias", "loss_averages", "source", "file_style",
               "pairs", "hints", "names")
    _compare = _fields[:-1]
    _repr = _fields[:-3]

    def __init__(self, checkpoint: str, ema_name: str, mapping: dict[str, str],
                 averaged: tuple[str, ...] = (), raw: tuple[str, ...] = (),
                 missing: tuple[str, ...] = (), unaveraged: tuple[str, ...] = (),
                 not_saved: tuple[str, ...] = (), dropped: tuple[str, ...] = (),
                 debias: tuple[str, ...] = (), loss_averages: tuple[str, ...] = (),
                 source: str = "keys", file_style: str = "tf1",
                 pairs: tuple[tuple[str, str], ...] = (), hints: tuple[str, ...] = (),
                 names: dict[str, str] | None = None) -> None:
        self.__dict__.update(
            checkpoint=checkpoint, ema_name=ema_name, mapping=mapping, averaged=averaged,
            raw=raw, missing=missing, unaveraged=unaveraged, not_saved=not_saved,
            dropped=dropped, debias=debias, loss_averages=loss_averages, source=source,
            file_style=file_style, pairs=pairs, hints=hints,
            names={} if names is None else names)

    def shown(self, key: str) -> str:
        """Returns the name ``ckpt list`` shows for ``key`` (its object path, or the key)."""
        return self.names.get(key) or key

    def to_json(self) -> dict[str, str]:
        """Returns ``{"ema_key": "target_key", …}``, the ``ckpt map --json`` document."""
        return dict(self.mapping)

    def sources(self) -> dict[str, str]:
        """Returns target key -> source key (the inverse of :attr:`mapping`)."""
        return {t: s for s, t in self.mapping.items()}

    def require_complete(self) -> EmaMap:
        """Returns self, or raises :class:`EmaError` explaining which shadows are missing."""
        if self.missing:
            raise EmaError(_missing_message(self))
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
) -> EmaMap:
    """Builds the EMA restore map of a checkpoint, in checkpoint keys.

    Args:
        checkpoint (`str` or `Checkpoint`): path or open checkpoint.
        ema_name (`str`, *optional*): the name of the ``ExponentialMovingAverage`` object whose
            averages to use (``avg``, ``ExponentialMovingAverage_1``…: the last part of the
            average's name); default: detected. Required when a variable has averages of
            several EMA objects (otherwise :class:`EmaError` names them).
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
            recording it in :attr:`EmaMap.missing`.
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

    Returns:
        `EmaMap`.

    Raises:
        EmaError: if an average cannot be paired with one variable from what the file records
            (its candidates and the option that decides are named), or a variable has averages
            of several EMA objects and ``ema_name`` picks none.
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
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else open_checkpoint(checkpoint)
    try:
        refuse_apply_order(ckpt, apply_order)
        if style in (None, "keras"):
            _require_keras(ckpt)
        variables = _paired_variables(ckpt, apply_order)
        unpaired = [v for v in variables.values() if v.role == R.EMA and not v.ema_of
                    and v.ema_candidates and style in (None, v.ema_style)]
        if unpaired:
            tf2 = any(v.ema_style != "tf1" for v in unpaired)
            spans = any(len({root_child(c) for c in v.ema_candidates}) > 1 for v in unpaired)
            raise UnprovenPairingError(
                _ambiguous_message(ckpt, variables, unpaired, apply_order),
                "--apply-order" if tf2 and not apply_order and not spans else None,
                {v.name: tuple(v.ema_candidates) for v in unpaired})
        # Under a variable_scope no <w>/<name> key shows the EMA name: the proven shadows do.
        detected = ckpt.ema_names() or sorted({
            k.rpartition("/")[2] for k, v in variables.items()
            if v.role == R.EMA and v.ema_of and v.ema_style == "tf1"})
        name = ema_name or (detected[0] if detected else R.DEFAULT_EMA_NAME)
        suffix = _recorded_suffixes(ckpt, variables)
        chosen = _choose_averages(ckpt, variables, suffix, ema_name, style)
        if (use_meta and style in (None, "tf1") and ckpt.meta is not None
                and ckpt.meta.collections.get("variables")):
            pairs, missing, not_saved = _from_meta(ckpt, variables, name, chosen)
            source = "meta"
        else:
            pairs, missing, not_saved = _from_keys(variables, chosen)
            source = "keys"
    finally:
        if not isinstance(checkpoint, Checkpoint):
            ckpt.close()

    unaveraged = []
    # BN statistics count only when some have shadows: TF1 trainers average them, Keras not.
    expected_roles = (R.WEIGHT, R.BN_STAT) if any(
        variables[t].role == R.BN_STAT for s, t in pairs if s != t and t in variables) else (
        R.WEIGHT,)
    if source == "keys" and any(s != t for s, t in pairs):
        unaveraged = [t for s, t in pairs if s == t and variables.get(t) is not None
                      and variables[t].role in expected_roles]
    elif source == "keys" and not missing:
        # Not one average stored: every weight misses one (BN statistics count only when
        # some have shadows, as in `ckpt list`'s "none of N weights has a shadow").
        missing = [t for s, t in pairs if variables.get(t) is not None
                   and variables[t].role in expected_roles]

    mapping: dict[str, str] = {}
    kept: list[tuple[str, str]] = []
    averaged, raw, dropped = [], [], []
    missing_set = set(missing)
    for src, tgt in pairs:
        role = variables[tgt].role if tgt in variables else _role_from_name(tgt)
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
    if allow_missing:
        missing = []
    graph_keys = ({v.checkpoint_key for v in ckpt.meta.variables.values()}
                  if source == "meta" else set())
    unsaved = [f"{t}/{name}" for t in missing if f"{t}/{name}" in graph_keys]
    hints = _hints(variables, name, detected, missing, unsaved)
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
        source=source, file_style=file_style(ckpt), pairs=tuple(kept), hints=tuple(hints),
        names={k: v.path for k, v in variables.items() if v.path})


def _require_keras(ckpt: Checkpoint) -> None:
    """Keras files: a proven pairing, or a refusal (:func:`require_keras_pairing`); an
    undecided ``use_ema`` or unpairable copies raise :class:`UnprovenPairingError`.

    keras_ema (and NumPy with it) is imported only for Keras files: ``ckpt list`` stays light.
    """
    layout = getattr(ckpt.reader, "keras", None)
    if layout is None:
        return
    from .keras_ema import require_keras_pairing

    try:
        require_keras_pairing(ckpt)
    except EmaError as exc:
        if layout.use_ema is None:
            raise UnprovenPairingError(str(exc), "--use-ema/--no-use-ema") from None
        if layout.averages and any(v is None for v in layout.averages.values()):
            # keras_ema names --trainable where the frozen set or sublayer order is open
            # (the one thing it can decide); other unpairable copies no option decides.
            option = "--trainable" if "--trainable" in str(exc) else None
            # each open average and its candidate weights: list shows '?' on both sides
            undecided = {v.name: tuple(v.ema_candidates) for v in ckpt.variables()
                         if v.role == R.EMA and not v.ema_of and v.ema_candidates}
            raise UnprovenPairingError(str(exc), option, undecided) from None
        raise


def file_style(ckpt: Checkpoint) -> str:
    """Returns how the checkpoint was written, which decides how errors explain it: ``"keras"``
    (a Keras weights file), ``"tf2"`` (a ``tf.train.Checkpoint``) or ``"tf1"`` (a Saver)."""
    if ckpt.format in ("keras", "h5") or getattr(ckpt.reader, "keras", None) is not None:
        return "keras"
    if ckpt.objects is not None:
        # tf_keras model.save_weights() in TF format: the root is the model, its layers tracked
        # as layer_with_weights-N / layer-N.
        keras = any(p.startswith(("layer_with_weights-", "layer-"))
                    for p in ckpt.objects.paths.values())
        return "keras" if keras else "tf2"
    return "tf1"


def stated_pairings(ckpt: Checkpoint, apply_order: str | None) -> dict[str, str]:
    """The pairings that rest only on the caller's ``apply_order`` (averages the file alone
    cannot place, paired under the stated order).

    Returns:
        `dict[str, str]`: average key -> variable key; empty without ``apply_order``, for
        non-TF2 checkpoints, or when the file proves every pairing by itself.
    """
    refuse_apply_order(ckpt, apply_order)
    if apply_order is None or ckpt.objects is None:
        return {}
    proven = R.pair_object_shadows(ckpt.entries(), ckpt.objects, None, None)
    stated = R.pair_object_shadows(ckpt.entries(), ckpt.objects, None, apply_order)
    return {s: v for s, v in stated.pairs.items() if s not in proven.pairs}


def _paired_variables(ckpt: Checkpoint, apply_order: str | None) -> dict:
    """The checkpoint's variables by key; with ``apply_order``, TF2 averages re-paired under it."""
    variables = {v.name: v for v in ckpt.variables()}
    if apply_order is None or ckpt.objects is None:
        return variables
    pairing = R.pair_object_shadows(ckpt.entries(), ckpt.objects, None, apply_order)
    for key, v in list(variables.items()):
        if v.role == R.EMA and v.ema_style == "object":
            if key in pairing.pairs:
                variables[key] = replace(v, ema_of=pairing.pairs[key], ema_candidates=())
            elif key in pairing.ambiguous:
                variables[key] = replace(v, ema_of=None,
                                         ema_candidates=pairing.ambiguous[key])
    shadow = {v.ema_of: k for k, v in variables.items() if v.role == R.EMA and v.ema_of}
    for key, v in list(variables.items()):
        if v.role != R.EMA and v.ema != shadow.get(key):
            variables[key] = replace(v, ema=shadow.get(key))
    return variables


def _ambiguous_message(ckpt: Checkpoint, variables, unpaired, apply_order) -> str:
    apart = sorted({root_child(c) for v in unpaired for c in v.ema_candidates})
    spans = any(len({root_child(c) for c in v.ema_candidates}) > 1 for v in unpaired)

    def show(key: str) -> str:
        if spans:  # same-named models: only the object path tells the candidates apart
            return key.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE")
        v = variables.get(key)
        return v.path if v is not None and v.path else key

    scoped = [v for v in unpaired if v.ema_style == "tf1"]
    if scoped:  # TF1 ema.apply() under a variable_scope: <scope>/w/ExponentialMovingAverage
        examples = "; ".join(f"{v.name} may average {' or '.join(v.ema_candidates)}"
                             for v in scoped[:3])
        more = f" (and {len(scoped) - 3} more)" if len(scoped) > 3 else ""
        why = ("the training .meta graph beside it would prove it (its "
               "moving_average_variables collection), but there is none or --no-meta was given"
               if ckpt.meta is None or not ckpt.meta.collections.get("variables") else
               "the .meta graph does not settle it (several candidates, or the variable is not "
               "in its moving_average_variables)")
        return (f"{ckpt.path}: {len(scoped)} average(s) are stored under a scope "
                f"(ema.apply() called inside tf.compat.v1.variable_scope): {examples}{more}; "
                f"the name alone could also be the average of a tensor or an unsaved variable, "
                f"and {why}; keep the training .meta (model.ckpt.meta) next to the checkpoint")

    examples = "; ".join(f"{show(v.name)} may average {' or '.join(map(show, v.ema_candidates))}"
                         for v in unpaired[:3])
    more = f" (and {len(unpaired) - 3} more)" if len(unpaired) > 3 else ""
    if all(v.ema_style == "keras" for v in unpaired):
        # tf_keras model.save_weights() (TF format): Adam/average/<variable name>
        return (f"{ckpt.path}: {len(unpaired)} average(s) of the tf_keras optimizer cannot be "
                f"paired from what the checkpoint records: it names each after its variable, "
                f"several weights share that name, dtype and shape, and which of them it "
                f"averaged is not recorded (layers frozen when it was built have no average; "
                f"the TF format keeps no trainable flags): {examples}{more}; give the layers "
                f"distinct names (tf_keras.layers.Dense(..., name=...)) when training, or "
                f"save a .keras (model.save('x.keras') records which layers were frozen)")
    if spans:
        return (f"{ckpt.path}: {len(unpaired)} average(s) cannot be paired from what the "
                f"checkpoint records: same-named variables of different objects "
                f"({', '.join(a + '/' for a in apart)}) have one dtype and shape, and the "
                f"checkpoint records neither the order those objects were created in nor the "
                f"order ema.apply() got them in (the root lists its objects by name), so no "
                f"--apply-order can tell: {examples}{more}; give the models distinct names "
                f"(keras.Sequential(..., name=...)) or name the variables when training")
    holders = _module_or_dict(ckpt, unpaired) if apply_order == "trainable" else []
    either = _list_or_dict(ckpt, unpaired) if apply_order == "trainable" else []
    decide = ("--apply-order trainable does not prove one order: objects with more than ten "
              f"children named 0, 1, 2… ({', '.join(either[:3])}"
              f"{' ...' if len(either) > 3 else ''}) may be lists, which "
              "module.trainable_variables visits by index, or dicts with keys '0', '1'…, "
              "which it visits sorted as strings (0, 1, 10, 11, 2…), and a list and a dict "
              "with digit keys are indistinguishable in the file (both write the same object "
              "graph); name the variables (tf.Variable(..., name=...)) when training, or "
              "keep such dicts to ten entries or key them by name, "
              "or, in Python, pass the live module: apply_ema(module, path, "
              "apply_order='trainable') reads the order from its own trainable_variables"
              if either else
              "--apply-order trainable leaves two orders: objects holding variables ("
              f"{', '.join(holders[:3])}{' ...' if len(holders) > 3 else ''}) may be "
              "tf.Modules, whose variables module.trainable_variables visits after its "
              "parent's own, or dicts, which it flattens in place, and a checkpoint records "
              "no types (both write the same object graph); name the variables "
              "(tf.Variable(..., name=...)) when training, or, in Python, pass the live "
              "module: apply_ema(module, path, apply_order='trainable') reads the order "
              "from its own trainable_variables" if holders else
              "the stated --apply-order does not give one pairing that fits the dtypes and "
              "shapes (it contradicts them or leaves several); name the variables "
              "(tf.Variable(..., name=...)) when training" if apply_order else
              "only if you know how ema.apply() was called: if it got "
              "module.trainable_variables of a tf.Module pass --apply-order trainable, if it "
              "got them in the order they were tracked, i.e. the order their attributes were "
              "assigned (as Keras' model.trainable_variables; not creation order), pass "
              "--apply-order tracked (Python: apply_order=...); the file cannot check that "
              "statement, so a wrong one gives wrong averages; for any other order no option "
              "can tell: name the variables (tf.Variable(..., name=...)) when training")
    return (f"{ckpt.path}: {len(unpaired)} average(s) cannot be paired from what the checkpoint "
            f"records: several variables share one name, dtype and shape, and the checkpoint "
            f"does not record the order ema.apply() got them in: {examples}{more}; {decide}")


def _module_or_dict(ckpt: Checkpoint, unpaired) -> list[str]:
    """The objects holding the candidates of ``unpaired`` averages (``model/z_blocks/0``)
    when the readings of ``module.trainable_variables`` with every node-that-could-be-a-dict
    read as a dict or as a tf.Module (see :func:`~ckpt_tools.pairing.variable_orders`) order
    those candidates differently; empty when they agree (the stated order fails for another
    reason)."""
    if ckpt.objects is None:
        return []
    cands = {c for v in unpaired for c in v.ema_candidates}
    orders = variable_orders(ckpt.objects)["trainable"]
    half = len(orders) // 2  # as tf.Modules, then as dicts; lists read as lists first
    first, second = (sorted((k for k in cands if k in order), key=order.__getitem__)
                     for order in (orders[0], orders[half]))
    if first == second:  # the uniform readings agree; a container read apart may not
        entries = ckpt.entries()

        def alike(a: str, b: str) -> bool:
            return (entries[a].dtype, entries[a].shape) == (entries[b].dtype, entries[b].shape)

        return open_containers(ckpt.objects, sorted(cands), alike)
    holders = [k.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE").rpartition("/")[0]
               for k in first]
    return list(dict.fromkeys(h for h in holders if h))


def _list_or_dict(ckpt: Checkpoint, unpaired) -> list[str]:
    """Object paths (``model/blocks``) of nodes with more than ten children named ``0``,
    ``1``… above the candidates of ``unpaired``: a list or a dict with digit keys, which
    ``module.trainable_variables`` visits in different orders."""
    if ckpt.objects is None:
        return []
    paths = list_or_dict_paths(ckpt.objects)
    cands = [c.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE") for v in unpaired
             for c in v.ema_candidates]
    return [p for p in paths if any(c.startswith(p + "/") for c in cands)]


def _role_from_name(key: str) -> str:
    last = key.rpartition("/")[2]
    return R.OPTIMIZER_SLOT if R._SLOT_RE.match(last) and "/" in key else R.OTHER


def _from_meta(ckpt: Checkpoint, variables, name: str, chosen: dict[str, str]):
    """``variables_to_restore()`` over the graph's collections, translated to checkpoint keys;
    each averaged variable from its stored average (``chosen``), else from
    ``<key>/<name>`` (then reported missing).

    Raises:
        EmaError: if the checkpoint stores an average of a variable the graph does not average
            (the ``.meta`` is from another graph): restoring it raw would be silently wrong.
    """
    meta = ckpt.meta
    ckey = {op: ckpt.stored_key(var.checkpoint_key) for op, var in meta.variables.items()}
    averaged_ops = list(dict.fromkeys(
        meta.collections.get("trainable_variables", [])
        + meta.collections.get("moving_average_variables", [])))
    pairs: dict[str, str] = {}
    for op in averaged_ops:
        target = ckey.get(op, op)
        pairs[chosen.get(target, f"{target}/{name}")] = target
    averaged_set = set(averaged_ops)
    for op in meta.collections.get("variables", []):
        key = ckey.get(op, op)
        if op not in averaged_set and key not in pairs:
            pairs[key] = key
    averaged_targets = {t for s, t in pairs.items() if s != t}
    contradicted = {t: s for t, s in chosen.items()
                    if t not in averaged_targets and variables[s].ema_style == "tf1"}
    if contradicted:
        raise UnprovenPairingError(_contradiction_message(ckpt, contradicted), "--no-meta",
                                   {t: (s,) for t, s in contradicted.items()})
    missing = [t for s, t in pairs.items() if s != t and s not in variables]
    not_saved = [t for s, t in pairs.items() if s == t and s not in variables]
    return list(pairs.items()), missing, not_saved


def _contradiction_message(ckpt: Checkpoint, contradicted: dict[str, str]) -> str:
    sample = "; ".join(f"{s} averages {t}" for t, s in list(contradicted.items())[:3])
    more = f" (and {len(contradicted) - 3} more)" if len(contradicted) > 3 else ""
    meta = ckpt.meta.path if ckpt.meta is not None else ".meta"
    return (f"{ckpt.path}: the checkpoint stores averages of {len(contradicted)} variable(s) "
            f"that the graph in {meta} does not average (not in its trainable_variables or "
            f"moving_average_variables): {sample}{more}; the .meta is probably from another "
            f"graph (another run, or a different var_list), and following it would restore "
            f"their raw values; pass --no-meta (Python: use_meta=False) to pair by the "
            f"checkpoint's names and use the stored averages, or replace the .meta with the "
            f"training graph's")


def _from_keys(variables, chosen: dict[str, str]):
    """The same map inferred from keys and roles when there is no graph: each variable from
    its chosen average (see :func:`_choose_averages`), else from itself."""
    pairs = []
    for key, v in variables.items():
        if v.role in (R.EMA, R.EMA_DEBIAS) or key == "_CHECKPOINTABLE_OBJECT_GRAPH":
            continue
        pairs.append((chosen[key], key) if key in chosen else (key, key))
    return pairs, [], []


def _recorded_suffixes(ckpt: Checkpoint, variables) -> dict[str, str]:
    """Average key -> the last part of the name TensorFlow gave it (``ExponentialMovingAverage``,
    ``fast``, ``ExponentialMovingAverage_1``): the key for TF1, the recorded ``full_name`` for
    TF2 objects."""
    full = ckpt.objects.full_names if ckpt.objects is not None else {}
    return {k: (full.get(k) or k).rpartition("/")[2] for k, v in variables.items()
            if v.role == R.EMA and v.ema_of}


def _base(suffix: str) -> str:
    return re.sub(r"_\d+$", "", suffix)


def _choose_averages(ckpt: Checkpoint, variables, suffix: dict[str, str],
                     ema_name: str | None, style: str | None) -> dict[str, str]:
    """Returns variable key -> the average to restore it from.

    A variable with one average uses it. A variable with several (two or more
    ``ExponentialMovingAverage`` objects: ``name="fast"`` and ``name="slow"``, or two default-named
    ones, ``W/ExponentialMovingAverage`` and ``W/ExponentialMovingAverage_1``) uses the one
    ``ema_name`` names: by the last part of its recorded name (TF1's ``average_name``), or, in a
    TF2 checkpoint, by the attribute it was saved under (``fast`` in
    ``tf.train.Checkpoint(fast=[...])``) or its name without TF's ``_N``: in TF2 the ``_N``
    TensorFlow appends counts names across the whole process, so it can differ from one
    variable to the next and never picks one of several averages.

    Raises:
        EmaError: naming the variables, their averages, the EMA names found and ``--ema-name``,
            when a variable has several averages and ``ema_name`` does not pick one.
    """
    tf2 = ckpt.objects is not None
    holder = ({k: ckpt.objects.paths.get(k, k).split("/", 1)[0] for k in suffix}
              if tf2 else {})
    shadows: dict[str, list[str]] = {}
    for v in variables.values():
        if v.role == R.EMA and v.ema_of and style in (None, v.ema_style):
            shadows.setdefault(v.ema_of, []).append(v.name)
    chosen: dict[str, str] = {}
    several: dict[str, list[str]] = {}
    for target, cands in shadows.items():
        picked = cands
        if ema_name is not None:
            base = [c for c in cands if _base(suffix.get(c, "")) == ema_name]
            if tf2:  # the _N is a process-wide counter: only the name= given tells objects
                picked = [c for c in cands if holder.get(c) == ema_name] or base
            else:  # TF1: average_name() semantics, <var>/<ema_name> exactly
                picked = [c for c in cands if suffix.get(c) == ema_name] or base
        if len(picked) == 1:
            chosen[target] = picked[0]
        elif len(cands) > 1:
            several[target] = sorted(cands)
    if several:
        raise UnprovenPairingError(
            _several_message(ckpt, variables, suffix, holder, several, ema_name), "--ema-name",
            {t: tuple(c) for t, c in several.items()})
    return chosen


def _several_message(ckpt, variables, suffix, holder, several, ema_name) -> str:
    def show(key: str) -> str:
        v = variables.get(key)
        return v.path if v is not None and v.path else key

    def named(key: str) -> str:  # TF2: the object path, and the name TF gave the average
        last = suffix.get(key, "")
        return show(key) if show(key).endswith("/" + last) else f"{show(key)} ({last})"

    cands = [c for cs in several.values() for c in cs]
    names = sorted({suffix.get(c, c) for c in cands})
    holders = sorted({holder[c] for c in cands if c in holder})
    examples = "; ".join(f"{show(t)} has {', '.join(map(named, cs))}"
                         for t, cs in list(several.items())[:3])
    more = f" (and {len(several) - 3} more)" if len(several) > 3 else ""
    stated = f"; --ema-name {ema_name} does not pick one" if ema_name is not None else ""
    if holders and len(holders) >= max(len(cs) for cs in several.values()):
        options = holders
        decide = (" (the attribute of the tf.train.Checkpoint each EMA's averages were saved "
                  "under; TF2's _N suffixes count names across the whole process and do not "
                  "tell EMA objects apart)")
    elif holders:
        options = sorted({_base(n) for n in names})
        decide = ("; in TF2 the _N suffixes count names across the whole process and do not "
                  "tell EMA objects apart: name the EMA objects when training "
                  "(tf.train.ExponentialMovingAverage(decay, name='fast')) or save each one's "
                  "averages under its own attribute (tf.train.Checkpoint(fast=[...], slow=[...]))")
    else:
        options, decide = names, ""
    return (f"{ckpt.path}: {len(several)} variable(s) have more than one average, so the "
            f"checkpoint holds several ExponentialMovingAverage objects and does not record "
            f"which one to evaluate with: {examples}{more}; EMA names found: "
            f"{', '.join(names)}{stated}; pass "
            + " or ".join(f"--ema-name {n}" for n in options[:4])
            + f" (Python: ema_name=...) to say which EMA object's averages to use{decide}")


def _hints(variables, name: str, detected: list[str], missing: list[str],
           unsaved: list[str]) -> list[str]:
    if not missing:
        return []
    hints = []
    if unsaved:
        hints.append(f"the .meta graph has {unsaved[0]!r} (and {len(unsaved) - 1} more) but the "
                     "checkpoint does not: the Saver's var_list left the shadows out"
                     if len(unsaved) > 1 else
                     f"the .meta graph has {unsaved[0]!r} but the checkpoint does not: the "
                     "Saver's var_list left it out")
    others = [d for d in detected if d != name]
    if others:
        hints.append(f"the checkpoint uses EMA name {others[0]!r}: pass --ema-name {others[0]} "
                     f"(ema_name={others[0]!r} in Python)")
    return hints


def _missing_message(m: EmaMap) -> str:
    if m.hints and m.hints[0].startswith("no averages kept as"):
        return f"{m.checkpoint}: {m.hints[0]}"
    sample = ", ".join(m.shown(t) for t in m.missing[:5]) + (
        f" and {len(m.missing) - 5} more" if len(m.missing) > 5 else "")
    shadow = f"{m.missing[0]}/{m.ema_name}"
    none = set(m.averaged) <= set(m.missing)  # not one shadow stored
    renamed = next((h for h in m.hints if h.startswith("the checkpoint uses EMA name")), None)
    if none and renamed:  # the shadows are there, under another name: nothing else to say
        return (f"{m.checkpoint}: no variable has an EMA shadow under '<name>/{m.ema_name}' "
                f"(e.g. {shadow!r} is not in the checkpoint); {renamed}")
    if none and m.file_style == "keras":
        cause = ("the optimizer had use_ema=False (train with e.g. "
                 "keras.optimizers.SGD(..., use_ema=True) to keep them)")
    elif none and m.file_style == "tf2":
        cause = ("a tf.train.Checkpoint saves only what it is given, "
                 "so save the averages with the model, e.g. tf.train.Checkpoint(model=model, "
                 "ema=[ema.average(v) for v in model.trainable_variables]), or training never "
                 "ran ema.apply()")
    elif none:
        cause = ("no EMA shadow is stored at all: the Saver probably saved only "
                 "tf.trainable_variables() (build it with tf.compat.v1.global_variables() or "
                 "Saver() to keep the shadows), or training never ran ema.apply()")
    elif m.file_style == "tf2":
        cause = ("these variables were probably created after ema.apply(), left out of its "
                 "var_list, or their ema.average(v) was not saved; pass allow_missing=True "
                 "(--allow-missing) to restore their raw values")
    else:
        cause = ("these variables were probably created after ema.apply() or left out of its "
                 "var_list; pass allow_missing=True (--allow-missing) to restore their raw values")
    hint = ("; " + "; ".join(m.hints)) if m.hints else ""
    if none:
        hint += ("; the raw weights are usable as they are (ckpt export --raw writes them to "
                 "one file)")
    if none and m.file_style != "tf1":  # no "<name>/ExponentialMovingAverage" talk here
        names = [m.names.get(t) or readable_name(t) for t in m.missing[:5]]
        sample = ", ".join(names) + (f" and {len(m.missing) - 5} more"
                                     if len(m.missing) > 5 else "")
        return (f"{m.checkpoint}: no averages are stored for any of its {len(m.missing)} "
                f"weight(s): {sample}; likely cause: {cause}{hint}")
    return (f"{m.checkpoint}: {len(m.missing)} variable(s) have no EMA shadow under "
            f"'<name>/{m.ema_name}' (e.g. {shadow!r} is not in the checkpoint): {sample}; "
            f"likely cause: {cause}{hint}")
