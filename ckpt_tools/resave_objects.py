"""Savers of two EMA objects in one TF1 evaluation graph (review-31-attack-r115 F1): the
restoring ``Saver(fast.variables_to_restore())`` and the saving
``Saver(ema.variables_to_restore())`` (or the other way round) wrote keys
``W/ExponentialMovingAverage`` from ``W``, which then held ``fast``'s averages. Nothing in the
file says which of the graph's Savers restored them, so neither what the keys' names say nor
``--averages-only`` (the keys hold the averages that graph restored: whose?) decides.
"""

from __future__ import annotations

from .errors import UnprovenPairingError
from .formats.graph_def import read_graphs, through_reads
from .formats.meta_saver import PART, saved_sources_all
from .formats.meta_update_ops import RESTORES, WRITES
from .save_op import graph_file, graph_named, written_sources
from .wording import agreeing, counted

__all__ = ["crossed_refusal", "other_ema_named", "raw_restored", "raw_saver_read",
           "restored_ema_named", "sits_under"]

_SAVE_OPS = frozenset({"SaveV2", "SaveSlices", "Save"})


def other_ema_named(ckpt, name: str) -> tuple[str, str] | None:
    """A key some Saver of ``ckpt``'s graph file (each save scope) writes from the variable
    ``<v>`` its name sits under, ``<v>/<suffix>``, with another suffix than the EMA name
    ``name``: a second EMA object's ``Saver(ema.variables_to_restore())`` (the one restoring
    in an evaluation graph whose other one saved), whose averages the variables may have held
    when the keys named ``<v>/<name>`` were saved from them (review-31-attack-r115 F1).

    Returns:
        `(key, variable)`, or ``None`` where no Saver so names a variable (or no graph is
        read)."""
    path = graph_file(ckpt)
    savers = saved_sources_all(path) if path else []
    saved = _saved_under(savers, name)
    for saver in savers:  # every Saver the graph builds
        for key, src in saver.items():
            var = sits_under(key, src)
            if var is not None and key[len(var) + 1:] != name:
                return key, var
            # a Saver naming a variable saved as <v>/<name> by another variable's key (a
            # restoring Saver({"model/V/slow": W}) or ({"model/W/fast": net/W}), whose save
            # op "writes" it from there): V's or fast's average restored into it
            # (review-33-attack-r126 F3, F4)
            whole = {PART.sub("", s) for s in src}
            if var is None and len(whole) == 1 and _crossed_into(key, whole.pop(), name, saved):
                return key, PART.sub("", src[0])
    return restored_ema_named(ckpt, name)


def _restores(ckpt, name: str) -> tuple[set[str], list[tuple[str, str]]]:
    """The variables some Saver of ``ckpt``'s graph file writes under ``<v>/<name>``
    (:func:`_saved_under`), and ``(variable, key)`` for each key a restore op of that graph
    outside every Saver's scope reads into a variable (:func:`_restored_keys`; none where no
    variable is so saved)."""
    path = graph_file(ckpt)
    savers = saved_sources_all(path) if path else []
    saved = _saved_under(savers, name)
    # what a Saver restores into a variable no Saver saves as an average, under another
    # name than its own (a staging variable, then moved into one that is:
    # review-33-attack-r131 C1); a variable saved under its own name (the global step)
    # carries nothing
    staged: dict[str, set[str]] = {}
    for saver in savers if saved else ():
        for key, src in saver.items():
            for s in src:
                if PART.sub("", s) not in saved and key != PART.sub("", s):
                    staged.setdefault(s, set()).add(key)
    return saved, [pair for graph in (read_graphs(path) if saved else ())
                   for pair in _restored_keys(graph.nodes, staged)]


def _saved_under(savers: list, name: str) -> set[str]:
    """The variables (a partitioned one's parts read as it) some Saver of ``savers`` writes
    under ``<v>/<name>``."""
    return {PART.sub("", v) for saver in savers for k, src in saver.items()
            if (v := sits_under(k, src)) is not None and k == f"{v}/{name}"}


