"""A run directory's ``checkpoint`` state file: which checkpoints it lists and which is the
latest (:func:`read_state_file`, :func:`read_state_order`), each name resolved as TensorFlow
and a copied run mean it (:func:`in_dir`). Moved out of :mod:`ckpt_tools.locate`, which
imports these back (``from .locate import STATE_FILE, read_state_file`` keeps working)."""

from __future__ import annotations

import os
import posixpath

from .errors import CorruptCheckpointError
from .formats._io import is_url, open_binary, state_entries
from .formats.v1 import find_shards, shard_pattern

STATE_FILE = "checkpoint"
_MAX_STATE_BYTES = 16 << 20  # a state file lists paths: even 100,000 of them fit


def read_state_file(directory: str) -> list[str]:
    """Returns the checkpoint prefixes listed in ``directory/checkpoint``, latest last.

    Raises:
        CheckpointNotFoundError: if there is no state file.
        CorruptCheckpointError: if it names no checkpoint.
    """
    if is_url(directory):  # names resolved inside the URL directory (see locate_url.state_target)
        from .locate_url import state_target

        directory = directory.rstrip("/")
        return [state_target(directory, p)
                for p in read_state_file_at(directory + "/" + STATE_FILE)]
    return [in_dir(directory, p) for p in read_state_file_at(os.path.join(directory, STATE_FILE))]


def read_state_file_at(path: str) -> list[str]:
    """Returns the checkpoint names a state file lists, as written (latest last).

    Raises:
        CheckpointNotFoundError: if there is no state file.
        CorruptCheckpointError: if it names no checkpoint.
    """
    latest, every = _parse_state_file(path)
    if latest in every:
        every.remove(latest)
    return every + [latest]


def read_state_order(directory: str) -> tuple[list[str], str]:
    """Returns ``(all_model_checkpoint_paths as listed, model_checkpoint_path)`` of
    ``directory/checkpoint``, resolved as :func:`read_state_file` resolves them. After a
    rollback (``tf.train.update_checkpoint_state(d, "model.ckpt-3", [... "model.ckpt-5"])``)
    the latest is not the last one listed.

    Raises:
        CheckpointNotFoundError: if there is no state file.
        CorruptCheckpointError: if it names no checkpoint.
    """
    if is_url(directory):
        from .locate_url import state_target

        directory = directory.rstrip("/")
        latest, every = _parse_state_file(directory + "/" + STATE_FILE)
        return [state_target(directory, p) for p in every], state_target(directory, latest)
    latest, every = _parse_state_file(os.path.join(directory, STATE_FILE))
    return [in_dir(directory, p) for p in every], in_dir(directory, latest)


def _parse_state_file(path: str) -> tuple[str, list[str]]:
    """``(model_checkpoint_path, all_model_checkpoint_paths)`` as written in state file
    ``path``."""
    with open_binary(path) as f:  # regular files only, and a bounded read
        raw = f.read(_MAX_STATE_BYTES + 1)
    if len(raw) > _MAX_STATE_BYTES:
        raise CorruptCheckpointError(
            f"checkpoint state file is larger than {_MAX_STATE_BYTES} bytes", path=path)
    latest, every = None, []
    for field, value in state_entries(raw):
        if field == "model_checkpoint_path":
            latest = value
        else:
            every.append(value)
    if latest is None:
        raise CorruptCheckpointError("checkpoint state file has no model_checkpoint_path",
                                     path=path)
    return latest, every


def in_dir(directory: str, name: str) -> str:
    if is_url(name):
        # A run trained on gs:// or s3:// and copied down (gsutil cp -r) keeps URLs in its
        # state file: the copy beside the state file is the one meant, as for absolute paths.
        local = os.path.join(directory, posixpath.basename(name.rstrip("/")))
        return local if prefix_exists(local) else name
    if os.path.isabs(name):
        # Checkpoints copied from another machine or directory keep absolute paths in their
        # state file: the copy beside the state file is the one meant, even when the original
        # still exists (reading that would show, average or --force-replace another run).
        local = os.path.join(directory, os.path.basename(name))
        if os.path.dirname(name) == os.path.abspath(directory):
            # The same file, named as the user typed the directory (titles, errors and
            # notes then show the path the user gave, not the one the run recorded).
            return local
        if os.path.dirname(name) != os.path.abspath(directory) and prefix_exists(local) and \
                os.path.realpath(local) != os.path.realpath(name):
            return local
        if not prefix_exists(name) and prefix_exists(local):
            return local
        return name
    return os.path.join(directory, name)


def prefix_exists(prefix: str) -> bool:
    pattern = shard_pattern(prefix)
    if pattern is not None:  # a sharded V1 checkpoint exists where its first shard does
        return os.path.exists(pattern.replace("?????", "00000"))
    return (os.path.isfile(prefix + ".index") or os.path.isfile(prefix)
            or find_shards(prefix) is not None)
