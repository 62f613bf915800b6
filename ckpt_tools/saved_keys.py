"""TF1 checkpoint keys that are not the names of the variables saved under them.

A ``tf.compat.v1.train.Saver(var_list=dict)`` saves each variable under the dict's key, which
need not be the variable's name: ``{"W": V, "V": W}`` (swapped), ``{"gen/W": W}`` (prefixed),
tf_cnn_benchmarks' tower-0 variables with ``v0/`` stripped, or a swapping Saver
(``{v.op.name: ema.average(v), ema.average_name(v): v}``, as
``MovingAverageOptimizer.swapping_saver()`` builds it). Pairing an average with a key by name
then bakes or exports another variable's value, or the raw one, as the EMA value. The
``.meta``'s save op records which variable each key holds (:mod:`.formats.meta_saver`);
:func:`refuse_renamed_keys` refuses wherever it shows a key holding a variable of another name.
"""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint
from .ema_refusals import UnprovenPairingError
from .errors import CheckpointError
from .formats.meta_on_read import AGGREGATE
from .formats.meta_saver import PART
from .raw_named import applied_shadows, named_as_own_average
from .save_op import graph_named, written_sources
from .wording import counted


def held_variable(sources: list[str]) -> str | None:
    """The one variable name a key's sources are (a partitioned variable's parts, or its
    average's, name one variable), or ``None`` where they name several."""
    names = {PART.sub("", s) for s in sources}
    return names.pop() if len(names) == 1 else None


def held_variables(ckpt: Checkpoint) -> dict[str, str | None] | None:
    """Key -> :func:`held_variable` of what the save op that wrote ``ckpt`` saved under it,
    for every key it wrote; ``None`` where :func:`~ckpt_tools.save_op.written_sources` is.
    Computed once per open checkpoint (callers must not change it): every reader of the save
    op's keys (:func:`renamed_keys`, :func:`translated_pairs`, :mod:`.saved_swaps`) takes it."""
    def held() -> dict[str, str | None] | None:
        sources = written_sources(ckpt)
        return None if sources is None else {k: held_variable(s) for k, s in sources.items()}
    return ckpt.memo("saved_keys_held", held)


def renamed_keys(ckpt: Checkpoint) -> dict[str, str | None]:
    """Returns stored key -> the variable its ``.meta``'s save op saved under it, for each key
    whose variable has another name (``None``: parts of several variables); ``{}`` where the
    ``.meta`` (or ``saved_model.pb``) records no save op that wrote this checkpoint
    (:mod:`.save_op`), or there is none, or every key is its variable's name.

    A key named as an average that holds its variable, where that variable's own key is not
    stored (a Saver of ``ema.variables_to_restore()``), is left out: :mod:`.raw_shadows`
    refuses it with its own reason. Computed once per open checkpoint (callers must not
    change it).
    """
    def renamed() -> dict[str, str | None]:
        stored = ckpt.entries()
        out: dict[str, str | None] = {}
        raw = None
        for key, held in (held_variables(ckpt) or {}).items():
            if key not in stored or held == key:
                continue
            if held is not None and key.startswith(held + "/") and held not in stored:
                # variables_to_restore(): raw_shadows explains it, where the key is named as
                # its average (not b/ExponentialMovingAverage/var, a suffix put after the
                # shadow b/ExponentialMovingAverage: review-21-attack-r60 F6)
                raw = named_as_own_average(ckpt) if raw is None else raw
                if key in raw:
                    continue
            out[key] = held
        return out
    return ckpt.memo("saved_keys_renamed", renamed)


