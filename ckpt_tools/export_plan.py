"""What :func:`ckpt_tools.export.export_weights` writes: each output name's source key (a
weight's average, or the weight as stored), which of them are averages, and what is said of the
rest (:func:`plan_export`). Nothing is read here but the variables, the pairing and the graph's
collections; the writers read the tensors. Which keys are written is found by the steps of
:mod:`ckpt_tools.export_keys`; the names they are written under and what is said of them,
here."""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint
from .ema_names import not_saved_note
from .errors import EmaError, OptionError, OutputError
from .export_keys import (
    ExportState,
    filtered_out,
    held_weights,
    map_sources,
    model_weights,
    raw_sources,
    raw_weights,
    start_plan,
)
from .export_rename import Renamer
from .export_said import roles_said
from .frozen_meta import NOT_TRAINABLE, frozen_variables
from .offer_probe import records_command
from .orphan_averages import orphan_warnings
from .raw_dropped import refuse_dropped_model_keys, shadow_written_keys
from .raw_plan import refuse_as_without_graph
from .raw_shadows import raw_named_keys
from .raw_stated import stated_raw_pairs
from .raw_unproven import twin_keys
from .scoped_twins import OFFERED, scoped_twin_hint
from .tensor_averages import add_tensor_averages, shadow_averages_left_out
from .tensor_raw import refuse_raw_tensor_averages
from .weight_keys_averaged import refuse_averages_as_raw
from .wording import counted


def _own_averages_said(plan: dict[str, str], own_averages: dict[str, str],
                       averaged: list[str]) -> list[str]:
    """Marks the names of a ``--raw`` plan whose key holds its variable's average under the
    variable's name (``Saver({v.op.name: ema.average(v)})``: ``own_averages``, key ->
    shadow) as ``averaged`` (in place: ``--json`` and the file's record say so per name,
    where they said raw: review-25-attack-r88 F3).

    Returns:
        the warning naming them (``[]`` where the plan writes none)."""
    held = [(n, k) for n, k in plan.items() if k in own_averages]
    if not held:
        return []
    averaged += [n for n, _ in held if n not in averaged]
    n, k = held[0]
    return [f"exporting the keys as stored: the .meta's save op shows {len(held)} of the "
            f"keys named as variables hold their averages (e.g. {k} holds "
            f"{own_averages[k]}){f' (written as {n})' if n != k else ''}, written as their "
            "averages (--json lists them as averaged)"]


def keys_are_raw_alone(path: str) -> OptionError:
    """Returns the usage error (exit 2) for ``keys_are_raw`` stated without ``ema=False``,
    naming ``path``: the options alone decide it, so the CLI raises it before anything is
    read (review-25-attack-r81 F6) and :func:`plan_export` for Python callers."""
    return OptionError(f"{path}: keys_are_raw=True (--keys-are-raw) states that keys "
                       "named as averages hold the raw weights, which only ema=False "
                       "(--raw) exports: give it, or omit the statement (if they hold the "
                       "averages, averages_only=True, --averages-only, states that)")


