"""The roles of a renaming TF1 Saver's keys read as the graph variables its ``.meta``'s save op
wrote into them, where the keys' own names hide them.

A ``Saver({v.op.name + "/var": v for v in tf1.global_variables()})`` stores ``w``'s shadow as
``w/ExponentialMovingAverage/var``, Adam's slots as ``w/Adam/var`` and its beta powers as
``beta1_power/var``: read by name, every one of them was a weight, so ``list`` (``--json``,
``variables()``) called them weights and ``export --raw`` wrote w's average and the slots as
raw weights, exit 0, no word (review-24-attack-r79 F3). A prefix Saver (``"model/" + name``)
keeps the names' endings and was read right. The save op says which variable each key holds
and the graph says what that variable is: a shadow, a slot or the step is that role under
whatever key it is stored.
"""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint
from .errors import CheckpointError
from .save_op import written_sources
from .saved_keys import PART, held_variables

#: graph roles that are no model weight, read through the save op (a key named as a weight
#: whose variable has one of them takes it); the plain ones refer to no other key
_NOT_WEIGHTS = (R.EMA, R.OPTIMIZER_SLOT, R.STEP, R.EMA_DEBIAS, R.LOSS_AVERAGE,
                R.TENSOR_AVERAGE)


def written_roles(ckpt: Checkpoint, info: dict) -> dict:
    """Re-reads the keys :func:`~ckpt_tools.roles.classify` called weights (``info``: key ->
    :class:`~ckpt_tools.roles.RoleInfo`) as the graph variable the ``.meta``'s save op wrote
    into each, for keys that are no graph variable's name and whose variable is stored under
    no key of its own name: where the graph, classified under its own names, calls that
    variable a shadow, an optimizer slot, the step or a tensor's average, the key takes that
    role (a slot's ``slot_of`` the key holding its variable, ``None`` where no one key holds
    it; a shadow's ``ema_of`` the key holding its variable). A shadow takes it only where
    its variable's raw value is stored under a key read as a weight. Only weights change,
    and only into roles that are no weight: this can take a key out of ``--raw``'s
    weights, never add one.

    Returns:
        key -> its new :class:`~ckpt_tools.roles.RoleInfo`, for the keys whose role changes;
        ``{}`` without a ``.meta`` whose save op wrote this checkpoint, for TF2 files, or
        where every key is a graph variable's name.
    """
    keys, roles = _graph_reading(ckpt)
    stored = ckpt.entries()
    out = {}
    for h, k, beside in keys:
        ri, gr = info.get(k), roles.get(h)
        # a key named as a graph variable (written_over, a swapping Saver: not in keys) or a
        # variable also stored under its own name is read elsewhere (saved_keys, saved_swaps)
        if h in stored or ri is None or ri.role != R.WEIGHT or gr is None \
                or gr.role not in _NOT_WEIGHTS:
            continue
        if gr.role == R.EMA:
            # only beside its variable's raw value under a key read as a weight: where no
            # key holds that (a Saver writing w's average as w/x, b raw as b/x), --raw
            # refuses the key as before rather than leave w out, and where a vtr key holds it
            # (a second object's w/slow beside w/ExponentialMovingAverage) the vtr readings
            # decide as before. Pairing a renamed Saver's keys stays the save op's own
            # reading (saved_keys.translated_pairs, else refused), which ema_of does not feed
            held = beside.get(gr.ema_of or "")
            owner = info.get(held)
            if owner is not None and owner.role in (R.WEIGHT, R.BN_STAT):
                out[k] = R.RoleInfo(R.EMA, ema_of=held, ema_style=gr.ema_style)
        elif gr.role == R.OPTIMIZER_SLOT:
            out[k] = R.RoleInfo(R.OPTIMIZER_SLOT, slot_of=beside.get(gr.slot_of or ""))
        else:
            out[k] = R.RoleInfo(gr.role)
    return out


def written_shadows(ckpt: Checkpoint) -> dict[str, str]:
    """The keys, no graph variable's name, that the ``.meta``'s save op wrote from a variable
    the graph (classified under its own names) reads as an EMA shadow, whatever role their
    own names give them: ``average --ema`` must average each of them, or refuse.

    Returns:
        key -> the shadow variable (a partitioned one's part by its key); ``{}`` where
        :func:`written_roles` reads nothing.
    """
    keys, roles = _graph_reading(ckpt)
    return {k: h for h, k, _ in keys if getattr(roles.get(h), "role", None) == R.EMA}


