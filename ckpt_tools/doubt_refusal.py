"""What a refusal says of a checkpoint whose mark (:mod:`~ckpt_tools.tools_mark`) records
``names_doubted``: who wrote it, who carried the doubt into it (s32f), and whether a graph
that doubts it was ever written beside it."""

from __future__ import annotations

from .errors import UnprovenPairingError
from .own_graph_doubt import CROSSED, GRAPH_OF_INPUT, RESAVED, SEVERAL_OBJECTS, proved_of, strongest
from .tools_mark import RECORD_KEY, names_doubted, stated_of
from .wording import agreeing

__all__ = ["doubt_writers", "names_doubted_refusal", "no_meta_doubted_refusal",
           "strict_doubt"]


def doubt_writers(d: dict) -> tuple[str, str]:
    """Who wrote the checkpoint whose mark's ``names_doubted`` is ``d``, for a refusal's
    ``"its ... key says <who> from inputs ... doubts<tail>"``: its writer (``"ckpt average
    wrote it"``) where the doubt is its own, else the commands that made it over their outputs
    (``"ckpt average wrote avg/model.ckpt-3"``), the tail naming the writer that carried it
    (``", and ckpt restore-ema carried that doubt into it"``): a carried doubt was said made
    by the carrier, from inputs it never read (s32f).

    Returns:
        ``(who, tail)``.
    """
    by = str(d.get("by", "ckpt average"))
    origins = [list(o) for o in d["origins"]] if isinstance(d.get("origins"), list) else []
    if not origins:
        return f"{by} wrote it", ""
    made: dict[str, list[str]] = {}
    for b, p in origins:
        made.setdefault(b, []).append(p)
    who = [f"{by} wrote it"] if d.get("own") else []
    who += [f"{b} wrote {' and '.join(ps)}" for b, ps in made.items()]
    return " and ".join(who), f", and {by} carried that doubt into it"


def strict_doubt(doc: dict | None) -> str | None:
    """What the mark ``doc`` says its inputs' graph proved, where that doubts its keys'
    names in a way no statement about the inputs' Saver lifts (``--not-swapped``) and
    ``--no-meta`` does not read past (:mod:`~ckpt_tools.own_graph_doubt`): a bake wrote one
    EMA object's averages over keys its input's graph says hold another's
    (:data:`~ckpt_tools.own_graph_doubt.GRAPH_OF_INPUT`), that graph proves several EMA
    objects (:data:`~ckpt_tools.own_graph_doubt.SEVERAL_OBJECTS`), or it showed its Saver
    writing keys named as averages from other variables' or other EMA objects' averages
    (:data:`~ckpt_tools.own_graph_doubt.CROSSED`): such a Saver writes each variable under
    its own name, so ``--not-swapped`` is true of it, and reading its names alone hands back
    the crossed averages (review-32-attack-r119 F3b-F7). The one place every reader of a
    mark asks whether its doubt is strict (marks written before that field too: their
    flags); where the graph proved several, the strongest (the refusal says it).

    Returns:
        `str` (one of those), or ``None`` where the doubt is a plain one (or none).
    """
    return strongest(proved_of(names_doubted(doc)))


def names_doubted_refusal(path: str, doc: dict) -> UnprovenPairingError:
    """The refusal (exit 6, ``--not-swapped``) of the pairing by names of the checkpoint
    ``path`` whose mark says ``ckpt average`` wrote it from inputs whose names a swapping
    Saver's graph doubts, where no graph beside it doubts it now (review-28-attack-r105
    F1-F3)."""
    d = names_doubted(doc) or {}
    said = f"{path}: " + doubt_said(d)
    proved = strict_doubt(doc)
    if proved == GRAPH_OF_INPUT:  # a bake over another object's keys (r117 F1-F3)
        return UnprovenPairingError(
            said + ", baking one EMA object's averages over keys that graph says hold "
            "another's: no graph says what these keys hold now. " + _read_from(d)
            + "the keys as stored: ckpt export --raw --no-meta")
    if proved == SEVERAL_OBJECTS:  # its input's graph proves several EMA objects (r117 F9)
        return UnprovenPairingError(
            said + ", whose graph proves averages of several EMA objects: its names are not "
            "read without that graph, neither under --not-swapped (a statement about a "
            "swapping Saver) nor under --no-meta. "
            + ("Read it with the graph it was written with beside it under its original "
               "name; " if d.get("graph_written", True) else _read_from(d))
            + "the keys as stored: ckpt export --raw --no-meta")
    if proved == CROSSED:  # --not-swapped is true of it, and says nothing (r119)
        return UnprovenPairingError(
            said + f": {agreeing(len(d.get('graphs') or [None]), 'that graph', 'those graphs')}"
            + (f" restored other variables' or other EMA objects' averages into the variables "
               f"{agreeing(len(d.get('graphs') or [None]), 'its', 'their')} Saver wrote under "
               "the averages' names" if RESAVED in proved_of(d) else
               f" showed {agreeing(len(d.get('graphs') or [None]), 'its', 'their')} Saver "
               "writing keys named as averages from other "
               "variables' or other EMA objects' averages")
            + ", and no such graph is beside it now: "
            "its names are not read alone, whatever its inputs' Saver (no statement "
            "decides). " + ("Copy it with that graph beside it under its original name; "
                            if d.get("graph_written", True) else
                            # none was written with it: copying its input's graph beside it
                            # is refused as not its own (review-32-attack-r122 F2)
                            _read_from(d))
            + "the keys as stored: ckpt export --raw --no-meta")
    if stated_of(doc).get("no_meta") and not d.get("graph_sha256"):
        # written under --no-meta: no graph was written with it, none can be copied beside
        # it, and its plain names hold what the keys named as averages held (r112 F3)
        return UnprovenPairingError(
            said + ", and that it was written under --no-meta, with no graph beside it: "
            "its plain names hold what its input's keys "
            "named as averages held, and no graph read proves what that was. If a Saver of "
            "each variable under its own name wrote the inputs, pass --not-swapped (Python: "
            "not_swapped=True); if the swapping Saver did, those keys held the raw weights: "
            "write it again from its inputs without --no-meta (the keys as stored: ckpt "
            "export --raw --no-meta)", option="--not-swapped")
    # where its writer wrote no such graph beside it, none was lost by a copy (s32f)
    lost = (", and no such graph is beside it now (renamed, or copied without it): its names "
            "are not read alone. Copy it with that graph beside it under its original name; if"
            ) if d.get("graph_written", True) else (
        f", and {d.get('by', 'ckpt average')} wrote no such graph beside it: its names are "
        "not read alone. If")
    return UnprovenPairingError(
        said + lost + " a Saver of each variable under its own name wrote the inputs, "
        "pass --not-swapped (Python: not_swapped=True); if the swapping Saver did, the keys "
        "as stored are what it saved (ckpt export --raw --no-meta)", option="--not-swapped")


