"""Which checkpoint key each live TensorFlow variable restores from: its average (as
:func:`~ckpt_tools.emamap.ema_map` pairs it), its raw value where no average is expected, or
a problem line the restore refuses with. No TensorFlow import: variables are duck-typed.
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .ema_missing_hints import MISFILED
from .emamap import KEEP, ema_map, rescope
from .errors import CheckpointError, EmaError
from .graph_saved import plan_in_graph
from .live_pairing import refuse_rivals
from .rescope_clash import stored_checkpoint_key
from .restore_problems import (
    NAMED_BY_NONE,
    NAMED_BY_SEVERAL,
    no_average_line,
    recorded_names,
    scope_advice,
)


def graph_key(var) -> tuple[str, object]:
    """Returns (checkpoint key, SaveSliceInfo or None) of a graph variable."""
    info = getattr(var, "_save_slice_info", None)
    name = var.op.name if hasattr(var, "op") else var.name.split(":")[0]
    return (info.full_name if info else name), info


def flatten_variables(var_list) -> list:
    """Returns ``var_list`` with each ``PartitionedVariable`` (and each list or tuple in it)
    replaced by its parts, in order."""
    out = []
    for v in var_list:
        if hasattr(v, "_get_variable_list"):  # PartitionedVariable
            out.extend(v._get_variable_list())
        elif isinstance(v, (list, tuple)):
            out.extend(v)
        else:
            out.append(v)
    return out


def recorded_keys(ckpt: Checkpoint, names: list[str], strip_scope: str | None = None,
                  add_scope: str | None = None) -> tuple[dict[str, str], list[str]]:
    """Pairs a graph's variables with an object-based (TF2) checkpoint's keys by the names
    TensorFlow recorded for the saved variables (their ``full_name``, the name TF's own v1
    ``Saver`` falls back to for such a file): graph name -> key of the one saved variable
    recorded under it, as :func:`~ckpt_tools.live_pairing.key_variables` pairs a list of TF2
    variables (review-18-attack-r40 F7: every graph name read as "not in the checkpoint").
    ``strip_scope`` / ``add_scope`` apply to the graph's names as to a TF1 checkpoint's keys
    (a graph imported with ``import_meta_graph(meta, import_scope="eval")`` takes
    ``add_scope="eval/"``: review-19-attack-r42 F2).

    Returns:
        (graph name -> checkpoint key, problem lines): a name no saved variable records, or
        that several record (TF2 names are not unique: unnamed variables are all
        ``Variable``; TF's ``Saver`` takes one of them, we take none).

    Raises:
        EmaError: no name is recorded for exactly one saved variable (unnamed TF2 variables,
            all ``Variable``: a ``var_list=`` cannot help); the names match weights while
            other saved weights look like them, or two equal models' weights
            (:func:`~ckpt_tools.live_pairing.refuse_rivals`: names are generated per process).
    """
    by_name: dict[str, list[str]] = {}
    for key, full in ckpt.objects.full_names.items():
        by_name.setdefault(full, []).append(key)
    keys, problems, unnamed = {}, [], []
    for name in dict.fromkeys(names):
        found = by_name.get(stored_checkpoint_key(name, strip_scope, add_scope, by_name), [])
        if len(found) == 1:
            keys[name] = found[0]
        elif found:
            problems.append(f"{name} ({NAMED_BY_SEVERAL} {len(found)} saved variables: "
                            f"{', '.join(found[:3])}{' ...' if len(found) > 3 else ''})")
        else:
            problems.append(f"{name} ({NAMED_BY_NONE})")
            unnamed.append(name)
    if names and not keys:  # var_list= cannot help: say what does
        scope = scope_advice(set(by_name), unnamed) if len(unnamed) == len(problems) else None
        hint = f"every one is recorded under another scope: pass {scope}, or " if scope else ""
        if (strip_scope or add_scope) and unnamed and all(n in by_name for n in unnamed):
            hint = "every one is recorded as the graph names it: leave out the scope options, or "
        raise EmaError(
            f"{ckpt.path}: no saved variable of this object-based (tf.train.Checkpoint) "
            "checkpoint was recorded under the name of exactly one of the graph's variables ("
            + "; ".join(problems[:4]) + (" ..." if len(problems) > 4 else "") + "), and a "
            "graph's variable restores only from the one saved variable recorded under its "
            f"name{recorded_names(ckpt)}: "
            + hint
            + "restore into the model built in TF2 with ckpt_tools.apply_ema(model, path), "
            "whose object paths decide, or name the graph's variables as the saved ones were "
            "named")
    if keys:  # also with problems: a graph weight left unmatched may be a shifted name (F5)
        refuse_rivals(ckpt, list(keys.values()),
                      instead="a graph's variables (the model built in TF2, eagerly)")
    return keys, problems


def graph_named(problems: list[str], to_key: dict[str, str]) -> list[str]:
    """``problems`` (:func:`plan_sources`'s lines, which lead with an object path such as
    ``model/layer_with_weights-0/kernel``) led by the graph's name of each variable, the
    path kept in brackets (review-19-attack-r42 F7: the user had to map object paths back to
    the names they built)."""
    by_path = {key.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE"): name
               for name, key in to_key.items()}
    out = []
    for line in problems:
        path, sep, rest = line.partition(" (")
        name = by_path.get(path)
        out.append(f"{name} (saved as {path}; {rest}" if name and sep else line)
    return out


def scope_check(ckpt: Checkpoint, keys: list[str], map_options: dict):
    """What makes a scope hint true: ``works(strip_scope, add_scope)`` is whether every one of
    ``keys`` restores (:func:`plan_sources` finds no problem) under those options in place of
    the caller's, their other options kept (review-17-user-u19 F3: a hint is given only
    where following it literally restores every variable)."""
    def works(strip_scope: str | None, add_scope: str | None) -> bool:
        options = {**map_options, "strip_scope": strip_scope, "add_scope": add_scope}
        try:
            return not plan_sources(ckpt, keys, options)[2]
        except CheckpointError:  # refused under them too
            return False
    return works


def plan_sources(ckpt: Checkpoint, keys: list[str], map_options: dict,
                 frozen: frozenset[str] = frozenset()) -> tuple[dict, dict, list]:
    """Pairs each target key with its source: (averaged {key: src}, raw {key: src}, problems).

    ``frozen``: keys of variables the live object proves non-trainable; one without an
    average restores its raw value, as TF's ``variables_to_restore()`` maps a variable
    ``ema.apply()`` was not given to itself."""
    def own(key: str) -> str:
        return stored_checkpoint_key(key, map_options.get("strip_scope"),
                                     map_options.get("add_scope"), ckpt)

    # the swap question asked of the keys restored alone: a weight no variable given
    # restores is neither read nor written (review-33-attack-r127 M2)
    m = ema_map(ckpt, slots=KEEP, non_averaged=KEEP, in_graph=True,
                **{**map_options, "targets": [own(k) for k in keys]})
    sources = m.sources()

    if m.held:  # keys the save op wrote from variables of other names: through it
        averaged, raw, lacking, problems = plan_in_graph(ckpt, m, keys, own, lambda k: rescope(
            k, map_options.get("strip_scope"), map_options.get("add_scope")), frozen)
        pairs = dict(m.pairs)
        lines = [no_average_line(ckpt, k, m.ema_name, pairs.get(f"{k}/{m.ema_name}"))
                 for k in lacking]
        misfiled = [h for h in m.hints if h.startswith(MISFILED)]
        if lines and misfiled:  # what the save op shows, as the CLI says it (r24 F0b)
            lines[-1] = lines[-1][:-1] + "; " + misfiled[0].replace(
                "--allow-missing (allow_missing=True)", "allow_missing=True") + ")"
        return averaged, raw, problems + lines
    missing = set(m.missing)
    averaged, raw, problems = {}, {}, []
    for key in dict.fromkeys(keys):
        src = sources.get(key)
        if src is None and ckpt.stored_key(key) != key:  # one part of a per-part saved tensor
            src = ckpt.stored_key(key)
            raw[key] = src
            continue
        # missing and pairs name checkpoint keys: eval/w (add_scope="eval/") is w's
        lacks = own(key) in missing
        if src is not None and src != key and not lacks:
            averaged[key] = src
        elif lacks and key in frozen and own(key) in ckpt:
            raw[key] = own(key)
        elif lacks:
            problems.append(no_average_line(ckpt, own(key), m.ema_name,
                                            dict(m.pairs).get(f"{own(key)}/{m.ema_name}")))
        elif own(key) in ckpt:  # a shadow in a graph imported under add_scope: its own key
            raw[key] = own(key)
        else:
            problems.append(f"{key} (not in the checkpoint)")
    if problems and not averaged and m.missing:
        m.require_complete()  # the "no shadows at all" message explains the likely cause
    return averaged, raw, problems
