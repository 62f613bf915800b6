"""``ckpt export``: model weights (EMA values by default) in one file for converters.

Examples::

    ckpt export train/ --out model.safetensors            # EMA weights, clean names
    ckpt export train/ --out model.npz --raw              # raw weights (warns if EMAs exist)
    ckpt export train/ --out w.h5 --rename 'model/=' --exclude '*/moving_*'
"""

from __future__ import annotations

from typing import Annotated

import typer

from ..checkpoint import open_checkpoint
from ._common import JsonOpt, PathArg, QuietOpt
from ._output import ByteProgress, Output, human_bytes
from .ema import ApplyOrderOpt, check_apply_order


def export_command(
    path: PathArg,
    out_path: Annotated[str, typer.Option(
        "--out", "-o", help="Output file (.npz, .safetensors or .h5).", show_default=False)],
    to: Annotated[str | None, typer.Option(
        "--to", help="Format: npz, safetensors or h5 (default: from the --out extension).")
    ] = None,
    ema: Annotated[bool | None, typer.Option(
        "--ema/--raw", help="Export averaged (default when the checkpoint has EMA shadows) or "
        "raw weights.", show_default=False)] = None,
    include: Annotated[list[str] | None, typer.Option(
        "--include", help="Only weights matching this glob (repeatable).")] = None,
    exclude: Annotated[list[str] | None, typer.Option(
        "--exclude", help="Leave out weights matching this glob (repeatable).")] = None,
    rename: Annotated[list[str] | None, typer.Option(
        "--rename", help="Prefix rule 'old/=new/' for output names (repeatable; first wins).")
    ] = None,
    ema_name: Annotated[str | None, typer.Option(
        "--ema-name", help="EMA suffix; default: detected.")] = None,
    allow_missing: Annotated[bool, typer.Option(
        "--allow-missing", help="Export raw values where a shadow is missing instead of failing.")
    ] = False,
    apply_order: ApplyOrderOpt = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing output file.")
                     ] = False,
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Export model weights under clean names (no optimizer slots, no step counters).

    Writes the EMA values by default when the checkpoint has shadows, so converters to
    PyTorch/ONNX pick up the weights that evaluate best.
    """
    from ..export import export_weights

    out = Output(json_mode=json_out, quiet=quiet)
    with open_checkpoint(path) as ckpt:
        total = sum(e.nbytes for e in ckpt.entries().values())
        with ByteProgress(out, total, "exporting") as advance:
            result = export_weights(ckpt, out_path, fmt=to, ema=ema, include=include,
                                    exclude=exclude, rename=rename, overwrite=force,
                                    progress=advance, ema_name=ema_name,
                                    allow_missing=allow_missing,
                                    apply_order=check_apply_order(apply_order))
    for w in result.warnings:
        out.warning(w)
    if json_out:
        out.json({"output": result.path, "format": result.format, "tensors": result.tensors,
                  "averaged": list(result.averaged), "bytes": result.nbytes})
        return
    out.print(f"wrote [bold]{result.path}[/] ({result.format}, {human_bytes(result.nbytes)}): "
              f"{len(result.tensors)} weights, {len(result.averaged)} with EMA values")
