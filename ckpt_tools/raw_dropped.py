"""What ``export --raw`` of a TF1 checkpoint would leave out of the keys its ``.meta``'s save
op wrote from model variables, where it saved some model variable under another name than its
own (a ``Saver(ema.variables_to_restore())``, renamed, suffixed or scope-stripped, or an
evaluation graph's re-save).

Such a Saver writes each weight under its average's name; where the keys beside them are
saved under names no reading of that Saver explains (a Saver mixing ``w``'s raw value under
its average's name with ``b``'s average under ``b``), ``--raw`` read the keys by their names
and wrote a weights file without ``w``, exit 0 with no word (review-23-attack-r70 F3, F7, F8).
Every key the save op wrote from a model variable now goes out, or the export is refused
naming it; a key it wrote from a variable that is no weight (a local variable) is said left
out (F5). A key written from a shadow, a slot or the step is never a weight.
"""

from __future__ import annotations

from collections.abc import Callable

from . import roles as R
from .checkpoint import Checkpoint
from .ema_updates import part_update_ops, shadow_owners
from .errors import OutputError, UnprovenPairingError
from .raw_beside_averages import mixed_said
from .raw_named import named_as_own_average, training_state
from .save_op import graph_named, written_sources
from .saved_keys import PART, held_variable
from .weight_keys_averaged import averages_under_variable_names
from .wording import agreeing, counted

#: roles a key written from a model variable has that ``--raw`` does not export as a weight
#: and that is said left out
_SAID = (R.OTHER, R.STEP)


def refuse_dropped_model_keys(ckpt: Checkpoint, variables, plan: dict[str, str],
                              left_out: Callable[[str], bool], *,
                              shadows_said: bool = False) -> list[str]:
    """Checks an ``export --raw`` plan against the save op, where it saved some model
    variable (none of the graph's shadows, slots or step) under another name than its own.

    Args:
        ckpt: the open checkpoint.
        variables: its variables by key (roles).
        plan: output name -> the key the plan writes under it.
        left_out: whether the caller's filters leave a key out (never refused nor said).
        shadows_said: the caller's warning names the keys written from EMA shadows as
            averages left out (:func:`~ckpt_tools.restored_raw.restored_raw_warning`), so
            :func:`refuse_dropped_averages` does not refuse them.

    Returns:
        Warnings (without ``warning:``) for keys written from variables that are no weight
        (a local variable, a step counter outside the ``global_step`` collection): left out.

    Raises:
        UnprovenPairingError: (exit 6) the plan leaves out a key the save op wrote from a
            model variable that holds a weight (named as its average, a weight's or a
            statistic's role, or written from a trainable variable); ``--exclude`` leaves it
            out knowingly; or (no option) the plan writes a key the save op wrote from an
            ``ema.apply()`` shadow of a variable (an average under ``--raw``), or a raw weight
            under the name of another graph variable's average; or (``--exclude``) it leaves
            out unsaid a key written from the shadow of a variable no key holds raw
            (:func:`refuse_dropped_averages`).
    """
    sources = written_sources(ckpt)  # None for a TF2 checkpoint: no graph file is read
    if not sources:
        return []
    if not shadows_said:
        refuse_dropped_averages(ckpt, sources, plan, left_out)
    state = training_state(ckpt)
    averages = shadow_written_keys(ckpt, sources)
    # a Saver that saved no model variable under another name than its own: read by names,
    # but never writing a shadow's key as a weight: a suffixing Saver of the averages alone
    # ({average name + '/var'}) saved only shadows and the step under other names, and --raw
    # wrote both averages as raw weights, exit 0 (review-25-attack-r84 F6)
    if not any(src and src != [k] and all(s not in state for s in src)
               for k, src in sources.items()):
        _refuse_written_averages(ckpt, sources, plan, averages)
        return []
    _refuse_misread_plan(ckpt, sources, plan, averages)
    exported = set(plan.values())
    raw = named_as_own_average(ckpt)
    trainable = set(ckpt.meta.collections.get("trainable_variables") or ())
    missed = [k for k, src in sorted(sources.items()) if src and k not in exported
              and all(s not in state for s in src) and not left_out(k)]
    weights = [k for k in missed if k in raw or any(s in trainable for s in sources[k])
               or getattr(variables.get(k), "role", None) in (R.WEIGHT, R.BN_STAT)]
    if weights:
        raise _dropped_refusal(ckpt, sources, state, weights)
    # a zero-debiased average's bookkeeping (<v>/biased, <v>/local_step) is not said
    said = [k for k in missed if getattr(variables.get(k), "role", None) in _SAID
            and not (k.rpartition("/")[2] in ("biased", "local_step")
                     and k.rpartition("/")[0] in ckpt.meta.variables)]
    if not said:
        return []
    local = set(ckpt.meta.collections.get("local_variables") or ())
    shown = [f"{k}{' (a local variable)' if sources[k][0] in local else ''}" for k in said]
    return [f"left out {counted(len(said), 'key')} the {graph_named(ckpt)}'s save op wrote from "
            "graph "
            f"variables that are neither weights nor statistics ({', '.join(shown[:4])}"
            f"{' ...' if len(shown) > 4 else ''}): --raw writes the model's weights only"]


