"""The mark of an output whose inputs' OWN graph shows their keys' names mislead, and the
graph an output was written with (review-29-attack-r107 F1, F2).

``ckpt average`` of a swapping Saver's run saved with a ``.meta`` at every save (TF's
default; ``MonitoredTrainingSession``) averaged each key under its own name and copied the
graph beside the output, but wrote no mark: the ``.index`` + ``.data`` copied (or renamed
without the ``.meta``) read as plain names, the mean of the raw weights exported as the
averages, exit 0 (F1). Such an output now carries ``names_doubted`` naming that graph, and the
SHA-256 of the graph written beside it (``graph_sha256``). An own ``.meta`` of other bytes
beside a marked output (the model's eval graph, another run's graph) is not the graph it was
written with: it is refused, not read as the proof of its keys (F2).

What such an output's mark says its inputs' graph proved (the doubt itself, a bake over
another object's keys, several EMA objects, crossed averages) is
:mod:`~ckpt_tools.own_graph_doubt`'s.
"""

from __future__ import annotations

import os

from .errors import UnprovenPairingError
from .formats._io import is_url

__all__ = ["evaluation_resave", "graph_digest", "graph_tables", "misleading_left", "misleads",
           "names_mislead", "refuse_foreign_graph", "renamed_keys", "rewrites_misleading",
           "save_op_written"]


def names_mislead(ckpt) -> bool:
    """Whether the graph file read for the TF1 checkpoint ``ckpt`` records a save op that
    wrote a key whose name says another role than what it holds (a swapping Saver, a training
    ``Saver(ema.variables_to_restore())``: :func:`misleads`; any key written from a variable
    of another name where the graph proves no average), or several save ops writing its keys
    from different variables (two Savers: nothing says which wrote it). A consistent scope
    rename (``net/W`` from ``model/W``, ``net/W/ExponentialMovingAverage`` from its average)
    does not mislead (review-30-attack-r110 F8).

    Returns:
        `bool` (``False`` where no graph is read or it records no save op).
    """
    from .save_op import CROSSED, graph_file, why_unwritten

    if graph_file(ckpt) is None:
        return False
    read = save_op_written(ckpt)
    if read is None:
        return why_unwritten(ckpt) == CROSSED
    written, renamed, tables = read
    if not renamed:
        return False
    if tables is None:  # no average the graph proves: every renamed key is doubted
        return True
    return any(misleads(k, vs, written, *tables) for k, vs in renamed.items())


def save_op_written(ckpt) -> tuple[dict[str, set[str]], dict[str, set[str]],
                                     tuple | None] | None:
    """What the save op of ``ckpt``'s graph wrote, read once per open checkpoint for
    :func:`names_mislead`, :func:`misleading_left`, :func:`evaluation_resave`,
    :func:`rewrites_misleading` and :mod:`~ckpt_tools.own_graph_doubt` (a bake asks two or
    three of them: each built the tables again): every key -> its variables' names
    (:func:`renamed_keys` with ``every``), the renamed keys alone, and :func:`graph_tables`
    where some key is renamed (else ``None``).

    Returns:
        `tuple` (callers must not change it), or ``None`` where
        :func:`~ckpt_tools.save_op.written_sources` is (no single save op wrote the keys).
    """
    from .save_op import written_sources

    def read() -> tuple | None:
        sources = written_sources(ckpt)
        if sources is None:
            return None
        written = renamed_keys(sources, every=True)
        renamed = {k: vs for k, vs in written.items() if vs != {k}}
        return written, renamed, graph_tables(ckpt) if renamed else None

    return ckpt.memo("own_graph_written", read)


def graph_tables(ckpt) -> tuple | None:
    """The tables :func:`misleads` reads, built once (not once per renamed key: quadratic on
    a large graph): each average the graph's update ops prove -> its variable, their EMA names,
    the graph's variable names; ``None`` where the graph proves no average."""
    from .meta_shadows import update_ops_of
    from .saved_keys import PART

    ops = update_ops_of(ckpt.meta)
    averages = {} if ops is None else ops[0].averages
    if not averages:
        return None
    owner = {PART.sub("", s): PART.sub("", v) for s, (v, _) in averages.items()}
    suffixes = {_EMA} | {s[len(o) + 1:] for s, o in owner.items() if s.startswith(o + "/")}
    names = {PART.sub("", n) for n in ckpt.meta.variables}
    return owner, suffixes, names


