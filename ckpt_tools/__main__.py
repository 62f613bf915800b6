"""``python -m ckpt_tools`` runs the ``ckpt`` command."""

from .cli import main

main()