def _dropped_refusal(ckpt: Checkpoint, sources: dict[str, list[str]], state: set[str],
                     keys: list[str]) -> UnprovenPairingError:
    """The refusal for ``keys`` (written from model variables) that ``--raw`` would drop."""
    graph = graph_named(ckpt)
    # keys named as graph variables that hold another variable's average: a mixed Saver
    mixed = sorted(a for a, src in sources.items() if ckpt.meta is not None
                   and a in ckpt.meta.variables and src != [a] and src
                   and all(s in state for s in src))
    why = (f"beside {counted(len(mixed), 'key')} named as variables that hold averages (e.g. "
           f"{mixed[0]} holds {sources[mixed[0]][0]}), so its Saver mixed raw weights under "
           "averages' names with averages under variables' names and the file holds no one "
           "set of raw weights (nor of averages)" if mixed else
           "ckpt reads no one naming of its Saver's keys that gives each model variable's "
           "key its variable's name (its own or its average's name, with one prefix or "
           "stripped scope for all), so it cannot write every raw weight it holds by name")
    shown = ", ".join(f"{a} from {sources[a][0]}" for a in keys[:3])
    return UnprovenPairingError(
        f"{ckpt.path}: export --raw would leave out {counted(len(keys), 'key')} the {graph}'s "
        "save op "
        f"wrote from model variables ({shown}{' ...' if len(keys) > 3 else ''}): {why}; "
        "refused rather than written without them; --exclude "
        + " --exclude ".join(repr(a) for a in keys[:3]) + (" ..." if len(keys) > 3 else "")
        + " leaves " + ("it" if len(keys) == 1 else "them") + " out knowingly",
        "--exclude", {a: (sources[a][0],) for a in keys})


def _refuse_written_averages(ckpt: Checkpoint, sources: dict[str, list[str]],
                             plan: dict[str, str], averages: set[str]) -> None:
    """Refuses a ``--raw`` plan that writes a key the save op wrote from an ``ema.apply()``
    shadow (``averages``: :func:`shadow_written_keys`), where the Saver saved no model
    variable under another name (only shadows, slots, the step): nothing to export where
    every key the plan writes is one (as for the prefixed twin:
    :func:`~ckpt_tools.saved_swaps.averages_alone_said`), else :func:`_refuse_misread_plan`
    names the first.

    Raises:
        OutputError: (exit 7) every key the plan writes holds an average.
        UnprovenPairingError: (exit 6) some do, beside raw weights.
    """
    # a key named as the variable whose average it holds (Saver({v.op.name:
    # ema.average(v)})) goes out under --raw as the averages, said by export's warning
    # ("hold their averages"), where the default export refuses and names --raw
    # (test_tf1_saver_dict_keys rawnames)
    named = averages_under_variable_names(ckpt)
    written = sorted(k for k in set(plan.values()) if k in averages and k not in named)
    # ... only where every key it writes is one: beside a raw weight under its own name
    # ({'w': w, 'b': ema.average(b)}) it wrote raw w and b's average as raw, exit 0
    # (review-25-attack-r88 F3)
    held = sorted(k for k in set(plan.values()) if k in named)
    if held and _raw_of_averaged(ckpt, sources, set(plan.values()) - set(named)):
        raise _mixed_refusal(ckpt, plan, held)
    if not written:
        return
    if len(written) < len(set(plan.values())):
        _refuse_misread_plan(ckpt, sources, plan, averages)
        return
    k = written[0]
    shadow = sources[k][0]
    of = _shadows_of(ckpt).get(shadow, shadow)
    # no path: export names the checkpoint and the output before a plan's OutputError
    raise OutputError(
        f"no weights to export: its {counted(len(written), 'tensor')} "
        f"{agreeing(len(written), 'holds', 'hold')} averages only "
        f"(the {graph_named(ckpt)}'s save op wrote {k} from {of}'s shadow {shadow}), and "
        "--raw exports model weights only, never an average under any name")