def renamed_collections(ckpt: Checkpoint, colls: dict[str, list[str]]) -> dict[str, list[str]]:
    """The ``.meta``'s collections of the keys a ``Saver(var_list=dict)`` renamed
    (``{"net/" + v.op.name: v}``), read through its save op: stored key -> the collections
    of the graph variable saved under it (``colls``: ``meta.collections_by_key()``), for
    what ``ckpt list`` shows and what it expects a shadow of (review-19-attack-r45 F6). The
    save op is read only where some stored key is no key of the graph's collections.

    Returns:
        `dict[str, list[str]]`; empty without a ``.meta`` or a renaming save op.
    """
    if ckpt.meta is None or ckpt.objects is not None or all(k in colls for k in ckpt.entries()):
        return {}
    try:
        renamed = renamed_keys(ckpt)
    except (OSError, CheckpointError):  # what is shown only: the commands that pair say why
        return {}
    found = {k: colls[h] for k, h in renamed.items() if h is not None and h in colls
             and k not in colls}
    # a key naming another graph variable shows the written one's (r49 F2)
    return {**found, **{k: colls.get(h, []) for k, h in written_over(ckpt).items()}}


def written_over(ckpt: Checkpoint) -> dict[str, str]:
    """Stored key -> the variable a ``Saver(var_list=dict)`` wrote into it, for each key that
    is the name of another graph variable while the written one is stored under no key of
    its own name (a student ``net/w0`` saved as ``w0`` beside a frozen teacher ``w0``): what
    the graph says of the key's name is the other's, never the written one's
    (review-20-attack-r49 F2). A swapping Saver's keys (each variable stored, under another's
    name) are paired through the save op (:mod:`.saved_swaps`) and are not listed. The save
    op is read only where some stored key is no variable of the graph, as
    :func:`renamed_collections` reads it; computed once per open checkpoint.

    Returns:
        `dict[str, str]`; empty without a ``.meta`` or such a key.
    """
    def over() -> dict[str, str]:
        stored = ckpt.entries()
        if ckpt.meta is None or ckpt.objects is not None:
            return {}
        graph = {v.checkpoint_key for v in ckpt.meta.variables.values()}
        if all(k in graph for k in stored):
            return {}
        try:
            renamed = renamed_keys(ckpt)
        except (OSError, CheckpointError):  # the commands that pair say why
            return {}
        return {k: h for k, h in renamed.items()
                if h is not None and k in graph and h not in stored}
    return ckpt.memo("saved_keys_written_over", over)


def held_roles(ckpt: Checkpoint, info: dict, colls: dict[str, list[str]]) -> dict:
    """The roles of the :func:`written_over` keys, read as the variable the save op wrote
    into them (its name, its collections ``colls[held]``), not as the graph variable of
    the key's name, which :func:`~ckpt_tools.roles.classify` read into ``info`` (key ->
    :class:`~ckpt_tools.roles.RoleInfo`): a student's weight saved under a frozen teacher's
    name is a weight, not ``other`` (review-20-attack-r49 F2). Only plain roles (weight,
    batch-norm statistic, other, step) are re-read.

    Returns:
        key -> its :class:`~ckpt_tools.roles.RoleInfo`, for the keys whose role changes.
    """
    over = written_over(ckpt)
    if not over:
        return {}
    stored = ckpt.entries()
    meta_vars = {v.checkpoint_key for v in ckpt.meta.variables.values()}
    names = set(ckpt.ema_names()) | {R.DEFAULT_EMA_NAME}
    plain = (R.WEIGHT, R.BN_STAT, R.OTHER, R.STEP)
    out = {}
    for k, h in over.items():
        ri = info.get(k)
        if ri is None or ri.role not in plain or ri.ema_of or ri.slot_of or ri.candidates:
            continue
        held = R.classify_one(h, stored[k], stored, names, names | {"avg"}, colls, meta_vars,
                              True, None)
        if held.role in plain and not (held.ema_of or held.slot_of) and held.role != ri.role:
            out[k] = held
    return out


def stripped_prefix(renamed: dict[str, str | None]) -> str | None:
    """The scope stripped from every renamed key (``v0/``), or ``None``."""
    prefixes = {h[: -len(k)] if h and h.endswith("/" + k) else None for k, h in renamed.items()}
    p = prefixes.pop() if len(prefixes) == 1 else None
    return p or None


