"""``ckpt average`` of TF2 saves whose averages are named after a name several variables
share (review-32-attack-r121 F3).

TF names every unnamed ``tf.Variable`` ``Variable`` (and two modules' ``w`` are both ``w``);
``ExponentialMovingAverage.apply`` then names their averages ``Variable/ExponentialMovingAverage``,
``..._1``... in the order it got them, per process. A run resumed in a new process whose
``ema.apply`` got the variables in another order (``[w, b]`` at one save,
``m.trainable_variables`` = ``[b, w]`` at the next) records the same ``full_name`` under
``ema/0`` in both saves, w's average in one and b's in the other: equal names there prove
nothing, and averaging by key wrote the mean of w's and b's averages, exit 0.

So a key whose recorded name is a variable named after a shared name (``S/...`` where ``S`` is
the ``full_name`` of two or more floating-point keys of that input) is averaged only where
each input's own EMA map (:func:`~ckpt_tools.emamap.proven_pairs`, under the command's
statements) proves it the average of the same weight key; an optimizer slot is proven by its
slot record instead (:mod:`~ckpt_tools.average_held`). Else the inputs are refused (exit 6).
"""

from __future__ import annotations

import re
from collections import Counter

from .average_keyed import keyed_alike
from .average_renumbered import proven_owners
from .checkpoint import Checkpoint
from .errors import UnprovenPairingError
from .roles import DEFAULT_EMA_NAME
from .wording import counted

__all__ = ["shared_name_keys", "refuse_unproven_shared", "droppable", "DROP_OFFER"]

_VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"


def _shown(key: str) -> str:
    """``key`` without the suffix every object checkpoint's variable key carries."""
    return key[:-len(_VALUE)] if key.endswith(_VALUE) else key


_COUNTER = re.compile(r"_\d+$")


def _trained(ckpt: Checkpoint) -> set[str]:
    """The keys a Keras optimizer (an object tracking ``_iterations`` and
    ``_trainable_variables``) lists in its ``_trainable_variables``: the model's weights it was
    built with, which TF keys at that list's place (``optimizer/_trainable_variables/0``) when
    saved with ``tf.train.Checkpoint(model=m, optimizer=opt)``. Weights, never averages: their
    key is the model's own attribute whatever order anything was built in
    (review-33-attack-r129 M1)."""
    objects = ckpt.objects
    out: set[str] = set()
    for _, kids in objects.children.items():
        names = dict(kids)
        if "_iterations" in names and "_trainable_variables" in names:
            out.update(objects.node_keys[c] for _, c in objects.children.get(
                names["_trainable_variables"], ()) if c in objects.node_keys)
    return out


def _counted(key: str, head: str, tail: str) -> bool:
    """Whether ``key``'s recorded name ``head/tail`` may carry an ``_N`` that follows an order
    apply() got rather than a name of the user's or Keras'.

    Checked with TensorFlow and Keras 3 (review-33-attack-r127 M1): ``tf.Variable(name="w_1")``,
    ``w_2`` under a module's scope record ``net/w_1``, ``net/w_2`` under the attributes
    ``model/w_1``, ``model/w_2``; Keras 3 names ``add_weight()`` without a name ``variable``,
    ``variable_1``... (``net/variable_1`` under a subclassed model's ``model/lin/c``,
    ``sequential/lin/variable_1`` under ``.../_operations/1/c``). Those keys are restored by
    TF into the same attribute in every save whatever the names say, so their ``_N`` proves
    nothing either way. Every other key of such a family counts, an attribute or a dict's key
    included: a list's place (``ema/0``) follows the order the code iterated in, and so does a
    dict keyed by a loop
    (``ema={f"a{i}": fast.average(v) ...}``, ``ema/a0`` holding ``Variable/fast`` in both saves,
    w's average in one and b's in the next: review-33-attack-r129 C2), whose keys name no
    weight: a list in disguise. So the user's own name is taken only where the key's own name
    is the recorded last part (``w_1``), and Keras' for its lowercase ``variable[_N]`` under a
    head that is not TF's ``Variable`` of an unnamed ``tf.Variable`` (Keras names models and
    layers in snake_case), wherever held: a weight, never an average that
    ``--drop-unproven-averages`` would leave out (review-33-attack-r129 M1). Not caught: an
    ``ExponentialMovingAverage(name="variable")`` over several variables the user named alike
    (``name="net"``), kept under a loop's keys or in a list."""
    local = _shown(key).rpartition("/")[2]
    base = _COUNTER.sub("", tail)
    if base == DEFAULT_EMA_NAME:
        return True
    if base == "variable" and head.rpartition("/")[2] != "Variable":
        return False  # Keras 3's weight wherever held, a list of model.weights included
    if local.isdigit():
        return True
    return local != tail.replace(".", "..").replace("/", ".S")  # else the user's attribute


