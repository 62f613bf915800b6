"""``ckpt restore-ema``: EMA-baked checkpoints (the EMA options are ``ckpt map``'s).

Examples::

    ckpt restore-ema train/ --out train_ema/ # eval scripts then restore EMA weights as-is
    ckpt restore-ema train/ --out x/ --dry-run
"""

from __future__ import annotations

from typing import Annotated

import typer

from ..checkpoint import open_checkpoint
from ..formats._io import is_url
from ..restored_mark import refuse_restored
from ..restored_record import stated_record_said
from ..wording import counted
from ._common import (
    SLOTS,
    AveragesOnlyOpt,
    FitOrderOpt,
    GrepOpt,
    JsonOpt,
    LoopOrderOpt,
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
    check_output_parent,
    choice,
    complete_from,
    display_names,
    json_notes,
    note_sibling_doubt,
    pick_format,
    resolve,
    trainable_names,
)
from ._output import Output, human_bytes
from .ema import (
    DROP,
    KEEP,
    AddOpt,
    ApplyOrderOpt,
    EmaNameOpt,
    ExcludeOpt,
    IncludeOpt,
    MissingOpt,
    NoMetaOpt,
    NumberedListsOpt,
    StripOpt,
    check_apply_order,
    filtered,
    map_options,
    note_assumed,
    note_stated_order,
    print_map,
    require_averaged,
    warn_unaveraged,
)