def _raw_of_averaged(ckpt: Checkpoint, sources: dict[str, list[str]],
                     keys: set[str]) -> list[str]:
    """The ``keys`` (none holding its variable's average) that hold the raw value of a
    variable the graph's ``ema.apply()`` averages: beside averages under the variables'
    names these make a mix. A key written from a variable no update op averages (a batch
    norm's moving statistic, the step) holds the same whichever set is read, so it is no mix:
    ``Saver({"W": ema.average(W), "V": ema.average(V), "mm": mm})`` was refused by ``--raw``
    as one, while the default export names ``--raw`` (review-26-attack-r90 F2).

    Returns:
        Those keys, sorted; every one of ``keys`` where the update ops are not read whole (no
        variable is then proven unaveraged) or a key's sources name no one variable.
    """
    owners = shadow_owners(ckpt, whole=True)
    if owners is None:
        return sorted(keys)
    averaged = {PART.sub("", v) for v in owners.values()}
    out = []
    for k in sorted(keys):
        var = held_variable(sources.get(k) or [])
        if var is None or var in averaged:
            out.append(k)
    return out


def _mixed_refusal(ckpt: Checkpoint, plan: dict[str, str],
                   held: list[str]) -> UnprovenPairingError:
    """The refusal of a ``--raw`` plan writing ``held`` (keys named as variables that hold
    those variables' averages) beside keys that hold raw values: the output would mix them
    under ``--raw``'s name; ``--exclude`` of ``held`` writes the raw values alone."""
    named = averages_under_variable_names(ckpt)
    raw = sorted(k for k in set(plan.values()) if k not in named)
    said = mixed_said(ckpt) or (f"key {held[0]} holds {held[0]}'s average {named[held[0]]} "
                                f"beside {counted(len(raw), 'key')} holding raw values (e.g. "
                                f"{raw[0]})")
    shown = " --exclude ".join(repr(k) for k in held[:3]) + (" ..." if len(held) > 3 else "")
    return UnprovenPairingError(
        f"{ckpt.path}: export --raw would write {counted(len(held), 'key')} that "
        f"{agreeing(len(held), 'holds', 'hold')} averages "
        f"({', '.join(held[:3])}{' ...' if len(held) > 3 else ''}) as raw weights: its "
        f"{graph_named(ckpt)}'s save op shows {said}; --raw writes raw weights only, never an "
        f"average under any name: --exclude {shown} writes the other keys' raw values "
        "alone",
        "--exclude", {k: (named[k],) for k in held})


def _refuse_misread_plan(ckpt: Checkpoint, sources: dict[str, list[str]],
                         plan: dict[str, str], averages: set[str]) -> None:
    """Refuses a ``--raw`` plan that writes an average (under any name: ``averages``,
    :func:`shadow_written_keys`), or a raw weight under another variable's average's name,
    as the save op shows: a mixed Saver's
    ``--exclude`` route wrote ``w``, saved from ``w/ExponentialMovingAverage``, as ``--raw``'s
    ``w`` (exit 0, a warning only), and a scope-stripped Saver beside a top-level ``w`` wrote
    raw ``tower/w`` as ``w/ExponentialMovingAverage`` (review-24-attack-r76 F1, F2). No
    option makes either right, so none is offered.

    Raises:
        UnprovenPairingError: (exit 6, option ``None``) naming the first such key.
    """
    variables = ckpt.meta.variables if ckpt.meta is not None else {}
    for name, key in sorted(plan.items()):
        src = sources.get(key)
        if not src:
            continue
        # an average is no raw weight under any name: a suffixing Saver's
        # b/ExponentialMovingAverage/var too (its role says so: review-24-attack-r79 F3)
        if key in averages:
            why = (f"would write {key!r} as a raw weight{f' (as {name!r})' if name != key else ''}"
                   f", but the {graph_named(ckpt)}'s save op wrote it from the shadow {src[0]} "
                   "(an average)")
        elif (name not in src and name.rpartition("/")[0] in variables
              and name.rpartition("/")[0] not in src):
            why = (f"would write the raw value of {src[0]} (key {key!r}) as {name!r}, the name "
                   f"of {name.rpartition('/')[0]}'s average")
        else:
            continue
        raise UnprovenPairingError(
            f"{ckpt.path}: export --raw {why}: ckpt reads no naming of its Saver's keys that "
            "gives each raw weight its variable's name, and no option of ckpt export --raw "
            "makes raw weights from it", None, {key: tuple(src)})


