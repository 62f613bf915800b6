"""What a TF2 split-holder refusal (ckpt_tools/ema_holders.py) prints, read back as the user
reads it: the holders it names with their weights, and each ``--exclude`` offer as the
arguments to type."""

from __future__ import annotations

import re
import shlex


def listed_holders(line: str) -> dict[str, set[str]]:
    """``{holder: {weight path, ...}}`` of each "H holds the averages of a, b" the refusal
    (one line) names."""
    return {h: set(ws.split(", ")) for h, ws in
            re.findall(r"[(;] ?(the root|[^ (;]+) holds the averages of ([^;)]+)", line)}


def printed_offers(line: str) -> list[list[str]]:
    """Each ``--exclude`` offer of "A or B exports one holder's averages alone", split into
    arguments as a shell would; ``[]`` where none is printed."""
    found = re.search(r"; ((?:--ema-name \S+ )?--exclude [^;]*?) exports one holder's", line)
    return [shlex.split(o) for o in found.group(1).split(" or ")] if found else []
