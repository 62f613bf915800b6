"""Where a checkpoint named by a URL is (:func:`locate_url`, which :func:`~ckpt_tools.locate.
locate` calls for ``s3://``, ``gs://``, ``http(s)://`` … paths), and which checkpoint a remote
state file names (:func:`state_target`): moved out of :mod:`ckpt_tools.locate`, whose local
half does not need it (imported there only when a path is a URL)."""

from __future__ import annotations

import os
import posixpath

from .errors import CheckpointNotFoundError, CorruptCheckpointError, UnsupportedFormatError
from .formats._io import is_url
from .locate import (
    DATA_RE,
    FILE_NAME_RE,
    STATE_FILE,
    Location,
    chosen,
    read_state_file_at,
)
from .run_latest import pick_latest


def locate_url(url: str) -> Location:
    """Resolves a URL to a V2 checkpoint with at most two directory listings (one when the URL
    names a directory with its trailing ``/``, a prefix or a file): whether the index, shards
    and ``.meta`` exist, and the shard sizes, all come from the listing, so ``ckpt list`` then
    costs the state file, the index and the ``.meta`` (four requests in all on S3, whatever
    the checkpoint's size; five for a run directory named without its ``/``, whose parent is
    listed first to tell it from a checkpoint prefix of that name).

    Raises:
        CheckpointNotFoundError: nothing checkpoint-like at ``url``.
        UnsupportedFormatError: a V1, SavedModel or Keras checkpoint (read those locally).
        RemoteAccessError: forbidden, or the network failed.
    """
    from .formats import remote

    store = remote.begin()  # a fresh session: no listing cached by an earlier command
    bare = url.rstrip("/")
    named_file = FILE_NAME_RE.search(bare) or os.path.basename(bare) == STATE_FILE
    if not named_file and store.is_http(bare):
        return _locate_http(store, url)
    # As locally: a prefix beside its .index is that checkpoint even where a same-named
    # "directory" exists (run/model.ckpt-5/ made by another tool); the parent's listing,
    # which reading the prefix needs anyway, says so. A trailing '/' names the directory.
    in_bucket = "/" in bare.split("://", 1)[-1]
    if not named_file and not url.endswith("/") and in_bucket and \
            store.size(bare + ".index") is not None:
        return _url_prefix(store, bare, url)
    if not named_file and (url.endswith("/") or store.is_dir(bare)):
        names = store.listing(bare)
        if STATE_FILE in names:
            state = remote.url_join(bare, STATE_FILE)
            return _url_prefix(store, state_target(bare, read_state_file_at(state)[-1]),
                               url, state)
        indexes = sorted(n for n in names if n.endswith(".index"))
        if indexes:
            newest, why = pick_latest(url, indexes, indexes,
                                      lambda n: str(names[n].get("LastModified", "")))
            found = _url_prefix(store, remote.url_join(bare, newest[: -len(".index")]), url)
            return chosen(found, url, indexes, newest, why)
        if "saved_model.pb" in names or any(n.endswith((".keras", ".h5")) for n in names):
            raise UnsupportedFormatError(
                f"{url}: only TensorFlow V2 checkpoints (.index + .data) are read from URLs; "
                "copy SavedModels and Keras files locally")
        raise CheckpointNotFoundError(
            f"{url}: no checkpoint there (no 'checkpoint' state file, no .index)")
    if os.path.basename(bare) == STATE_FILE:
        return _url_prefix(store, state_target(remote.url_parent(bare),
                                                read_state_file_at(bare)[-1]), url, bare)
    m = DATA_RE.match(bare)
    prefix = m.group(1) if m else bare
    for suffix in (".index", ".meta"):
        if bare.endswith(suffix):
            prefix = bare[: -len(suffix)]
    return _url_prefix(store, prefix, url)