@records_command  # an offer in a refusal is probed with this command's filters (r62 F4)
def plan_export(ckpt: Checkpoint, *, ema: bool | None = None, include=None, exclude=None,
                rename=None, tensor_averages: bool = False,
                weights_out: dict[str, str] | None = None,
                expected_out: dict[str, str] | None = None, notes_out: list | None = None,
                stated_out: dict[str, str] | None = None,
                **map_options) -> tuple[dict[str, str], list[str], list[str]]:
    """Chooses what to export: ({output name: source key}, averaged names, warnings).

    ``ema=None`` or ``True`` exports averages and refuses (:class:`EmaError`) a checkpoint
    without them unless ``allow_missing=True``; ``False`` exports raw weights (with a warning if
    averages exist). ``weights_out``, when given, gets output name -> the weight's own key
    (which differs from the source key where that is its average); ``expected_out``, output
    name -> why the file expects that weight raw (:func:`~ckpt_tools.raw_reasons.expected_raw`);
    ``stated_out``, key -> output name (before ``rename``) of each key ``--raw`` writes only
    because ``keys_are_raw`` states it holds the raw weights (``stated_keys_are_raw``).
    ``use_meta=False`` plans as if no ``.meta`` were beside the checkpoint.
    ``tensor_averages=True`` also exports the averages of non-scalar tensors that are not
    variables (:mod:`ckpt_tools.tensor_averages`) under their own keys, as averaged values.

    Raises:
        EmaError: averages are missing or cannot be paired with their variables (the map's
            refusals included), unless ``ema=False`` or ``allow_missing``; with
            ``ema=False``, a key named as a weight that the save op wrote from an average
            (:func:`~ckpt_tools.weight_keys_averaged.refuse_averages_as_raw`), and what the
            keys alone refuse where the graph file records no save op that wrote them
            (:func:`~ckpt_tools.raw_plan.refuse_as_without_graph`).
        OutputError: two tensors would be exported under one name.
        VariableNotFoundError: a ``rename`` rule renamed no exported name (exit 3).
        OptionError: ``keys_are_raw`` stated without ``ema=False``, or where no key is
            such (exit 2).
    """
    ckpt = ckpt.with_meta(map_options.get("use_meta", True))
    # a statement only --raw reads: never a silent no-op; the CLI's one check too (exit 2)
    if ema is not False and ckpt.keys_are_raw:
        raise keys_are_raw_alone(ckpt.path)
    st = start_plan(ckpt, ema, include, exclude, tensor_averages, map_options)
    if st.use_ema:
        map_sources(st)
    else:
        raw_sources(st)
    if ckpt.keys_are_raw and not st.stated:  # a statement deciding nothing: never a silent
        # no-op (unless a graph proving nothing hid the keys it speaks of: refused as
        # without it)
        _refuse_as_without_graph(ckpt, include, exclude, rename, tensor_averages, map_options)
        raise OptionError(f"{ckpt.path}: --keys-are-raw (Python: keys_are_raw=) states that "
                          "keys a Saver(ema.variables_to_restore()) wrote from the model "
                          "variables hold the raw weights; this checkpoint has no such key "
                          "for --raw to export: omit it")
    order = _creation_order(ckpt)
    model_weights(st)
    if not st.use_ema:
        raw_weights(st)
    held_weights(st)
    # frozen model variables the .meta lists outside trainable_variables: never averaged,
    # restored raw by TF's variables_to_restore(), exported raw with a note (r22 F10)
    st.frozen = frozen_variables(ckpt, st.variables, st.weights, st.sources)
    st.weights += st.frozen
    st.weights.sort(key=lambda k: order.get(k, len(order)))
    st.held_as = {k: n for n, k in (st.holders or {}).items()}
    renamed = Renamer(rename)
    _refuse_unwritten(st)
    plan, first, averaged = _named_plan(st, renamed, weights_out, expected_out)
    st.warnings += _plan_said(st, plan, first, averaged, notes_out)
    _add_tensor_averages(st, plan, averaged, tensor_averages, renamed)
    renamed.check(ckpt.path)
    if not st.use_ema:  # a .meta whose save op did not write the keys proves nothing of
        # them: the reading without it must pass too (review-24-attack-r79 F2, F8)
        _refuse_as_without_graph(ckpt, include, exclude, rename, tensor_averages, map_options)
    if st.stated and ckpt.keys_are_raw and stated_out is not None:  # what rests on the
        # statement
        pairs = stated_raw_pairs(st.holders)
        stated_out.update({k: pairs[k] for k in plan.values() if k in pairs})  # output order
    return plan, averaged, st.warnings


