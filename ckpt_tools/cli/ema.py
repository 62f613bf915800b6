"""``ckpt map`` and ``ckpt restore-ema``: EMA name maps and EMA-baked checkpoints.

Examples::

    ckpt map train/ --json                   # {"W/ExponentialMovingAverage": "W", ...}
    ckpt map train/ --ema-name avg --strip-scope tower_0/
    ckpt restore-ema train/ --out train_ema/ # eval scripts then restore EMA weights as-is
    ckpt restore-ema train/ --out x/ --dry-run
"""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING, Annotated

import typer

from ..checkpoint import open_checkpoint
from ._common import JsonOpt, PathArg, QuietOpt
from ._output import ByteProgress, Output, human_bytes

if TYPE_CHECKING:
    from ..emamap import EmaMap

# Library modules that pull in NumPy are imported inside the commands, so that building the
# CLI (which every `ckpt list` does) stays cheap.
KEEP, DROP = "keep", "drop"

EmaNameOpt = Annotated[str | None, typer.Option(
    "--ema-name", help="EMA suffix (ExponentialMovingAverage, avg, ...); default: detected.")]
NoMetaOpt = Annotated[bool, typer.Option(
    "--no-meta", help="Ignore the .meta graph and infer the map from checkpoint keys.")]
StripOpt = Annotated[str | None, typer.Option(
    "--strip-scope", help="Remove this prefix from target names (e.g. 'tower_0/').")]
AddOpt = Annotated[str | None, typer.Option(
    "--add-scope", help="Prepend this prefix to target names (e.g. 'model/').")]
IncludeOpt = Annotated[list[str] | None, typer.Option(
    "--include", help="Only targets matching this glob (repeatable).")]
ExcludeOpt = Annotated[list[str] | None, typer.Option(
    "--exclude", help="Leave out targets matching this glob (repeatable).")]
MissingOpt = Annotated[bool, typer.Option(
    "--allow-missing", help="Restore raw values where a shadow is missing instead of failing.")]
ApplyOrderOpt = Annotated[str | None, typer.Option(
    "--apply-order", help="TF2 averages of same-named variables: the order ema.apply() got "
    "them in, when the checkpoint allows several pairings: 'trainable' (a tf.Module's "
    "trainable_variables) or 'tracked' (creation order, Keras' trainable_variables).")]


def check_apply_order(apply_order: str | None) -> str | None:
    """Returns ``apply_order`` after checking it names a known order (usage error otherwise)."""
    if apply_order is not None and apply_order not in ("trainable", "tracked"):
        raise typer.BadParameter("expected 'trainable' or 'tracked'", param_hint="--apply-order")
    return apply_order


def _map_options(ema_name, no_meta, strip_scope, add_scope, include, exclude, allow_missing,
                 apply_order=None):
    return {"ema_name": ema_name, "use_meta": not no_meta, "strip_scope": strip_scope,
            "add_scope": add_scope, "include": include, "exclude": exclude,
            "allow_missing": allow_missing, "apply_order": check_apply_order(apply_order)}


