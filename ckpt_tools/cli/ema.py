"""``ckpt map``: EMA name maps, and the EMA options and notes the EMA commands share.

Examples::

    ckpt map train/ --json                   # {"W/ExponentialMovingAverage": "W", ...}
    ckpt map train/ --ema-name avg --strip-scope tower_0/
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ..checkpoint import open_checkpoint
from ..wording import counted
from ._common import (
    PAIRING,
    SLOTS,
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
    display_names,
    exclude_globs,
    no_selection,
    note_sibling_doubt,
    require_selection,
    resolve,
    trainable_names,
)
from ._output import Column, Output
from ._run import say_stated, warn_read_by_names

if TYPE_CHECKING:
    from ..emamap import EmaMap

# Library modules that pull in NumPy are imported inside the commands, so that building the
# CLI (which every `ckpt list` does) stays cheap.
KEEP, DROP = "keep", "drop"

EmaNameOpt = Annotated[str | None, typer.Option(
    "--ema-name", metavar="NAME", rich_help_panel=PAIRING,
    help="Which EMA object's averages to use, by the last part of their name (avg, "
    "ExponentialMovingAverage_1; comma-separated for several); default: detected.")]
NoMetaOpt = Annotated[bool, typer.Option(
    "--no-meta", rich_help_panel=PAIRING,
    help="Ignore the .meta graph; pair by checkpoint keys. Risk: a TF1 Saver that stored "
    "averages under other keys gives raw weights or another variable's average (refused "
    "where its own .meta shows it).")]
StripOpt = Annotated[str | None, typer.Option(
    "--strip-scope", metavar="PREFIX",
    help="Remove this prefix from target names (e.g. 'tower_0/').")]
AddOpt = Annotated[str | None, typer.Option(
    "--add-scope", metavar="PREFIX", help="Prepend this prefix to target names (e.g. 'model/').")]
IncludeOpt = Annotated[list[str] | None, typer.Option(
    "--include", hidden=True, help="Alias of --grep.")]
ExcludeOpt = Annotated[list[str] | None, typer.Option(
    "--exclude", metavar="GLOB", help="Leave out variables matching this glob "
    "(repeatable); it matches a name or the key read.")]
MissingOpt = Annotated[bool, typer.Option(
    "--allow-missing", help="Restore raw values where a shadow is missing instead of failing.")]
ApplyOrderOpt = Annotated[str | None, typer.Option(
    "--apply-order", metavar="trainable|tracked", rich_help_panel=PAIRING,
    autocompletion=complete_from("trainable", "tracked"),
    help="TF2 averages of variables sharing a name and shape: the order ema.apply() got "
    "them in: 'trainable' (a tf.Module's) or 'tracked' (Keras': attribute assignment "
    "order, not creation order); ORDER:PATH: that object's only (several: a,b).")]


NumberedListsOpt = Annotated[bool, typer.Option(
    "--numbered-lists", rich_help_panel=PAIRING,
    help="With --apply-order: children named 0, 1, 2... are lists (by index), not dicts "
    "(0, 1, 10, 2...), which the file cannot tell from 11 entries on.")]


def check_apply_order(apply_order: str | None, numbered_lists: bool = False) -> str | None:
    """Returns ``apply_order`` after checking it names a known order (usage error otherwise);
    with ``numbered_lists``, as :func:`ckpt_tools.pairing.numbered_lists` states it."""
    if apply_order is not None and ":" in apply_order:  # trainable:model/generator (F4, F5)
        from ..pairing import numbered_lists as stated
        from ..scoped_order import parse_order

        try:
            scoped = parse_order(apply_order, keys=False)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--apply-order") from None
        return stated(scoped) if numbered_lists else scoped  # r31 F6
    choice(apply_order, ("trainable", "tracked"), "--apply-order")
    if numbered_lists and apply_order is None:
        raise typer.BadParameter(
            "it states how --apply-order reads objects whose children are named 0, 1, 2...: "
            "pass it with --apply-order trainable (or tracked)", param_hint="--numbered-lists")
    if numbered_lists:
        from ..pairing import numbered_lists as stated

        return stated(apply_order)
    return apply_order


def proven_variables(ckpt, keys, ema_name: str | None, no_meta: bool,
                     apply_order: str | None) -> list:
    """The variables with the pairing ``ckpt map`` proves (the deciding options applied),
    for commands that report an average's variable (``stats``, ``show``).

    Args:
        ckpt: the open checkpoint.
        keys: the keys the command reports on.

    Returns:
        `list[Variable]`: as :func:`ckpt_tools.ema_decide.decide_pairing` gives them.

    Raises:
        UnprovenPairingError: one of ``keys`` is an average whose variable the file does not
            prove (exit 6, the message names the option that decides, as ``ckpt map``'s).
    """
    from ..ema_decide import decide_pairing

    variables, refusal = decide_pairing(ckpt, ema_name=ema_name, use_meta=not no_meta,
                                        apply_order=check_apply_order(apply_order))
    if refusal is not None:
        wanted = set(keys)
        if any(v.role == "ema" and not v.ema_of and v.name in wanted for v in variables):
            raise refusal
    return variables


def open_averages(ckpt, keys, ema_name: str | None, no_meta: bool, apply_order: str | None,
                  strict: bool = False) -> tuple[list, set[str], dict | None]:
    """As :func:`proven_variables`, without refusing: for ``stats``, whose statistics are the
    file's own values whatever the pairing (review-13-attack-r23 F6). An average the file does
    not pair is shown with no variable and no drift, as ``list`` marks it '?'. The drift of
    the averages it does pair asks what it would ask of a file that pairs them all: whether a
    Keras file was saved swapped (where its weights differ from their copies).

    Returns:
        ``(variables, open_keys, unproven)``: the variables as
        :func:`ckpt_tools.ema_decide.decide_pairing` gives them; the averages among ``keys`` whose
        variable the file does not prove; and ``{"option", "reason"}`` (``list --json``'s
        ``ema_unproven``) when there are any, else ``None``.
    """
    from ..ema_decide import decide_pairing

    variables, refusal = decide_pairing(ckpt, ema_name=ema_name, use_meta=not no_meta,
                                        apply_order=check_apply_order(apply_order))
    if refusal is None:
        return variables, set(), None
    wanted = set(keys)
    unpaired = {v.name for v in variables if v.role == "ema" and not v.ema_of
                and v.name in wanted}
    if not unpaired:
        return variables, set(), None
    if strict:  # --strict: nothing shown rests on what the file does not prove
        raise refusal
    _refuse_unstated_swap(ckpt, {v.name: v.ema_of for v in variables
                                 if v.role == "ema" and v.ema_of and v.name in wanted})
    return variables, unpaired, {"option": refusal.option, "reason": str(refusal)}


def _refuse_unstated_swap(ckpt, pairs: dict[str, str]) -> None:
    """The SwapEMAWeights question of a Keras 3 file's paired copies, which
    :func:`~ckpt_tools.keras_assumed.keras_assumptions` asks only where every copy is paired:
    refused (exit 6, ``--not-swapped``) where a pair differs and nothing states it."""
    layout = getattr(ckpt.reader, "keras", None)
    if layout is None or not layout.use_ema or ckpt.not_swapped or not pairs or \
            getattr(ckpt.reader, "by_tf_keras", layout.tf_keras):
        return
    from ..errors import UnprovenPairingError
    from ..keras_assumed import swap_refusal
    from ..keras_assumption_texts import NOT_SWAPPED
    from ..swap_assumed import same_values

    if not same_values(ckpt, pairs):
        raise UnprovenPairingError(swap_refusal(ckpt, [NOT_SWAPPED]), option="--not-swapped")


def map_options(ckpt, ema_name, no_meta, strip_scope, add_scope, grep, regex, include, exclude,
                allow_missing, apply_order=None, strict: bool = False) -> dict:
    """Keyword arguments for :func:`ckpt_tools.ema_map` from the shared EMA options.

    Raises:
        VariableNotFoundError: the name filters match no key (exit 3).
    """
    names = NameFilter([*(grep or []), *(include or [])], regex)
    if names.active or exclude:  # the --exclude 'model/c' a raw-key refusal offers (r106 F2)
        from ..raw_key_names import raw_written_names

        names.written_as = raw_written_names(ckpt)
    require_selection(ckpt, names, exclude)
    return {"ema_name": ema_name, "use_meta": not no_meta, "strip_scope": strip_scope,
            "add_scope": add_scope, "include": names.as_globs(ckpt),
            "exclude": exclude_globs(ckpt, exclude, names.written_as),
            "allow_missing": allow_missing, "apply_order": check_apply_order(apply_order),
            "strict": strict}


def map_command(
    path: PathArg,
    ema_name: EmaNameOpt = None,
    no_meta: NoMetaOpt = False,
    strip_scope: StripOpt = None,
    add_scope: AddOpt = None,
    grep: GrepOpt = None,
    regex: RegexOpt = None,
    exclude: ExcludeOpt = None,
    include: IncludeOpt = None,
    non_averaged: Annotated[str, typer.Option(
        metavar="keep|drop", autocompletion=complete_from("keep", "drop"),
        help="Variables without an average: 'keep' (map to themselves) or 'drop'.")] = KEEP,
    slots: Annotated[str, typer.Option(
        "--slots", metavar="keep|drop", autocompletion=complete_from("keep", "drop"),
        help="Optimizer slots: 'drop' (evaluation never needs "
        "them) or 'keep' (TensorFlow's exact variables_to_restore).")] = DROP,
    keep_slots: Annotated[bool, typer.Option(
        "--keep-slots", hidden=True, help="Alias of --slots keep.")] = False,
    allow_missing: MissingOpt = False,
    style: Annotated[str | None, typer.Option(
        "--style", metavar="tf1|object|keras|slot",
        autocompletion=complete_from("tf1", "object", "keras", "slot"),
        help="Use only averages kept this way: tf1 (<var>/<ema name>), object "
        "(TF2 ema.average(v)), keras (use_ema=True), slot (an 'average' optimizer slot).")
    ] = None,
    apply_order: ApplyOrderOpt = None,
    numbered_lists: NumberedListsOpt = False,
    use_ema: UseEmaOpt = None,
    optimizer: OptimizerOpt = None,
    trainable: TrainableOpt = None,
    loop_order: LoopOrderOpt = False,
    fit_order: FitOrderOpt = False,
    strict: StrictOpt = False,
    not_swapped: NotSwappedOpt = False,
    saver_def_wrote: SaverDefWroteOpt = False,
    averages_only: AveragesOnlyOpt = False,
    wide: WideOpt = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Print the EMA restore map: checkpoint key -> variable it restores into.

    Matches tf.train.ExponentialMovingAverage.variables_to_restore() (from the .meta graph
    when present), expressed in checkpoint keys, so partitioned variables are right.
    --grep/--regex naming a shadow keep its pair; filters leaving no row are exit 3.
    """
    apply_order = check_apply_order(apply_order, numbered_lists)
    from ..emamap import ema_map
    from ..restored_mark import marked_map_note

    out = Output(json_mode=json_out, quiet=quiet, wide=wide)
    choice(non_averaged, (KEEP, DROP), "--non-averaged")
    choice(slots, SLOTS, "--slots")
    choice(style, ("tf1", "object", "keras", "slot"), "--style")
    with open_checkpoint(resolve(out, path), use_ema=use_ema, optimizer=optimizer, meta=not no_meta,
                         trainable=trainable_names(trainable, loop_order, fit_order),
                         not_swapped=not_swapped, fit_order=fit_order,
                         saver_def_wrote=saver_def_wrote,
                         averages_only=averages_only) as ckpt:
        note_sibling_doubt(out, ckpt)
        marked = marked_map_note(ckpt)
        if marked:  # restore-ema's output: said before its copies' map or refusal (r40 F5)
            out.note(f"note: {marked}", always=True)
        options = map_options(ckpt, ema_name, no_meta, strip_scope, add_scope, grep, regex,
                              include, exclude, allow_missing, apply_order, strict)
        m = ema_map(ckpt, slots=KEEP if keep_slots else slots, non_averaged=non_averaged,
                    style=style, **options)
        require_mapped(ckpt, m, filtered(grep, regex, include, exclude), exclude)
        if m.averaged:  # paired by names past a graph doubting them (s33c)
            warn_read_by_names(out, ckpt)
        if m.missing and (options["include"] is not None or options["exclude"]):
            # said of the whole file (others may have averages the filters leave out),
            # naming only the weights the filters keep
            whole = ema_map(ckpt, style=style, **{**options, "include": None, "exclude": None})
            whole.require_complete(left_out=set(whole.missing) - set(m.missing))
        names = display_names(ckpt)
        note_stated_order(out, ckpt, apply_order, ema_name, read=m.mapping)
        # --json stays the bare mapping: the notes say it; only what the map reads can
        # rest on the swap question (a user EMA's averages: review-29 s29j F5 left)
        note_assumed(out, ckpt, written=m.mapping)
    warn_unaveraged(out, m)
    m.require_complete()
    if json_out:
        out.json(m.to_json())
        return
    print_map(out, m, names)


def filtered(grep, regex, include, exclude) -> NameFilter | None:
    """The name filters given, or ``None`` without any (nothing to check)."""
    names = NameFilter([*(grep or []), *(include or [])], regex)
    return names if names.active or exclude else None


def require_mapped(ckpt, m: EmaMap, names: NameFilter | None, exclude) -> None:
    """Fails when name filters that match keys leave the map empty: ``--grep '*/Momentum'``
    names only slots, which ``map`` drops.

    Raises:
        VariableNotFoundError: exit 3, naming the filters.
    """
    if names is not None and not m.mapping:
        raise no_selection(ckpt.path, names, exclude, "variable to map")


def require_averaged(ckpt, options: dict, names: NameFilter | None, exclude) -> None:
    """Fails (exit 3) before any writing when the name filters leave no variable with an EMA
    shadow although the checkpoint has some, so the dry run and the real run agree; without
    averages at all, baking gives its own error.

    Raises:
        VariableNotFoundError: exit 3, naming the filters.
    """
    from ..emamap import ema_map

    if names is None:
        return
    if ema_map(ckpt, slots=KEEP, non_averaged=KEEP, **options).averaged:
        return
    unfiltered = {**options, "include": None, "exclude": None}
    whole = ema_map(ckpt, slots=KEEP, non_averaged=KEEP, **unfiltered)
    if whole.averaged:
        from ..ema_filters import excluded_said

        # (one glob may leave out several variables, by a name or a key read: r122 N1)
        raise no_selection(ckpt.path, names, exclude, "variable with an EMA shadow",
                           said=excluded_said(ckpt, whole.mapping, whole.averaged,
                                              options.get("exclude")))


def note_stated_order(out: Output, ckpt, apply_order: str | None,
                      ema_name: str | None = None, read=None) -> dict:
    """Prints :func:`ckpt_tools.statements.stated_notes` on stderr (with ``-q`` too: the values
    are wrong if a statement is) and returns its fields for the command's ``--json`` document
    (``{}`` when nothing rests on a statement). ``read``: the checkpoint keys the command read
    (``None``: all it pairs), as ``stated_notes`` takes them."""
    from ..statements import stated_notes

    notes, found = stated_notes(ckpt, check_apply_order(apply_order), ema_name, read)
    say_stated(out, notes)
    return found


def note_assumed(out: Output, ckpt, keys: list[str] | None = None, written=None) -> dict:
    """Says what the pairing of a Keras file's EMA copies assumes, which the file cannot show
    (:func:`ckpt_tools.keras_assumed.keras_assumptions`): that weights of one shape and dtype
    got their copies in the order ``fit()`` builds the optimizer in, and that the file was not
    saved after ``SwapEMAWeights(swap_on_epoch=True)`` (not said where each weight equals its
    copy bit for bit: either reading gives the same values). Both are shown with ``-q`` too:
    the values are wrong if the assumption is, and nothing else tells. ``keys``: only where
    they include an average (``show``/``stats``: the drift the pairing decides). ``written``:
    the checkpoint keys the command reads (an export's, a map's sources), where only a user
    EMA's averages leave no swap question
    (:func:`~ckpt_tools.user_ema_swap.unswapped_written`, review-28-attack-r104 F5); ``show``,
    ``stats`` and ``diff --ema`` pass none: the drift they show is from the weights, which a
    swap replaces, so the question stays there.

    Returns:
        `dict`: ``{"assumed": [...]}`` (``"fit_order"``, ``"not_swapped"``) for the command's
        ``--json`` document, or ``{}``.
    """
    from ..keras_assumed import assumptions_for  # NumPy only where values are compared

    assumed = assumptions_for(ckpt, keys)
    if written is not None:
        from ..user_ema_swap import unswapped_written

        assumed = unswapped_written(ckpt, assumed, written)
    for a in assumed:
        out.note(f"note: {a.short}", always=True)
    return {"assumed": [a.name for a in assumed]} if assumed else {}


def warn_unaveraged(out: Output, m: EmaMap) -> None:
    from ..ema_names import not_saved_note

    warning = m.unaveraged_warning()
    if warning:
        out.warning(warning)
    for note in (m.unaveraged_note(), not_saved_note(m)):
        if note:
            out.note(f"note: {note}")


def print_map(out: Output, m: EmaMap, names: dict[str, str]) -> None:
    """The map as a table (``restored from -> restores into``), in display names: the column
    is not headed "checkpoint key", which TF2 and Keras names are not (review-27-user-u29 F1);
    the summary then says that ``--json`` gives the keys."""
    rows = [[(names.get(src, src), "cyan" if src != tgt else "dim"), "→", names.get(tgt, tgt)]
            for src, tgt in m.mapping.items()]
    # A Keras optimizer's use_ema copies have no EMA object name, and config.json or the
    # optimizer's layout pairs them, not the keys.
    what = ("Keras optimizer use_ema copies" if m.file_style == "keras"
            else f"{m.ema_name}, from {m.source}")
    out.table(f"{m.checkpoint}: EMA map ({what})",
              [Column("restored from", shrink="middle", min_width=20), Column("", data=False),
               Column("restores into", shrink="middle", min_width=20)], rows)
    if out.quiet:  # the rows only, as every table with -q
        return
    out.summary()
    out.summary(f"{len(m.averaged)} averaged, {len(m.raw)} raw, {len(m.dropped)} left out "
             f"(optimizer slots/filters)"
             + (f", {counted(len(m.loss_averages), 'loss average')}" if m.loss_averages
                else "")
             + (f", {counted(len(m.debias), 'zero-debias helper')}" if m.debias else ""))
    if any(names.get(key, key) != key for pair in m.mapping.items() for key in pair):
        out.summary("names as ckpt list shows them, not as stored: --json gives the keys",
                    "dim")