def _refuse_unwritten(st: ExportState) -> None:
    """Refuses an export whose weights the plan would write raw where that is not proven:
    an export of averages with weights twinned with another EMA's averages, averages missing
    or nothing averaged; a ``--raw`` export of a key named as a weight holding an average.

    Raises:
        UnprovenPairingError: :func:`_refuse_twins_without_average`'s (exit 6).
        EmaError: averages missing (the map's refusal), no average at all, or (``--raw``)
            an average under a weight's key.
    """
    ckpt, variables, m = st.ckpt, st.variables, st.m
    if st.use_ema:  # a weight the filters leave out is not exported: its average cannot matter
        _refuse_twins_without_average(ckpt, variables, [  # kept raw too (--allow-missing)
            t for t in (*m.missing, *(k for k in st.weights if st.sources.get(k, k) == k))
            if not st.left_out(t)], st.map_options.get("ema_name"))
        m.require_complete(left_out=[t for t in m.missing if st.left_out(t)])
        kept = [k for k in st.weights if not st.left_out(k)]
        if not st.has_ema and kept:
            # Not one average stored, and nothing the map calls missing (every weight missing
            # one is refused above): only state such as batch-norm statistics, which would go
            # out raw. Never silently raw: refused as restore-ema refuses it.
            raise EmaError(
                f"{ckpt.path}: no variable has an EMA shadow: the {counted(len(kept), 'tensor')} "
                "to "
                f"export ({', '.join(st.name(k) for k in kept[:4])}"
                f"{' ...' if len(kept) > 4 else ''}) are {roles_said(variables, kept)} "
                "with no average; ckpt export --raw writes their raw values")
    if not st.use_ema and st.holders is None:  # an average under a weight's renamed key (r56 F1)
        refuse_averages_as_raw(ckpt, [k for k in st.weights if not st.left_out(k)])


def _named_plan(st: ExportState, renamed: Renamer, weights_out: dict[str, str] | None,
                expected_out: dict[str, str] | None
                ) -> tuple[dict[str, str], dict[str, tuple[str, str]], list[str]]:
    """Names each weight the filters keep (its save op's name, else its own, through
    ``--rename``) and fills ``weights_out`` and ``expected_out`` as
    :func:`plan_export` says.

    Returns:
        ({output name: source key}, {output name: (key, name before --rename)}, averaged
        output names).

    Raises:
        OutputError: two tensors would be exported under one name.
    """
    m = st.m
    plan: dict[str, str] = {}
    first: dict[str, tuple[str, str]] = {}  # exported name -> (key, name before --rename)
    averaged: list[str] = []
    for key in st.weights:
        name = st.held_as.get(key) or st.name(key)
        before = name
        src = st.sources.get(key, key)
        if st.left_out(key):
            continue
        name = renamed(name)
        if name in plan:
            other, other_before = first[name]
            if other_before != before:  # --rename mapped two names onto one
                fix = "adjust --rename"
            else:  # one name for both: --rename rewrites them alike, a filter picks one
                root = key.split("/", 1)[0]
                fix = ("--rename rewrites both alike; export them one at a time, e.g. "
                       f"--grep '{root}/*'" if root != other.split("/", 1)[0] else
                       f"--rename rewrites both alike; leave one out (--exclude '{key}')")
            # Named by the weights (never by the average one of them takes its value from).
            raise OutputError(f"two tensors would be exported as {name!r} "
                              f"({st.name(other)} and {st.name(key)}); {fix}")
        plan[name] = src
        first[name] = (key, before)
        if weights_out is not None:
            weights_out[name] = key
        if src != key:
            averaged.append(name)
        elif st.use_ema and expected_out is not None and key in m.expected_raw:
            expected_out[name] = m.expected_raw[key]
        elif st.use_ema and expected_out is not None and key in st.frozen:
            expected_out[name] = NOT_TRAINABLE
    return plan, first, averaged


