"""What :mod:`.restore` says when a graph's variables cannot be restored: one problem line
per variable, in the file's own terms, and what decides."""

from __future__ import annotations

from collections.abc import Callable, Collection

from . import roles as R
from .checkpoint import Checkpoint
from .rescope_clash import stored_checkpoint_key
from .wording import counted


def no_average_line(ckpt: Checkpoint, key: str, ema_name: str, owner: str | None = None) -> str:
    """A problem line for ``key``, which has no average, in the file's own terms: a TF1 Saver
    names the shadow after its variable (``owner``: the variable whose average that name is,
    when ``ema.apply()`` ran inside a ``variable_scope``); a TF2 checkpoint holds what was
    saved of ``ema.average(v)``. ``owner`` the name itself: the map restores it as a variable
    of its own, proven no average of ``key`` (a gradient's moment kept under it,
    review-17-attack-r38's MINOR: it read "w0/ExponentialMovingAverage is
    w0/ExponentialMovingAverage's average"). Where the ``.meta``'s graph only copies a value
    into it that it cannot prove an average or not (a warm start's fed value, a copy of
    ``key``), the line says so and names ``use_meta=False``, which reads it by its name
    (review-18-attack-r41 F2)."""
    if ckpt.objects is None and owner == f"{key}/{ema_name}":
        from .ema_sources import copied_value  # reads the .meta's graph: only here
        from .ema_updates import update_ops

        copied = copied_value(update_ops(ckpt), key, owner)
        if copied:
            return (f"{key} (no shadow of its own; {owner} is no proven average of {key}: the "
                    f".meta's graph shows it written {copied}, and no ema.apply() update "
                    f"averaging {key} into it; use_meta=False reads it by its name, as {key}'s "
                    "average)")
        return (f"{key} (no shadow of its own; {key}/{ema_name} is no average of {key}: it "
                "restores as a variable of its own)")
    if ckpt.objects is None and owner not in (None, key):
        return f"{key} (no shadow of its own; {key}/{ema_name} is {owner}'s average)"
    if ckpt.objects is None:
        return f"{key} (no shadow {key}/{ema_name})"
    return (f"{key.removesuffix('/.ATTRIBUTES/VARIABLE_VALUE')} (no average: its "
            "ema.average(v) is not saved)")


def scope_advice(ckpt: Checkpoint | Collection[str], keys: list[str],
                 works: Callable[[str | None, str | None], bool] | None = None) -> str | None:
    """The scope options that make each of ``keys`` (graph names the checkpoint lacks) a
    stored name: ``add_scope="P/"`` where each is ``P/`` + one, ``P/`` of any depth (a graph
    imported with ``import_meta_graph(meta, import_scope="eval/m")``, or under a
    ``name_scope``); ``strip_scope="P/"`` where ``P/`` + each is one (a graph rebuilt without
    the training scope; a top-level name stored as it is counts, as
    :func:`~ckpt_tools.rescope_clash.stored_checkpoint_key` reads it); both, where the graph
    was rebuilt under another scope in place of the training one. Stored names: the
    checkpoint's keys and the variables its save op wrote (a ``Saver(var_list=dict)``'s keys
    are not their names). ``works(strip_scope, add_scope)`` (:func:`~ckpt_tools.restore_plan.
    scope_check`) is asked before options are named: a hint is given only where following it
    restores every variable (review-17-user-u19 F3). ``None`` where none fits. A hint naming
    the options, never applied: the user says which scope their graph has.

    Example:
        >>> scope_advice({"w", "b"}, ["m/w", "m/b"])
        'add_scope="m/"'
        >>> scope_advice({"w", "b"}, ["eval/m/w", "eval/m/b"])
        'add_scope="eval/m/"'
        >>> scope_advice({"tower_0/w", "tower_0/b"}, ["w", "b"])
        'strip_scope="tower_0/"'
        >>> scope_advice({"net/w", "net/b", "global_step"}, ["model/w", "model/b"])
        'strip_scope="net/", add_scope="model/"'
    """
    if not keys:
        return None
    names = _stored_names(ckpt)
    first = keys[0]
    heads = [first[:i + 1] for i, c in enumerate(first) if c == "/"]
    for add in [""] + [h for h in heads if all(k.startswith(h) for k in keys)]:
        rest = [k[len(add):] for k in keys]
        strips = sorted({n[:-len(rest[0])] for n in names if n.endswith("/" + rest[0])},
                        key=lambda s: (len(s), s))
        for strip in ([""] if add else []) + strips:
            if all(stored_checkpoint_key(r, strip or None, None, names) in names for r in rest) \
                    and (works is None or works(strip or None, add or None)):
                return ", ".join(f'{o}="{v}"' for o, v in (("strip_scope", strip),
                                                            ("add_scope", add)) if v)
    return None