def restore_ema_command(
    path: PathArg,
    out_dir: Annotated[str | None, typer.Option(
        "--out", "-o", metavar="DIR|FILE",
        help="Output directory (created if missing; never the input's), a file with "
        "--format h5/keras, or an s3://bucket/dir/ URL. Default for a local Keras input only: "
        "<stem>_ema/ beside it.",
        show_default=False)] = None,
    name: Annotated[str | None, typer.Option(
        metavar="NAME",
        help="Output checkpoint name; default: the input's (model.ckpt-1000).")] = None,
    fmt: Annotated[str | None, typer.Option(
        "--format", metavar="keras|v2|h5", autocompletion=complete_from("keras", "v2", "h5"),
        help="'keras' (a Keras file of the input's kind; default for Keras input), 'v2' "
        "(TensorFlow checkpoint; default otherwise) or 'h5' (HDF5 weights by layer name).")
    ] = None,
    to: Annotated[str | None, typer.Option("--to", hidden=True, help="Alias of --format.")
                  ] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Show what would be written; write nothing.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace existing output files (never input files).")] = False,
    slots: Annotated[str, typer.Option(
        "--slots", metavar="keep|drop", autocompletion=complete_from("keep", "drop"),
        help="Optimizer slots: 'keep' (copied unchanged) or "
        "'drop' (left out of the output).")] = KEEP,
    drop_slots: Annotated[bool, typer.Option(
        "--drop-slots", hidden=True, help="Alias of --slots drop.")] = False,
    no_verify: Annotated[bool, typer.Option(
        "--no-verify", help="Skip CRC32C checks while copying (an index entry without a "
        "CRC32C is still refused, as TensorFlow refuses it).")] = False,
    ema_name: EmaNameOpt = None,
    no_meta: NoMetaOpt = False,
    strip_scope: StripOpt = None,
    add_scope: AddOpt = None,
    grep: GrepOpt = None,
    regex: RegexOpt = None,
    exclude: ExcludeOpt = None,
    include: IncludeOpt = None,
    allow_missing: MissingOpt = False,
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
    """Write a checkpoint whose plain variable names hold the EMA (averaged) values.

    Everything else (shadows, slots, global_step, the .meta graph) is copied unchanged, with a
    'checkpoint' state file, so an unchanged eval script uses them; a SavedModel gives a
    SavedModel. Keras in, Keras out: a .keras or .weights.h5 gives one of its kind (--out
    optional); for one saved during fit() by ModelCheckpoint alone, state --not-swapped (a
    .weights.h5: --use-ema too). <name>.restored.json records
    --averages-only/--saver-def-wrote: keep it.
    """
    apply_order = check_apply_order(apply_order, numbered_lists)
    from ..bake_outputs import check_out_format
    from ..ema_apply_order import refuse_apply_order
    from ..emaout import FORMATS, write_ema
    from ..errors import OutputError

    out = Output(json_mode=json_out, quiet=quiet, wide=wide)
    fmt = choice(pick_format(fmt, to), (*FORMATS, "keras"), "--format")
    slots = DROP if drop_slots else choice(slots, SLOTS, "--slots")
    if out_dir is not None:
        check_output_parent(out_dir, "creating the output directory")
    with open_checkpoint(resolve(out, path), use_ema=use_ema, optimizer=optimizer, meta=not no_meta,
                         trainable=trainable_names(trainable, loop_order, fit_order),
                         not_swapped=not_swapped, fit_order=fit_order,
                         saver_def_wrote=saver_def_wrote,
                         averages_only=averages_only) as ckpt:
        note_sibling_doubt(out, ckpt)
        refuse_apply_order(ckpt, check_apply_order(apply_order))  # Keras: exit 2, not ignored
        refuse_restored(ckpt)  # its weights are the averages already (r40 F5)
        keras_in = getattr(ckpt.reader, "keras", None) is not None
        fmt = fmt or ("keras" if keras_in else "v2")
        if out_dir is None and not (keras_in and fmt == "keras"):
            raise typer.BadParameter("required for a TensorFlow checkpoint or a --format "
                                     f"{fmt} output (only a Keras file in, Keras file out "
                                     "has a default)", param_hint="--out")
        if fmt != "keras":
            try:
                check_out_format(out_dir, fmt)
            except OutputError as exc:  # the options disagree: a usage error (exit 2)
                raise typer.BadParameter(str(exc), param_hint="--out") from None
        if keras_in and fmt == "v2":
            raise typer.BadParameter(
                "a Keras file's averages go into a Keras file (--format keras, the default) or "
                "an .h5 Keras' load_weights reads (--format h5): a TensorFlow bundle of its keys "
                "(layers/dense/vars/0) is something no Keras or TensorFlow loader maps onto a "
                "model", param_hint="--format")
        if fmt == "keras":
            unused = [o for o, given in (  # only the options given (u26 F12: no --include)
                ("--grep", bool(grep)), ("--regex", bool(regex)), ("--include", bool(include)),
                ("--exclude", bool(exclude)), ("--slots", slots != KEEP),
                ("--strip-scope", strip_scope is not None), ("--add-scope", add_scope is not None),
                ("--ema-name", ema_name is not None), ("--no-meta", no_meta),
                ("--allow-missing", allow_missing)) if given]
            if unused:  # never silently ignored: the whole file is written, every average in
                raise typer.BadParameter(
                    f"{', '.join(unused)} {'does' if len(unused) == 1 else 'do'} not apply to "
                    "a Keras output, which is the whole "
                    "model with every EMA copy in place of its weight; ckpt export --grep/"
                    "--exclude writes a subset of the weights", param_hint=unused[0])
            _restore_keras(out, ckpt, out_dir, name, force, dry_run, json_out, quiet, strict)
            return
        options = map_options(ckpt, ema_name, no_meta, strip_scope, add_scope, grep, regex,
                              include, exclude, allow_missing, apply_order, strict)
        require_averaged(ckpt, options, filtered(grep, regex, include, exclude), exclude)
        if dry_run:
            result = write_ema(ckpt, out_dir, name=name, fmt=fmt, dry_run=True,
                               overwrite=force, slots=slots, **options)
            stated = note_stated_order(out, ckpt, apply_order, ema_name,
                                       read=result.ema_map.mapping)
            stated = {**stated, **note_assumed(out, ckpt, written=result.ema_map.mapping)}
            warn_unaveraged(out, result.ema_map)
            if json_out:
                out.json({**_doc(result.to_dict(), out), **stated})
            else:
                print_map(out, result.ema_map, display_names(ckpt))
                if not quiet:
                    out.prose(f"dry run: would write {result.output}", "dim")
            return
        url = is_url(out_dir)  # the bytes written, then their upload (about the input's)
        total = 2 * sum(e.stored_bytes for e in ckpt.entries().values()) if url else None
        # SIGTERM is Ctrl-C for every command (cli.main): temporary files are removed.
        with out.progress("baking EMA", total) as bar:
            result = write_ema(ckpt, out_dir, name=name, fmt=fmt, overwrite=force,
                               verify=not no_verify, slots=slots, progress=bar.advance,
                               progress_total=None if url else (  # what is written (s29g)
                                   lambda written: bar.update(0, written)), **options)
        stated = note_stated_order(out, ckpt, apply_order, ema_name,  # after: see export
                                   read=result.ema_map.mapping)
        # what the averages written were read from (a user EMA's: no swap question, r104 F5)
        stated = {**stated, **note_assumed(out, ckpt, written=result.ema_map.mapping)}
    out.wrote(result.output)
    warn_unaveraged(out, result.ema_map)
    for w in result.warnings:
        out.warning(w)
    for n in result.notes:
        out.note(f"note: {n}")
    if json_out:
        out.json({**_doc(result.to_dict(), out), **stated})
    elif not quiet:
        # keys --averages-only read as averages that hold raw weights if a training run saved
        # them: never called EMA values, as export says it (review-26-attack-r94 F4)
        doubted = (stated.get("stated_averages_only") or {}).get("raw_if_trained")
        stated_said = ("(--averages-only; the raw weights if a training run saved them)"
                       if doubted else "")
        if result.format == "h5":
            out.prose(f"wrote {result.output} ({human_bytes(result.nbytes)}): "
                     f"{counted(len(result.tensors), 'weight')}, {len(result.averaged)} "
                     + (f"from keys you stated hold averages {stated_said}" if doubted
                        else "averaged"))
        else:
            what = "SavedModel " if result.format == "saved_model" else ""
            one = len(result.replaced) == 1  # "1 variable now holds" (u31 F3)
            held = (f"now {'holds' if one else 'hold'} the values of keys you stated hold "
                    f"averages {stated_said}" if doubted else
                    f"now {'holds its' if one else 'hold their'} EMA values")
            out.prose(f"wrote {what}{result.output} ({human_bytes(result.nbytes)}): "
                     f"{counted(len(result.replaced), 'variable')} {held}, "
                     f"{counted(result.copied, 'tensor')} copied unchanged"
                     + (f", {len(result.dropped)} dropped" if result.dropped else "")
                     + stated_record_said(result.files))


def _restore_keras(out: Output, ckpt, out_dir: str | None, name: str | None, force: bool,
                   dry_run: bool, json_out: bool, quiet: bool = False,
                   strict: bool = False) -> None:
    """Keras in, Keras out: a file of the input's kind whose weights are the averages."""
    from ..errors import UnsupportedFormatError
    from ..keras_assumed import refuse_assumed
    from ..keras_bake import (
        bake_keras_ema,
        check_keras_output,
        keras_default_out,
        keras_output_path,
    )
    from ..keras_ema import require_keras_pairing

    if getattr(ckpt.reader, "keras", None) is None:
        raise UnsupportedFormatError(f"{ckpt.path}: --format keras needs a Keras input "
                                     "(.keras, .weights.h5, .h5); use --format v2")
    chosen = out_dir is None  # the output's place is ckpt's choice: said even with -q
    if chosen:
        out_dir = keras_default_out(ckpt)
        check_output_parent(out_dir, "creating the output directory")
    target = keras_output_path(ckpt, out_dir, name)
    if dry_run:
        require_keras_pairing(ckpt)
        refuse_assumed(ckpt, strict=strict)  # not_swapped: always
        check_keras_output(ckpt, target, force)
        pairs = {w: a for a, w in ckpt.reader.keras.averages.items()}
        assumed = note_assumed(out, ckpt)
        if json_out:
            out.json({**_doc({"dry_run": True, "output": target, "map": pairs}, out),
                      **assumed})
        else:
            out.prose(f"dry run: would write {target} with {counted(len(pairs), 'weight')} "
                      f"set to {'its' if len(pairs) == 1 else 'their'} EMA values", "dim")
        return
    result = bake_keras_ema(ckpt, target, overwrite=force, strict=strict)
    stated = note_stated_order(out, ckpt, None)
    stated = {**stated, **note_assumed(out, ckpt)}
    out.wrote(result.path)
    if json_out:
        out.json({**_doc({"output": result.path, "format": "keras",
                          "replaced": result.replaced, "bytes": result.nbytes}, out),
                  **stated})
    elif not quiet:
        out.prose(f"wrote {result.path} ({human_bytes(result.nbytes)} of averages): "
                  f"{counted(len(result.replaced), 'weight')} now "
                  f"{'holds its' if len(result.replaced) == 1 else 'hold their'} EMA values; "
                  "load it with "
                  "model.load_weights()" + (" or keras.models.load_model()"
                                            if result.path.endswith(".keras") else ""))
    elif chosen:  # -q: the one line of data is where the output went (review-13-user-u15 F7)
        out.prose(result.path)


def _doc(doc: dict, out: Output) -> dict:
    """``doc`` with the "warnings" and "notes" stderr showed: every note, the statements' ones
    said on opening (``--saver-def-wrote``, the sibling ``.meta``'s doubt) too, as export's
    --json has them (review-27-attack-r99 F1).

    Returns:
        `dict`: a new document.
    """
    return {**doc, "warnings": list(out.warned), "notes": json_notes(out, doc.get("notes", ()))}
