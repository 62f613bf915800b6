"""What ``ckpt export`` says where it has nothing (or only state) to export."""

from __future__ import annotations

from . import roles as R
from .raw_named import raw_named_keys
from .saved_keys import held_variables
from .saved_swaps import averages_alone_said
from .wording import agreeing, counted


def roles_said(variables, keys: list[str]) -> str:
    """The roles of ``keys`` in words (``batch-norm statistics``, ``weights``)."""
    said = {R.BN_STAT: "batch-norm statistics", R.WEIGHT: "weights"}
    return " and ".join(sorted({said.get(variables[k].role, variables[k].role) for k in keys}))


def no_weights(ckpt, ema: bool | None) -> str:
    """Why a checkpoint has no model weights to export: only state (a step counter), or, for
    ``--raw``, only keys named as averages whose variables are not stored (a TF1 Saver of the
    averages alone, or of ``ema.variables_to_restore()``; review-12-attack-r20 F10)."""
    named = [v.name for v in ckpt.variables_unwarned() if v.role == "ema"]
    alone = averages_alone_said(ckpt) if ema is False else ""
    if alone:  # keys the save op proves hold averages, under names that do not say so
        return alone
    raw = raw_named_keys(ckpt) if ema is False else {}
    if raw:  # a renamed or stripped Saver's vtr keys: raw weights, not "only state" (r56 F3)
        k = next(iter(raw))
        t = (held_variables(ckpt) or {}).get(k) or raw[k]  # the graph's, not the key's name
        return (f"its {counted(len(raw), 'key')} named as averages "
                f"{agreeing(len(raw), 'holds', 'hold')} their variables' raw values "
                f"(e.g. {k}: the .meta's save op wrote it from {t}), which --raw exports "
                "under their variables' names only where every other key is its own "
                "variable's; here some are not, so restore in the graph imported from the "
                ".meta (its Saver restores every key) and read the variables there")
    if ema is not False or not named:  # None: the default, the averages
        return "it holds no model weights, only state such as a step counter"
    return (f"its {counted(len(named), 'tensor')} {agreeing(len(named), 'is', 'are')} keys named "
            f"as averages (e.g. {named[0]}) with no "
            "variable stored beside them, and --raw exports model weights only: without "
            "--raw they export as their variables' averages where the .meta's save op "
            "proves they hold averages (or --averages-only states it)")


#: What ``export --raw --no-meta`` says in place of
#: :data:`~ckpt_tools.keras_assumed.RAW_EMA_WARNING` ("drop --raw to export them"): with the
#: graphs set aside nothing shows which keys hold the averages, and where a swapping Saver
#: wrote the file (the refusal's own offer, ``--raw --no-meta``) dropping ``--raw`` would write
#: its raw weights as the averages (review-28-user-u30 F5).
NO_META_RAW_WARNING = (
    "exporting the keys named as variables as stored (--raw) although the checkpoint has keys "
    "named as EMA shadows; with --no-meta nothing read shows which of them hold the averages: "
    "if a swapping Saver wrote it ({v.op.name: ema.average(v), ...}), these are the averages; "
    "if a Saver of each variable under its own name did, they are the raw weights and an "
    "export without --raw writes the shadows")


#: ``ExportResult.stored`` of ``export --raw --no-meta`` over keys named as EMA shadows: the
#: file's record says ``"values": "stored"`` (review-33-attack-r128 F4).
NO_META_STORED = "the averages where a swapping Saver wrote them; --no-meta reads no graph to tell"


def no_meta_raw_warning(ckpt) -> str:
    """What ``export --raw --no-meta`` of ``ckpt`` (as ``--no-meta`` reads it) says of the
    keys named as variables it exports: what its own graph, left unread, shows of them
    (:func:`~ckpt_tools.no_meta_own.raw_warning`); where its mark records that ``--no-meta``
    wrote it (``stated.no_meta``: its plain names were written from the keys its input named
    as averages, which a graph doubted), that (review-30-attack-r112 F3); else
    :data:`NO_META_RAW_WARNING`'s either-or.

    Returns:
        `str`: the warning's text (without ``"warning: "``).
    """
    from .no_meta_own import raw_warning
    from .tools_mark import RECORD_KEY, names_doubted, stated_of

    shown = raw_warning(ckpt)
    if shown:
        return shown
    doubt = names_doubted(getattr(ckpt, "tools_mark", None))
    if doubt and not stated_of(getattr(ckpt, "tools_mark", None)).get("no_meta"):
        from .doubt_refusal import doubt_said

        # the mark was read: not "nothing read shows" (review-33-attack-r128 m2)
        return ("exporting the keys named as variables as stored (--raw --no-meta): "
                f"{doubt_said(doubt)}, a graph not read here: where that Saver wrote a key "
                "named as a variable, it holds an average, not a raw weight")
    if stated_of(getattr(ckpt, "tools_mark", None)).get("no_meta"):
        return ("exporting the keys named as variables as stored (--raw) although the "
                f"checkpoint has keys named as EMA shadows; its {RECORD_KEY} key says it was "
                "written under --no-meta, which wrote into its plain names what its input's "
                "keys named as averages held although a graph that doubts those names was "
                "not read: these are those keys' values (a swapping Saver's keys named as "
                "averages hold the raw weights), not proven averages")
    return NO_META_RAW_WARNING
