"""Pairs live TensorFlow 2 variables with the keys of an object-based checkpoint.

``apply_ema`` (:mod:`ckpt_tools.restore`) is given a live object: a ``tf.Module``, a Keras
model, a ``tf.train.Checkpoint``, or a list of variables. Its variables are paired by object
path, exactly as ``tf.train.Checkpoint`` names them, from the checkpoint's root or the one
child of it that the object's structure proves it is; a Keras 3 model's weights, which the
object graph keys through its optimizer's lists, by their path through the model. Names pair
only a list of variables (or a name-based TF1 checkpoint): names are generated per process.
"""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint
from .errors import EmaError
from .wording import counted


def escape_local_name(name: str) -> str:
    """TensorFlow's ``trackable.escape_local_name``: an attribute name as checkpoint keys spell
    a path's part (``"."`` -> ``".."``, ``"/"`` -> ``".S"``).

    Example:
        >>> escape_local_name("a/b.c")
        'a.Sb..c'
    """
    return name.replace(".", "..").replace("/", ".S")


def trackable_children(obj) -> dict[str, object]:
    """The objects ``obj`` tracks for a checkpoint, by local name (empty for a leaf)."""
    try:
        return obj._trackable_children("checkpoint")
    except (AttributeError, TypeError):
        return {ref.name: ref.ref for ref in getattr(obj, "_checkpoint_dependencies", [])}


def object_keys(root) -> dict[str, object]:
    """Returns checkpoint key -> variable for every variable reachable from ``root``.

    Walks the trackable object graph breadth-first, as ``tf.train.Checkpoint`` does when it
    names keys, so keys are those a checkpoint of ``root`` would have.
    """
    import tensorflow as tf  # apply_ema checked it is installed
    out: dict[str, object] = {}
    seen = {id(root)}
    queue = [(root, "")]
    while queue:
        obj, path = queue.pop(0)
        for name, child in trackable_children(obj).items():
            if id(child) in seen:
                continue
            seen.add(id(child))
            child_path = f"{path}/{escape_local_name(name)}" if path else escape_local_name(name)
            # A Keras 3 variable is not a tf.Variable but saves as one (its value is).
            if isinstance(child, tf.Variable) or isinstance(getattr(child, "value", None),
                                                             tf.Variable):
                out[f"{child_path}/.ATTRIBUTES/VARIABLE_VALUE"] = child
            queue.append((child, child_path))
    return out


