"""``ckpt list``: what is in a checkpoint, without TensorFlow.

Examples::

    ckpt list train/                       # latest checkpoint in a training directory
    ckpt list model.ckpt-1000 --role ema   # only EMA shadows
    ckpt list model.ckpt-1000 --grep 'conv*/weights' --json
    ckpt list model.ckpt-1000 --regex 'Momentum$' --quiet
"""

from __future__ import annotations

from typing import Annotated

import typer

from ..checkpoint import open_checkpoint
from ..errors import OptionError
from ..listing import list_names, list_variables
from ..restored_record import has_record as has_restored_record
from ..roles import ROLES
from ..run_record import has_record
from ._common import (
    AveragesOnlyOpt,
    FitOrderOpt,
    GrepOpt,
    JsonOpt,
    LoopOrderOpt,
    NameFilter,
    NotSwappedOpt,
    OptimizerOpt,
    PathArg,
    QuietOpt,
    RegexOpt,
    SaverDefWroteOpt,
    StrictOpt,
    TrainableOpt,
    UseEmaOpt,
    WideOpt,
    choice,
    complete_from,
    no_selection,
    resolve,
    trainable_names,
)
from ._output import Output
from ._run import note_quick_assumed, note_recorded, say_stated
from .ema import (
    ApplyOrderOpt,
    EmaNameOpt,
    NoMetaOpt,
    NumberedListsOpt,
    check_apply_order,
    note_assumed,
    note_stated_order,
)
from .list_table import print_table