def _stored_names(ckpt: Checkpoint | Collection[str]) -> set[str]:
    names = set(ckpt)
    if isinstance(ckpt, Checkpoint):
        from .save_op import written_sources

        for sources in (written_sources(ckpt) or {}).values():
            names.update(sources)
    return names


def _when(scope: str) -> str:
    """When the scope options ``scope`` (:func:`scope_advice`) are the graph's."""
    opts = dict(o.split("=") for o in scope.split(", "))
    strip, add = opts.get("strip_scope"), opts.get("add_scope")
    if strip and add:
        return f"if the graph was rebuilt under {add[1:-1]} in place of {strip[1:-1]}"
    if strip:
        return "if the graph was rebuilt without it"
    return "if the graph was imported (or built) under it"


#: Problem lines of a graph name paired with an object-based checkpoint's keys by the names
#: TensorFlow recorded (:func:`~ckpt_tools.restore_plan.recorded_keys`).
NAMED_BY_NONE = "no saved variable was recorded under this name"
NAMED_BY_SEVERAL = "the name recorded for"


def restore_advice(problems: list[str], ckpt: Checkpoint | None = None,
                   works: Callable[[str | None, str | None], bool] | None = None) -> str:
    """What decides, for the problems :func:`_plan` found (``ckpt``: the checkpoint, to name
    scope options that would make the graph's names its keys; ``works``: whether they
    restore every variable, see :func:`scope_advice`)."""
    named = [p for p in problems if f"({NAMED_BY_NONE})" in p or f"({NAMED_BY_SEVERAL} " in p]
    if not named:
        return _advice(problems, ckpt, works)
    # what a graph's names can and cannot restore from a TF2 checkpoint (r40 F7)
    rest = _advice([p for p in problems if p not in named], ckpt, works)
    names = [p.partition(" (")[0] for p in named]
    head = (f"{rest}; the checkpoint is object-based (tf.train.Checkpoint): a graph's "
            "variable restores from the one saved variable recorded under its name"
            f"{recorded_names(ckpt)}; ")
    tf2 = ("restore into the model built in TF2 with ckpt_tools.apply_ema(model, path) "
           "(or apply_ema(tf.train.Checkpoint(NAME=model), path), placed as it was saved), "
           "whose object paths decide")
    weights = _weight_like(ckpt, names)
    if weights:  # a weight left out may be a shifted name: no subset is safe (r42 F5)
        return (head + f"{', '.join(weights[:3])}{' ...' if len(weights) > 3 else ''} "
                "look like the saved weights, whose names TensorFlow and Keras generate per "
                "process (a layer built before the model shifts them), so leaving them out "
                f"could pair the others with other layers' values: {tf2}, or name the graph's "
                "variables as the saved ones were named")
    unseen = names[sum(problems.index(p) < 8 for p in named):]  # the error shows 8 (r42 F3)
    listed = "those named above" + (f" and {', '.join(unseen)}" if unseen else "")
    return (head + f"pass var_list= without the {counted(len(names), 'variable')} it records under "
            f"no name or several ({listed}), or {tf2}")


