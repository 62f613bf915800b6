"""Averages of variables a TF2 checkpoint does not store: said, never dropped in silence.

``tf.train.Checkpoint(model=m, ema_vars=[ema.average(v) for v in m.trainable_variables])``
saves every average, but only the weights the object graph tracks. A Keras 3 model keeps layers
assigned in a list attribute (``self.blocks = [Dense(4), ...]``) in its own ``TrackedList``,
which ``tf.train.Checkpoint`` does not save, so their weights are not in the checkpoint while
their averages are, named by TF after the variable (``net/blk0/kernel/ExponentialMovingAverage``).
Such an average pairs with nothing stored, so an export holds fewer weights than the model has:
callers say so, naming them, and ``list`` says it under its table (review-30-user-u32 F2).
"""

from __future__ import annotations

import re

from . import roles as R
from .formats._record import replace
from .object_slashed import split_slashed
from .wording import agreeing, counted

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    from .checkpoint import Checkpoint


def orphan_averages(ckpt: Checkpoint, variables) -> dict[str, str]:
    """Returns average key -> the variable name TensorFlow recorded for it (its ``full_name``
    without the last part, the EMA name), for each TF2 average (not a scalar loss average)
    that pairs with no variable and may belong to none the checkpoint stores; ``{}`` for
    files without an object graph.

    Args:
        ckpt: the open checkpoint.
        variables: its variables by key (``{v.name: v for v in ckpt.variables_unwarned()}``).
    """
    if ckpt.objects is None:
        return {}
    full = ckpt.objects.full_names
    stored: dict[str, set] = {}  # recorded name -> the (shape, dtype) stored under it
    for k, v in variables.items():
        if k in full and v.role != R.EMA:
            stored.setdefault(full[k], set()).add((tuple(v.shape), v.dtype))
    out = {}
    for key, v in variables.items():
        name = full.get(key) or ""
        if v.role != R.EMA or v.ema_of or v.ema_candidates or "/" not in name:
            continue
        base = name.rpartition("/")[0]
        # a stored variable of that name but another shape is not it: Keras 3 names every
        # variable of a subclassed model like the model (net/kernel), stored or not (u21 F5)
        if (tuple(v.shape), v.dtype) not in stored.get(base, ()):
            out[key] = base
    return out


def orphan_warning(orphans: dict[str, str], result: str) -> str | None:
    """The warning for :func:`orphan_averages`' result, saying ``result`` (what the output
    lacks because of them), or ``None`` when there is none."""
    if not orphans:
        return None
    names = sorted(set(orphans.values()))
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return (f"{counted(len(orphans), 'average')} "
            f"{agreeing(len(orphans), 'belongs', 'belong')} to variables this checkpoint does "
            f"not store ({shown}: the names TensorFlow gave them), so {result}: the model's "
            "object graph did not track them (a Keras 3 model keeps layers assigned in a list "
            "attribute, self.blocks = [Dense(...), ...], in a TrackedList, which "
            "tf.train.Checkpoint does not save); save a checkpoint that holds those weights "
            "(with the optimizer too, tf.train.Checkpoint(model=model, optimizer=optimizer, "
            "...), it stores them in the optimizer's list: state --apply-order "
            "trainable:optimizer), or read their averages by key "
            f"({', '.join(sorted(orphans)[:2])}{', ...' if len(orphans) > 2 else ''})")


def orphan_warnings(ckpt: Checkpoint, variables, result: str, keep=None) -> list[str]:
    """The warnings for :func:`orphan_averages` (those ``keep(key, name)`` keeps, all without
    it), saying ``result`` (what the output lacks because of them). An average whose
    variable's name is that of a tensor the checkpoint stores as an average is no average of
    a variable the checkpoint lacks: an EMA applied to another EMA's averages
    (``ema2.apply([ema.average(v) ...])`` writes ``net/w/ExponentialMovingAverage/
    ExponentialMovingAverage`` beside ``net/w/ExponentialMovingAverage``), said so
    (review-17-attack-r37 F7)."""
    found = {k: n for k, n in orphan_averages(ckpt, variables).items()
             if keep is None or keep(k, n)}
    full = ckpt.objects.full_names if ckpt.objects is not None else {}
    averages = {full[k]: k for k, v in variables.items() if k in full and v.role == R.EMA}
    twice = {k: n for k, n in found.items() if n in averages}
    out = [orphan_warning({k: n for k, n in found.items() if k not in twice}, result)]
    if twice:
        names = sorted(set(twice.values()))
        shown = ", ".join(f"{n} ({_path(averages[n])})" for n in names[:4]) + (
            f" and {len(names) - 4} more" if len(names) > 4 else "")
        out.append(f"{counted(len(twice), 'average')} {agreeing(len(twice), 'is', 'are')} "
                   "averages of tensors this checkpoint stores as "
                   f"averages ({shown}): an ExponentialMovingAverage applied to another's "
                   "averages (an EMA of an EMA, as ema2.apply([ema.average(v) ...]) writes), "
                   "no weight's own average, so no weight takes them; read them by key "
                   f"({', '.join(sorted(twice)[:2])}{', ...' if len(twice) > 2 else ''})")
    return [w for w in out if w]