def written_variables(ckpt: Checkpoint) -> dict[str, str]:
    """The graph variable (its checkpoint key: a partitioned one's whole name) the ``.meta``'s
    save op wrote into each key that is no graph variable's name, where
    :func:`written_roles` reads it (what the file proves a renamed key holds, for
    :func:`~ckpt_tools.roles.proven_training_state`).

    Returns:
        key -> variable; ``{}`` where :func:`written_roles` reads nothing.
    """
    return {k: h for h, k, _ in _graph_reading(ckpt)[0]}


def _graph_reading(ckpt: Checkpoint) -> tuple[list[tuple[str, str, dict]], dict]:
    """The save op's reading of a renaming Saver's keys: ``(variable, key, the key holding each
    variable beside it: of a part, the same part)`` for each variable one key holds and each
    part of a partitioned variable its own key holds, the key no graph variable's name, and
    the graph's roles of those variables (:func:`~ckpt_tools.roles.classify` under the
    graph's own names).

    Returns:
        ``(keys, roles)``; ``([], {})`` without a ``.meta`` whose save op wrote this
        checkpoint, for TF2 files, where every key is a graph variable's name or no key holds
        one variable.
    """
    def read():
        meta = ckpt.meta
        if meta is None or ckpt.objects is not None:
            return [], {}
        stored = ckpt.entries()
        graph = {v.checkpoint_key for v in meta.variables.values()}
        if all(k in graph for k in stored):
            return [], {}
        try:
            held = held_variables(ckpt) or {}
        except (OSError, CheckpointError):  # what is shown only: the commands that pair say why
            return [], {}
        key_of: dict[str, str] = {}
        twice: set[str] = set()
        for k, h in held.items():
            if h is not None and k in stored:
                if h in key_of:  # one variable under two keys: neither is "the" key holding it
                    twice.add(h)
                key_of[h] = k
        for h in twice:
            del key_of[h]
        # a partitioned variable's parts saved each under a key of its own (w/part_0/var): the
        # key holds that part, so it takes the variable's role, paired part by part (F2)
        part_keys = _part_keys(ckpt, held, stored, twice)
        whole = {h for h, _ in part_keys}
        if not key_of and not whole:
            return [], {}
        # the checkpoint as a plain Saver of this graph would have named its keys (a partitioned
        # variable by its first part's key: parts of one index have one shape)
        first = {h: part_keys[(h, min(t for g, t in part_keys if g == h))] for h in whole}
        roles = R.classify({h: stored[k] for h, k in {**key_of, **first}.items()}, meta,
                           collections=meta.collections_by_key())
        # (variable, its key, the key holding each variable beside it: of a part, the same part)
        keys = [(h, k, key_of) for h, k in key_of.items() if k not in graph]
        keys += [(h, k, {g: part_keys.get((g, t)) for g, _ in part_keys})
                 for (h, t), k in part_keys.items() if k not in graph]
        return keys, roles
    return ckpt.memo("written_roles_reading", read)


def _part_keys(ckpt: Checkpoint, held: dict, stored, twice: set[str]) -> dict:
    """(variable, part tag such as ``/part_0``) -> the key the save op wrote that part of the
    partitioned variable into, for the variables in ``twice`` (stored under several keys) whose
    every key holds exactly one part, no two keys the same part.

    Returns:
        `dict[tuple[str, str], str]`; a variable whose keys are anything else is left out
        (read as before: no role from the graph).
    """
    sources = written_sources(ckpt) or {}
    found: dict[tuple[str, str], str] = {}
    bad: set[str] = set()
    for k, h in held.items():
        if h not in twice or k not in stored:
            continue
        src = sources.get(k) or []
        tag = PART.search(src[0]) if len(src) == 1 else None
        if tag is None or (h, tag.group()) in found:
            bad.add(h)
            continue
        found[(h, tag.group())] = k
    return {(h, t): k for (h, t), k in found.items() if h not in bad}