def _plan_said(st: ExportState, plan: dict[str, str], first: dict[str, tuple[str, str]],
               averaged: list[str], notes_out: list | None) -> list[str]:
    """Says what the named plan leaves raw or out: ``--raw``'s dropped model keys and own
    averages (marking those ``averaged`` in place), or the averages' export's raw weights,
    orphan averages and (into ``notes_out``) graph variables the Saver left out.

    Returns:
        the warnings.

    Raises:
        EmaError: ``--raw`` would drop a key the save op wrote from a model variable
            (:func:`~ckpt_tools.raw_dropped.refuse_dropped_model_keys`).
    """
    ckpt, m, warnings = st.ckpt, st.m, []
    if not st.use_ema and plan:  # each key the save op wrote from a model variable: out, or
        # refused (a mixed or unread Saver dropped raw w unsaid; review-23-attack-r70 F3, F5,
        # F7, F8); nothing to write is refused apart, saying why (exit 7)
        warnings += refuse_dropped_model_keys(ckpt, st.variables, plan, st.left_out,
                                              shadows_said=st.stated)
        warnings += _own_averages_said(plan, st.own_averages, averaged)
    if st.use_ema and notes_out is not None and not_saved_note(m):
        notes_out.append(not_saved_note(m))  # graph variables the Saver left out (r22 F2)
    if st.use_ema:  # weights exported raw beside averaged ones: said, as restore-ema says it
        raw_too = m.unaveraged_warning({k for k, _ in first.values()})
        if raw_too:
            warnings.append(raw_too)
        # averages of weights the file lacks (not tracked by the object graph): said
        warnings += orphan_warnings(ckpt, st.variables, "the output holds "
                                    f"{counted(len(plan), 'weight')} without those",
                                    lambda k, n: not filtered_out({n, k}, st.include,
                                                                  st.exclude))
    return warnings


def _add_tensor_averages(st: ExportState, plan: dict[str, str], averaged: list[str],
                         tensor_averages: bool, renamed: Renamer) -> None:
    """Adds the averages of tensors that are not variables to ``plan`` and ``averaged``
    (``tensor_averages``), or says they are left out, in place.

    Raises:
        EmaError: a tensor average the save op wrote from a model variable
            (:func:`~ckpt_tools.tensor_raw.refuse_raw_tensor_averages`).
    """
    ckpt, variables, held_as = st.ckpt, st.variables, st.held_as
    include, exclude = st.include, st.exclude
    # a key --raw exports as the raw weight the save op wrote into it (a scoped apply()'s
    # vtr key, tower/net/w/ExponentialMovingAverage, reads as a tensor's average) is no
    # average to add or to name as left out (review-21-attack-r53 F5); nor is a key the save
    # op proves holds its variable's raw value where --raw refuses its holder (a renamed
    # Saver(ema.variables_to_restore()) keeping global_step: review-22-attack-r64 F6), nor
    # one exported already as a weight's average (model/w/ExponentialMovingAverage of an
    # averages-only Saver under a prefix; review-22-attack-r64 F4)
    # ... nor one the save op wrote from a variable's shadow: that variable's average, never a
    # tensor's (a renamed Saver of a second object's vtr; review-24-attack-r76 F5)
    raw_named, exported = raw_named_keys(ckpt), set(plan.values())
    # ... always: another object's averages of variables left out by --ema-name are no
    # tensor's, and are said as what they are (review-27-attack-r96 F3)
    of_variables = shadow_written_keys(ckpt)
    def tensor_left_out(k: str) -> bool:
        return k in held_as or k in raw_named or k in exported or k in of_variables \
            or filtered_out({k}, include, exclude)

    # ... and one the save op wrote from a model variable holds its raw value: never
    # exported or named as an average (review-26-attack-r91 F1)
    refuse_raw_tensor_averages(ckpt, [k for k, v in variables.items() if v.role ==
                                      R.TENSOR_AVERAGE and not tensor_left_out(k)])
    left = add_tensor_averages(variables, plan, averaged, tensor_averages, tensor_left_out,
                               renamed)
    if left:
        st.warnings.append(left)
    if st.use_ema:
        other = shadow_averages_left_out(ckpt, [
            k for k, v in variables.items() if v.role == R.TENSOR_AVERAGE and k in of_variables
            and k not in held_as and k not in raw_named and k not in exported
            and not filtered_out({k}, include, exclude)])
        if other:
            st.warnings.append(other)