def list_command(
    path: PathArg,
    role: Annotated[list[str] | None, typer.Option(
        "--role", "-r", metavar="ROLE", autocompletion=complete_from(*ROLES),
        help=f"Show only these roles (repeatable): {', '.join(ROLES)}.")] = None,
    collection: Annotated[list[str] | None, typer.Option(
        "--collection", "-c", metavar="COLLECTION",
        help="Show only members of a graph collection (repeatable; needs a .meta): trainable, "
        "global, moving_avg, model, local, or a full collection name.")] = None,
    grep: GrepOpt = None,
    regex: RegexOpt = None,
    sort: Annotated[str, typer.Option(
        metavar="name|size", autocompletion=complete_from("name", "size"),
        help="Sort by 'name' (checkpoint order, numbers in names counted: ema/2 before "
        "ema/10) or 'size'.")] = "name",
    wide: WideOpt = False,
    ema_name: EmaNameOpt = None,
    apply_order: ApplyOrderOpt = None,
    numbered_lists: NumberedListsOpt = False,
    no_meta: NoMetaOpt = False,
    use_ema: UseEmaOpt = None,
    optimizer: OptimizerOpt = None,
    trainable: TrainableOpt = None,
    loop_order: LoopOrderOpt = False,
    fit_order: FitOrderOpt = False,
    strict: StrictOpt = False,
    not_swapped: NotSwappedOpt = False,
    averages_only: AveragesOnlyOpt = False,
    saver_def_wrote: SaverDefWroteOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """List variables with dtype, shape, size, role, collections and EMA shadow.

    Reads only the checkpoint index (and the .meta graph beside it, if any): no tensor data
    (but a Keras file's weights and EMA copies, to tell what its pairing assumes), no
    TensorFlow. Names are object paths for TF2/Keras checkpoints; --json adds the raw key.
    The EMA column shows the pairing 'ckpt map' proves (--ema-name, --apply-order, --no-meta
    decide as there); an average the file does not pair is 'of ?' with its candidates.
    """
    out = Output(json_mode=json_out, quiet=quiet, wide=wide)
    match = NameFilter(grep, regex)
    apply_order = check_apply_order(apply_order, numbered_lists)
    bad = [r for r in role or () if r not in ROLES]
    if bad:  # a usage error, before the note on which file a directory led to
        raise typer.BadParameter(f"unknown role {bad[0]!r}; expected one of: "
                                 f"{', '.join(ROLES)}", param_hint="--role")
    choice(sort, ("name", "size"), "--sort")
    try:
        if quiet and not json_out and not role and not collection and not trainable \
                and not strict:
            # Names only: no roles to classify, so the keys-only path (100,000 names < 1 s).
            with open_checkpoint(resolve(out, path), use_ema=use_ema, optimizer=optimizer,
                                 not_swapped=not_swapped, fit_order=fit_order,
                                 averages_only=averages_only, meta=not no_meta,
                                 saver_def_wrote=saver_def_wrote) as ckpt:
                names = list_names(ckpt, match=match if match.active else None, sort=sort)
                if match.active and not names:
                    raise no_selection(path, match, shown=list_names(ckpt))
                out.lines(names)
                _quick_notes(out, ckpt, apply_order, ema_name)
            return
        listing = list_variables(resolve(out, path), roles=role, collections=collection,
                                 match=match if match.active else None, sort=sort,
                                 use_ema=use_ema, optimizer=optimizer,
                                 trainable=trainable_names(trainable, loop_order, fit_order),
                                 ema_name=ema_name, use_meta=not no_meta,
                                 apply_order=apply_order, assumptions=True,
                                 strict=strict, not_swapped=not_swapped, fit_order=fit_order,
                                 averages_only=averages_only, saver_def_wrote=saver_def_wrote)
    except OptionError:  # an option that cannot apply to this file: its own message (exit 2)
        raise
    except ValueError as exc:
        hint = {"role": "--role", "sort": "--sort"}.get(str(exc).split()[1], "--collection")
        raise typer.BadParameter(str(exc), param_hint=hint) from None
    marked = listing.marked  # a name shown with '?' matches without it too (u33 F6)
    if match.active and not any(match(v.name, v.path) or v.name in marked and match(
            v.name, marked[v.name]) for v in listing.by_key.values()):
        raise no_selection(listing.checkpoint, match, shown={
            n for v in listing.by_key.values() for n in (v.name, v.path) if n} | set(
            marked.values()))
    said = apply_order is not None or trainable or use_ema or not_swapped or fit_order \
        or averages_only or optimizer or saver_def_wrote
    noted = bool(listing.assumed) and not json_out  # --json: "assumed" (as the fast path)
    # restore-ema's output: its weights are the averages; its copies' assumed pairing
    # decides nothing, and the summary says so (review-32-user-u34)
    noted = noted and not (listing.ema_evidence or {}).get("weights_are_averages")
    # ckpt train's run record states --not-swapped/--fit-order for its files: its notes are
    # printed as map, export print them (review-22-user-u24 F8)
    recorded = not json_out and (listing.ema_evidence is not None and has_record(
        listing.checkpoint) or has_restored_record(listing.checkpoint) or bool(
        listing.stated))  # (also what a mark inside the bundle states: tools_mark)
    if said or noted or recorded:  # as map, export say
        with open_checkpoint(resolve(out, path), use_ema=use_ema, optimizer=optimizer,
                             meta=not no_meta,
                             trainable=trainable_names(trainable, loop_order, fit_order),
                             not_swapped=not_swapped, fit_order=fit_order,
                             averages_only=averages_only,
                             saver_def_wrote=saver_def_wrote) as ckpt:
            note_recorded(out, ckpt)  # --saver-def-wrote, restore-ema's record (its output)
            say_stated(out, listing.said)  # what list_variables read, as export says it
            if noted:
                note_assumed(out, ckpt)  # the EMA column shows an assumed pairing
    else:  # the statements' notes, --json too: its fields are the listing's (u33 F7)
        say_stated(out, listing.said)
    if listing.meta_note and not json_out:  # another graph doubting its names (r78)
        out.note(f"note: {listing.meta_note}", always=True)
    if json_out:
        warned = [*out.warned, *listing.orphans]  # r94 F5; u32 F2: as export warns
        warned = {"warnings": warned} if warned else {}
        out.json({**listing.to_dict(), **warned})
    elif quiet:
        out.lines([v.path or v.name for v in listing.variables])
    else:
        print_table(out, listing)


def _quick_notes(out: Output, ckpt, apply_order: str | None, ema_name: str | None) -> None:
    """``list -q``'s names-only path: the notes the table's path prints where the names
    show a pairing that rests on a statement or an assumption (a Keras file's copies are
    named after the weights they are paired with: review-12-attack-r21 F2), on stderr, kept
    with ``-q``. Only Keras files and checkpoints of swappable averages are looked at further
    (the keys-only path stays cheap for others)."""
    note_recorded(out, ckpt)
    note_stated_order(out, ckpt, apply_order, ema_name)
    note_quick_assumed(out, ckpt)