def shadow_written_keys(ckpt: Checkpoint, sources: dict[str, list[str]] | None = None
                        ) -> set[str]:
    """The keys the ``.meta``'s save op wrote from ``ema.apply()`` shadows of graph variables
    only: averages of variables, whatever their names (``model/w/ExponentialMovingAverage`` of
    a renamed Saver of a second object's ``variables_to_restore()`` is ``w``'s average, no
    tensor's: review-24-attack-r76 F5). A tensor's average (a BN statistic's
    ``assign_moving_average``) is not among them. Empty without a ``.meta`` whose save op and
    update ops are read, or for a TF2 checkpoint.

    Args:
        ckpt: the open checkpoint.
        sources: :func:`~ckpt_tools.save_op.written_sources` of it where already read.
    """
    if sources is None:
        sources = written_sources(ckpt)
    shadows = _shadows_of(ckpt) if sources else {}
    return {k for k, src in sources.items() if src and all(s in shadows for s in src)} \
        if shadows else set()


def refuse_dropped_averages(ckpt: Checkpoint, sources: dict[str, list[str]],
                            plan: dict[str, str], left_out: Callable[[str], bool]) -> None:
    """Refuses an ``export --raw`` plan that leaves out a key the save op wrote from the
    ``ema.apply()`` shadow of a graph variable no key holds raw: a mixed Saver that wrote
    ``w``'s average as ``model/w`` (or ``w_ema``) and raw ``b`` as ``model/b`` (or ``b``)
    exported ``b`` alone, exit 0 with no word, a model without ``w`` (review-24-attack-r79
    F1). An average is never written as raw, so the only way out is leaving it out knowingly.

    Args:
        ckpt: the open checkpoint.
        sources: :func:`~ckpt_tools.save_op.written_sources` of it.
        plan: output name -> the key the plan writes under it.
        left_out: whether the caller's filters leave a key out (never refused).

    Raises:
        UnprovenPairingError: (exit 6, option ``--exclude``) naming the keys and whose
            averages they hold.
    """
    shadows = _shadows_of(ckpt)
    held = {s for src in sources.values() for s in src}
    exported = set(plan.values())
    dropped = {k: shadows[src[0]] for k, src in sorted(sources.items())
               if src and all(s in shadows for s in src) and k not in exported
               and not left_out(k) and not any(shadows[s] in held for s in src)}
    if not dropped:
        return
    keys = list(dropped)
    shown = ", ".join(f"{k} holds {v}'s average" for k, v in list(dropped.items())[:3])
    raise UnprovenPairingError(
        f"{ckpt.path}: export --raw would leave out {counted(len(keys), 'key')} the "
        f"{graph_named(ckpt)}'s save op wrote from EMA shadows of variables whose raw values "
        f"no key holds ({shown}{' ...' if len(keys) > 3 else ''}): --raw writes raw weights "
        "only, and the file holds none for " + ("it" if len(keys) == 1 else "them")
        + ", so the export would lack those weights; refused rather than written without "
        "them; --exclude " + " --exclude ".join(repr(k) for k in keys[:3])
        + (" ..." if len(keys) > 3 else "") + " leaves "
        + ("it" if len(keys) == 1 else "them") + " out knowingly",
        "--exclude", {k: tuple(sources[k]) for k in keys})


def _shadows_of(ckpt: Checkpoint) -> dict[str, str]:
    """Shadow -> the graph variable its ``ema.apply()`` update op averages, as the ``.meta``
    records them (``{}`` without one whose update ops are read)."""
    found = part_update_ops(ckpt)
    if found is None or ckpt.meta is None:
        return {}
    variables = ckpt.meta.variables
    return {s: v for s, (v, _scope) in found[0].averages.items() if v in variables and v != s}
