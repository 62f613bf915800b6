"""``ckpt train``'s run record: what the trainer knows at save time and no file can show.

A Keras 3 file whose weights differ from their EMA copies is refused (exit 6) unless
``--not-swapped`` states that ``SwapEMAWeights(swap_on_epoch=True)`` did not swap it
(:mod:`~ckpt_tools.keras_assumed`). ``ckpt train --api keras`` saves every
``ckpt-<step>.keras`` from ``on_train_batch_end``, never swapped, and says so in
``<train dir>/run_record.json``, rewritten atomically after each save::

    {"written_by": "ckpt train", "version": 1, "api": "keras", "swapped": false,
     "fit_order": true, "files": {"ckpt-100.keras": {"size": 123456, "sha256": "..."}}}

:func:`not_swapped_record` reads it as the statement ``--not-swapped`` for exactly the files
it names, in its own directory, whose bytes still have the recorded size and SHA-256: a file
renamed, replaced or copied over (another run's checkpoint under the same name) inherits
nothing and is refused as before. Anything else (no record, another program's, malformed,
too large) is no statement. ``"fit_order": true`` (the trainer builds its optimizer with
``model.trainable_variables``, fit()'s order) is read the same way as ``--fit-order``
(:func:`vouching_record`); a record without it states only ``not_swapped``.
"""

from __future__ import annotations

import os

RECORD_NAME = "run_record.json"
WRITER = "ckpt train"
_MAX_BYTES = 1 << 20  # a record of thousands of files; a larger one is not ours


def file_digest(path: str) -> dict:
    """``{"size": bytes, "sha256": hex}`` of ``path``, as the record keeps it."""
    import hashlib

    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while True:
            block = f.read(1 << 20)
            if not block:
                break
            size += len(block)
            h.update(block)
    return {"size": size, "sha256": h.hexdigest()}


def read_json_object(path: str, limit: int = _MAX_BYTES) -> dict | None:
    """The JSON object in the file ``path`` if it is one of at most ``limit`` bytes, else
    ``None`` (missing, unreadable, larger, not JSON, nested past the parser's stack, or not
    an object): what a record beside a checkpoint is read with, trusting nothing in it.

    >>> read_json_object("/nonexistent/record.json") is None
    True
    """
    try:
        if os.path.getsize(path) > limit:
            return None
        with open(path, "rb") as f:
            text = f.read(limit + 1)
    except OSError:
        return None
    import json

    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's stack
        return None
    return doc if isinstance(doc, dict) else None


def read_record(directory: str) -> dict | None:
    """The run record in ``directory`` (``None`` where there is none, or it is not one
    ``ckpt train`` wrote)."""
    doc = read_json_object(os.path.join(directory, RECORD_NAME))
    if doc is None or doc.get("written_by") != WRITER or doc.get("version") != 1 \
            or doc.get("swapped") is not False or not isinstance(doc.get("files"), dict):
        return None
    return doc


def write_record(directory: str, files: dict[str, dict], api: str = "keras") -> str:
    """Write the record naming ``files`` (basename -> :func:`file_digest`) atomically (a
    temporary file renamed over it), so a reader never sees half of one.

    Returns:
        `str`: the record's path.
    """
    import json

    path = os.path.join(directory, RECORD_NAME)
    doc = {"written_by": WRITER, "version": 1, "api": api, "swapped": False,
           "fit_order": True,
           "note": "each file was saved by ckpt train during fit(), never swapped by "
                   "SwapEMAWeights: its EMA copies are the averages; its optimizer was built "
                   "with model.trainable_variables (fit()'s order)",
           "files": dict(sorted(files.items()))}
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def recorded_files(directory: str) -> dict[str, dict]:
    """The files the record in ``directory`` names (empty where there is none)."""
    doc = read_record(directory)
    return dict(doc["files"]) if doc else {}


def lists_all(directory: str, names: list[str]) -> bool:
    """Whether the run record in ``directory`` (a local one ``ckpt train`` wrote) names every
    one of ``names``: the checkpoints there are the trainer's own ``ckpt-<step>.keras``
    series, so the highest step is its latest, as a ``checkpoint`` state file would say.
    Names only: which of them the record vouches for is read when one is opened."""
    if "://" in directory or not os.path.isfile(os.path.join(directory, RECORD_NAME)):
        return False
    files = recorded_files(directory)
    return bool(names) and all(n in files for n in names)


def not_swapped_record(path: str) -> str | None:
    """The run record that states ``path`` was not saved swapped, or ``None``.

    Only a local file named in the record beside it, whose size and SHA-256 are the recorded
    ones, is vouched for.

    Returns:
        `str | None`: the record's path.
    """
    found = vouching_record(path)
    return found[0] if found else None


def has_record(path: str) -> bool:
    """Whether a run record sits beside ``path`` (one stat; :func:`vouching_record` says
    whether it vouches for the file)."""
    return "://" not in path and os.path.isfile(
        os.path.join(os.path.dirname(path) or ".", RECORD_NAME))


def vouching_record(path: str) -> tuple[str, dict] | None:
    """The run record that vouches for ``path`` (named in it, bytes unchanged) and what it
    states: ``{"not_swapped": True, "fit_order": bool}``; ``None`` where none does."""
    if "://" in path or not os.path.isfile(path):
        return None
    directory = os.path.dirname(path) or "."
    record = os.path.join(directory, RECORD_NAME)
    if not os.path.isfile(record):  # the common case: one stat, nothing read
        return None
    doc = read_record(directory)
    said = doc["files"].get(os.path.basename(path)) if doc else None
    if not isinstance(said, dict) or said.get("size") != os.path.getsize(path):
        return None
    try:
        if file_digest(path) != {"size": said.get("size"), "sha256": said.get("sha256")}:
            return None
    except OSError:
        return None
    return record, {"not_swapped": True, "fit_order": doc.get("fit_order") is True}
