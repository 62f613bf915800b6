"""Bounds on every text-format protobuf parse (a text ``.meta``, ``saved_model.pbtxt``).

protobuf's pure-Python text tokenizer holds ~150 bytes per character of ONE whitespace run or
string token (its regexes repeat a group per character): 20 MB of spaces took 3 GB, 400 MB was
killed for memory (review-24-attack-r78 F5). Every text parse goes through :func:`bounded_text`,
which refuses a file over :data:`TEXT_META_MAX_BYTES` and, before the parser sees anything,
replaces each long ``tensor_content`` literal (a constant's packed values, TensorFlow writes
it as one escaped line: a 1.2 MB table is a 2.8 MB line) by ``""``: ckpt_tools never reads a
large constant from a graph (only a scalar divisor, :mod:`.meta_on_read`). What remains may
hold no line over :data:`TEXT_META_MAX_LINE` (review-25-attack-r81 F1, F3, F5).
:func:`looks_text` is the one test of whether bytes are text at all (review-25-attack-r81 F1,
F2): only then are they text-parsed.
"""

from __future__ import annotations

import re

from ..errors import CorruptCheckpointError

TEXT_META_MAX_BYTES = 64 << 20
TEXT_META_MAX_LINE = 1 << 20
# a tensor_content literal longer than this is dropped: a scalar's is at most 4 x 8 bytes
# escaped (\ooo), 32 characters; any constant ckpt_tools reads is a scalar
TEXT_CONTENT_KEEP = 4096
# leading whitespace and '#' comment lines skipped before the field keywords are looked for
_HEAD = 1 << 20
_KEYWORDS = (b"meta_info_def", b"graph_def", b"saver_def", b"collection_def",
             b"signature_def", b"asset_file_def", b"object_graph_def",
             b"saved_model_schema_version", b"meta_graphs")
_SPACE = re.compile(rb"[ \t\r\n\f\v]*")
# one TensorFlow-written tensor_content line; [^\n] repeats one character class, which the
# regex engine walks without per-character state (unlike the tokenizer's groups)
_CONTENT = re.compile(rb'(?m)^([ \t]*tensor_content: )"([^\n]{%d,})"[ \t]*$'
                      % TEXT_CONTENT_KEEP)


class TextMetaTooLargeError(CorruptCheckpointError):
    """A text-format ``MetaGraphDef`` or ``SavedModel`` over :data:`TEXT_META_MAX_BYTES`, or
    with a line over :data:`TEXT_META_MAX_LINE` once its long constants are dropped: left
    unread (exit 4, as corrupt)."""


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n and not n % (1 << 20) else f"{n} bytes"


def looks_text(data) -> bool:
    """Whether ``data`` (a file's bytes or map) reads as a text-format proto: a field keyword
    of a ``MetaGraphDef``/``SavedModel`` in its first 4096 bytes, or in the 4096 after its
    leading whitespace and ``#`` comment lines (a comment header TensorFlow's parser skips,
    review-25-attack-r81 F2), looked for in its first MiB only."""
    head = bytes(data[:_HEAD + 4096])
    if any(k in head[:4096] for k in _KEYWORDS):
        return True
    pos = 0
    while pos < _HEAD:
        pos = _SPACE.match(head, pos).end()
        if head[pos:pos + 1] != b"#":
            break
        pos = head.find(b"\n", pos)
        if pos < 0:
            return False
    return pos < _HEAD and any(k in head[pos:pos + 4096] for k in _KEYWORDS)


def _dropped(match: re.Match) -> bytes:
    inner = match.group(2).replace(b"\\\\", b"").replace(b'\\"', b"")
    if b'"' in inner:  # more than one literal on the line: left whole (the line bound decides)
        return match.group(0)
    return match.group(1) + b'""'


def bounded_text(data, path: str, what: str) -> str:
    """The text of ``data`` (a file's bytes or map) that protobuf's text parser may be given:
    each ``tensor_content`` literal over :data:`TEXT_CONTENT_KEEP` characters replaced by
    ``""``, decoded as UTF-8 (one linear pass; nothing parsed).

    Args:
        data: the file's bytes.
        path: the file, named in errors.
        what: the message it should hold (``"MetaGraphDef"``, ``"SavedModel"``), for errors.

    Raises:
        TextMetaTooLargeError: over :data:`TEXT_META_MAX_BYTES`, or a line over
            :data:`TEXT_META_MAX_LINE` bytes once the long constants are dropped.
        CorruptCheckpointError: not UTF-8.
    """
    if len(data) > TEXT_META_MAX_BYTES:
        raise TextMetaTooLargeError(
            f"a text-format {what} of {len(data)} bytes, over the "
            f"{_size(TEXT_META_MAX_BYTES)} read as text (protobuf's text parser can take "
            "100x a file's size in memory)", path=path)
    text, dropped = _CONTENT.subn(_dropped, data)
    # a bytes count bounds the characters; (?m)^ starts each try at a line's start: one pass
    long_line = re.search(rb"(?m)^[^\n]{%d}" % TEXT_META_MAX_LINE, text)
    if long_line:
        raise TextMetaTooLargeError(
            f"a text-format {what} with a line over {_size(TEXT_META_MAX_LINE)} besides "
            "its constants' values (protobuf's text parser takes ~150x a line's length in "
            "memory)", path=path, offset=None if dropped else long_line.start())
    try:
        return text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"not a {what} (text, not UTF-8: {exc})",
                                     path=path) from None