def _read_from(d: dict) -> str:
    """What a refusal of a mark's ``names_doubted`` ``d`` offers for reading the averages
    where no graph of the output exists: its inputs, with their graphs. Where the doubt was
    carried (``origins``), the checkpoints it was written from are other ckpt outputs, whose
    copies are refused the same way; the inputs the mark names are the ones to read
    (review-32-attack-r124 N1).

    Returns:
        `str`, ending ``"; "``.
    """
    n = len(d.get("inputs") or [])
    if not n or not d.get("origins"):
        return (f"Read the averages from {agreeing(n or 2, 'the checkpoint', 'the checkpoints')}"
                " it was written from; ")
    # (the refusal names those inputs: doubt_said)
    return (f"Read the averages from {agreeing(n, 'that input', 'those inputs')}, with "
            f"{agreeing(n, 'its graph', 'their graphs')} beside {agreeing(n, 'it', 'them')}; ")


def doubt_said(d: dict) -> str:
    """``"its _CKPT_TOOLS_RECORD key says <who> from inputs (...) whose keys' names a
    swapping (or crossing) Saver's graph (...) doubts<tail>"`` of the mark's
    ``names_doubted`` ``d``: ``crossing`` where that graph showed a Saver crossing averages
    (:data:`~ckpt_tools.own_graph_doubt.CROSSED`), which swaps nothing (review-32-attack-r122
    N2)."""
    proved = proved_of(d)
    saver = ("an evaluation graph re-saving averages it restored from other names"
             if RESAVED in proved else "a crossing Saver's graph" if CROSSED in proved else
             "a swapping Saver's graph")
    graphs = ", ".join(str(g) for g in d.get("graphs") or []) or "a graph of their prefix"
    inputs = ", ".join(str(i) for i in d.get("inputs") or [])
    who, carried = doubt_writers(d)
    return (f"its {RECORD_KEY} key says {who} from "
            f"inputs{f' ({inputs})' if inputs else ''} whose keys' names {saver} "
            f"({graphs}) doubts{carried}")


def no_meta_doubted_refusal(path: str, doc: dict,
                            undecided: dict | None = None) -> UnprovenPairingError:
    """The refusal (exit 6, ``--not-swapped``) of the pairing by names alone, under
    ``--no-meta``, of the checkpoint ``path`` whose mark ``doc`` records ``names_doubted``,
    by a command whose output records no statement (export, map, the Python API handing
    back arrays or a map): the file's own record doubts the names ``--no-meta`` reads
    (:func:`~ckpt_tools.no_meta_mark.refuse_unrecorded`); ``undecided``: the pairings left
    open (``list`` marks them ``?``)."""
    d = names_doubted(doc) or {}
    # written under --no-meta itself: its plain names hold what the input's keys named as
    # averages held (r112 F3), which no graph read proves
    held = (", and that it was written under --no-meta: its plain names hold what its "
            "input's keys named as averages held" if stated_of(doc).get("no_meta") else "")
    return UnprovenPairingError(
        f"{path}: --no-meta pairs its keys by their names alone, but "
        + doubt_said(d) + held + ": a swapping Saver's keys named as averages hold the raw "
        "weights, so the names do not say what its keys hold. If a Saver of each variable "
        "under its own name wrote the inputs, pass --not-swapped (Python: not_swapped=True); "
        "if the swapping Saver did, the keys as stored are what it saved (ckpt export --raw "
        "--no-meta)", option="--not-swapped", undecided=undecided)
