"""Writing checkpoints to URLs: refusing outputs that would replace an input or an existing
object (:func:`check_new`), and uploading in an order (under a lock on S3) such that a reader
never sees an index with data it was not written with (:func:`upload`).
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import CheckpointError, CheckpointNotFoundError, OutputError
from . import remote_s3
from ._write import shadowed_checkpoint
from .remote import normalize, session, url_join
from .remote_errors import deadline, translate

#: Names of a run's files: the state file, and a checkpoint's index, data shards and graph.
_RUN_FILE = re.compile(r"(^checkpoint$|\.index$|\.meta$|\.data-\d+-of-\d+$)")


def _upload_rank(name: str) -> int:
    """Upload order: data first, then the ``.index`` that points into it, then the ``.meta``,
    and the ``checkpoint`` state file that names the checkpoint last."""
    if name == "checkpoint":
        return 3
    return 2 if name.endswith(".meta") else 1 if name.endswith(".index") else 0


def check_new(directory: str, names: list[str], *, overwrite: bool = False,
              whole_directory: bool = True) -> None:
    """Refuses (exit 7) to write ``names`` into URL ``directory`` where that would replace
    an input of this command, or, without ``overwrite``, any object that exists. The same
    rules as local writes (``formats/_write.py``): a checkpoint output directory
    (``whole_directory``) that holds an input is refused with or without ``--force`` (its
    ``checkpoint`` state file would be rewritten); a single-file output is refused only when
    it is itself an input.

    Raises:
        OutputError: an input would be replaced, or an object exists and ``overwrite`` is
            false.
        RemoteAccessError: forbidden, or the network failed.
    """
    from ..errors import OutputError

    if directory.lower().startswith(("http://", "https://")):
        raise OutputError(
            f"{directory.rstrip('/')}/: http(s):// is read-only here (plain HTTP has no "
            "agreed way to write objects, let alone atomically); write to a local directory, "
            "s3:// or gs://")
    store = session()
    where = normalize(directory)
    for key, url in store.inputs.items():
        if where == key or where.startswith(key + "/"):
            # s3://b/run/model.ckpt-5.index/ as a "directory": its objects would shadow the
            # input object of that name in listings (the run would read as missing).
            raise OutputError(f"{directory.rstrip('/')}/: is under the input object {url}; "
                              "refusing to write there; choose another --out")
    for name in names:
        target = normalize(url_join(directory, name))
        if target in store.inputs:
            raise OutputError(f"{url_join(directory, name)}: is input "
                              f"{store.inputs[target]}; refusing to overwrite it (--force "
                              "never replaces inputs)")
    if whole_directory:
        for key, url in store.inputs.items():
            if key.rsplit("/", 1)[0] == where:
                raise OutputError(
                    f"{directory.rstrip('/')}/: holds the input {url}; refusing to write a "
                    "checkpoint there (its 'checkpoint' state file and files would be "
                    "replaced); choose another --out")
        _refuse_shadowing(store, directory, where)
    try:
        existing = session().listing(directory)
    except CheckpointNotFoundError:
        return
    held = next((url for key, url in store.inputs.items()
                 if key.rsplit("/", 1)[0] == where), None)
    if held is not None:
        # The run's history counts as input, as locally: beside an input, its state file and
        # every checkpoint's files are never replaced (--force onto model.ckpt-3.index would
        # destroy that checkpoint).
        for name in names:
            if name in existing and _RUN_FILE.search(name):
                raise OutputError(
                    f"{url_join(directory, name)}: is part of the run of input {held} (the "
                    "run's state file and checkpoints count as input); refusing to replace "
                    "it (--force never replaces inputs); choose another --out")
    clash = [n for n in names if n in existing]
    if clash and not overwrite:
        raise OutputError(f"{url_join(directory, clash[0])}: already exists (pass --force to "
                          "replace it)")


def _refuse_shadowing(store, directory: str, where: str) -> None:
    """Refuses an output directory named like a checkpoint of an input's run
    (``s3://b/run/model.ckpt-5/`` beside ``model.ckpt-5.index``): that prefix would then
    resolve to the new directory, as locally (``Inputs.refuse_shadowing``).

    Raises:
        OutputError: naming ``directory`` and the input whose run it is in (exit 7).
    """
    parent, _, name = where.rpartition("/")
    held = next((url for key, url in store.inputs.items()
                 if key.rsplit("/", 1)[0] == parent), None)
    if held is None or not name:
        return
    parent_url = directory.rstrip("/").rsplit("/", 1)[0]
    try:
        siblings = store.listing(parent_url)
    except CheckpointNotFoundError:
        return
    state = (store.fetch(url_join(parent_url, "checkpoint")) if "checkpoint" in siblings
             else None)
    if shadowed_checkpoint(name, siblings, state):
        shown = directory.rstrip("/")
        raise OutputError(
            f"{shown}/: would shadow checkpoint {shown} of the run of input {held} (that "
            "prefix would then read this directory instead of the checkpoint); refusing to "
            "write there; choose another --out")


def upload(files: list[str], directory: str, *, overwrite: bool = False,
           progress=None, whole_directory: bool = True) -> list[str]:
    """Uploads local ``files`` into URL ``directory`` so that a reader never sees an index
    with data it was not written with.

    Order: data shards (and single-file outputs) first, then the ``.index``, the ``.meta``,
    and the ``checkpoint`` state file last; each object appears whole. Replacing (``--force``)
    an existing checkpoint first deletes its old ``.index``: meanwhile, and after an
    interruption, that name reads as missing (exit 3), never as old index with new data
    (readers also pin their reads to the listed ETags, so one that listed the old objects
    is refused when they change). Data shards the old index had and the new one lacks are
    deleted last. On S3 a writer first creates a lock object in ``directory`` with
    ``If-None-Match: *`` (a concurrent writer is refused, exit 7), and objects that were new
    when checked are created the same way.

    Args:
        files: local files, uploaded under their base names.
        directory: the destination URL directory.
        overwrite: replace objects that exist; otherwise refuse before uploading anything.
        progress: called with bytes as they are uploaded (S3: per part; other stores: per
            file).

    Returns:
        The URLs written, in upload order.

    Raises:
        OutputError: an object exists and ``overwrite`` is false, an input would be
            replaced, or another writer holds the directory's lock (exit 7).
        CheckpointNotFoundError, RemoteAccessError: the bucket is missing, forbidden, or the
            network failed (the message says what was left behind).
    """
    store = session()
    names = sorted(files, key=lambda f: (_upload_rank(os.path.basename(f)), f))
    bases = [os.path.basename(f) for f in names]
    fs, dir_path = store.fs(directory)
    conditional = remote_s3.is_s3(fs)
    lock = lock_directory(directory, overwrite=overwrite) if conditional else None
    try:
        store.forget(directory)  # list again, under the lock
        check_new(directory, bases, overwrite=overwrite, whole_directory=whole_directory)
        try:
            existing = store.listing(directory)
        except CheckpointNotFoundError:
            existing = {}
        return _upload_in_order(store, fs, names, directory, existing, conditional, progress)
    finally:
        store.forget(directory)  # what was listed is out of date
        unlock_directory(fs, lock)


#: Output directories whose writer lock this process holds (:func:`reserved`): normalized
#: URL -> the lock object's path.
_HELD: dict[str, str] = {}


@contextmanager
def reserved(directory: str, *, overwrite: bool = False) -> Iterator[None]:
    """Holds URL ``directory``'s writer lock (S3) from before the command reads any tensor
    until it has uploaded (:func:`upload` inside uses it): a missing bucket or another
    writer is refused up front, not after minutes of work. Other stores: nothing to hold.

    Raises:
        CheckpointNotFoundError: the bucket does not exist.
        OutputError: another writer holds the lock (its owner is named); with ``overwrite``
            a lock whose owner ran on this host and is gone is broken instead.
        RemoteAccessError: forbidden, or the network failed.
    """
    store = session()
    fs, _ = store.fs(directory)
    key = normalize(directory)
    if not remote_s3.is_s3(fs) or key in _HELD:
        yield
        return
    lock = lock_directory(directory, overwrite=overwrite)
    _HELD[key] = lock
    try:
        yield
    finally:
        del _HELD[key]
        unlock_directory(fs, lock)


def unlock_directory(fs, lock: str | None) -> None:
    """Deletes the lock :func:`lock_directory` created (best effort; None: nothing)."""
    if lock is None:
        return
    try:
        remote_s3.remove(fs, lock, deadline())
    except Exception:  # noqa: BLE001 - the write's own outcome is what matters
        pass


def lock_directory(directory: str, *, overwrite: bool = False) -> str | None:
    """Creates the writer lock object in S3 URL ``directory`` (``If-None-Match: *``), recording
    its owner (host, pid, time), and returns its path for :func:`unlock_directory`; None when
    this process holds it already (:func:`reserved`). A lock left by a writer that ran on
    this host and no longer runs (kill -9, a crash) is broken with ``overwrite`` (--force);
    any other existing lock is refused, naming its owner.

    Raises:
        OutputError: another writer holds it (exit 7).
        CheckpointNotFoundError: the bucket does not exist.
        RemoteAccessError: forbidden, or the network failed.
    """
    if normalize(directory) in _HELD:
        return None
    store = session()
    fs, dir_path = store.fs(directory)
    lock_url = url_join(directory, remote_s3.LOCK_NAME)
    for attempt in (0, 1):
        try:
            store.requests += 1
            with translate(lock_url, deadline()):
                return remote_s3.lock(fs, dir_path, deadline())
        except CheckpointNotFoundError:
            bucket = directory.split("://", 1)[0] + "://" + \
                directory.split("://", 1)[1].split("/", 1)[0]
            raise CheckpointNotFoundError(
                f"{bucket}/: the bucket does not exist (--out {directory}); create it first, "
                "or check the name; nothing was written") from None
        except OutputError:
            owner = _lock_owner(fs, lock_url)
            dead = _dead_here(owner)
            if attempt == 0 and overwrite and dead:
                # Best effort against a second breaker: the lock is deleted only if it is
                # still the dead owner's, and then created again conditionally.
                if _lock_owner(fs, lock_url) == owner:
                    store.requests += 1
                    with translate(lock_url, deadline()):
                        remote_s3.remove(fs, fs._strip_protocol(lock_url), deadline())
                continue
            raise OutputError(f"{directory.rstrip('/')}/: another ckpt command is writing "
                              f"there ({_describe(owner, lock_url)}); nothing was written. "
                              f"{_advice(owner, dead, lock_url)}") from None
    raise OutputError(f"{directory.rstrip('/')}/: another ckpt command took its lock "
                      f"{lock_url} meanwhile; nothing was written")


def _lock_owner(fs, lock_url: str) -> dict | None:
    """The owner a lock object records (``host``, ``pid``, ``time``, ``token``), or None
    when it cannot be read or is not ours."""
    try:
        with translate(lock_url, deadline()):
            body = remote_s3.get(fs, fs._strip_protocol(lock_url), [(0, 4096)], None,
                                 deadline())[0]
        owner = json.loads(body)
    except Exception:  # noqa: BLE001 - an unreadable lock is described as such
        return None
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int) or \
            not isinstance(owner.get("host"), str):
        return None
    return owner


def _dead_here(owner: dict | None) -> bool:
    """Whether ``owner`` ran on this host and its process is gone."""
    if owner is None or owner["host"] != socket.gethostname() or owner["pid"] <= 0:
        return False
    if owner["pid"] == os.getpid():
        return False  # this process: a lock it still holds, or one it failed to remove
    try:
        os.kill(owner["pid"], 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: alive, another user's
        return False
    return False


def _describe(owner: dict | None, lock_url: str) -> str:
    if owner is None:
        return f"its lock {lock_url} exists"
    since = f" since {owner['time']}" if isinstance(owner.get("time"), str) else ""
    return (f"lock {lock_url} held by pid {owner['pid']} on host "
            f"{owner['host']!r}{since}")


def _advice(owner: dict | None, dead: bool, lock_url: str) -> str:
    if dead:
        return ("That process is no longer running (interrupted, e.g. kill -9): pass --force "
                "to break its lock and write")
    if owner is not None and owner["host"] == socket.gethostname():
        return "That process is still running on this host: wait for it to finish"
    return ("If no writer is running, one was interrupted: delete that object and retry")


def _upload_in_order(store, fs, names: list[str], directory: str, existing: dict,
                     conditional: bool, progress) -> list[str]:
    bases = [os.path.basename(f) for f in names]
    # A checkpoint being replaced: an .index uploaded with its data shards. A single file
    # that is merely named *.index (an export) replaces that one object, nothing else.
    old_indexes = [b for b in bases if b.endswith(".index") and b in existing
                   and any(o.startswith(b[: -len(".index")] + ".data-") for o in bases)]
    removed: list[str] = []
    written: list[str] = []
    try:
        for base in old_indexes:
            url = url_join(directory, base)
            store.requests += 1
            with translate(url, deadline()):
                if conditional:
                    remote_s3.remove(fs, fs._strip_protocol(url), deadline())
                else:
                    fs.rm_file(fs._strip_protocol(url))
            removed.append(base)
        for local in names:
            base = os.path.basename(local)
            url = url_join(directory, base)
            size = os.path.getsize(local)
            store.requests += 1
            if conditional:
                wait = deadline(size)
                with translate(url, wait):
                    remote_s3.put(fs, local, fs._strip_protocol(url),
                                  create=base not in existing, timeout=wait,
                                  progress=progress)
            else:
                store.call(fs, url, "put_file", local, fs._strip_protocol(url), nbytes=size)
                if progress:
                    progress(size)
            written.append(url)
    except CheckpointError as exc:
        if removed:
            prefix = removed[0][: -len(".index")]
            left = (f"; the old {removed[0]} had been deleted first, so "
                    f"{url_join(directory, prefix)} reads as missing (never as a mix of old "
                    "and new) until a rerun completes")
        elif written:
            left = (f"; {len(written)} new object(s) were uploaded, no .index: nothing "
                    "readable was changed")
        else:
            left = "; nothing was uploaded"
        exc.args = (str(exc) + left,)
        raise
    # Shards of a replaced checkpoint that the new one does not have (fewer shards now).
    for base in old_indexes:
        stem = base[: -len(".index")] + ".data-"
        for name in sorted(existing):
            if name.startswith(stem) and name not in bases:
                url = url_join(directory, name)
                try:
                    store.call(fs, url, "rm_file", fs._strip_protocol(url))
                except CheckpointError:
                    pass  # an unreferenced leftover: harmless to readers
    return written


__all__ = ["check_new", "lock_directory", "reserved", "unlock_directory", "upload"]
