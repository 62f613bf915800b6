"""JSON text for the one printer (:mod:`._output`): how a document is encoded (indented for a
terminal, one compact line for a pipe) and the escaping of what ``json.dumps`` leaves as it is
that a terminal must not get (DEL, C1 and invisible format characters)."""

from __future__ import annotations

import json

from ._text import CONTROL, json_escape

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    from typing import Any


def json_default(obj: Any) -> Any:
    """``json.dumps``' ``default``: a tuple as a list, a record by its ``to_dict()``, an array
    by its ``tolist()``.

    Raises:
        TypeError: for anything else (what ``json.dumps`` expects of a ``default``).
    """
    if isinstance(obj, tuple):
        return list(obj)
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"cannot serialize {type(obj).__name__}")


def json_text(value: Any) -> str:
    """``value`` as the compact JSON text a piped document holds.

    Returns:
        `str`: the text, not yet escaped for the terminal (:func:`json_escaped`).
    """
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=json_default)


def json_document(data: Any, indented: bool) -> list[str]:
    """``data`` as one JSON document's lines: indented (for reading on a terminal), or one
    compact line (for ``jq`` and scripts).

    Returns:
        `list[str]`: the lines, not yet escaped for the terminal (:func:`json_escaped`).
    """
    if indented:
        # json escapes newlines inside strings, so each "\n" left is the indentation's.
        return json.dumps(data, indent=2, ensure_ascii=False, default=json_default).split("\n")
    # Compact separators and no indent keep json.dumps on its C encoder (c_make_encoder);
    # indent=... falls back to the pure-Python one, ~10x slower on a large listing.
    return [json_text(data)]


def json_escaped(text: str) -> str:
    """``text`` with what json.dumps leaves as it is escaped: DEL, C1 and the invisible format
    characters (U+202E reorders what a terminal shows; json escapes C0 controls itself), as
    ``\\uXXXX``.

    Returns:
        `str`: the text to write.
    """
    # Of CONTROL only C0 (which json.dumps has escaped already) and DEL are ASCII, so an
    # ASCII document (a flag CPython keeps) needs one memchr for DEL, not the regex scan (4 ms
    # on a 3,000-variable listing).
    if (not text.isascii() or "\x7f" in text) and CONTROL.search(text):
        return CONTROL.sub(json_escape, text)
    return text