def key_variables(model_or_variables, ckpt: Checkpoint) -> tuple[list, list[str]]:
    """Pairs variables with checkpoint keys: by object path when given an object (TF2), then by
    the variable's name for the rest. Returns ([(variable, key)], problems)."""
    if isinstance(model_or_variables, (list, tuple)):
        variables, keyed = list(model_or_variables), {}
    else:
        variables = list(getattr(model_or_variables, "variables", []))
        keyed = object_keys(model_or_variables) if ckpt.objects is not None else {}
        # A Keras 3 model's weights are keyed by its optimizer's lists; the object graph also
        # records their path through the model, which the live object's structure gives.
        alias = ckpt.keys_by_model_path() if keyed else {}
        keyed = {alias.get(k, k): v for k, v in keyed.items()}
        if keyed and not any(k in ckpt for k in keyed):
            # The object was one child of the checkpoint's root (tf.train.Checkpoint(model=m)):
            # find which child by trying the root's top-level names.
            best = _root_child(ckpt, keyed, alias)
            if best is not None:
                keyed = {alias.get(f"{best}/{k}", f"{best}/{k}"): v for k, v in keyed.items()}
            else:
                # Its structure matches nothing saved: pairing it by variable names would be a
                # guess (Keras and TF generate names like dense_1 per process). A list of
                # variables states that names are what pairs them.
                raise EmaError(
                    f"{ckpt.path}: the object's structure (its attribute paths) matches no "
                    "object in the checkpoint, so which saved variable each of its variables is "
                    "cannot be told; pass the object the checkpoint was saved from or one of "
                    "its children, or a list of variables to pair them by name "
                    "(apply_ema(model.variables, path)) where those names are stable"
                    + _wrapped_root(ckpt, keyed))
    pairs = [(v, k) for k, v in keyed.items() if k in ckpt]
    found = {id(v) for v, _ in pairs}
    taken = {k: v for v, k in pairs}
    # A variable the object walk placed whose object path the checkpoint does not hold was not
    # saved (a decoder beside a saved encoder): its name may be another variable's.
    unsaved = {} if _via_optimizer(ckpt) else {
        id(v): k for k, v in keyed.items() if k not in ckpt and id(v) not in found}
    # Variables the object walk did not place (Keras 3 models are reachable only through their
    # optimizer's lists) are paired by name: the full_name TF2 records, or a TF1 key.
    by_name: dict[str, list[str]] = {}
    if ckpt.objects is not None:
        for key, full in ckpt.objects.full_names.items():
            if "/.OPTIMIZER_SLOT/" not in key:
                by_name.setdefault(full, []).append(key)
    problems = []
    flat = _keras3_average_owners(ckpt) if ckpt.objects is not None else {}
    todo = variables or [v for k, v in keyed.items()]
    walked = None if isinstance(model_or_variables, (list, tuple)) else {
        id(v) for v in keyed.values()}
    # Keras tracks layers kept in a Python list that TF's object graph does not (a Keras 3
    # model's blocks, reached only through a built optimizer's list): a trainable variable the
    # walk missed is still one the caller gave, never silently left as it is (u21 F1).
    if walked is not None:
        listed = {id(v) for v in todo}
        todo += [v for v in keras_trainable(model_or_variables) if id(v) not in listed]
    live: dict[str, int] = {}  # a flattened path two live variables share decides nothing
    for v in todo:
        if getattr(v, "path", None):
            live[v.path.replace("/", "_")] = live.get(v.path.replace("/", "_"), 0) + 1
    for v in todo:
        if id(v) in found:
            continue
        names = [n for n in (getattr(v, "path", None), v.name.split(":")[0]) if n]
        shown = names[0]  # Keras 3's path (dense_1/kernel), not its bare name (kernel)
        if id(v) in unsaved:
            problems.append(f"{shown} (its object path {unsaved[id(v)]} is not in the "
                            "checkpoint: it was not saved)")
            continue
        keys: list[str] = []
        for name in names:
            keys = by_name.get(name) or ([name] if name in ckpt else [])
            if keys:
                break
        mine = getattr(v, "path", None) and v.path.replace("/", "_")
        if len(keys) != 1 and mine and live.get(mine) == 1 and len(flat.get(mine, ())) == 1:
            keys = flat[mine]
        if len(keys) > 1:
            problems.append(f"{shown} (ambiguous: {', '.join(keys)}; pass the model object "
                            "instead of a variable list so object paths decide)")
        elif not keys and walked is not None and id(v) not in walked and _via_optimizer(ckpt):
            problems.append(f"{shown} ({UNREACHED})")
        elif not keys:
            problems.append(f"{shown} (no checkpoint key for this variable)")
        elif keys[0] in taken:  # one saved variable is never restored into two
            other = taken[keys[0]]
            problems.append(f"{shown} (its name matches {keys[0]}, which "
                            f"{getattr(other, 'path', None) or other.name} already restores "
                            "from: the checkpoint holds one of them)")
        else:
            pairs.append((v, keys[0]))
            taken[keys[0]] = v
            found.add(id(v))
    if isinstance(model_or_variables, (list, tuple)) and ckpt.objects is not None and pairs \
            and not problems:  # (those are refused first, each named)
        refuse_rivals(ckpt, [k for _, k in pairs])
    return pairs, problems


#: Why a live Keras variable the object graph does not reach has no key (u21 F1, F2).
UNREACHED = "not reached by the object's paths"


