"""The option rows docs/cli.md gives a command: its own table, and the rows of the table of
options several commands take whose ``commands`` cell names it (review-13-user-u15 F8: the
README's per-command tables, moved there, each shared row given once)."""

from __future__ import annotations

import re
from pathlib import Path

CLI_DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
SHARED = "\n## Options several commands take\n"


def cli_doc_rows(command: str) -> dict[str, str]:
    """``{option cell: meaning}`` for ``ckpt COMMAND`` (the cell as written between the
    backticks: ``--grep, -g GLOB``, ``--slots keep\\|drop``)."""
    text = CLI_DOC.read_text()
    rows: dict[str, str] = {}
    shared = text.split(SHARED, 1)[1].split("\n## ", 1)[0]
    for cell, meaning, commands in re.findall(r"^\| `([^`]*)` \| (.*) \| ([a-z, -]+) \|$",
                                              shared, re.M):
        if command in [c.strip() for c in commands.split(",")]:
            assert cell not in rows, (command, cell)
            rows[cell] = meaning
    own = text.split(f"\n## `ckpt {command}`\n", 1)[1].split("\n## ", 1)[0]
    for cell, meaning in re.findall(r"^\| `([^`]*)` \| (.*) \|$", own, re.M):
        assert cell not in rows, (command, cell)  # given once: shared or its own
        rows[cell] = meaning
    return rows