def _refuse_as_without_graph(ckpt: Checkpoint, include, exclude, rename,
                             tensor_averages: bool, map_options: dict) -> None:
    """:func:`~ckpt_tools.raw_plan.refuse_as_without_graph` with this ``--raw`` plan's
    options.

    Raises:
        EmaError: the plan without the graph refuses, where the graph proves nothing.
    """
    refuse_as_without_graph(ckpt, lambda view: plan_export(
        view, ema=False, include=include, exclude=exclude, rename=rename,
        tensor_averages=tensor_averages, **{**map_options, "use_meta": False}))


def _refuse_twins_without_average(ckpt: Checkpoint, variables: dict,
                                  keys: list[str], ema_name: str | None = None) -> None:
    """Refuses an export of averages where weights with no average (``keys``: missing, or
    kept raw by ``--allow-missing``) are :func:`~ckpt_tools.raw_unproven.twin_keys`: with no
    ``.meta``, ``net/w/b/fast`` beside ``net/w`` is an EMA named ``b/fast``'s average of it as
    much as a weight; "probably frozen" and the offered ``--allow-missing`` exported a second
    object's averages as model weights, exit 0 (review-23-attack-r67 F10, F11).

    Raises:
        UnprovenPairingError: naming the keys, the EMA names that read them as averages and
            ``--exclude`` (exit 6); of :func:`~ckpt_tools.scoped_twins.scoped_twin_hint`'s
            keys, its option ``--exclude`` where the export leaving them out works, else
            ``None``.
    """
    twins = twin_keys(ckpt, variables, keys)
    from .errors import UnprovenPairingError

    scoped = scoped_twin_hint(ckpt, variables, [k for k in keys if k not in twins], ema_name)
    if scoped:  # model/model/w/fast beside model/w (review-25-attack-r82 F2); the other
        # averages' export without them offered where it works (review-26-attack-r89 F3)
        raise UnprovenPairingError(f"{ckpt.path}: {scoped}", option="--exclude" if (
            OFFERED in scoped) else None, undecided={})
    if not twins:
        return

    shown = sorted(twins)
    names = " or ".join(f"'{n}'" for n in sorted(set(twins.values())))
    raise UnprovenPairingError(
        f"{ckpt.path}: without a .meta the keys cannot tell whether {', '.join(shown[:4])}"
        f"{' ...' if len(shown) > 4 else ''} (no average stored) "
        f"{'is a weight' if len(shown) == 1 else 'are weights'} or another "
        f"ExponentialMovingAverage's averages (one named {names}) of the stored variables "
        "they sit under, of their dtype and shape: keep the training .meta beside the "
        "checkpoint (its update ops decide), pass --ema-name "
        + " or --ema-name ".join(sorted(set(twins.values()))) + " if that is the EMA whose "
        "averages to export, or pass "
        + " ".join(f"--exclude '{k}'" for k in shown) + " to leave "
        + ("it" if len(shown) == 1 else "them") + " out (a weight left out is not exported)",
        option="--exclude", undecided={})


def _creation_order(ckpt: Checkpoint) -> dict[str, int]:
    """Checkpoint key -> creation index from the graph (Keras HDF5 readers expect layer weights
    in creation order: kernel before bias)."""
    if ckpt.meta is None:
        return {}
    order: dict[str, int] = {}
    for coll in ("trainable_variables", "variables"):
        for key in ckpt.meta.keys_in(coll):
            order.setdefault(key, len(order))
    return order