def keras_trainable(root) -> list:
    """The ``trainable_variables`` of the outermost Keras layers or models ``root`` is or
    holds (through trackable children, as ``tf.train.Checkpoint(model=m)`` holds ``m``), in
    Keras' order, each once: Keras tracks layers kept in Python lists that the object graph
    does not record. Returns [] where it holds none."""
    out: list = []
    seen: set[int] = set()
    queue = [root]
    while queue:
        obj = queue.pop(0)
        if id(obj) in seen or len(seen) > 100_000:
            continue
        seen.add(id(obj))
        if callable(getattr(obj, "_flatten_layers", None)):  # a Keras layer or model
            for v in getattr(obj, "trainable_variables", None) or ():
                if id(v) not in seen:
                    seen.add(id(v))
                    out.append(v)
            continue
        queue += list(trackable_children(obj).values())
    return out


def optimizer_advice(ckpt: Checkpoint, problems: list[str]) -> str:
    """What restores variables the object's paths do not reach (problems ending in
    :data:`UNREACHED`) where the checkpoint keys them through a Keras optimizer's list:
    that optimizer, built with the variables it trained, passed under its saved name.
    Returns ``""`` where no such problem is listed."""
    if not any(p.endswith(f"({UNREACHED})") for p in problems):
        return ""
    opts = sorted({k.split("/_trainable_variables/", 1)[0] for k in ckpt.keys()
                   if "/_trainable_variables/" in k})
    name = opts[0] if len(opts) == 1 else "NAME"
    held = f" ({', '.join(opts)})" if len(opts) > 1 else ""
    return ("; Keras keeps them in layers the object graph does not record (e.g. held in a "
            "Python list), so the checkpoint stores them only through its optimizer's list "
            f"({name}/_trainable_variables/N): build the optimizer saved as {name!r}{held} with "
            "the variables "
            "it trained, in the order its first apply_gradients() got them (e.g. "
            "opt.build(model.trainable_variables)), and pass it beside the model under their "
            f"saved names: apply_ema(tf.train.Checkpoint(model=model, {name}=opt), path"
            f"[, apply_order='trainable:{name}']); or write a restorable copy with ckpt "
            "restore-ema / ckpt export")


def refuse_rivals(ckpt: Checkpoint, keys: list[str], instead: str = "a list") -> None:
    """Refuses pairing variables by name in an object-based checkpoint where the names cannot
    tell which saved weights are theirs.

    The names a TF2 checkpoint records are generated per process (Keras' ``dense``,
    ``dense_1``, TF's ``Variable``): a process that builds only a GAN's generator names its
    variables as the discriminator, built first in training, was named; one that builds a
    model without the head built before it in training names every layer as the layer before
    it was named; one that builds two equal models in the other order names each as the other
    was named. Only the object's structure tells them apart. Refused where a matched weight
    has a saved lookalike (same shape, dtype, role and own name, ``_N`` aside) that no name
    matched (review-19-attack-r42 F5: one is enough, the names may be shifted), or where
    matched lookalikes sit under different top-level objects under names that differ only by
    a ``_N`` uniquifier (F1: two models built in the other order).

    ``instead``: what was given in place of the object (a list; a graph's variables, paired
    by name by :func:`~ckpt_tools.restore_plan.recorded_keys`).

    Raises:
        EmaError: naming where the other weights are and the way that decides (the object).
    """
    matched = set(keys)
    kind = lookalike_kinds(ckpt)
    wanted = {kind[k] for k in matched if k in kind}
    rivals = [k for k in kind if k not in matched and kind[k] in wanted]
    if rivals:
        where = sorted({_holder(ckpt, k) for k in rivals})
        why = (f"{', '.join(repr(w) for w in where[:3])}{' ...' if len(where) > 3 else ''} "
               "hold other weights of the same shapes, and the names TensorFlow and Keras "
               "record are generated per process (a process that builds only one of two equal "
               "models, or a model without a layer built before it in training, names its "
               "layers as others were named)")
    else:
        crossed = _crossed(ckpt, [k for k in matched if k in kind], kind)
        if not crossed:
            return
        why = (f"{_holder(ckpt, crossed[0])!r} and {_holder(ckpt, crossed[1])!r} sit under "
               "different top-level objects with names that differ only by the counter "
               "TensorFlow and Keras add per process "
               "(a process that builds the two models in the other order names each as the "
               "other was named)")
    raise EmaError(
        f"{ckpt.path}: the variables' names match {counted(len(matched), 'saved weight')}, but "
        f"{why}, "
        f"so names do not tell which weights are these variables'; pass the object instead "
        f"of {instead}, placed as it was saved, so object paths decide: "
        "apply_ema(tf.train.Checkpoint(NAME=model), path) with NAME one of the checkpoint's "
        f"top-level names ({', '.join(sorted(_top_level(ckpt)))}), or, for a model saved "
        "inside another object, that object rebuilt around it")