def _path(key: str) -> str:
    return key.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE")


def default_named(full_name: str, stored) -> bool:
    """Whether ``full_name`` (a TF2 variable's recorded name) may be read as an average of a
    variable the checkpoint does not store (``stored``: recorded names present) by its name
    alone: its last part is TF's default EMA name (``ExponentialMovingAverage[_N]``), or its
    head is stored. TF2 records no other EMA name: one read off another pair (``attn/query``
    beside ``attn/query/kernel`` reads ``kernel`` as one) proves nothing of ``attn/out/
    kernel``, the model's own weight (review-18-attack-r39 F8); only a stated name does
    (:func:`stated_orphans`).

    Example:
        >>> default_named("net/blk0/kernel/ExponentialMovingAverage_1", {})
        True
        >>> default_named("attn/out/kernel", {"attn/query": 1, "attn/query/kernel": 2})
        False
    """
    head, _, last = full_name.rpartition("/")
    return bool(head) and (head in stored or R.UNIQUIFIED.sub("", last) == R.DEFAULT_EMA_NAME)


def unstated_orphans(keys, full: dict[str, str], names, stated) -> set[str]:
    """Those of ``keys`` (TF2 keys; ``full``: key -> recorded name) that no EMA name but one
    read off another pair reads as an average, and then of a variable the checkpoint does
    not store: ``attn/out/kernel`` where ``attn/query`` beside ``attn/query/kernel`` makes
    ``kernel`` read as an EMA name (``names``: those recognised) and no ``attn/out`` is
    stored (review-18-attack-r39 F8). The pairing keeps them as variables, so their own
    averages (``attn/out/kernel/ExponentialMovingAverage``) pair with them; ``stated``: the
    names the user states (``--ema-name``), which read them as averages still.

    Example:
        >>> full = {"q": "attn/query", "k": "attn/query/kernel", "o": "attn/out/kernel"}
        >>> sorted(unstated_orphans(["k", "o"], full, {"kernel"}, ()))
        ['o']
        >>> unstated_orphans(["o"], full, {"kernel"}, ["kernel"])
        set()
    """
    stored = set(full.values())
    said = {R.UNIQUIFIED.sub("", n) for n in stated or ()}
    out = set()
    for k in keys:
        f = full.get(k) or ""
        head, _, last = f.rpartition("/")
        base = R.UNIQUIFIED.sub("", last)
        if (head and head not in stored and base != R.DEFAULT_EMA_NAME and base not in said
                and last not in said and split_slashed(f, names, stored) is None):
            out.add(k)
    return out


def read_alike(ckpt: Checkpoint, variables: dict, ema_name: str | None = None) -> list[str]:
    """Keys of TF2 weights recorded as ``<x>/<name>`` with no ``<x>`` stored, where another
    pair reads ``name`` (``_N`` aside) as an EMA name (``w/fast`` beside ``w``) and it is not
    TF's default: the ones :func:`default_named` keeps as weights (review-18-attack-r39 F8),
    which may as well be averages of variables the checkpoint does not store (only
    ``ema_name``'s where given; never one whose own average is paired with it, nor one the
    object graph holds as its module's own variable: :func:`module_own`). Scalars too: TF2
    averages no tensor, so a scalar ``<x>/<name>`` is a variable's or its average.
    ``export --raw`` writes them with its warning that they may be either."""
    if ckpt.objects is None:
        return []
    full = ckpt.objects.full_names
    weights = [k for k, v in variables.items() if v.role == R.WEIGHT]
    found = [k for k in weights if k in full and not variables[k].ema
             and variables[k].dtype in R._FLOAT and "/" in full[k]
             and (ema_name is None or ema_name == full[k].rpartition("/")[2]
                  or ema_name == R.UNIQUIFIED.sub("", full[k].rpartition("/")[2]))]
    if not found:
        return []
    firsts: dict = {}
    entries = ckpt.entries()
    for k, f in full.items():
        if k in entries:
            firsts.setdefault(f, entries[k])
    names = set(R.detect_ema_names(firsts)) - {R.DEFAULT_EMA_NAME}
    # Another EMA's average of the same variable (disc/w/slow beside disc/w/fast_1) is no
    # module variable of disc/w (review-19-attack-r44 F1)
    averaging = names | {R.DEFAULT_EMA_NAME} | ({ema_name} if ema_name else set())
    return [k for k in found if full[k].rpartition("/")[0] not in firsts
            and R.UNIQUIFIED.sub("", full[k].rpartition("/")[2]) in names
            and not module_own(ckpt.objects, k, weights, averaging)]


