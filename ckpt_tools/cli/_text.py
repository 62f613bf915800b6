"""Terminal-safe text for the one printer (:mod:`._output`): escaping of untrusted text
(names, paths, messages) so it can never drive a terminal or forge a row, terminal cell widths,
and whether a stream is a terminal (``TTY_COMPATIBLE=1``/``0`` forces it)."""

from __future__ import annotations

import os
import re
import unicodedata

from ..lazy_re import LazyPattern
from ._shorten import ELLIPSIS

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    from typing import TextIO

# C0/C1 controls, DEL, and invisible format characters that reorder or hide text (bidi
# overrides and isolates, zero-width spaces and joiners, the soft hyphen, word joiners,
# interlinear annotations, tag characters).
CONTROL = LazyPattern("[\x00-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u2028-\u202e"
                      "\u2060-\u206f\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]")
_DATA = LazyPattern(CONTROL.pattern + "|\\\\")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def clean(text: object) -> str:
    """Returns ``text`` (a name, a cell, a line of data) as a string with control characters
    escaped (``\\x1b``, ``\\n``) and a backslash doubled, so the escaping is one-to-one: a name
    holding ESC shows as ``t\\x1bx``, one spelling it out (backslash, ``x1b``) as ``t\\\\x1bx``.

    Example:
        >>> clean("a\\nb\\x1b[2J")
        'a\\\\nb\\\\x1b[2J'
    """
    s = text if isinstance(text, str) else str(text)
    if not _DATA.search(s):
        return s
    return _DATA.sub(_escape_char, s)


_ESCAPED = LazyPattern(r"\\(?:x[0-9a-f]{2}|u[0-9a-f]{4}|[ntr\\])")
_UNNAMED = {v: k for k, v in _NAMED.items()}


def unclean(text: str) -> str:
    """Returns the name :func:`clean` shows as ``text`` (its inverse): what a user pasting a
    name from ``ckpt list`` meant.

    Example:
        >>> unclean(clean("t\\x1bx\\n")) == "t\\x1bx\\n"
        True
    """
    return _ESCAPED.sub(lambda m: _UNNAMED.get(m.group(0)) or chr(int(m.group(0)[2:], 16)),
                        text)


def clean_message(text: object) -> str:
    """Returns a message (notes, errors, titles, sentences) with control characters escaped;
    backslashes stay as they are, since messages quote names with ``repr`` (which doubles
    them) and may hold text to type back (``$'t\\x1bx'``)."""
    s = text if isinstance(text, str) else str(text)
    if not CONTROL.search(s):
        return s
    return CONTROL.sub(_escape_char, s)


def json_escape(m: re.Match) -> str:
    c = m.group(0)
    if ord(c) > 0xFFFF:  # JSON spells astral characters as a surrogate pair
        v = ord(c) - 0x10000
        return f"\\u{0xD800 + (v >> 10):04x}\\u{0xDC00 + (v & 0x3FF):04x}"
    return f"\\u{ord(c):04x}"


def _escape_char(m: re.Match) -> str:
    c = m.group(0)
    if c in _NAMED:
        return _NAMED[c]
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def cell_len(text: str) -> int:
    """Returns how many terminal columns ``text`` takes (wide CJK characters count 2)."""
    if text.isascii():
        return len(text)
    n = 0
    for c in text:
        if unicodedata.combining(c):
            continue
        n += 2 if unicodedata.east_asian_width(c) in "WF" else 1
    return n


def shorten_end(text: str, width: int) -> str:
    """Shortens a list (``a,b,c``, raw or shown) to ``width`` columns with ``…`` at the end,
    after a comma when one fits; an escape (``\\x1b``) is never cut.

    Example:
        >>> shorten_end("trainable,global,model", 18)
        'trainable,global,…'
    """
    shown = clean(text)
    if cell_len(shown) <= width:
        return shown
    if width <= 1:
        return ELLIPSIS[:width]
    tokens = [clean(c) for c in text] if shown != text else list(text)
    head, n = [], 0
    for t in tokens:
        if n + cell_len(t) > width - 1:
            break
        head.append(t)
        n += cell_len(t)
    cut = max((k for k, t in enumerate(head) if t == ","), default=-1)
    if cut > 0:
        head = head[: cut + 1]
    return "".join(head) + ELLIPSIS


def _forced_tty() -> bool | None:
    value = os.environ.get("TTY_COMPATIBLE", "")
    return {"1": True, "0": False}.get(value)


def is_tty(stream: TextIO) -> bool:
    forced = _forced_tty()
    if forced is not None:
        return forced
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