def map_command(
    path: PathArg,
    ema_name: EmaNameOpt = None,
    no_meta: NoMetaOpt = False,
    strip_scope: StripOpt = None,
    add_scope: AddOpt = None,
    include: IncludeOpt = None,
    exclude: ExcludeOpt = None,
    non_averaged: Annotated[str, typer.Option(
        help="Variables without an average: 'keep' (map to themselves) or 'drop'.")] = KEEP,
    keep_slots: Annotated[bool, typer.Option(
        "--keep-slots", help="Keep optimizer slots (TensorFlow's exact variables_to_restore).")
    ] = False,
    allow_missing: MissingOpt = False,
    style: Annotated[str | None, typer.Option(
        "--style", help="Use only averages kept this way: tf1 (<var>/<ema name>), object "
        "(TF2 ema.average(v)), keras (use_ema=True), slot (an 'average' optimizer slot).")
    ] = None,
    apply_order: ApplyOrderOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Print the EMA restore map: checkpoint key -> variable it restores into.

    Matches tf.train.ExponentialMovingAverage.variables_to_restore() (from the .meta graph
    when present), expressed in checkpoint keys, so partitioned variables are right.
    """
    from ..emamap import ema_map

    out = Output(json_mode=json_out, quiet=quiet)
    if non_averaged not in (KEEP, DROP):
        raise typer.BadParameter("expected 'keep' or 'drop'", param_hint="--non-averaged")
    if style is not None and style not in ("tf1", "object", "keras", "slot"):
        raise typer.BadParameter("expected tf1, object, keras or slot", param_hint="--style")
    m = ema_map(path, slots=KEEP if keep_slots else DROP, non_averaged=non_averaged,
                style=style, **_map_options(ema_name, no_meta, strip_scope, add_scope, include,
                                            exclude, allow_missing, apply_order))
    _warn_unaveraged(out, m)
    m.require_complete()
    if json_out:
        out.json(m.to_json())
        return
    _print_map(out, m)


def _warn_unaveraged(out: Output, m: EmaMap) -> None:
    if m.unaveraged:
        out.warning(f"{len(m.unaveraged)} weight(s) have no '{m.ema_name}' shadow and keep "
                    f"their raw values: {', '.join(m.unaveraged[:5])}"
                    + (" ..." if len(m.unaveraged) > 5 else ""))


def _print_map(out: Output, m: EmaMap) -> None:
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False,
                  title=f"{m.checkpoint}: EMA map ({m.ema_name}, from {m.source})",
                  title_justify="left")
    table.add_column("checkpoint key", overflow="fold")
    table.add_column("", width=2)
    table.add_column("restores into", overflow="fold")
    for src, tgt in m.mapping.items():
        style = "cyan" if src != tgt else "dim"
        table.add_row(f"[{style}]{src}[/]", "→", tgt)
    out.print(table)
    out.print(f"\n{len(m.averaged)} averaged, {len(m.raw)} raw, {len(m.dropped)} left out "
              f"(optimizer slots/filters)"
              + (f", {len(m.loss_averages)} loss averages" if m.loss_averages else "")
              + (f", {len(m.debias)} zero-debias helpers" if m.debias else ""))


def restore_ema_command(
    path: PathArg,
    out_dir: Annotated[str, typer.Option(
        "--out", "-o", help="Output directory for the EMA-baked checkpoint (created if "
        "missing; never the input's directory).", show_default=False)],
    name: Annotated[str | None, typer.Option(
        help="Output checkpoint name; default: the input's (model.ckpt-1000).")] = None,
    fmt: Annotated[str, typer.Option(
        "--format", help="'v2' (TensorFlow checkpoint) or 'h5' (Keras-style HDF5 weights).")
    ] = "v2",
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Show what would be written; write nothing.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace existing output files (never input files).")] = False,
    drop_slots: Annotated[bool, typer.Option(
        "--drop-slots", help="Leave optimizer slots out of the output.")] = False,
    no_verify: Annotated[bool, typer.Option(
        "--no-verify", help="Skip CRC32C checks while copying.")] = False,
    ema_name: EmaNameOpt = None,
    no_meta: NoMetaOpt = False,
    strip_scope: StripOpt = None,
    add_scope: AddOpt = None,
    include: IncludeOpt = None,
    exclude: ExcludeOpt = None,
    allow_missing: MissingOpt = False,
    apply_order: ApplyOrderOpt = None,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Write a checkpoint whose plain variable names hold the EMA (averaged) values.

    Everything else (shadows, slots, global_step, the .meta graph) is copied unchanged and a
    'checkpoint' state file is written, so an unmodified evaluation script that restores with a
    plain Saver or tf.train.load_checkpoint evaluates with EMA weights.
    """
    from ..bake import bake_ema, plan_outputs
    from ..emamap import ema_map

    out = Output(json_mode=json_out, quiet=quiet)
    if fmt not in ("v2", "h5"):
        raise typer.BadParameter("expected 'v2' or 'h5'", param_hint="--format")
    options = _map_options(ema_name, no_meta, strip_scope, add_scope, include, exclude,
                           allow_missing, apply_order)
    with open_checkpoint(path) as ckpt:
        if dry_run:
            m = ema_map(ckpt, slots=KEEP, **options)
            _warn_unaveraged(out, m)
            m.require_complete()
            if fmt == "v2" and os.path.isdir(out_dir):
                target = plan_outputs(ckpt, out_dir, name, force)  # also checks it is safe
            else:
                target = _output_path(ckpt, out_dir, name, fmt)
            if json_out:
                out.json({"dry_run": True, "output": target, "map": m.to_json()})
            else:
                _print_map(out, m)
                out.print(f"[dim]dry run: would write {target}[/]")
            return
        if fmt == "h5":
            from ..export import export_weights

            target = _output_path(ckpt, out_dir, name, fmt)
            if target != out_dir:
                os.makedirs(out_dir, exist_ok=True)
            result = export_weights(ckpt, target, fmt="h5", ema=True, overwrite=force,
                                    **options)
            if json_out:
                out.json({"output": result.path, "tensors": result.tensors,
                          "averaged": list(result.averaged), "bytes": result.nbytes})
            else:
                out.print(f"wrote [bold]{result.path}[/] ({human_bytes(result.nbytes)}): "
                          f"{len(result.tensors)} weights, {len(result.averaged)} averaged")
            return
        total = sum(e.stored_bytes for e in ckpt.entries().values())
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            with ByteProgress(out, total, "baking EMA") as advance:
                result = bake_ema(ckpt, out_dir, name=name, overwrite=force,
                                  verify=not no_verify, drop_slots=drop_slots,
                                  progress=advance, **options)
        finally:
            signal.signal(signal.SIGTERM, previous)
        _warn_unaveraged(out, result.ema_map)
        for w in result.warnings:
            out.warning(w)
        _report(out, result, json_out)


def _output_path(ckpt, out_dir: str, name: str | None, fmt: str) -> str:
    """Where restore-ema writes: ``<out>/<name>`` (v2 prefix), ``<out>/<name>.h5``, or the
    ``--out`` file itself when it already ends in ``.h5``."""
    base = name or ckpt.name
    if fmt == "h5":
        return out_dir if out_dir.endswith((".h5", ".hdf5")) else os.path.join(out_dir,
                                                                                base + ".h5")
    return os.path.join(out_dir, base)


def _raise_interrupt(signum, frame):  # SIGTERM -> clean up temporary files like Ctrl-C does
    raise KeyboardInterrupt


def _report(out: Output, result, json_out: bool) -> None:
    if json_out:
        out.json({"output": result.prefix, "files": result.files, "replaced": result.replaced,
                  "copied": result.copied, "dropped": result.dropped, "bytes": result.nbytes})
        return
    out.print(f"wrote [bold]{result.prefix}[/] ({human_bytes(result.nbytes)}): "
              f"{len(result.replaced)} variables now hold their EMA values, "
              f"{result.copied} tensors copied unchanged"
              + (f", {len(result.dropped)} dropped" if result.dropped else ""))
