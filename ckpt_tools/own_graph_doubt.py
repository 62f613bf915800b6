"""What the graph of a marked output's inputs proved of their keys' names: the one field
``names_doubted["graph_proved"]`` of the output's ``_CKPT_TOOLS_RECORD``
(:mod:`~ckpt_tools.tools_mark`), written here and honoured in one place
(:func:`~ckpt_tools.doubt_refusal.strict_doubt`).

A ``names_doubted`` mark says a swapping Saver's graph doubts the inputs' names: a statement
about that Saver (``--not-swapped``) decides it. What the graph proved beyond that, no
statement lifts, and ``--no-meta`` does not read past it (:data:`PROVED`, weakest first):

* :data:`CROSSED`: an input's Saver wrote keys named as averages from other variables' or
  other EMA objects' averages (:func:`crosses_averages`): such a Saver writes each variable
  under its own name, so ``--not-swapped`` is true of it and says nothing
  (review-32-attack-r119 F3b-F7); the refusals call its graph a crossing Saver's, not a
  swapping one's (review-32-attack-r122 N2).
  With it, :data:`RESAVED` where no Saver crossed them but an evaluation graph re-saved keys
  it restored from other names (review-33-attack-r126 F5, N1: said so, not "a crossing
  Saver").
* :data:`SEVERAL_OBJECTS`: a bake's input's graph proves averages of several EMA objects
  (review-32-attack-r117 F8-F10).
* :data:`GRAPH_OF_INPUT`: a bake wrote one EMA object's averages over keys that graph says
  hold another's: the graph copied beside it is its input's, no longer its own (no
  ``graph_sha256`` is kept: review-32-attack-r117 F1-F3).

The field lists those proved (sorted; absent where none), joined as marks join
(:func:`~ckpt_tools.tools_mark.merged`) and with a writer's own finding
(:func:`~ckpt_tools.tools_mark.graph_written`); a refusal says the strongest
(:func:`strongest`). Marks written before this field (ckpt_tools of session 32: one boolean
per finding, ``graph_of_input``, ``several_objects``, ``crossed``) are read the same
(:func:`proved_of`).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["CROSSED", "GRAPH_OF_INPUT", "PROVED", "PROVED_KEY", "RESAVED", "SEVERAL_OBJECTS",
           "bake_proved", "crosses_averages", "own_graph_doubt", "proved_of", "strongest"]

#: The field of a mark's ``names_doubted`` listing what its inputs' graph proved.
PROVED_KEY = "graph_proved"
CROSSED = "crossed"
#: Beside :data:`CROSSED` only: the crossing was an evaluation graph's re-save of keys it
#: restored from other names (no Saver of it crossed them), which the refusal says.
RESAVED = "resaved"
SEVERAL_OBJECTS = "several_objects"
GRAPH_OF_INPUT = "graph_of_input"
#: Every value :data:`PROVED_KEY` lists, weakest first.
PROVED = (RESAVED, CROSSED, SEVERAL_OBJECTS, GRAPH_OF_INPUT)


def strongest(proved: Iterable[str]) -> str | None:
    """The strongest of ``proved`` (values of :data:`PROVED`; others are passed over): the
    one a refusal names.

    Returns:
        `str`, or ``None`` where none is given."""
    return max((p for p in proved if p in PROVED), key=PROVED.index, default=None)


def proved_of(doubt: dict | None) -> frozenset[str]:
    """What a mark's ``names_doubted`` part ``doubt`` says its inputs' graph proved: the
    values its :data:`PROVED_KEY` lists, and, in a mark written before that field, the
    boolean flags of the same names it then carried.

    Returns:
        `frozenset` of values of :data:`PROVED` (empty for ``None``: a plain doubt)."""
    if not isinstance(doubt, dict):
        return frozenset()
    listed = doubt.get(PROVED_KEY)
    said = {p for p in listed if p in PROVED} if isinstance(listed, list) else set()
    # session 32's marks: one flag per finding (the outputs users already have)
    return frozenset(said | {p for p in PROVED if doubt.get(p) is True})


def bake_proved(ckpt, source_of: dict[str, str], averaged=None) -> frozenset[str]:
    """What a bake of the TF1 checkpoint ``ckpt`` (restore-ema: ``averaged`` ``None``;
    ``average --ema --bake``: the keys it averages), writing under each key ``k`` the value
    of ``source_of.get(k, k)``, records its input's graph proved (:data:`GRAPH_OF_INPUT`:
    :func:`_bakes_over`; :data:`SEVERAL_OBJECTS`: :func:`_several_objects`), whether that
    graph is copied beside the output or not (review-32-attack-r119 F3).

    Returns:
        `frozenset` of values of :data:`PROVED`.
    """
    return frozenset(({GRAPH_OF_INPUT} if _bakes_over(ckpt, source_of, averaged) else set())
                     | ({SEVERAL_OBJECTS} if _several_objects(ckpt) else set()))


def own_graph_doubt(ckpts) -> dict | None:
    """What the average of ``ckpts`` (open checkpoints) says of inputs whose own graph shows
    their keys' names mislead (:func:`~ckpt_tools.own_graph_mark.names_mislead`):
    ``{"graphs": [...], "inputs": [...]}`` for :func:`~ckpt_tools.tools_mark.mark_doc`'s
    ``doubted``, its :data:`PROVED_KEY` listing :data:`CROSSED` where an input's Saver
    crossed averages (:func:`crosses_averages`).

    An evaluation graph's re-save (:func:`~ckpt_tools.own_graph_mark.evaluation_resave`) is
    no such input: its keys'
    names say the averages, which what its graph shows neither proves nor denies, and its
    average is read as it is, by the averages-only rule (review-30-attack-r112 F2).

    Returns:
        `dict`, or ``None`` where no input's own graph shows it.
    """
    from .own_graph_mark import evaluation_resave, names_mislead

    shown = [c for c in ckpts if getattr(c, "meta", None) is not None
             and not getattr(c, "meta_unread", None) and names_mislead(c)
             and not evaluation_resave(c)]
    if not shown:
        return None
    doubt = {"graphs": [str(c.meta_source).rstrip("/").rsplit("/", 1)[-1] for c in shown],
             "inputs": [c.path for c in shown]}
    # no --not-swapped lifts it (r119); nor --averages-only an evaluation graph's re-save of
    # keys it restored from another EMA object's or variable's names (review-33-attack-r126
    # F5: the copy's refusal offered --not-swapped, and --not-swapped --averages-only read
    # the mean of fast's averages as slow's)
    crossed = any(crosses_averages(c) for c in shown)
    if crossed or any(_resave_crossed(c) for c in shown):
        # RESAVED beside it: the refusal says what the graph did (review-33-attack-r126 N1)
        doubt[PROVED_KEY] = [CROSSED] if crossed else [CROSSED, RESAVED]
    return doubt


def _resave_crossed(ckpt) -> bool:
    """Whether ``ckpt``'s keys named as averages, each written by its graph's save op from
    the variable it is named under, are ones that graph also restored from another EMA
    object's or another variable's names (:func:`~ckpt_tools.resave_objects.crossed_refusal`:
    an evaluation graph's ``Saver(ema.variables_to_restore())`` beside a restoring Saver or
    ``init_from_checkpoint`` of other names): refused read in place, whatever is stated.

    Returns:
        `bool` (``False`` where no save op is read)."""
    from .resave_objects import crossed_refusal
    from .save_op import written_sources

    sources = written_sources(ckpt) or {}
    evaluated = [(k, vs[0]) for k, vs in sources.items()
                 if len(vs) == 1 and vs[0] != k and k.startswith(vs[0] + "/")]
    return bool(evaluated) and crossed_refusal(ckpt, evaluated) is not None


def crosses_averages(ckpt) -> bool:
    """Whether the save op of ``ckpt``'s own graph wrote a key named as an average from a
    proven average it does not name (another variable's, another EMA object's): a Saver
    crossing averages, which writes each variable under its own name (review-32-attack-r119
    F3b-F7); unlike a swap, no statement about swapping tells such keys apart.

    Returns:
        `bool` (``False`` where no single save op or no proven average is read).
    """
    from .own_graph_mark import misleads, save_op_written

    read = save_op_written(ckpt)
    if read is None or read[2] is None:  # no single save op, no key renamed, no average
        return False
    written, renamed, tables = read
    _, suffixes, _ = tables
    for key, vs in renamed.items():
        if len(vs) != 1 or not any(key.endswith("/" + x) for x in suffixes):
            continue  # a plain name (a swap's), or written from several variables
        (src,) = vs
        proven = tables[0].get(src) is not None or any(src.endswith("/" + x) for x in suffixes)
        if proven and misleads(key, vs, written, *tables):
            return True
    return False


def _several_objects(ckpt) -> bool:
    """Whether the TF1 checkpoint ``ckpt``'s own graph proves averages of more than one EMA
    name (or an average not named ``<its variable>/<EMA name>``, whose name cannot be told).
    A bake's output of it read without that graph (copied, ``--no-meta``) is never paired by
    its names on a statement about its Saver (``--not-swapped``): that statement says
    nothing of keys holding another object's or another variable's averages
    (review-32-attack-r117 F8, F10; kept where F9 lets the output be read in place).

    Returns:
        `bool` (``False`` where the graph proves no average).
    """
    from .own_graph_mark import graph_tables

    tables = graph_tables(ckpt)
    if tables is None:
        return False
    names = {s[len(o) + 1:] if s.startswith(o + "/") else None for s, o in tables[0].items()}
    return len(names) > 1 or None in names


def _bakes_over(ckpt, source_of: dict[str, str], averaged=None) -> bool:
    """Whether a bake of the TF1 checkpoint ``ckpt`` (restore-ema, ``average --ema --bake``)
    leaves under some key that ``ckpt``'s own graph says holds an average something else:
    written (``source_of``: key -> the key whose value it gets) from a key the save op wrote
    from another variable, or, for ``average`` (``averaged``: the keys it averages; ``None``
    for restore-ema, which copies the others unchanged), copied from the newest input instead
    of averaged. That graph, copied beside the output, would read it as the average it names:
    slow's average of W written over ``model/W``, which the graph says holds fast's, read in
    place as fast's (review-32-attack-r117 F1-F3). A key holding a variable raw now written
    with an average is a bake's convention (its mark says so): EMA objects averaging disjoint
    variables, their averages under crossed keys, bake over none (r117 F9).

    Returns:
        `bool`: ``True`` also where the graph cannot tell (no single save op wrote the keys,
        a key written from several variables); ``False`` where no graph is read or it proves
        no average.
    """
    from .own_graph_mark import graph_tables, save_op_written
    from .save_op import graph_file

    if graph_file(ckpt) is None:
        return False
    read = save_op_written(ckpt)
    if read is None:
        return True
    written, tables = read[0], graph_tables(ckpt)
    if tables is None:  # no average proven: no key the graph says holds one
        return False
    owner, suffixes, _ = tables
    for key, held in written.items():
        src = source_of.get(key, key)
        if src == key and (averaged is None or key in averaged):
            continue  # as the save op wrote it (or the mean of it)
        if len(held) != 1:
            return True
        (var,) = held
        if owner.get(var) is None and not any(var.endswith("/" + x) for x in suffixes):
            continue  # a variable's raw value: now its average, as every bake writes
        if src == key or written.get(src) != held:
            return True
    return False
