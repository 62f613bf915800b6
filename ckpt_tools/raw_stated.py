"""``export --raw`` of TF1 keys named as averages that a ``Saver(ema.variables_to_restore())``
wrote from the model variables themselves: written only where the caller states that they
hold the raw weights (``--keys-are-raw``; review-23-attack-r70 F1, F2).

Such a Saver maps ``ema.average_name(v)`` to ``v``, so each key holds what ``v`` held when it
saved: the raw weights where a TRAINING graph saved, the AVERAGES where an evaluation graph
restored them (with that same Saver) and saved again. The ``.meta`` cannot tell the two apart:
an evaluation graph built by the training ``model_fn`` holds ``ema.apply()``'s shadows and
update ops and the optimizer too, never run. So ``--raw`` refuses them unless stated;
``--averages-only`` is the statement for the other reading (the default export then writes
them as the averages). A fine-tune that restored the averages with that Saver, trained and
saved with it builds no ``ema.apply()`` either: its optimizer writing the variables makes it
such a graph, the statement deciding (review-24-attack-r77 F5, r79 F5). Where the ``.meta``
reads as an evaluation graph (no shadow variables, no ``ema.apply()``, no op of the graph
writing the variables: :func:`~ckpt_tools.raw_named.evaluation_graph`), ``--raw`` refuses
whatever is stated, offering the export that writes the averages (never "no key holds the
raw weights" as a fact, nor that a fine-tune would show: a step set from outside the graph,
``Variable.load()``, leaves no op; review-25-attack-r82 F5).
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .ema_refusals import UnprovenPairingError
from .raw_named import evaluation_graph
from .save_op import graph_named, written_sources
from .wording import counted

STATE_RAW = "pass --keys-are-raw (Python: open_checkpoint(path, keys_are_raw=True)) with --raw"


def raw_offer(ckpt: Checkpoint) -> str:
    """``--raw``, or ``--raw --keys-are-raw`` where only the statement lets it export (a
    Saver(ema.variables_to_restore())'s keys), as a refusal offers it: each only where
    :func:`~ckpt_tools.offer_probe.works` accepts it; ``""`` where neither is."""
    from .offer_probe import works

    if works(ckpt, raw=True):
        return "--raw"
    if ckpt.keys_are_raw or ckpt.averages_only or ckpt.objects is not None:
        return ""
    stated = ckpt.reopened(keys_are_raw=True)
    try:
        return "--raw --keys-are-raw" if works(stated, raw=True) else ""
    finally:
        stated.close()


def averages_offer(ckpt: Checkpoint) -> str:
    """The export that writes the keys as the averages, as a refusal offers it: the default
    export, else with ``--averages-only``, each only where it is accepted
    (:func:`~ckpt_tools.offer_probe.works`: a renamed Saver's keys are refused there); else
    that no option of ``ckpt export`` does."""
    from .offer_probe import works

    for stated in (False, True):  # as typed: without --raw, so without --keys-are-raw
        probe = ckpt.reopened(averages_only=True, keys_are_raw=False) if stated else (
            ckpt.reopened(keys_are_raw=False) if ckpt.keys_are_raw else ckpt)
        try:
            if works(probe):
                return ("ckpt export --averages-only (without --raw; Python: open_checkpoint("
                        "path, averages_only=True)) exports them as the averages" if stated else
                        "ckpt export without --raw exports them as the averages")
        finally:
            if probe is not ckpt:
                probe.close()
    return _unread_offer(ckpt) or "no option of ckpt export reads them as the averages here"


def _unread_offer(ckpt: Checkpoint) -> str:
    """``ckpt export --no-meta --averages-only`` (with ``--exclude`` of each key the ``.meta``
    shows no EMA object averaging: raw whichever graph saved it, review-29-attack-r108 F1)
    where the ``.meta``'s read refuses a renamed Saver's keys but that export is accepted, as
    the renamed-keys refusal offers it (review-29-attack-r108 F2); ``""`` elsewhere."""
    from .never_averaged import exclude_text, never_averaged
    from .offer_probe import works

    if ckpt.meta is None or ckpt.objects is not None:
        return ""
    never = sorted(never_averaged(ckpt))
    probe = ckpt.reopened(averages_only=True, keys_are_raw=False)
    try:
        if not works(probe.with_meta(False), exclude=tuple(never)):
            return ""
    finally:
        probe.close()
    left = f" {exclude_text(never)}" if never else ""
    return (f"ckpt export --no-meta --averages-only{left} (without --raw; Python: "
            "open_checkpoint(path, meta=False, averages_only=True)"
            f"{', exclude=[...]' if never else ''}) exports them as the averages")


def listed_averages_option(ckpt: Checkpoint, ema_name: str | None = None) -> str:
    """The ``ckpt export`` options that read a ``Saver(ema.variables_to_restore())``'s keys as
    the averages (an evaluation graph's re-save), as ``list`` names them: ``--averages-only``
    where the ``.meta``'s read accepts it, else ``--no-meta --averages-only`` (a renamed
    Saver's keys, which the ``.meta``'s read refuses: review-29-attack-r108 F2), each with
    the ``--exclude`` of every key the graph shows no EMA object averaging (F1) and the
    ``--ema-name`` listed with, each only where the export plan accepts it
    (:func:`~ckpt_tools.offer_probe.works`).

    Returns:
        the options as typed, or ``""`` where neither is accepted (then export's refusal
        names what decides, if anything does).
    """
    from .never_averaged import exclude_text, never_averaged
    from .offer_probe import works

    if ckpt.meta is None or ckpt.objects is not None:
        return ""
    never = tuple(sorted(never_averaged(ckpt)))
    left = (f" --ema-name {ema_name}" if ema_name else "") + (
        f" {exclude_text(never)}" if never else "")
    probe = ckpt.reopened(averages_only=True, keys_are_raw=False)
    try:
        for view, typed in ((probe, "--averages-only"),
                            (probe.with_meta(False), "--no-meta --averages-only")):
            if works(view, ema_name, exclude=never):
                return typed + left
    finally:
        probe.close()
    return ""


def stated_raw_pairs(holders: dict[str, str]) -> dict[str, str]:
    """Returns key -> export name for the keys of ``holders`` (export name -> key, as
    :func:`~ckpt_tools.restored_raw.restored_raw_holders` gives them) stored under another
    name than the variable's: those ``--keys-are-raw`` decides."""
    return {k: n for n, k in holders.items() if k != n}


def refuse_unstated_raw(ckpt: Checkpoint, holders: dict[str, str]) -> None:
    """Refuses ``export --raw`` of ``holders`` (export name -> key,
    :func:`~ckpt_tools.restored_raw.restored_raw_holders`) unless the caller stated
    ``keys_are_raw``; then :func:`~ckpt_tools.restored_raw.restored_raw_warning` says it.

    Raises:
        UnprovenPairingError: (exit 6) the statement is not given: the keys may hold the
            raw weights or the averages (``--keys-are-raw`` or ``--averages-only`` decides);
            or, given or not, the ``.meta`` reads as an evaluation graph's (the default
            export writes them as the averages).
    """
    pairs = stated_raw_pairs(holders)
    if not pairs:
        return
    key, name = next(iter(pairs.items()))
    src = ((written_sources(ckpt) or {}).get(key) or [name])[0]  # the graph's name (b of model/b)
    graph = graph_named(ckpt)
    keys = (f"{counted(len(pairs), 'key')} named as averages (e.g. {key}) that the {graph}'s save "
            "op "
            f"wrote from the model variables themselves (e.g. from {src})")
    undecided = {k: (n,) for k, n in pairs.items()}
    if any(evaluation_graph(ckpt, k) for k in pairs):
        raise UnprovenPairingError(
            f"{ckpt.path}: --raw refuses {keys}, whatever is stated: they hold what those "
            "variables held when that Saver saved, and its graph (a Saver of ema.variables_to_"
            "restore(), no shadow variables, no ema.apply(), no op of it writing those "
            "variables but a batch norm statistic's update) reads as an evaluation graph, "
            "which re-saves the averages it restored; the file cannot show a step written "
            "from outside the graph (a value set with Variable.load() or by another graph), "
            f"which would leave fine-tuned raw weights there; {averages_offer(ckpt)}",
            None, undecided)
    if not ckpt.keys_are_raw:
        raise UnprovenPairingError(
            f"{ckpt.path}: {keys}, as a Saver(ema.variables_to_restore()) writes them, hold "
            "what those variables held when it saved: the raw weights if a training graph "
            "saved (a fine-tune that restored the averages with that Saver and trained, too), "
            "the averages if an evaluation graph restored them and saved again (it may build "
            "ema.apply() and the optimizer too, never run), and the file cannot tell which: "
            f"{STATE_RAW} if they hold the raw weights; if they hold the averages, "
            f"{averages_offer(ckpt)}", "--keys-are-raw", undecided)