def uncounted(name: str) -> str:
    """``name`` with the ``_N`` counter TensorFlow and Keras add per process taken off each
    part (``sequential_1/dense_2/kernel`` -> ``sequential/dense/kernel``).

    Example:
        >>> uncounted("sequential_1/dense_2/kernel_1")
        'sequential/dense/kernel'
    """
    return "/".join(R.UNIQUIFIED.sub("", part) for part in name.split("/"))


def lookalike_kinds(ckpt: Checkpoint) -> dict[str, tuple]:
    """Checkpoint key -> (shape, dtype, role, own name) of each saved weight or BatchNorm
    statistic: what a shifted name could mean instead (``dense_1/kernel`` for
    ``dense/kernel``; never a BatchNorm statistic for its gamma). The own name is the last
    part of the recorded name, its ``_N`` counter aside (``w_1`` for ``w``)."""
    full = ckpt.objects.full_names if ckpt.objects is not None else {}

    def own_name(key: str) -> str:
        return uncounted((full.get(key) or key).split(":")[0].rpartition("/")[2])

    return {v.name: (tuple(v.shape), v.dtype, v.role, own_name(v.name))
            for v in ckpt.variables_unwarned() if v.role in (R.WEIGHT, R.BN_STAT)}


def _crossed(ckpt: Checkpoint, keys: list[str], kind: dict[str, tuple]) -> tuple[str, str] | None:
    """Two of ``keys`` (matched by name) of one kind under different top-level objects whose
    recorded names differ only by ``_N`` counters (``enc``'s ``dense/kernel`` and ``dec``'s
    ``dense_1/kernel``): each name could be the other's in a process that built them in the
    other order. Names that differ otherwise (``enc/kernel``, ``dec/kernel``) are stable."""
    full = ckpt.objects.full_names if ckpt.objects is not None else {}
    seen: dict[tuple, tuple[str, str]] = {}
    for key in sorted(keys):
        top = (ckpt.path_of(key) or key).split("/", 1)[0]
        group = (kind[key], uncounted(full.get(key) or key))
        first = seen.setdefault(group, (top, key))
        if first[0] != top:
            return first[1], key
    return None


def _holder(ckpt: Checkpoint, key: str) -> str:
    """The object path of ``key``'s owner (``models/1/layer_with_weights-0``)."""
    path = ckpt.path_of(key) or key.split("/.ATTRIBUTES/", 1)[0]
    return path.rpartition("/")[0] or path


def _top_level(ckpt: Checkpoint) -> set[str]:
    from .pairing import root_child

    return {root_child(k) for k in ckpt.keys() if "/" in k}


def _via_optimizer(ckpt: Checkpoint) -> bool:
    """Whether model weights may be keyed through a Keras 3 optimizer's lists
    (``optimizer/_trainable_variables/N``), where a live model's object paths are not keys."""
    return any("/_trainable_variables/" in k or "/_variables/" in k for k in ckpt.keys())


def _wrapped_root(ckpt: Checkpoint, keyed: dict) -> str:
    """Where the object wraps the checkpoint's root (``tf.train.Checkpoint(model=m)`` given
    for a ``model.save_weights()`` file, whose root is ``m``): the hint to pass that child
    bare. Returns "" where not exactly one child of the object has all its variables at
    the root's paths."""
    under: dict[str, list[bool]] = {}
    for k in keyed:
        if "/" in k:
            head, rest = k.split("/", 1)
            under.setdefault(head, []).append(rest in ckpt)
    inside = [head for head, found in under.items() if all(found)]
    if len(inside) != 1:
        return ""
    return (f"; the object's {inside[0]} has the structure of the checkpoint's root (the file "
            "was saved from it directly, e.g. by model.save_weights()): pass it bare, "
            "apply_ema(model, path)")