def _weight_like(ckpt: Checkpoint | None, names: list[str]) -> list[str]:
    """Those of ``names`` (graph variables no saved variable's name pairs) whose own name, its
    ``_N`` counter aside, is a saved weight's (``kernel``, ``gamma``): the weights of a model
    whose names were shifted, never an optimizer's slots or step."""
    if ckpt is None or ckpt.objects is None:
        return []
    from .live_pairing import lookalike_kinds, uncounted

    own = {kind[3] for kind in lookalike_kinds(ckpt).values()}
    return [n for n in names if uncounted(n.rpartition("/")[2]) in own]


def recorded_names(ckpt: Checkpoint | None) -> str:
    """`` (it records NAMES)``: the names an object-based checkpoint records for its saved
    variables, each once, the first few: its weights' first (what a graph's variables are
    named after), never slots or averages (review-19-attack-r42 F3: a tf_keras optimizer's
    ``Adam/m/dense/kernel`` were shown in place of the model's); ``""`` without any."""
    objects = getattr(ckpt, "objects", None)
    if objects is None:
        return ""
    rank = {R.WEIGHT: 0, R.BN_STAT: 0, R.STEP: 1}
    names = sorted({(rank.get(v.role, 2), objects.full_names[v.name])
                    for v in ckpt.variables_unwarned()
                    if v.name in objects.full_names and "/.OPTIMIZER_SLOT/" not in v.name
                    and v.role not in (R.OPTIMIZER_SLOT, R.EMA, R.EMA_DEBIAS)})
    if not names:
        return ""
    shown = [n for _, n in names[:6]]
    return f" (it records {', '.join(shown)}{' ...' if len(names) > 6 else ''})"


def _advice(problems: list[str], ckpt: Checkpoint | None,
            works: Callable[[str | None, str | None], bool] | None) -> str:
    if not problems:
        return ""
    if any("(no shadow " in p for p in problems):
        return ("; pass allow_missing=True to restore their raw values, or var_list= without "
                "them")
    if any("(no average: " in p or "; no average: " in p for p in problems):
        return ("; pass allow_missing=True to restore their raw values, or save every "
                "averaged variable's ema.average(v) (tf.train.Checkpoint(model=model, "
                "ema=[ema.average(v) for v in variables]))")
    absent = [p.partition(" (not in the checkpoint")[0] for p in problems
              if " (not in the checkpoint" in p]
    scope = scope_advice(ckpt, absent, works) if ckpt is not None \
        and len(absent) == len(problems) else None
    if scope:
        return f"; every one is stored under another scope: pass {scope} {_when(scope)}"
    if any("(not in the checkpoint" in p for p in problems):
        return "; pass var_list= with the variables the checkpoint holds"
    return ""


def entry_mismatch(ckpt: Checkpoint, key: str, src: str, shape, dtype_name: str) -> str | None:
    entry = ckpt.entry(src)
    if tuple(entry.shape) != tuple(shape) or entry.dtype_name != dtype_name:
        return (f"{key}: checkpoint {src!r} is {entry.dtype_name}{list(entry.shape)} but the "
                f"variable is {dtype_name}{list(shape)}")
    return None


#: Why a graph with no variables restores nothing (review-16-attack-r32 F6).
NO_VARIABLES = ("the graph has no variables to restore: build the model, or import its .meta "
                "with tf.compat.v1.train.import_meta_graph, before restoring (or pass var_list=)")


def keras_pointer(ckpt: Checkpoint) -> str:
    """For a Keras weights file restored into a TF1 graph: where its averages go instead (a
    Keras model, through ``apply_ema``); else ``""``."""
    if getattr(ckpt.reader, "keras", None) is None:
        return ""
    return ("; this is a Keras weights file: restore it into the Keras model with "
            "ckpt_tools.apply_ema(model, path)")
