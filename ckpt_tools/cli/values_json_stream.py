"""``ckpt show --full --json`` written as it is formatted: the document's text comes in
pieces, each tensor's values a part of whole rows at a time, so memory holds one part's text,
never the whole document (s29g: 1M values built 154 MB of text in 8 s before printing any).
``json.loads`` of the pieces joined is the document :func:`~.values_text.values_json` gives."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np

from .values_text import json_ready

#: Values converted and written together (about 1 MB of text for float32 values).
PART = 1 << 16


def stream_values_json(array: np.ndarray, dumps: Callable[[object], str],
                       part: int = PART) -> Iterator[str]:
    """Yields the text of ``values_json(array, full=True)["values"]`` in pieces of about
    ``part`` values: nested lists, strings decoded, NaN/Inf as strings, complex values as
    ``[real, imag]`` pairs. Each piece is whole JSON tokens (a string is never cut).

    Args:
        array: the tensor.
        dumps: JSON text of a converted part (``json.dumps`` with the caller's options).
        part: values per piece (at least 1).

    Returns:
        `Iterator[str]`: the pieces, in order.
    """
    if array.ndim == 0 or array.size <= part:
        yield dumps(json_ready(array))
        return
    row = math.prod(array.shape[1:])
    yield "["
    if row > part:  # a row alone is a part or more: each row in parts of its own
        for i in range(array.shape[0]):
            if i:
                yield ","
            yield from stream_values_json(array[i], dumps, part)
    else:  # whole rows together, the list's brackets left out
        step = max(1, part // max(row, 1))
        for i in range(0, array.shape[0], step):
            if i:
                yield ","
            yield dumps(json_ready(array[i:i + step]))[1:-1]
    yield "]"


def show_document(head: dict, tensors: Iterator[tuple[dict, np.ndarray]],
                  tail: Callable[[], dict], dumps: Callable[[object], str]) -> Iterator[str]:
    """Yields the text of ``{**head, "tensors": [...], **tail()}`` in pieces: each tensor's
    fields, then its ``"values"`` streamed (:func:`stream_values_json`) and ``"truncated":
    false``, as ``{**fields, **values_json(array, full=True)}``.

    Args:
        head: the fields before ``"tensors"`` (``"checkpoint"``).
        tensors: ``(fields, array)`` per tensor, produced as the document is written.
        tail: called after the last tensor: the fields after ``"tensors"`` (the warnings
            said while reading them).
        dumps: JSON text of a value.

    Returns:
        `Iterator[str]`: the pieces, in order.
    """
    yield dumps(head)[:-1] + ("," if head else "") + '"tensors":['
    for i, (fields, array) in enumerate(tensors):
        yield ("," if i else "") + dumps(fields)[:-1] + ("," if fields else "") + '"values":'
        yield from stream_values_json(array, dumps)
        yield ',"truncated":false}'
    rest = tail()
    yield "]" + ("," + dumps(rest)[1:] if rest else "}")