#: Roles of keys no EMA pairing reads (neither an average nor a weight it pairs).
_UNPAIRED = frozenset((R.STEP, R.OPTIMIZER_SLOT, R.EMA_DEBIAS, R.LOSS_AVERAGE))


def refuse_renamed_keys(ckpt: Checkpoint, variables, *, in_graph: bool = False,
                        ema_name: str | None = None) -> None:
    """Refuses (exit 6) a TF1 checkpoint whose ``.meta`` save op saved some key from a
    variable of another name: pairing by key names would give another variable's average, or
    its raw value, as its EMA value.

    Args:
        ckpt: the open checkpoint (with its ``.meta``; without one nothing is refused here).
        variables: its variables by key (roles).
        in_graph: the targets are the graph's own variables (``restore_ema``/``ema_saver`` in
            the graph imported from the ``.meta``), not keys: only averages' keys that hold
            something other than their own shadow matter there.
        ema_name: the ``--ema-name`` given; without one, where the graph shows several EMA
            objects, the names the save op's pairing accepts are offered
            (:func:`~ckpt_tools.renamed_offers.renamed_object_offers`).

    Raises:
        UnprovenPairingError: naming the file, a key and the variable it holds; the option
            ``--no-meta`` only where every key is its variable's name without one scope
            (tf_cnn_benchmarks' ``v0/``), which the keys' own names then pair.
    """
    renamed = renamed_keys(ckpt)
    swapping = any(h and h.startswith(k + "/") for k, h in renamed.items()) and any(
        h and k.startswith(h + "/") for k, h in renamed.items())
    if in_graph:
        renamed = {k: h for k, h in renamed.items()
                   if k in variables and variables[k].role == R.EMA}
    if not renamed:
        return
    key, held = next(iter(sorted(renamed.items())))
    # every average whose key, or its variable's, holds what its name does not: left open
    holders = {h for h in renamed.values() if h}
    undecided = {k: (v.ema_of,) for k, v in sorted(variables.items())
                 if v.role == R.EMA and v.ema_of
                 and (k in renamed or v.ema_of in renamed or v.ema_of in holders)}
    # never a key no pairing reads, beside others: a renamed global_step was listed
    # "? (1 average)" and counted as a weight whose pairing is unproven (s28a "Left")
    undecided = undecided or {k: (h or k,) for k, h in sorted(renamed.items())
                              if k not in variables or variables[k].role not in _UNPAIRED} \
        or {k: (h or k,) for k, h in sorted(renamed.items())}
    n = len(renamed)
    head = (f"{ckpt.path}: its {graph_named(ckpt)}'s save op stored {counted(n, 'key')} from "
            "variables "
            f"of other names (e.g. key {key} holds {held or 'parts of several variables'})")
    as_var = {k for k, h in renamed.items() if h and h.startswith(k + "/")}
    # a key named as its variable's average, however renamed (tower/net/w/Exponential
    # MovingAverage or w/ExponentialMovingAverage from net/w: review-21-attack-r53 F5, r56 F3)
    # (b/ExponentialMovingAverage/var from the shadow is no such key: r60 F6); where the
    # graph's shadows are unknown, the names decide as before
    raw, named = named_as_own_average(ckpt), applied_shadows(ckpt) is None
    as_avg = {k for k, h in renamed.items() if h and (k in raw or named and k.startswith(h + "/"))}
    prefix = stripped_prefix(renamed)
    parts = sorted(k for k, h in renamed.items() if h and PART.search(k)
                   and PART.sub("", k) == h)  # W/part_0/<ema> holding W/part_0's shadow
    computed = sorted(k for k, h in renamed.items() if h and AGGREGATE.search(h)
                      and h not in (ckpt.meta.variables if ckpt.meta is not None else ()))
    if computed and len(computed) == n:  # review-21-attack-r54 F6, where not proven
        raise UnprovenPairingError(
            f"{ckpt.path}: its {graph_named(ckpt)}'s save op wrote {counted(n, 'key')} from a "
            "value it "
            f"computes, not from a variable (e.g. key {computed[0]} holds "
            f"{renamed[computed[0]]}), as tf.distribute's MirroredStrategy saves a SyncOnRead "
            "variable (the mean or sum of its replicas), which the graph file does not prove "
            "here to be one variable's (e.g. a text .meta keeps no constant's value); pass "
            "--no-meta to pair the keys by their own names (Python: use_meta=False)",
            "--no-meta", undecided)
    if parts:
        raise UnprovenPairingError(
            f"{ckpt.path}: its {graph_named(ckpt)}'s save op stored the parts of a partitioned "
            f"variable under one key each (e.g. {parts[0]} holds that part of "
            f"{renamed[parts[0]]} whole, not as a slice of {renamed[parts[0]]}), as a "
            "Saver({ema.average_name(p): ema.average(p) for p in parts}) writes them; ckpt does "
            "not assemble parts saved under separate keys, so it pairs none of them (nor does "
            "--averages-only); in the graph imported from the .meta, its own Saver "
            "(import_meta_graph(...).restore) restores them into the shadow variables",
            None, undecided)
    if swapping and not in_graph and as_var | as_avg == set(renamed):
        from .saved_swaps import swap_objects

        objects = swap_objects(ckpt, variables)
        if objects:  # review-13-attack-r24 F2
            raise UnprovenPairingError(
                head + ": the keys named as the variables hold one EMA object's averages and "
                "the keys named as averages the raw weights and another's averages, as a "
                "swapping Saver of one of several EMA objects writes them: the save op and the "
                "update ops prove each, and --ema-name decides which object's averages to use ("
                + ", ".join(f"--ema-name {n}" for n in objects) + ")",
                "--ema-name", undecided)
    if swapping and (in_graph or as_var | as_avg == set(renamed)):
        raise UnprovenPairingError(
            head + ": the keys named as the variables hold their averages and the keys named "
            "as averages hold the raw weights, as a swapping Saver ({v.op.name: "
            "ema.average(v), ema.average_name(v): v}, MovingAverageOptimizer.swapping_saver()) "
            "writes them"
            + (": in the graph the keys are restored by their names, so restore the output of "
               "ckpt restore-ema (which pairs them through the save op) with the graph's Saver"
               if in_graph else ", and the save op does not prove every key's variable and "
               "shadow, so ckpt does not pair them"), None, undecided)
    mixed = sorted(set(raw) - set(renamed))  # W/ExponentialMovingAverage from W, beside
    if as_var and as_var | as_avg == set(renamed) and mixed:  # V's average under V (r70 F3)
        raise UnprovenPairingError(
            head + ": the keys named as the variables hold their averages, as a "
            f"Saver({{v.op.name: ema.average(v)}}) writes them, beside "
            f"{counted(len(mixed), 'key')} "
            f"named as averages that hold their variables' raw values (e.g. {mixed[0]} from "
            f"{raw[mixed[0]]}), as a Saver of ema.variables_to_restore() writes them: the file "
            "holds neither one set of averages nor one of raw weights, and no option of ckpt "
            "export makes one from it (--raw refuses it too)", None, undecided, raw=tuple(mixed))
    if as_var and as_var | as_avg == set(renamed):
        from .raw_beside_averages import mixed_said

        beside = mixed_said(ckpt)  # {'w': w, 'b': ema.average(b)} (review-25-attack-r88 F3)
        if beside:  # review-25-attack-r88 F3; several objects' averages: r117 M4
            from .renamed_offers import mixed_refusal

            raise UnprovenPairingError(head + mixed_refusal(ckpt, beside), None, undecided)
        raise UnprovenPairingError(
            head + ": the keys named as the variables hold their averages, as a "
            "Saver({v.op.name: ema.average(v)}) writes them: use the keys as stored (ckpt "
            "export --raw; in the graph, a plain Saver().restore), which give the averages",
            "--raw", undecided)
    if as_avg == set(renamed):
        # what the save op proves, no more: an evaluation graph's re-save with that Saver
        # holds the averages there (note s30j; as raw_offers.without_raw_names says, r108 F4)
        from .raw_named_said import IF_TRAINED
        from .raw_stated import averages_offer, raw_offer  # they run the map: imported late

        raw_typed = raw_offer(ckpt)
        raise UnprovenPairingError(
            head + ": the keys named as averages were written from their variables "
            "themselves, as a Saver built from ema.variables_to_restore() writes them, so "
            f"they {IF_TRAINED} (to keep the averages, train with a Saver of all variables, "
            "tf.train.Saver(), and use variables_to_restore() only to evaluate), and the "
            "averages if an evaluation graph restored them with that Saver and saved again "
            "(it may build ema.apply() too), which the file cannot show; "
            + (f"ckpt export {raw_typed} writes them as the raw weights; " if raw_typed
               else "") + averages_offer(ckpt),
            None, undecided, raw=tuple(sorted(as_avg)))
    if prefix and in_graph:  # use_meta=False alone fails on the graph's other towers (F5)
        raise UnprovenPairingError(
            head + f": every such key is its variable's name without {prefix!r} (as "
            "tf_cnn_benchmarks saves tower 0), which the graph's restore by key cannot follow; "
            "in this graph pair them by the keys' own names: ckpt_tools.restore_ema(sess, "
            f"path, use_meta=False, add_scope={prefix!r}, var_list=[v for v in "
            f"tf.compat.v1.global_variables() if v.op.name.startswith({prefix!r})])",
            "use_meta=False", undecided)
    if prefix and not _no_meta_works(ckpt):
        # ema.apply() inside the tower's variable_scope: its averages' keys keep the scope
        # the Saver stripped (review-25-attack-r80 F5: the offered --no-meta was refused)
        kept = next((f"key {k} holds {h}" for k, h in sorted(renamed.items())
                     if h and k.startswith(prefix)), None)
        raise UnprovenPairingError(
            head + f": every such key is its variable's name without {prefix!r} (as "
            "tf_cnn_benchmarks saves tower 0), so the .meta's collections name none of these "
            "keys, and the keys' own names pair no average with its weight either (--no-meta "
            "refuses it too"
            + (f": {kept}, an average ema.apply() made inside variable_scope("
               f"{prefix.rstrip('/')!r}), whose key still carries the scope" if kept else "")
            + "); no option of ckpt decides: in the graph imported from the .meta "
            "(tf.compat.v1.train.import_meta_graph(...).restore(sess, path)) each key is "
            "restored into its variable, the averages into ema.apply()'s shadow variables",
            None, undecided)
    if prefix:
        raise UnprovenPairingError(
            head + f": every such key is its variable's name without {prefix!r} (as "
            "tf_cnn_benchmarks saves tower 0), so the .meta's collections name none of these "
            "keys; pass --no-meta to pair them by the keys' own names (Python: "
            "use_meta=False)", "--no-meta", undecided)
    if not in_graph and ema_name is None:  # several objects: the save op pairs one (r106 F3)
        from .renamed_offers import renamed_object_offers

        offers, objects = renamed_object_offers(ckpt)
        if offers:
            raise UnprovenPairingError(
                head + f": a Saver(var_list=dict) whose keys are not its variables' names, "
                f"and the .meta's update ops show {objects}: nothing recorded says which "
                f"object an evaluation uses; pass {' or '.join(offers)} (the object you "
                "evaluate with), which pairs its averages with the keys through the save op"
                + ("; --allow-missing writes raw the variables it does not average"
                   if any(o.endswith("--allow-missing") for o in offers) else ""),
                "--ema-name", undecided)
    from .renamed_offers import evaluation_resave_offer, in_graph_offer

    resaved = "" if in_graph else evaluation_resave_offer(ckpt, [
        k for k in renamed if k not in variables or variables[k].role not in _UNPAIRED])
    raise UnprovenPairingError(
        head + ": a Saver(var_list=dict) whose keys are not its variables' names; pairing "
        "averages with keys by name would use another variable's average or a raw weight, "
        "and ckpt does not translate such keys"
        + ("" if in_graph else in_graph_offer(ckpt, ema_name)) + resaved,
        None, undecided)