def misleading_left(ckpt, source_of: dict[str, str], every: bool = False,
                    unwritten=()) -> bool:
    """Whether an output that writes under each key ``k`` of the TF1 checkpoint ``ckpt`` the
    value of key ``source_of.get(k, k)`` (a bake: restore-ema, ``average --ema --bake``) keeps
    a key whose name, by ``ckpt``'s own graph's save op, says another role than what it then
    holds. A plain name holding its own variable's average is a baked output's convention, not
    a misleading name. ``net/W/fast`` left holding ``slow``'s average of ``W`` misleads
    (review-31-attack-r114 F2, F3). ``every``: each key the save op wrote is checked, not
    only those it renamed (a key written from a renamed one: review-31-attack-r114 F1).
    ``unwritten``: keys the output leaves out (raw-valued averages' names, dropped slots):
    they mislead no one.

    Returns:
        `bool` (``True`` where the graph cannot tell: no single save op, or renamed keys and
        no average it proves; ``False`` where no graph is read or no key is renamed).
    """
    from .save_op import graph_file

    if graph_file(ckpt) is None:
        return False
    read = save_op_written(ckpt)
    if read is None:
        return True
    written, renamed, tables = read
    if not any(k not in unwritten for k in renamed):
        return False
    if tables is None:
        return True
    return not all(_holds_as_named(k, written.get(source_of.get(k, k)), written, *tables)
                   for k in (written if every else renamed) if k not in unwritten)


def _holds_as_named(key: str, now: set[str] | None, written: dict[str, set[str]],
                    owner: dict[str, str], suffixes: set[str], names: set[str]) -> bool:
    """Whether ``key``, holding what the save op wrote from the variables ``now``, holds what
    its name says (:func:`misleads`), a plain name its own variable's average included."""
    if not now or len(now) != 1:
        return False
    (src,) = now
    if src == key:
        return True
    of = owner.get(src) or next((src[:-len(x) - 1] for x in suffixes
                                 if src.endswith("/" + x)), None)
    if key.endswith("/" + src) and key not in names:  # its source under a scope prefix
        return True
    plain = not any(key.endswith("/" + x) for x in suffixes)
    if of is not None and plain and (key == of or written.get(key) == {of}):
        # never an average's name written from its variable now holding some object's
        # average: model/W/slow holding fast's reads as slow's (review-31-attack-r116 F1)
        return True
    return not misleads(key, now, written, owner, suffixes, names)


def renamed_keys(sources: dict, every: bool = False) -> dict[str, set[str]]:
    """The keys a save op wrote from a variable of another name (``sources``: key -> the
    variables written under it, :func:`~ckpt_tools.save_op.written_sources`), each with
    those variables' names without ``/part_N``; ``every``: each key, renamed or not.

    Returns:
        `dict`: key -> its variables' names (``{}`` where every key is its variable's)."""
    from .saved_keys import PART

    written = {k: {PART.sub("", v) for v in vs} for k, vs in sources.items()}
    return written if every else {k: vs for k, vs in written.items() if vs != {k}}


_EMA = "ExponentialMovingAverage"


def misleads(key: str, sources: set[str], written: dict[str, set[str]],
              owner: dict[str, str], suffixes: set[str], names: set[str]) -> bool:
    """Whether ``key``'s name says another role than what the save op wrote into it
    (``sources``): a plain name written from an average, an average's name
    (``<base>/<EMA name>``) written from a variable, from the average of another variable
    than the one ``<base>`` holds, or from an average of another EMA name (``written``:
    key -> its sources), or another graph variable's name (``names``). ``owner``: each
    proven average -> its variable; ``suffixes``: the EMA names of those averages. A scope
    rename (``net/W`` from ``model/W``, ``net/W/<EMA name>`` from ``model/W/<EMA name>``) says
    what it holds (review-30-attack-r110 F8).

    Returns:
        `bool`."""
    if len(sources) != 1:
        return True
    (src,) = sources
    of = owner.get(src) or next((src[:-len(x) - 1] for x in suffixes
                                 if src.endswith("/" + x)), None)
    if of is not None:  # written from an average: its name must be its variable's average's
        # under the same EMA name: net/W/fast written from model/W/slow (another object's
        # average of the same variable) misleads (review-31-attack-r114 F2)
        if not src.startswith(of + "/") or not key.endswith(src[len(of):]):
            return True
        base = key[:-(len(src) - len(of))]
        return not (base == of or written.get(base) == {of})
    base = next((key[:-len(x) - 1] for x in suffixes if key.endswith("/" + x)), None)
    if base is not None:  # an average's name written from a variable
        return True
    return key in names