def shared_name_keys(ckpt: Checkpoint, keys: list[str]) -> dict[str, tuple[str, int]]:
    """Of ``keys`` (floating-point keys), those whose ``full_name`` in ``ckpt``'s object graph
    is a variable named after a name two or more of ``keys`` record there, or the head of
    names differing only by TF's ``_N`` (:func:`_counted` says which names count): key ->
    (that shared name, how many keys record it); ``{}`` where ``ckpt`` has no object graph.
    A weight a Keras optimizer lists (:func:`_trained`) is never one of them."""
    if ckpt.objects is None:
        return {}
    trained = _trained(ckpt)
    names = {k: ckpt.objects.full_names.get(k) for k in keys}
    count = Counter(n for n in names.values() if n is not None)
    shared = {n for n, c in count.items() if c > 1}
    # averages numbered apart only by TF's _N (Variable/ExponentialMovingAverage and ..._1):
    # two variables of one name, or two objects over one, whose numbers follow each
    # process's apply() order, saved or not beside them (review-32-attack-r125 F1)
    numbered: dict[tuple[str, str], set[str]] = {}
    for k, n in names.items():
        head, _, tail = (n or "").rpartition("/")
        if head and _counted(k, head, tail):
            numbered.setdefault((head, _COUNTER.sub("", tail)), set()).add(n)
    for (head, _), group in numbered.items():
        if len(group) > 1:
            shared.add(head)
            count[head] = max(count[head], len(group))
    out: dict[str, tuple[str, int]] = {}
    for k, n in names.items():
        if n is None or k in trained:
            continue  # a Keras optimizer's weight: never an average, never dropped
        # every shared name the recorded one is under: "Variable" for
        # "Variable/ExponentialMovingAverage_1" (the longest, where several are)
        under = [s for s in shared if n.startswith(s + "/")]
        if under:
            s = max(under, key=len)
            out[k] = (s, count[s])
    return out


def _unproven(ckpts: list[Checkpoint], keys: list[str]) -> dict[str, tuple[Checkpoint, str, int]]:
    """Of ``keys``, those some input records under a name several variables share there:
    key -> (that input, the shared name, how many variables share it), the newest input's
    where it records one; an optimizer slot (proven by its slot record,
    :mod:`~ckpt_tools.average_held`) and a key whose holder's own key names the same weight in
    every input (:func:`~ckpt_tools.average_keyed.keyed_alike`) are left out."""
    unproven: dict[str, tuple[Checkpoint, str, int]] = {}
    for ckpt in reversed(ckpts):
        slots = ckpt.objects.slots if ckpt.objects is not None else {}
        for k, (s, n) in shared_name_keys(ckpt, keys).items():
            if k not in slots:
                unproven.setdefault(k, (ckpt, s, n))
    if unproven:
        for k in keyed_alike(ckpts, unproven):
            del unproven[k]
    return unproven


def droppable(ckpts: list[Checkpoint], keys: list[str], pairing: dict | None) -> list[str]:
    """The keys :func:`refuse_unproven_shared` refuses without ``bake`` (the command's
    statements ``pairing``), sorted: ``drop_unproven_averages`` leaves exactly these out of
    the output."""
    unproven = _unproven(ckpts, keys)
    if not unproven:
        return []
    owners = [proven_owners(c, pairing or {}) for c in ckpts]
    ours = owners[-1]
    return sorted(k for k in unproven if ours is None or k not in ours or any(
        theirs is None or theirs.get(k) != ours[k] for theirs in owners[:-1]))


#: What the plain average's refusal offers: the weights averaged, these averages left out.
DROP_OFFER = ("; or, to average the other variables alone (the weights, SWA-style) and leave "
              "these averages out of the output, --drop-unproven-averages")


def refuse_unproven_shared(ckpts: list[Checkpoint], keys: list[str], pairing: dict | None,
                           bake: bool, offer: bool = False) -> None:
    """Refuses averaging ``keys`` of the TF2 ``ckpts`` (the newest last) where a key's recorded
    name is under a name several variables share in some input and neither the holders' own
    keys (:mod:`~ckpt_tools.average_keyed`) nor the inputs' own EMA maps each prove it the
    average of the same weight key.

    With ``bake``, where the newest input's own map cannot be built under the command's
    statements, this returns: the ``--bake`` pairing then refuses that map with the option
    that decides (``--apply-order``), which this check repeats for every input when given.
    With ``offer`` (a plain average) the refusal offers ``--drop-unproven-averages``.

    Raises:
        UnprovenPairingError: (exit 6, ``option`` ``None``) naming the input, the key, the
            shared name and why the files cannot tell which variable's average it holds.
    """
    unproven = _unproven(ckpts, keys)
    if not unproven:
        return
    newest = ckpts[-1]
    ours = proven_owners(newest, pairing or {})
    if ours is None and bake:
        return  # the --bake pairing refuses the newest's map, naming what decides it
    for ckpt in ckpts[:-1] if ours is not None else ckpts[-1:]:
        theirs = proven_owners(ckpt, pairing or {}) if ours is not None else None
        bad = sorted(k for k in unproven if theirs is None or k not in theirs
                     or k not in ours or theirs[k] != ours[k])
        if not bad:
            continue
        key = bad[0]
        if theirs is not None and key in theirs and key in ours:
            raise UnprovenPairingError(
                f"{ckpt.path}: {_shown(key)!r} is the EMA average of {_shown(theirs[key])!r} "
                f"there but of {_shown(ours[key])!r} in {newest.path}, as each one's own EMA "
                "map proves: averaging by key would mix different variables' averages: "
                "refused; average only checkpoints whose keys hold the same variables (no "
                "option decides)", option=None)
        holder, shared, many = unproven[key]
        more = f" (and {counted(len(bad) - 1, 'other key')})" if len(bad) > 1 else ""
        raise UnprovenPairingError(
            f"{ckpt.path}: {_shown(key)!r} holds {holder.objects.full_names.get(key)!r}"
            f"{'' if holder is ckpt else ' in ' + str(holder.path)}, named after "
            f"{shared!r}, a name {counted(many, 'variable')} share there{more}: TF numbers "
            "such averages _N in the order each process's ema.apply() got them, so equal "
            "names do not prove that a key "
            "holds the same variable's average in every input, and no EMA map of each input "
            "proves it: averaging by key could mix different variables' averages: refused; "
            "name the variables (name=) in the run, or keep the averages in a dict keyed by "
            "the weights' paths (ema={'dense/bias': ...}); with --ema --bake, state an "
            "--apply-order true of every input's ema.apply()"
            f"{DROP_OFFER if offer else ''} (docs/averaging.md)", option=None)