def _locate_http(store, url: str) -> Location:
    """Resolves an ``http(s)://`` URL that names no file: a run directory with a
    ``checkpoint`` state file or, not ending in ``/`` and failing that, a checkpoint prefix
    (its ``.index`` exists). No listing (a web server gives none with sizes): each object is
    asked for by name, the state file first, so that either form costs at most four
    requests for ``ckpt list`` (a prefix: a 404, the index, the .meta, an object graph).
    An HTML page answering for a file is its absence (see ``remote_http.is_html_page``), and
    a "state file" that does not parse beside a prefix's ``.index`` leaves the prefix.

    Raises:
        CheckpointNotFoundError: neither is there.
    """
    from .formats import remote

    bare = url.rstrip("/")
    state = remote.url_join(bare, STATE_FILE)
    # Without the '/' the state file is a probe (the URL may be a prefix): a 403 is its
    # absence there, as a public bucket without list permission answers for a missing
    # object; a run directory's (URL ending in '/') and a prefix's .index are needed, and
    # stay forbidden.
    if (store.size(state) if url.endswith("/") else store.probe_size(state)) is not None:
        try:
            entries = read_state_file_at(state)
        except CorruptCheckpointError:
            # Without the slash the URL may be a prefix, and what answered for the state
            # file a server's page for any path (a web app's fallback): the prefix's .index
            # decides; a URL ending in '/' names the run directory, whose state file is bad.
            if url.endswith("/") or store.size(bare + ".index") is None:
                raise
            return _url_prefix(store, bare, url)
        return _url_prefix(store, state_target(bare, entries[-1]), url, state)
    if not url.endswith("/") and store.size(bare + ".index") is not None:
        return _url_prefix(store, bare, url)
    if store.probe_size(remote.url_join(bare, "saved_model.pb")) is not None:  # docs: exit 5
        raise UnsupportedFormatError(
            f"{url}: a SavedModel; only TensorFlow V2 checkpoints (.index + .data) are read "
            "from URLs: copy SavedModels locally")
    tried = state if url.endswith("/") else f"{state}, no {bare}.index"
    raise CheckpointNotFoundError(
        f"{url}: not found (no {tried}; an http(s):// directory cannot be listed, so a run "
        "directory needs its 'checkpoint' state file, or give the checkpoint prefix URL)")


def state_target(directory: str, name: str) -> str:
    """The URL of the checkpoint a remote state file in URL ``directory`` names: a relative
    name inside ``directory``; a URL or an absolute local path (the training machine's, or
    another bucket's after a copy) by its base name in ``directory`` when that checkpoint is
    there; a URL in the same bucket as written.

    A state file in a bucket is not trusted to send reads elsewhere: a name outside the
    bucket (another bucket or host, ``file://``, a local path) is refused unless its base name
    exists in ``directory``; a relative name with a ``..`` segment is refused (a store keeps it
    as part of the key, so readers disagree on what it names).

    Raises:
        UnsupportedFormatError: the name points outside the state file's bucket.
    """
    from .formats import remote

    state = directory + "/" + STATE_FILE
    if is_url(name) or os.path.isabs(name):
        target = remote.normalize(name) if is_url(name) else name
        if is_url(name) and remote.same_bucket(target, directory):
            return target
    else:
        if ".." in name.split("/"):
            # Object stores keep '..' as part of a key (TensorFlow's file systems join the
            # strings), so whether it means a parent folder is up to the reader: refused, as
            # in URLs, rather than read from a place another tool would not read.
            raise UnsupportedFormatError(
                f"{state}: names checkpoint {name!r}, whose '..' an object store keeps as part "
                "of the key; open the checkpoint by its URL instead")
        target = remote.normalize(directory + "/" + name)
        if remote.same_bucket(target, directory):
            return target
    local = directory + "/" + posixpath.basename(name.rstrip("/"))
    if remote.session().probe_size(local + ".index") is not None:
        return local  # a copied run: its state file still names where it was written
    raise UnsupportedFormatError(
        f"{state}: names checkpoint {name!r}, outside {remote.bucket_of(directory)}; a "
        "remote state file may only name checkpoints in its own bucket (refusing to read "
        "elsewhere); open the checkpoint by its URL instead")


def _url_prefix(store, prefix: str, original: str, state: str | None = None) -> Location:
    from .formats import remote

    if store.size(prefix + ".index") is not None:
        meta = prefix + ".meta"
        # its own graph, if saved: a probe (over http(s) a 403 is its absence)
        return Location(prefix, "v2", meta if store.probe_size(meta) is not None else None,
                        state)
    if store.probe_size(prefix) is not None or \
            store.probe_info(prefix + "-00000-of-00001") is not None:
        if prefix.endswith((".keras", ".h5", ".hdf5")):  # never a "V1 checkpoint" (u17 F13)
            raise UnsupportedFormatError(
                f"{original}: Keras files are not read from URLs, only TensorFlow V2 "
                "checkpoints (.index + .data): download it and give the local path")
        raise UnsupportedFormatError(
            f"{original}: only TensorFlow V2 checkpoints (.index + .data) are read from URLs; "
            "copy V1 checkpoints locally")
    if state:
        raise CheckpointNotFoundError(
            f"{state} names checkpoint {prefix!r}, but {prefix}.index does not exist")
    if not store.is_dir(remote.url_parent(prefix)):
        raise CheckpointNotFoundError(f"{original}: not found")
    raise CheckpointNotFoundError(f"{original}: no checkpoint found (no {prefix}.index)")