def evaluation_resave(ckpt) -> bool:
    """Whether every key the save op of ``ckpt``'s own graph wrote from a variable of another
    name is an evaluation graph's ``Saver(ema.variables_to_restore())`` key: named
    ``<v>/<EMA name>`` after the one variable ``<v>`` it was written from, in a graph with no
    shadow variable, no ``ema.apply()`` and no op training what it saves
    (:func:`~ckpt_tools.raw_named.evaluation_graph`), ``<v>`` stored under no key of its own,
    and one EMA name the graph proves (:func:`_resave_name`). Such a key holds what that Saver
    restored (the averages, restored from a training checkpoint): no swapped name, but
    nothing in the file proves it, so the checkpoint read through that graph is refused
    naming ``--averages-only``, and its copy without the graph is refused the same way (keys
    named as averages with no variable beside them); an average of such checkpoints is read
    exactly so, not as a swapping Saver's (review-30-attack-r112 F2).

    Returns:
        `bool` (``False`` where no graph's save op is read, or none renamed a key).
    """
    from .raw_named import evaluation_graph
    from .resave_objects import sits_under
    from .save_op import graph_file, written_sources

    if graph_file(ckpt) is None or getattr(ckpt, "meta_unread", None):
        return False
    sources = written_sources(ckpt)
    read = save_op_written(ckpt)
    renamed = read[1] if read is not None else {}
    if not renamed:
        return False
    stored = ckpt.entries()
    held = {}  # key -> the one variable (or the part of it) it was written from
    for key, vs in renamed.items():
        (var, *more) = sorted(vs)
        own = sits_under(key, sources[key])
        if more or own is None or var in stored or own in stored \
                or not evaluation_graph(ckpt, key):
            return False
        held[key] = own
    return _resave_name(ckpt, sources, held) is not None


def _resave_name(ckpt, sources: dict[str, list[str]], held: dict[str, str]) -> str | None:
    """The one EMA name ``<name>`` under which the save op wrote each renamed key
    ``<v>/<name>`` from ``<v>`` (``held``: key -> ``<v>``; ``sources``: the save op's), where
    the graph proves it an EMA name and no other (review-31-attack-r115 F1): the name read
    alone pairs each key with its ``<v>`` (TF's default ``ExponentialMovingAverage``; not
    ``tower/ExponentialMovingAverage``, read alone as the average of ``<v>/tower``), or a
    name no average's by itself (``ExponentialMovingAverage(decay, name="fast")``:
    ``W/fast``) that the save op proves a ``variables_to_restore()`` name: one part, every
    key under it so written, each from a variable that call maps (trainable or in
    ``moving_average_variables``). Any Saver of the graph naming a variable ``<v>/<other
    name>`` (two EMA objects: the restoring Saver of one, the saving Saver of another)
    leaves it unproven: nothing says whose averages the variables held.

    Returns:
        `str`, or ``None`` where no single name is so proven."""
    from . import roles as R
    from .raw_named import vtr_variables
    from .resave_objects import other_ema_named

    names = {key[len(var) + 1:] for key, var in held.items()}
    if len(names) != 1:
        return None
    (name,) = names
    by_name = {v.name: v for v in ckpt.with_meta(False).variables_unwarned()}
    read = [by_name.get(key) for key in held]
    if any(v is None for v in read):
        return None
    if any(v.role == R.EMA for v in read):  # the name alone pairs each key: with its <v>?
        if not all(v.role == R.EMA and v.ema_of == held[v.name] for v in read):
            return None
    else:
        averaged = vtr_variables(ckpt)
        if "/" in name or any(k not in held for k in sources if k.endswith("/" + name)) \
                or any(not set(sources[k]) <= averaged and held[k] not in averaged
                       for k in held):
            return None
    return None if other_ema_named(ckpt, name) else name