def _no_meta_works(ckpt: Checkpoint) -> bool:
    """Whether ``export --no-meta`` of ``ckpt`` (the keys paired by their own names) is
    accepted, so that a refusal may offer it (:func:`~ckpt_tools.offer_probe.works`)."""
    from .offer_probe import works  # it runs the export plan, which imports this module

    return works(ckpt.with_meta(False))


def translated_pairs(ckpt: Checkpoint, variables,
                     ema_name: str | None = None) -> tuple[list, list, list] | None:
    """Pairs the keys of a TF1 ``Saver(var_list=dict)`` whose keys are not its variables'
    names through the ``.meta``'s save op: the key holding variable ``X`` takes the key holding
    ``X``'s shadow ``X/<name>`` (TF's ``average_name``), whatever the keys are called.
    ``ema_name`` (``--ema-name``), where given, must be that one name.

    Returns:
        ``(pairs, missing, not_saved)`` as :func:`~ckpt_tools.ema_names.from_keys` gives
        them, in checkpoint keys, or ``None`` where no key is renamed or the save op does not
        prove every key's variable with one EMA name (:func:`refuse_renamed_keys` refuses).
    """
    renamed = renamed_keys(ckpt)
    if not renamed or any(h is None or h.startswith(k + "/") or k.startswith(h + "/")
                          for k, h in renamed.items()):
        return None  # parts of several variables, or averages saved under variables' names
    held_of = held_variables(ckpt) or {}
    held: dict[str, str] = {}
    for key in variables:
        h = held_of.get(key)
        if h is None:
            return None  # a key this save op did not write: nothing proves what it holds
        held[key] = h
    key_of = {h: k for k, h in held.items()}
    if len(key_of) != len(held):
        return None
    shadow_of: dict[str, str] = {}  # variable key -> its average's key
    names = set()
    for s, v in variables.items():
        if v.role != R.EMA:
            continue
        parts = held[s].split("/")
        owner = next((i for i in range(len(parts) - 1, 0, -1)
                      if "/".join(parts[:i]) in key_of), None)
        t = key_of["/".join(parts[:owner])] if owner else None
        if t is None or variables[t].role == R.EMA or t in shadow_of:
            return None
        shadow_of[t] = s
        names.add("/".join(parts[owner:]))
    if len(names) != 1 or (ema_name and names != {ema_name}) or any(
            held[k].endswith("/" + n) for n in names
            for k, v in variables.items() if v.role != R.EMA):
        return None  # several EMA names, or a key not named as an average holds one
    pairs = [(shadow_of.get(k, k), k) for k, v in variables.items()
             if v.role not in (R.EMA, R.EMA_DEBIAS) and k != "_CHECKPOINTABLE_OBJECT_GRAPH"]
    # the .meta's collections read through the save op, as from_meta reads them for a plain
    # Saver: a graph variable in neither trainable_variables nor moving_average_variables
    # (frozen) has no shadow to expect; it was asked for one (review-19-attack-r45 F6)
    meta = ckpt.meta
    frozen: set[str] = set()
    if meta is not None and meta.collections.get("trainable_variables"):
        listed = {*meta.keys_in("trainable_variables"),
                  *meta.keys_in("moving_average_variables")}
        frozen = set(meta.keys_in("variables")) - listed
    missing = [k for k, v in variables.items() if v.role == R.WEIGHT and k not in shadow_of
               and held[k] not in frozen]
    return pairs, missing, []
