"""Whether averages were saved swapped with their variables, which no checkpoint shows.

A library that lets a run evaluate or export its averages by swapping them into the model
leaves a checkpoint saved in between holding the averages as the model's variables and the raw
weights where the averages belong; nothing in the file says so:

* Keras 3: ``ModelCheckpoint`` after ``SwapEMAWeights(swap_on_epoch=True)`` (its copies:
  :mod:`~ckpt_tools.keras_assumed`);
* averages kept as an optimizer slot (``…/.OPTIMIZER_SLOT/optimizer/average``): TF Model
  Garden's ``ExponentialMovingAverage`` optimizer, whose ``swap_weights()`` runs before an eval
  or export save, and TF Addons' ``MovingAverage``, whose ``swap_weights()`` does the same
  (both add the average to the variable, then subtract: ``a += b; b = a - b; a -= b``). Its
  ``AverageModelCheckpoint`` assigns the averages to the variables instead, so each variable
  equals its slot.

Reading them as not swapped is an assumption (``not_swapped``), said in a note, ``--json``'s
``"assumed"`` and an :class:`~ckpt_tools.errors.AssumptionWarning`, refused by ``--strict``,
stated by ``--not-swapped``. Where every variable equals its average bit for bit either reading
gives the same values, and nothing is assumed.

A TF1 checkpoint of ``MovingAverageOptimizer.swapping_saver()`` without its ``.meta`` is not
flagged: its keys look like every classic checkpoint's (the README says so). Beside a ``.meta``
that records no save op (no ``SaverDef``: ``export_meta_graph()`` without a saver) the keys'
names pair its averages all the same, and that is flagged: ``saver_not_swapped``
(:func:`saver_assumptions`), refused by ``--strict``, stated by ``--not-swapped``.
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .formats._record import Frozen

__all__ = ["SLOT_NOT_SWAPPED", "SLOT_RAW_WARNING", "SLOT_STATED_NOTE", "Assumption",
           "of_style", "same_values", "saver_assumptions", "slot_assumptions", "slot_pairs"]


class Assumption(Frozen):
    """One reading of the file that its pairing takes for granted.

    Attributes:
        name: ``"fit_order"``, ``"not_swapped"`` or ``"saver_not_swapped"`` (``--json``'s
            ``"assumed"``).
        note: what is assumed, why, and the way out, in full (the Python
            :class:`~ckpt_tools.errors.AssumptionWarning`).
        what: what is assumed, in a few words (``--strict``'s error).
        decides: the statement that decides (``--trainable NAMES --loop-order``, ``--raw``).
        line: the note the commands print, one short line naming the options that decide
            (the ordinary file raises the question on every command: review-13-user-u14 F7);
            ``note`` where empty.
        refused: refused wherever values or a pairing are handed back, as ``not_swapped``
            is, not only under ``--strict`` (``note`` is then the refusal, without the path).
    """

    name: str
    note: str
    what: str
    decides: str
    line: str = ""
    refused: bool = False
    # a Frozen record, not a dataclass: `ckpt list` reaches this module (crossed Savers),
    # and dataclasses brings inspect with it (formats/_record.py)
    _fields = ("name", "note", "what", "decides", "line", "refused")

    def __init__(self, name: str, note: str, what: str, decides: str, line: str = "",
                 refused: bool = False) -> None:
        self.__dict__.update(name=name, note=note, what=what, decides=decides, line=line,
                             refused=refused)

    @property
    def short(self) -> str:
        """The note ``ckpt`` prints (``line``, else ``note``)."""
        return self.line or self.note


SLOT_NOT_SWAPPED = Assumption(
    "not_swapped",
    "if this checkpoint was saved after the EMA optimizer's swap_weights() (TF Model Garden's "
    "ExponentialMovingAverage before an eval or export save, or TF Addons' MovingAverage), "
    "its variables hold the averages and its average slots the raw weights, which the "
    "checkpoint cannot show: then use the checkpoint as it is, its own variables are the "
    "averages (ckpt export --raw writes them); --not-swapped states it was not",
    "the checkpoint is taken as not saved after the EMA optimizer's swap_weights() (Model "
    "Garden / TF Addons; its variables differ from their average slots)",
    "if it was, use it as it is: its own variables are the averages (ckpt export --raw "
    "writes them; Python: ema=False); if not, state it: --not-swapped (Python: "
    "not_swapped=True)",
    "assumes the checkpoint was not saved after the EMA optimizer's swap_weights() (Model "
    "Garden, TF Addons); --not-swapped states it; if it was, use the checkpoint as it is "
    "(ckpt export --raw)")

#: ``--raw`` on a checkpoint whose averages are optimizer slots (without ``warning:``, and
#: without the way to the averages, which depends on the file: ``keras_assumed.raw_warning``).
SLOT_RAW_WARNING = (
    "exporting the checkpoint's own variables (--raw), not their average slots: right if it "
    "was saved after the EMA optimizer's swap_weights() (Model Garden's eval/export; its "
    "variables are then the averages); ")

#: The note for a stated ``--not-swapped`` on such a checkpoint (without ``note:``).
SLOT_STATED_NOTE = (
    "average slots read as the averages because you stated --not-swapped (not saved after "
    "the EMA optimizer's swap_weights()); if it was, use the checkpoint as it is (ckpt export "
    "--raw)")


def same_values(ckpt: Checkpoint, pairs: dict[str, str]) -> bool:
    """Whether each weight equals its average bit for bit (dtype and shape included); stops
    at the first that differs (a mid-training file: its first weight). Read once per open
    checkpoint and set of pairs (a stated ``--trainable`` re-pairs them).

    Args:
        ckpt: the open checkpoint.
        pairs: average key -> weight key.

    Returns:
        `bool`: ``True`` where every pair holds the same bytes (also for no pairs).
    """
    return ckpt.memo(("same_values", frozenset(pairs.items())),
                     lambda: _compare(ckpt, pairs))


def _compare(ckpt: Checkpoint, pairs: dict[str, str]) -> bool:
    import numpy as np  # only where a pairing is assumed: restore-ema of TF1 needs no NumPy

    for avg, weight in pairs.items():
        a, w = np.asarray(ckpt.tensor(avg)), np.asarray(ckpt.tensor(weight))
        if a.dtype != w.dtype or a.shape != w.shape or a.tobytes() != w.tobytes():
            return False
    return True


def slot_pairs(ckpt: Checkpoint) -> dict[str, str]:
    """The averages kept as optimizer slots (``ema_style`` ``"slot"``) that the slot records
    pair: average key -> variable key; empty for other checkpoints.

    Returns:
        `dict[str, str]`.
    """
    if getattr(ckpt.reader, "keras", None) is not None or ckpt.objects is None:
        return {}
    return {v.name: v.ema_of for v in ckpt.variables_unwarned()
            if v.role == "ema" and v.ema_style == "slot" and v.ema_of}


def slot_assumptions(ckpt: Checkpoint) -> list[Assumption]:
    """``not_swapped`` for a checkpoint whose average slots differ from their variables
    (nothing where ``--not-swapped`` stated it, or every variable equals its average).

    Returns:
        `list[Assumption]`: ``[SLOT_NOT_SWAPPED]`` or ``[]``.
    """
    pairs = slot_pairs(ckpt)
    if not pairs or ckpt.not_swapped or same_values(ckpt, pairs):
        return []
    return [SLOT_NOT_SWAPPED]


def saver_assumptions(ckpt: Checkpoint) -> list[Assumption]:
    """``saver_not_swapped`` for a TF1 checkpoint whose graph file records no save op, where
    the keys' names pair a stored variable with its stored average that differs from it
    (:func:`~ckpt_tools.save_op.named_pairs_unproven`): a swapping Saver's keys would pair so
    too, its raw weights as the averages (review-13-attack-r24 F0a). Nothing where
    ``--not-swapped`` stated it or every such variable equals its average.

    Returns:
        `list[Assumption]`: one ``saver_not_swapped`` naming the graph file and a pair, or
        ``[]``.
    """
    from .save_op import crossed_keys, graph_file, graph_named, named_pairs_unproven

    pairs = named_pairs_unproven(ckpt)
    if not pairs or same_values(ckpt, pairs):
        return []
    if ckpt.meta_doubt and graph_file(ckpt) is None:
        return [_doubted(ckpt)]
    avg, var = next(iter(sorted(pairs.items())))
    graph = graph_named(ckpt)
    crossed = crossed_keys(ckpt)
    if crossed:
        from .saver_def_stated import saver_def_offer

        return [_crossed(graph, *crossed, offer=saver_def_offer(ckpt))]
    return [Assumption(
        "saver_not_swapped",
        f"the {graph} records no save op (no SaverDef: export_meta_graph() without a saver), "
        f"so the averages are paired by the keys' names ({avg} as {var}'s): if a swapping "
        "Saver ({v.op.name: ema.average(v), ema.average_name(v): v}) wrote the checkpoint, "
        "each key named as a variable holds its average and each key named as an average the "
        "raw weight (a crossed Saver: another variable's average), which nothing read can "
        "show: then use the keys as stored, the keys named as variables are the averages "
        "(ckpt export --raw writes them); --not-swapped states each key holds its name's "
        "variable",
        f"the keys are taken as holding their names' variables (the {graph} records no save "
        "op that would prove it: no SaverDef)",
        "a Saver of each variable under its own name: --not-swapped (Python: "
        "not_swapped=True); a swapping Saver: use the keys as stored (ckpt export --raw)",
        f"the {graph} records no save op (no SaverDef), so averages pair by key names: if a "
        "swapping Saver wrote the checkpoint they are the raw weights (its averages: ckpt "
        "export --raw); --not-swapped states it did not swap")]


def _doubted_said(ckpt: Checkpoint) -> str:
    """Why a checkpoint saved without its own ``.meta`` is not paired by its keys' names
    (``meta_doubt``: :mod:`~ckpt_tools.meta_sibling`), in a message naming the graphs."""
    from .meta_sibling import doubt_files

    _, key, sources = ckpt.meta_doubt[0]
    several = len(ckpt.meta_doubt) > 1
    return (f"it has no .meta of its own, and {doubt_files(ckpt.meta_doubt)}, the "
            + ("graphs of other checkpoints" if several else "graph of another checkpoint")
            + " of this prefix (nothing records which run wrote "
            f"{'them' if several else 'it'}: a resumed run, an earlier one, or its own), "
            f"{'record' if several else 'records'} a save op of exactly these "
            f"keys that wrote {key} from {', '.join(sources)}, not from the variable its name "
            "says (e.g. a swapping Saver, {v.op.name: ema.average(v), ema.average_name(v): v}), "
            "so the keys' names do not prove what they hold")


def _doubted(ckpt: Checkpoint) -> Assumption:
    """``saver_not_swapped``, refused: another checkpoint's graph of the same prefix records a
    save op of exactly these keys that reads them otherwise than their names
    (:func:`_doubted_said`); it may be another run's, so it proves nothing, and the names
    prove nothing either (review-24-attack-r78 F1-F4, F6, F8, F9)."""
    from .meta_sibling import doubt_files

    said = _doubted_said(ckpt)
    return Assumption(
        "saver_not_swapped",
        f"{said}: if a Saver of each variable under its own name wrote this checkpoint, pass "
        "--not-swapped (Python: not_swapped=True); if that graph's Saver did, its keys named "
        "as variables hold what it saved there (a swapping Saver's: the averages): use the "
        "keys as stored (ckpt export --raw --no-meta)",
        f"the keys are taken as holding their names' variables ({said})",
        "a Saver of each variable under its own name: --not-swapped (Python: "
        "not_swapped=True); the other graph's Saver: use the keys as stored (ckpt export --raw "
        "--no-meta)",
        f"{doubt_files(ckpt.meta_doubt)} (another checkpoint's graph) records a save op of these "
        "keys that contradicts their names; --not-swapped states each key holds its name's "
        "variable", refused=True)


def _crossed_said(graph: str, key: str, one: list[str], other: list[str]) -> str:
    """What the graph file's save ops disagree about (:func:`_crossed`), in a message; which
    Saver is the one whose SaverDef a .meta records is not claimed: either may be the swapping
    one (a MonitoredTrainingSession's Scaffold saver; review-26-attack-r94 F6)."""
    if graph == ".meta":  # one graph building several Savers (review-25-attack-r85 F2, F4)
        return (f"its .meta's graph builds Savers whose save ops write exactly these keys from "
                f"different variables (key {key} from {', '.join(one)} in one, from "
                f"{', '.join(other)} in another: e.g. a Saver() of each variable under its "
                "own name and a Saver of some keys from other variables than their names' (a "
                "swapping Saver, {v.op.name: ema.average(v), ema.average_name(v): v}, or the "
                "averages', {v.op.name: ema.average(v)}), both in this graph, such as a "
                "MonitoredTrainingSession's Scaffold(saver=...) beside another of these Savers "
                "built for an evaluation export: either may be the one whose SaverDef the .meta "
                "records, and either may have saved the checkpoint, the other with "
                "write_meta_graph=False), and nothing in the file records which of them wrote it")
    between = (f"key {key} from {', '.join(one)} in one graph, from {', '.join(other)} in "
               "another: a swapping Saver, {v.op.name: ema.average(v), ema.average_name(v): "
               "v}, beside a Saver of each variable under its own name")
    return (f"its {graph} records save ops that wrote these keys from different variables "
            f"({between}, e.g. Builder.add_meta_graph_and_variables(saver=...) then "
            "add_meta_graph()), and nothing in the file records which of them wrote the "
            "variables")


def _crossed_head(graph: str, key: str, one: list[str], other: list[str]) -> tuple[str, str]:
    """:func:`_crossed_said` in two parts, for a refusal that gives the options first
    (review-28-user-u30 F6): what the save ops disagree about, and the setups that give it.

    Returns:
        ``(head, why)``.
    """
    between = f"key {key} from {', '.join(one)} in one, from {', '.join(other)} in another"
    if graph == ".meta":
        return (f"its .meta's graph builds Savers whose save ops write exactly these keys from "
                f"different variables ({between}), and nothing in the file records which of "
                "them wrote it",
                "e.g. a Saver() of each variable under its own name and a Saver of some keys "
                "from other variables than their names' (a swapping Saver, {v.op.name: "
                "ema.average(v), ema.average_name(v): v}, or the averages', {v.op.name: "
                "ema.average(v)}), both in this graph, such as a MonitoredTrainingSession's "
                "Scaffold(saver=...) beside another of these Savers built for an evaluation "
                "export: either may be the one whose SaverDef the .meta records, and either "
                "may have saved the checkpoint, the other with write_meta_graph=False")
    return (f"its {graph} records save ops that wrote these keys from different variables "
            f"({between}), and nothing in the file records which of them wrote the variables",
            "a swapping Saver, {v.op.name: ema.average(v), ema.average_name(v): v}, beside a "
            "Saver of each variable under its own name, e.g. "
            "Builder.add_meta_graph_and_variables(saver=...) then add_meta_graph()")


def _crossed(graph: str, key: str, one: list[str], other: list[str], *,
             offer: str = "") -> Assumption:
    """``saver_not_swapped``, refused: the graph file's save ops disagree about what ``key``
    holds (a TF1 SavedModel's swapping Saver of ``add_meta_graph_and_variables(saver=)`` beside
    another graph's plain Saver), and nothing records which one wrote the variables.
    ``offer``: :func:`~ckpt_tools.saver_def_stated.saver_def_offer` (``--saver-def-wrote``),
    said first where the ``.meta``'s ``SaverDef`` Saver may have written them."""
    said = _crossed_said(graph, key, one, other)
    head, why = _crossed_head(graph, key, one, other)  # the options first (u30 F6)
    return Assumption(
        "saver_not_swapped",
        f"{head}: " + (f"{offer}; otherwise, " if offer else "")
        + "if a Saver of each variable under its own name wrote them, pass "
        "--not-swapped (Python: not_swapped=True); if the swapping one did, each key named as "
        "a variable holds its average and each key named as an average the raw weight: use the "
        f"keys as stored (ckpt export --raw --no-meta). Such Savers: {why}",
        f"the keys are taken as holding their names' variables ({said})",
        ("the .meta's SaverDef Saver: --saver-def-wrote; " if offer else "")
        + "a Saver of each variable under its own name: --not-swapped (Python: "
        "not_swapped=True); a swapping Saver: use the keys as stored (ckpt export --raw "
        "--no-meta)",
        f"the {graph}'s save ops disagree about what the keys hold (e.g. {key}); "
        "--not-swapped states each key holds its name's variable", refused=True)


def refuse_crossed_raw(ckpt: Checkpoint) -> bool:
    """Refuses ``export --raw`` (``ema=False``) where the graph file's save ops disagree about
    what the keys hold (:func:`_crossed`), or another checkpoint's graph of its prefix records
    a save op of its keys that contradicts their names (:func:`_doubted`): the keys named as
    variables are the raw weights if a Saver of each variable under its own name wrote them,
    the averages if the swapping one did.

    Returns:
        `bool`: ``False`` (nothing refused).

    Raises:
        UnprovenPairingError: (exit 6) naming ``--no-meta`` (the keys as stored, whichever
            wrote them) and ``--not-swapped`` (without ``--raw``).
    """
    from .crossed_unpaired import refuse_crossed_unpaired
    from .save_op import crossed_keys, graph_named

    refuse_crossed_unpaired(ckpt)  # no stored pair: the names alone decided (r94 F1)
    crossed = crossed_keys(ckpt)
    if not (crossed or ckpt.meta_doubt) or not (
            any(a.refused for a in saver_assumptions(ckpt)) or _doubted_raw(ckpt)):
        return False
    from .errors import UnprovenPairingError
    from .meta_sibling import stated_offer

    said = _crossed_said(graph_named(ckpt), *crossed) if crossed else _doubted_said(ckpt)
    offer = "" if crossed else stated_offer(ckpt)
    if crossed:
        from .saver_def_stated import saver_def_offer

        offer = saver_def_offer(ckpt)
    raise UnprovenPairingError(
        f"{ckpt.path}: {said}: --raw exports the keys named as variables, which hold the raw "
        "weights if a Saver of each variable under its own name wrote them and the averages if "
        "the swapping one did; to export those keys as stored whichever it was, pass --no-meta "
        "with --raw; if the plain Saver wrote them, export the averages with --not-swapped "
        "instead (without --raw)" + (f"; {offer}" if offer else ""), option="--no-meta")


def _doubted_raw(ckpt: Checkpoint) -> bool:
    """Whether ``--raw`` by the keys' names is refused for a checkpoint saved without its own
    ``.meta`` that another checkpoint's graph of its prefix doubts (``meta_doubt``), whatever
    the names pair: a swapping Saver's keys named as variables hold the averages, and where no
    key is named as an average (``{v.op.name: ema.average(v)}``, a custom EMA name) nothing
    paired them, so --raw wrote the averages as the raw weights, exit 0 (review-25-attack-r83
    F12, r87 F1). Not where ``--not-swapped`` or ``--keys-are-raw`` is stated (the statement
    decides), nor where the names pair each stored average with a stored variable of the same
    bytes (:func:`saver_assumptions`: either reading gives the same values).

    Returns:
        `bool`.
    """
    from .save_op import graph_file, named_pairs_unproven

    if not ckpt.meta_doubt or graph_file(ckpt) is not None or ckpt.not_swapped \
            or ckpt.keys_are_raw:
        return False
    pairs = named_pairs_unproven(ckpt)
    return not pairs or not same_values(ckpt, pairs)


def doubted_raw_route(ckpt: Checkpoint) -> str | None:
    """Where ``export --raw`` is refused by a same-prefix ``.meta``'s doubt
    (:func:`refuse_crossed_raw`): what a refusal that would otherwise point at ``--raw`` says
    instead, beginning with :data:`~ckpt_tools.unstored_heads.RAW_REFUSED`. A Saver of the
    averages alone under the variables' names (``{v.op.name: ema.average(v)}``) saved without
    a ``.meta`` beside one that records it: the "no EMA shadow" refusal said "the raw weights
    are usable as they are (ckpt export --raw writes them)", while the keys hold the averages
    and ``--raw`` is refused (review-26-attack-r90 F3).

    Returns:
        `str`, or ``None`` where ``--raw`` is not refused so.
    """
    from .unstored_heads import RAW_REFUSED

    if not _doubted_raw(ckpt):
        return None
    from .meta_sibling import doubt_files

    return (f"{RAW_REFUSED} (it has no .meta of its own, and {doubt_files(ckpt.meta_doubt)}, "
            "the graph of another checkpoint of this prefix, records a save op of these keys "
            "that wrote some from averages, so the keys named as variables may hold the "
            "averages, not raw weights): ckpt export --raw --no-meta exports the keys as "
            "stored, whichever Saver wrote them")


def of_style(assumed: list[Assumption], style: str | None) -> list[Assumption]:
    """The assumptions of ``assumed`` that concern averages kept the ``style`` way
    (``ema_map(style=)``): ``"slot"``: the average slots' ``not_swapped``; another style: the
    rest; ``None``: all.

    Returns:
        `list[Assumption]`.
    """
    if style is None:
        return assumed
    return [a for a in assumed if (a == SLOT_NOT_SWAPPED) == (style == "slot")]