def graph_digest(path: str | None) -> str | None:
    """The SHA-256 (hex) of the graph file ``path`` (local, or a URL fetched whole), or
    ``None`` where there is none or it cannot be read."""
    if not path:
        return None
    if is_url(path):
        from .average_carried import digest
        from .formats._io import close_map, fetched, map_file

        data = fetched(path) or map_file(path)
        try:
            return digest(bytes(data))
        finally:
            close_map(data)
    from .run_record import file_digest

    try:  # streamed in 1 MiB blocks: a graph can be hundreds of MB
        return file_digest(path)["sha256"]
    except OSError:
        return None


def refuse_foreign_graph(path: str, graph: str, doc: dict) -> UnprovenPairingError | None:
    """The refusal (exit 6) of reading the checkpoint ``path`` through its own graph file
    ``graph`` where its mark (``doc``) says ckpt_tools wrote it with doubted names and
    records no graph of these bytes as the one written with it: another graph placed beside
    it (an eval graph, another run's ``.meta``) proves nothing of what its keys hold.

    Returns:
        `UnprovenPairingError`, or ``None`` where ``graph`` is the recorded one.
    """
    from .doubt_refusal import doubt_writers, strict_doubt
    from .own_graph_doubt import GRAPH_OF_INPUT
    from .tools_mark import RECORD_KEY, names_doubted

    d = names_doubted(doc) or {}
    recorded = d.get("graph_sha256")
    if isinstance(recorded, str) and recorded == graph_digest(graph):
        return None
    who, carried = doubt_writers(d)
    strict = strict_doubt(doc)
    if strict == GRAPH_OF_INPUT:
        return UnprovenPairingError(
            f"{path}: its {RECORD_KEY} key says {who} from inputs whose keys' names a "
            f"Saver's graph doubts{carried}, baking one EMA object's averages over keys "
            f"that graph says hold another's: {os.path.basename(graph)} beside it is its "
            "input's graph, which no longer says what these keys hold. Read the averages "
            "from the checkpoint it was written from; the keys as stored: ckpt export --raw "
            "--no-meta", option=None)
    return UnprovenPairingError(
        f"{path}: its {RECORD_KEY} key says {who} from inputs "
        f"whose keys' names a Saver's graph doubts{carried}, and {os.path.basename(graph)} "
        "beside it is "
        "not the graph it was written with (" + ("other bytes than recorded" if recorded else
                                                  "none was") + "): its save op proves nothing "
        "of these keys. Move that file away (the keys are then read as the mark says)"
        + ("" if strict else  # --not-swapped is true of a crossing (r119)
           ", or, if a Saver of each variable under its own name wrote the inputs, pass "
           "--not-swapped") + "; the keys as stored: ckpt export --raw --no-meta",
        option=None if strict else "--not-swapped")


def rewrites_misleading(newest, source_of: dict[str, str], to_average) -> bool:
    """Whether ``average --ema --bake`` of inputs read through ``newest``'s own graph writes,
    under every key that graph's save op wrote from a variable of another name, the mean of
    a proven EMA shadow (``source_of``: output key -> the key whose average it holds;
    ``to_average``: the shadow keys averaged): a plain name then holds its variable's
    average, as a baked output's plain names do, and an average's name its average
    (review-30-attack-r110 F2).

    Returns:
        `bool` (``False`` where the graph records no single save op that wrote the keys).
    """
    from .save_op import graph_file

    if graph_file(newest) is None or getattr(newest, "meta_unread", None):
        return False
    read = save_op_written(newest)
    if read is None:
        return False
    renamed = read[1]
    return bool(renamed) and all(source_of.get(k, k) in to_average for k in renamed) \
        and not misleading_left(newest, source_of)