def _crossed_into(key: str, own: str, name: str, saved: set[str]) -> bool:
    """Whether ``key``, read into the variable ``own`` saved as ``<own>/<name>`` (``saved``
    holds those), is not ``own``'s own value or average: its name, less ``/<name>``, is not
    ``own``'s. A rename (``model/W/slow`` into ``net/W``) is one too: the names alone do not
    tell it from another layer's (``l1/w/slow`` into ``l2/w``, ``disc/d/w/slow`` into
    ``gen/d/w``: review-33-attack-r130 C1), so it is refused where the keys are read as
    averages; the training checkpoint holds them under their own names."""
    stem = PART.sub("", key[:-len(name) - 1] if key.endswith("/" + name) else key)
    return own in saved and stem != own


def restored_ema_named(ckpt, name: str) -> tuple[str, str] | None:
    """A key ``<v>/<suffix>`` (another suffix than the EMA name ``name``) that a restore op of
    ``ckpt``'s graph file outside every Saver's scope reads into a variable ``<v>`` (or a part
    of it) that a Saver of the graph writes under ``<v>/<name>``: ``tf1.train
    .init_from_checkpoint(ckpt, {"w/fast": w})`` or ``warm_start`` restoring a second EMA
    object's averages into the variables a ``Saver(ema.variables_to_restore())`` then saved
    (review-32-attack-r119 F2). The graph drops a restore op's output ports, so each of its
    keys is read against each variable it assigns (one key each, as those APIs build them; a
    Saver's own restore reads the keys its save op writes, read by :func:`other_ema_named`).

    Returns:
        `(key, variable)`, or ``None`` where no such restore is recorded (or no graph)."""
    saved, restored = _restores(ckpt, name)
    for target, key in restored:
        var = sits_under(key, [target])
        if var is not None and PART.sub("", var) in saved \
                and key[len(var) + 1:] != name:
            return key, var
        own = PART.sub("", target)
        # a key mapped onto a variable of another name (init_from_checkpoint's map: a
        # scope rename fc/w/fast into net/fc/w, review-32-attack-r124 F1; the saved EMA
        # name's key of another variable, V/slow into W, review-33-attack-r126 F1):
        # fail-closed, the names cannot tell a rename from another layer's average
        if var is None and _crossed_into(key, own, name, saved):
            return key, own
    return None


def raw_restored(ckpt, name: str) -> tuple[str, str] | None:
    """A key of a variable's own name (``l1/w``, or that name under another leading scope)
    that a restore op of ``ckpt``'s graph file outside every Saver's scope reads into a
    variable ``<v>`` a Saver of the graph writes under ``<v>/<name>``:
    ``tf1.train.init_from_checkpoint(ckpt, {"l1/w": l1/w})`` or ``warm_start`` filling the
    variable with a training checkpoint's RAW weight before a
    ``Saver(ema.variables_to_restore())`` saved it as the average (review-33-attack-r130 M1).
    Unlike a Saver merely built in the graph, such an op is the variable's initializer:
    it ran.

    Returns:
        `(key, variable)`, or ``None`` where no such restore is recorded (or no graph)."""
    saved, restored = _restores(ckpt, name)
    for target, key in restored:
        own, stem = PART.sub("", target), PART.sub("", key)
        if own in saved and not key.endswith("/" + name) \
                and sits_under(key, [target]) is None and _renamed(stem, own) \
                and not _crossed_into(key, own, name, saved):
            return key, own
    return None


def raw_saver_read(ckpt, name: str) -> tuple[str, str] | None:
    """A key of a variable's own name that some Saver of ``ckpt``'s graph file reads into a
    variable ``<v>`` another Saver of it writes under ``<v>/<name>`` (``Saver()`` or
    ``Saver({"l1/w": l1/w})`` beside ``Saver(ema.variables_to_restore())``): if that Saver
    restored it, the variable held the raw weight (review-33-attack-r130 M1). A Saver built
    is no proof that it restored (a Scaffold builds one), so this is only said.

    Returns:
        `(key, variable)`, or ``None``."""
    path = graph_file(ckpt)
    savers = saved_sources_all(path) if path else []
    saved = _saved_under(savers, name)
    for saver in savers:
        for key, src in saver.items():
            whole = {PART.sub("", s) for s in src}
            own = next(iter(whole)) if len(whole) == 1 else None
            if own in saved and not key.endswith("/" + name) \
                    and sits_under(key, src) is None and _renamed(PART.sub("", key), own):
                return key, own
    return None