def _edges(objects, key: str) -> list[str]:
    """The object graph's edge names (unescaped) on ``key``'s path: a dict keyed by a name
    with ``/`` in it (``{ema.average_name(v): ...}``) is ONE edge ``disc/w/fast``, which the
    unescaped path ``ema/disc/w/fast`` cannot tell from three."""
    head, sep, _ = key.partition("/.ATTRIBUTES/")
    if not sep:
        return (objects.paths.get(key) or "").split("/")
    return [re.sub(r"\.([S.])", lambda m: "/" if m.group(1) == "S" else ".", e)
            for e in head.split("/")]


def module_own(objects, key: str, weights, averaging=()) -> bool:
    """Whether the TF2 object graph ``objects`` holds ``key`` (recorded as ``<x>/<name>``) as
    its module's own variable, never an average of a variable ``<x>`` the checkpoint does not
    store, whatever EMA name ``<name>`` is: the graph holds it at the path its name gives,
    one attribute per part (``loss/avg`` as attribute ``avg`` of the object ``loss``; not a
    dict keyed by the name, ``ema/disc/w/fast`` from ``{ema.average_name(v): ...}``:
    review-19-attack-r44 F4), or beside another of ``weights`` (keys read as weights)
    recorded under the same ``<x>/`` (a ``tf.Module`` ``net`` holding ``net/w`` and
    ``net/fast``: ``net`` is the module's name scope), one not itself ``<x>/<word>`` with
    ``<word>`` (``_N`` aside) in ``averaging`` (EMA names: another EMA's average of ``<x>``,
    ``disc/w/slow`` beside ``disc/w/fast_1``, is no module variable: r44 F1). TF names an
    average ``<variable's name>/<EMA name>`` and the user attaches it where they like (a list
    ``ema/0``), so a stated ``--ema-name fast`` reads such a key as an average only without
    this evidence (s19g, after review-18-attack-r39 F8).

    Returns:
        `bool`: True where the graph shows ``key`` is its module's own variable.

    Example:
        >>> from types import SimpleNamespace as NS
        >>> g = NS(paths={"a": "net/fast", "b": "net/w", "c": "ema/2", "d": "ema/6"},
        ...        full_names={"a": "net/fast", "b": "net/w", "c": "b/kernel/fast",
        ...                    "d": "b/kernel/slow"})
        >>> module_own(g, "a", ["a", "b"]), module_own(g, "c", ["b", "c"])
        (True, False)
        >>> module_own(g, "c", ["c", "d"]), module_own(g, "c", ["c", "d"], {"slow"})
        (True, False)
    """
    path = objects.paths.get(key) or ""
    full = objects.full_names.get(key) or ""
    head = full.rpartition("/")[0]
    if not path or not head:
        return False
    edges = _edges(objects, key)
    parts = full.split("/")
    if edges[-len(parts):] == parts:
        return True
    parent = path[:len(path) - len(edges[-1])].rstrip("/")

    def module_variable(k: str) -> bool:
        name = objects.full_names.get(k) or ""
        rest = name[len(head) + 1:]
        return name.startswith(f"{head}/") and not (
            "/" not in rest and R.UNIQUIFIED.sub("", rest) in averaging)

    return any(k != key and (objects.paths.get(k) or "").rpartition("/")[0] == parent
               and module_variable(k) for k in weights)


def stated_orphans(ckpt: Checkpoint, variables: dict, ema_name: str | None) -> dict:
    """``variables`` (key -> :class:`~ckpt_tools.variable.Variable`) with each weight
    :func:`read_alike` finds under ``ema_name`` read as an average of a variable the
    checkpoint does not store, where the user states that name (``--ema-name``): a Keras 3
    model's layers in a plain list, averaged by an EMA named ``fast``. Unchanged otherwise."""
    if not ema_name or "," in ema_name or "/" in ema_name:
        return variables
    found = read_alike(ckpt, variables, R.UNIQUIFIED.sub("", ema_name))
    if not found:
        return variables
    out = dict(variables)
    for k in found:
        out[k] = replace(variables[k], role=R.EMA, ema_of=None, ema_style="object",
                         ema=None, ema_candidates=())
    return out
