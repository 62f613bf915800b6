"""Option and argument types shared by several ``ckpt`` commands."""

from __future__ import annotations

from typing import Annotated

import typer

PathArg = Annotated[
    str,
    typer.Argument(
        help="Checkpoint: a training directory (uses its 'checkpoint' state file), a prefix "
        "such as model.ckpt-1000, a .index, .data-*, or .meta file, a V1 file or shard, a "
        "SavedModel directory or its saved_model.pb, or a .keras/.h5 file.",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print only the data, no notes.")]