def _renamed(stem: str, own: str) -> bool:
    """Whether the checkpoint name ``stem`` read into the variable ``own`` is ``own`` itself
    or ``own`` under another leading scope (``model/W`` into ``net/W``, ``fc/w`` into
    ``net/fc/w``): every part of the shorter name but its first is the longer one's end.

    Returns:
        `bool`; ``False`` where another variable's name is read (``model/V`` into
        ``model/W``, ``model/b2/w`` into ``net/b1/w``)."""
    a, b = stem.split("/"), own.split("/")
    n = min(len(a), len(b))
    common = 0
    while common < n and a[-1 - common] == b[-1 - common]:
        common += 1
    return common >= max(1, n - 1)


def _restored_keys(nodes, staged: dict[str, set[str]] | None = None) -> list[tuple[str, str]]:
    """``(variable, key)`` for each checkpoint key a restore op outside every Saver's scope
    reads into a variable of the graph ``nodes``: ``init_from_checkpoint``'s and
    ``warm_start``'s ``checkpoint_initializer`` (RestoreV2), ``warm_start``'s vocabulary
    remap (LoadAndRemapMatrix, review-33-attack-r126 F2), and what a variable so restored
    is then assigned into (a staging variable's hop). The graph drops a restore op's output
    ports, so each of its keys is read against each variable it assigns (one key each, as
    those APIs build them). ``staged``: variable -> the keys a Saver restores into it, where
    no Saver saves it as an average: carried on where its value is moved on. Every op
    writing a variable counts as a move (an assign, assign_add, a scatter or slice update:
    review-33-attack-r131 C1)."""
    by_op: dict[str, list[str]] = {"save": [], "restore": [], "write": []}
    for n in nodes:  # one pass over the ops (a large graph's tens of thousands)
        kind = nodes.op(n)
        if kind in _SAVE_OPS:
            by_op["save"].append(n)
        elif kind in RESTORES:
            by_op["restore"].append(n)
        elif WRITES.match(kind):
            by_op["write"].append(n)
    scopes = {n.rpartition("/")[0] for n in by_op["save"]}
    # each restore op -> the node holding the key names it reads (input 1 of each kind)
    reads = {n: nodes[n].inputs[1] for n in by_op["restore"]
             if n.rpartition("/")[0] not in scopes and len(nodes[n].inputs) > 1}
    if not reads and not staged:
        return []
    into: dict[str, set[str]] = {v: set(keys) for v, keys in (staged or {}).items()}
    # (variable assigned, the restore ops and variables its value is computed from): a
    # vocabulary remap with out-of-vocabulary rows concatenated, a hop through tf.cast or
    # * 1.0 (review-33-attack-r130 C2) reach them through other ops, not reads alone
    moves: list[tuple[str, set[str], set[str]]] = []
    for n in by_op["write"]:
        inputs = [i for i in nodes[n].inputs if not i.startswith("^")]
        if len(inputs) > 1 and inputs[0]:
            target = through_reads(nodes, inputs[0])
            restores, variables = set(), set()
            for value in inputs[1:]:  # a scatter's indices and updates, a slice's bounds
                found = _sources_of(nodes, value, reads)
                restores |= found[0]
                variables |= found[1]
            if restores or variables - {target}:
                moves.append((target, restores, variables - {target}))
    for target, restores, _ in moves:
        for r in restores:
            if reads[r] in nodes:
                into.setdefault(target, set()).update(nodes[reads[r]].strings)
    for _ in range(4):  # a restored variable's value assigned on (stage/w into w)
        grown = False
        for target, _, variables in moves:
            for v in variables & set(into):
                if not into[v] <= into.get(target, set()):
                    into.setdefault(target, set()).update(into[v])
                    grown = True
        if not grown:
            break
    return [(t, k) for t in sorted(into) for k in sorted(into[t])]


_VARIABLES = frozenset({"VarHandleOp", "VariableV2", "Variable", "TemporaryVariable"})
_MAX_SOURCES = 512  # ops a value is followed back through at most (a remap's few dozen)


