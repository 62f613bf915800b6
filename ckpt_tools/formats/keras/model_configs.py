"""Keras' JSON configs, read safely: the ``config.json`` and ``metadata.json`` of a ``.keras``
archive or of an unzipped model directory (:func:`model_dir_of`) as objects of bounded depth
(and size, read from a directory), and a legacy ``.h5``'s JSON attributes. A config nested
deeper than Keras ever writes would overflow ``json``'s stack.
"""

from __future__ import annotations

import json
import os

from ...errors import CorruptCheckpointError
from .._io import is_url, open_binary
from .h5_files import CONFIG_MEMBER, METADATA_MEMBER, WEIGHTS_MEMBER

_MAX_CONFIG_BYTES = 256 << 20  # a config.json beside the weights is read whole; Keras' are KBs
_MAX_JSON_DEPTH = 200  # Keras configs nest a few dozen levels; json itself fails near 1000


def _too_deep(value, limit: int = _MAX_JSON_DEPTH) -> bool:
    """Returns True if ``value`` nests lists/dicts deeper than ``limit`` (checked without
    recursion, so the check itself cannot overflow the stack)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


def parse_json_object(raw, what: str, path: str) -> dict:
    """Parses ``raw`` as a JSON object of bounded depth.

    Returns:
        the object (a ``dict``).

    Raises:
        CorruptCheckpointError: naming ``path`` and ``what``, if ``raw`` is not JSON, is not an
            object, or nests deeper than Keras ever writes (``json`` would overflow the stack).
    """
    try:
        value = json.loads(raw)
    except RecursionError:
        value = None
        problem = "nests too deeply to be a Keras config"
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise CorruptCheckpointError(f"{what} is not valid JSON: {exc}", path=path) from None
    else:
        problem = None
        if not isinstance(value, dict):
            problem = f"is a JSON {type(value).__name__}, expected an object"
        elif _too_deep(value):
            problem = f"nests deeper than {_MAX_JSON_DEPTH} levels"
    if problem:
        raise CorruptCheckpointError(f"{what} {problem}", path=path)
    return value


def json_attr(value):
    """Returns a legacy file's JSON attribute as a dict, or None when it is not a sound one."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    try:
        return parse_json_object(value, "attribute", "")
    except CorruptCheckpointError:
        return None


def model_dir_of(path: str) -> str | None:
    """Returns the unzipped Keras model directory whose weights ``path`` is, else ``None``.

    Keras 3's ``model.save(dir, zipped=False)`` writes ``config.json``, ``metadata.json`` and
    ``model.weights.h5`` (and ``assets/``) into ``dir``, and ``keras.models.load_model`` reads
    any directory holding ``config.json`` so: the weights file is that model's, exactly as the
    ``model.weights.h5`` member of a ``.keras`` archive is. Local paths only (a URL's directory
    is not listed).
    """
    if is_url(path) or os.path.basename(path) != WEIGHTS_MEMBER:
        return None
    directory = os.path.dirname(path) or "."
    return directory if os.path.isfile(os.path.join(directory, CONFIG_MEMBER)) else None


def read_model_dir(directory: str) -> tuple[dict, dict | None]:
    """Reads an unzipped Keras model directory's ``config.json`` and ``metadata.json``.

    Returns:
        ``(config, metadata)``; ``metadata`` is ``None`` when the file is absent.

    Raises:
        CorruptCheckpointError: naming the file, if one is not a JSON object of bounded depth
            and size, or cannot be read.
    """
    found: list[dict | None] = []
    for name in (CONFIG_MEMBER, METADATA_MEMBER):
        path = os.path.join(directory, name)
        if name == METADATA_MEMBER and not os.path.lexists(path):
            found.append(None)
            continue
        try:
            with open_binary(path) as f:
                raw = f.read(_MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise CorruptCheckpointError(f"cannot read: {exc.strerror or exc}",
                                         path=path) from None
        if len(raw) > _MAX_CONFIG_BYTES:
            raise CorruptCheckpointError(
                f"larger than {_MAX_CONFIG_BYTES} bytes: not a Keras {name}", path=path)
        found.append(parse_json_object(raw, name, path))
    return found[0], found[1]