def _root_child(ckpt: Checkpoint, keyed: dict, alias: dict[str, str]) -> str | None:
    """The child of the checkpoint's root that the live object is, where its structure proves
    it: the only top-level object holding its relative keys, with no other weights of its
    shapes elsewhere in the file. Returns None where no child holds them.

    Raises:
        EmaError: two children fit (an online and a target network of one class), or the file
            holds weights of the object's shapes outside the one that fits (a model whose own
            weights are kept only through its optimizer, beside a copy of it): which one the
            object is cannot be told from its structure.
    """
    roots = sorted({k.split("/", 1)[0] for k in [*ckpt.keys(), *alias] if "/" in k})
    # A live object holds model variables: a child whose matching keys are all averages or
    # slots (the ``ema/`` mirror a custom loop saves beside ``model/``) is not what it is.
    held = {v.name for v in ckpt.variables_unwarned()
            if v.role not in (R.EMA, R.EMA_DEBIAS, R.OPTIMIZER_SLOT)}
    counts = {r: sum(alias.get(f"{r}/{k}", f"{r}/{k}") in held for k in keyed) for r in roots}
    fitting = [r for r in roots if counts[r]]
    if not fitting:
        return None
    how = ("pass the object as the child it is, e.g. apply_ema(tf.train.Checkpoint("
           f"{fitting[0]}=model), path), so its object paths are exact")
    if len(fitting) > 1:
        raise EmaError(f"{ckpt.path}: the object fits {len(fitting)} of the checkpoint's "
                       f"top-level objects ({', '.join(fitting)}), so which one it is cannot "
                       f"be told from its structure; {how}")
    best = fitting[0]
    # Trained weights it holds under that child: where the file also keeps trained weights of
    # those shapes elsewhere (a Keras 3 optimizer's list, which keys the weights of the model it
    # trains), the child may be an untrained copy (a target network) of the object. A model
    # whose own weights are keyed through its optimizer holds none under its child.
    mine = {alias.get(f"{best}/{k}", f"{best}/{k}") for k in keyed}
    shapes = {tuple(v.shape) for k, v in keyed.items()
              if f"{best}/{k}" in ckpt and getattr(v, "trainable", False)}
    rivals = [v.name for v in ckpt.variables_unwarned()
              if v.role == R.WEIGHT and not v.name.startswith(best + "/")
              and v.name not in mine and tuple(v.shape) in shapes]
    if rivals:
        raise EmaError(f"{ckpt.path}: the object fits {best}/, but the checkpoint also holds "
                       f"weights of its shapes elsewhere ({rivals[0]}"
                       f"{f' and {len(rivals) - 1} more' if len(rivals) > 1 else ''}), so "
                       f"which object it is cannot be told from its structure; {how}")
    return best


def _keras3_average_owners(ckpt: Checkpoint) -> dict[str, list[str]]:
    """Keras 3 variable path -> checkpoint key of the weight, from the optimizer's averages.

    A Keras 3 optimizer names each average ``<its name>/<variable path with '/' as
    '_'>_average``; the weight it averages is the one the file pairs it with. Where a
    custom layer's sublayers record the same ``full_name`` (``net/kernel`` for up and
    down), this name tells them apart. Returns flattened path -> weight keys (more than one:
    it decides nothing)."""
    out: dict[str, list[str]] = {}
    full = ckpt.objects.full_names
    for var in ckpt.variables_unwarned():
        avg = full.get(var.ema or "")
        if var.ema is None or not avg or not avg.endswith("_average") or "/" not in avg:
            continue
        out.setdefault(avg.split("/", 1)[1][: -len("_average")], []).append(var.name)
    return out
