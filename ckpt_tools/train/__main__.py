"""``python -m ckpt_tools.train train|eval ...``: the trainer without the main ``ckpt`` app."""

from __future__ import annotations

import typer

from .cli import register

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Reference CIFAR-10 trainer (v1 towers / tf2 / keras) and raw-vs-EMA evaluation.",
)
register(app)

if __name__ == "__main__":
    app()