def _sources_of(nodes, value: str, reads: dict) -> tuple[set[str], set[str]]:
    """The restore ops (keys of ``reads``) and variable ops that the op ``value`` of the
    graph ``nodes`` is computed from, followed back through every op's data inputs (at most
    :data:`_MAX_SOURCES` ops), stopping at each restore op and variable."""
    restores: set[str] = set()
    variables: set[str] = set()
    seen: set[str] = set()
    todo = [value]
    while todo and len(seen) < _MAX_SOURCES:
        name = todo.pop().lstrip("^").split(":")[0]
        if name in seen or name not in nodes:
            continue
        seen.add(name)
        if name in reads:
            restores.add(name)
        elif nodes.op(name) in _VARIABLES:
            variables.add(name)
        else:
            todo.extend(i for i in nodes[name].inputs if not i.startswith("^"))
    return restores, variables


def sits_under(key: str, src: list[str]) -> str | None:
    """The variable a save op's ``key`` is named under as ``<v>/<name>``, written from
    ``src``: its one source (a partitioned variable's part saved alone, ``w/part_0``, under
    ``w/part_0/ExponentialMovingAverage``), or the variable its parts are of (``w`` of
    ``w/part_0``, ``w/part_1``).

    Returns:
        `str`, or ``None`` where ``key`` is a source's own or sits under none."""
    whole = {PART.sub("", s) for s in src}
    if key in src or key in whole:
        return None
    heads = ([src[0]] if len(src) == 1 else []) + (sorted(whole) if len(whole) == 1 else [])
    return next((v for v in heads if key.startswith(v + "/")), None)


def crossed_refusal(ckpt, evaluated: list) -> UnprovenPairingError | None:
    """The refusal (exit 6, no option decides) of reading as averages the keys ``evaluated``
    (``(key, variable)``: named as averages, an evaluation graph's Saver wrote each from the
    variable, or the part of it, it is named under) where they carry several EMA names, or a
    Saver of that graph names those variables under another (:func:`other_ema_named`).

    Returns:
        `UnprovenPairingError`, or ``None`` where one name is all the graph's Savers use."""
    sources = written_sources(ckpt) or {}
    under = {s: sits_under(s, sources.get(s) or []) for s, _ in evaluated}
    named = {s: s[len(v) + 1:] for s, v in under.items() if v is not None}
    if not named:
        return None
    (name, *more) = sorted(set(named.values()))
    other = (next((s, under[s]) for s, n in named.items() if n != name) if more
             else other_ema_named(ckpt, name))
    s = next(iter(named))
    if other is None:
        raw = raw_restored(ckpt, name)
        if raw is None:
            return None
        # the graph filled the variables from their raw weights' keys: no statement makes
        # what it saved averages (review-33-attack-r130 M1)
        return UnprovenPairingError(
            f"{ckpt.path}: {counted(len(evaluated), 'key')} named as averages "
            f"{agreeing(len(evaluated), 'was', 'were')} written from "
            f"{agreeing(len(evaluated), 'its variable', 'their variables')} by a Saver of a "
            f"graph (e.g. {s} from {under[s]}), whose {graph_named(ckpt)} restores "
            f"{raw[1]} from the key {raw[0]} outside its Savers (init_from_checkpoint or "
            "warm_start): a key of the variable's own name, its raw weight in a training "
            "checkpoint, so the keys hold raw weights, not averages (--averages-only cannot "
            "make them averages); read the averages you want from the training checkpoint",
            None, {k: (v,) for k, v in evaluated})
    return UnprovenPairingError(
        f"{ckpt.path}: {counted(len(evaluated), 'key')} named as averages "
        f"{agreeing(len(evaluated), 'was', 'were')} written from "
        f"{agreeing(len(evaluated), 'its variable', 'their variables')} by a Saver of a graph "
        f"(e.g. {s} from {under[s]}), whose {graph_named(ckpt)} also names "
        f"{other[1]}'s value {other[0]} (a Saver's or a restore op's): "
        + ("another variable's average under the same EMA name, so a variable may hold "
           "another's average, " if other[0].endswith("/" + name) else
           "two EMA objects' variables_to_restore() names, so each variable held the "
           "averages of whichever object's names restored it, ")
        + "which the file cannot show (--averages-only cannot decide it); "
        "read the averages you want from the training checkpoint", None,
        {k: (v,) for k, v in evaluated})
