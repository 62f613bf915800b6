"""``open_checkpoint``: find a checkpoint from any path a user might type, and read it.

Accepted paths: a training directory (its ``checkpoint`` state file names the latest
checkpoint), a checkpoint prefix, a ``.index``, ``.data-*`` or ``.meta`` file, a V1 file or any
shard of a sharded V1 checkpoint (or its ``-?????-of-N`` pattern), a SavedModel directory, its
``saved_model.pb``, or a TF Serving model directory (its highest numeric version), and Keras
``.keras``/``.h5`` files.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from . import roles as _roles
from .errors import (
    CheckpointNotFoundError,
    CorruptCheckpointError,
    OptionError,
    UnsupportedFormatError,
    VariableNotFoundError,
)
from .formats import open_reader
from .formats._io import (
    canonical_location,
    is_url,
    open_binary,
    require_regular,
    state_entries,
)
from .formats._record import Frozen, replace
from .formats.dtypes import STRING
from .formats.entry import TensorEntry
from .formats.meta import MetaGraph, read_meta_graph
from .formats.objgraph import OBJECT_GRAPH_KEY, ObjectGraph, parse_object_graph, readable_name
from .formats.savedmodel import (
    SAVED_MODEL_FILES,
    read_saved_model,
    saved_model_file,
    serving_versions,
    variables_prefix,
)
from .formats.v1 import find_shards, is_v1_file, shard_base, shard_pattern

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the list path
if TYPE_CHECKING:
    import numpy as np

    from .formats import Reader

STATE_FILE = "checkpoint"
_MAX_STATE_BYTES = 16 << 20  # a state file lists paths: even 100,000 of them fit
_LIST_ITEM = re.compile(r"(^|/)_\w+/\d+(/|$)")
_DATA_RE = re.compile(r"^(.*)\.data-\d{5}-of-\d{5}$")
# Names that are files by contract: a FIFO, device, socket or directory under one is refused.
# (".data-00000-of-00001" and V1 shards "model.ckpt-00000-of-00002" end alike).
_FILE_NAME_RE = re.compile(r"(\.(index|meta|keras|h5|hdf5|pb|pbtxt)|-\d{5}-of-\d{5})$")


class Variable(Frozen):
    """One stored tensor, as ``ckpt list`` shows it.

    Attributes:
        name: checkpoint key (what ``tf.train.load_checkpoint(...).get_tensor`` takes).
        dtype: TensorFlow dtype name (``float32``, ``bfloat16``, ``string``…).
        shape: full shape (for partitioned variables, of the whole tensor).
        role: one of :data:`ckpt_tools.roles.ROLES`.
        collections: graph collections it belongs to (needs a ``.meta``).
        ema_of: for an EMA shadow, the key of the variable it averages, only where the file
            proves it; ``None`` for an average it cannot pair (then ``ema_candidates``).
        ema: for a variable whose one EMA shadow the file proves, the shadow's key. ``None``
            both when it has no shadow and when which one is its average is not proven
            (several EMA objects' averages, or averages the file cannot pair: then
            ``ema_candidates`` lists them; :func:`ckpt_tools.emamap.decide_pairing` applies
            ``ema_name=``/``apply_order=``). Never a candidate picked as if proven.
        slot_of: for an optimizer slot, the key of its variable.
        nbytes: bytes of stored data.
        partitions: number of stored slices (0 when not partitioned).
        path: readable object path for TF2 keys (``model/dense/kernel``), else ``None``.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    role: str
    collections: tuple[str, ...] = ()
    ema_of: str | None = None
    ema: str | None = None
    slot_of: str | None = None
    nbytes: int = 0
    partitions: int = 0
    path: str | None = None
    ema_style: str | None = None  # how the average is kept (roles.EMA_STYLES), on both sides
    # An average the file cannot pair (ema_of is None): the variables it may belong to; a
    # variable whose average is not proven (ema is None): the averages it may take.
    ema_candidates: tuple[str, ...] = ()
    _fields = ("name", "dtype", "shape", "role", "collections", "ema_of", "ema", "slot_of",
               "nbytes", "partitions", "path", "ema_style", "ema_candidates")

    def __init__(self, name: str, dtype: str, shape: tuple[int, ...], role: str,
                 collections: tuple[str, ...] = (), ema_of: str | None = None,
                 ema: str | None = None, slot_of: str | None = None, nbytes: int = 0,
                 partitions: int = 0, path: str | None = None, ema_style: str | None = None,
                 ema_candidates: tuple[str, ...] = ()) -> None:
        self.__dict__.update(
            name=name, dtype=dtype, shape=shape, role=role, collections=collections,
            ema_of=ema_of, ema=ema, slot_of=slot_of, nbytes=nbytes, partitions=partitions,
            path=path, ema_style=ema_style, ema_candidates=ema_candidates)

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    def to_dict(self) -> dict:
        """Every field (tuples as lists) and ``size``."""
        d = dict(self.__dict__)
        d["shape"] = list(self.shape)
        d["collections"] = list(self.collections)
        d["ema_candidates"] = list(self.ema_candidates)
        d["size"] = self.size
        return d


class Location(Frozen):
    """What a user-supplied path resolved to."""

    prefix: str  # checkpoint prefix (V2), file (V1) or shard pattern (sharded V1)
    format: str  # "v2" or "v1" (object-based is detected after opening)
    meta_path: str | None
    state_file: str | None = None
    saved_model: str | None = None  # the saved_model.pb whose variables/ this is
    # Set when a directory without a state file held several candidates: which one was taken
    # and why, for the CLI to say so (one stderr note) instead of choosing silently.
    choice: str | None = None
    _fields = ("prefix", "format", "meta_path", "state_file", "saved_model", "choice")

    def __init__(self, prefix: str, format: str, meta_path: str | None,  # noqa: A002
                 state_file: str | None = None, saved_model: str | None = None,
                 choice: str | None = None) -> None:
        self.__dict__.update(prefix=prefix, format=format, meta_path=meta_path,
                             state_file=state_file, saved_model=saved_model, choice=choice)

    @property
    def name(self) -> str:
        """The checkpoint's own name, the default name of what is derived from it:
        ``model.ckpt-7`` for ``…/model.ckpt-7-?????-of-00002``, ``variables`` in a SavedModel."""
        return os.path.basename(shard_base(self.prefix))


@contextmanager
def _errors_in(path: str):
    """Adds ``path`` to CheckpointErrors raised without naming a file (slice, shape, dtype)."""
    try:
        yield
    except (CorruptCheckpointError, UnsupportedFormatError) as exc:
        if str(exc).startswith(path) or getattr(exc, "path", None):
            raise
        if isinstance(exc, CorruptCheckpointError):
            raise CorruptCheckpointError(str(exc), path=path) from exc
        raise UnsupportedFormatError(f"{path}: {exc}") from exc


def read_state_file(directory: str) -> list[str]:
    """Returns the checkpoint prefixes listed in ``directory/checkpoint``, latest last.

    Raises:
        CheckpointNotFoundError: if there is no state file.
        CorruptCheckpointError: if it names no checkpoint.
    """
    if is_url(directory):  # names resolved inside the URL directory (see _state_target)
        directory = directory.rstrip("/")
        return [_state_target(directory, p)
                for p in read_state_file_at(directory + "/" + STATE_FILE)]
    return [_in_dir(directory, p) for p in read_state_file_at(os.path.join(directory, STATE_FILE))]


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
        directory = directory.rstrip("/")
        latest, every = _parse_state_file(directory + "/" + STATE_FILE)
        return [_state_target(directory, p) for p in every], _state_target(directory, latest)
    latest, every = _parse_state_file(os.path.join(directory, STATE_FILE))
    return [_in_dir(directory, p) for p in every], _in_dir(directory, latest)


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


def _in_dir(directory: str, name: str) -> str:
    if os.path.isabs(name):
        # Checkpoints copied from another machine or directory keep absolute paths in their
        # state file: the copy beside the state file is the one meant, even when the original
        # still exists (reading that would show, average or --force-replace another run).
        local = os.path.join(directory, os.path.basename(name))
        if os.path.dirname(name) != os.path.abspath(directory) and _exists(local) and \
                os.path.realpath(local) != os.path.realpath(name):
            return local
        if not _exists(name) and _exists(local):
            return local
        return name
    return os.path.join(directory, name)


def _exists(prefix: str) -> bool:
    pattern = shard_pattern(prefix)
    if pattern is not None:  # a sharded V1 checkpoint exists where its first shard does
        return os.path.exists(pattern.replace("?????", "00000"))
    return (os.path.isfile(prefix + ".index") or os.path.isfile(prefix)
            or find_shards(prefix) is not None)


def _prefix_location(prefix: str, original: str, state: str | None = None) -> Location:
    meta = shard_base(prefix) + ".meta"
    # exists(), not isfile(): a FIFO or directory in a file's place is then refused by the
    # reader (open_regular) with a clear error instead of being skipped or called missing.
    meta_path = meta if os.path.exists(meta) else None
    if os.path.exists(prefix + ".index"):
        return Location(prefix, "v2", meta_path, state)
    if os.path.isfile(prefix):
        pattern = shard_pattern(prefix) if is_v1_file(prefix) else None
    else:
        pattern = shard_pattern(prefix) or find_shards(prefix)
    if pattern is not None:
        # A sharded V1 checkpoint: always opened whole, from any shard, its pattern or its
        # prefix; the reader refuses when a shard is missing.
        meta = shard_base(pattern) + ".meta"
        return Location(pattern, "v1", meta if os.path.isfile(meta) else None, state)
    if os.path.isfile(prefix) and is_v1_file(prefix):
        return Location(prefix, "v1", meta_path, state)
    if os.path.isfile(prefix):
        if state:  # the state file led here: name it and what it names, not the directory
            raise CorruptCheckpointError(
                f"names checkpoint {prefix!r}, which is not a TensorFlow checkpoint (no "
                f"{os.path.basename(prefix)}.index beside it, not a V1 table)", path=state)
        raise CorruptCheckpointError(
            "not a TensorFlow checkpoint (expected a .index file, a V1 checkpoint table, a "
            ".meta graph or a training directory)", path=original)
    if state:
        raise CheckpointNotFoundError(
            f"{state} names checkpoint {prefix!r}, but neither {prefix}.index nor {prefix} "
            "exists (deleted by max_to_keep, or the directory was moved?)")
    raise CheckpointNotFoundError(f"{original}: no checkpoint found (no such file or prefix)")


def _chosen(found: Location, directory: str, candidates: list[str], picked: str) -> Location:
    if len(candidates) < 2:
        return found
    others = sorted(c for c in candidates if c != picked)
    more = f" and {len(others) - 3} more" if len(others) > 3 else ""
    return replace(found, choice=(
        f"{directory}: {len(candidates)} candidate checkpoints and no 'checkpoint' state file; "
        f"using {picked} (newest{', .keras preferred' if picked.endswith('.keras') else ''}; "
        f"not {', '.join(others[:3])}{more}); name a file to choose"))


def locate(path: str | os.PathLike) -> Location:
    """Resolves a user-supplied path to a checkpoint.

    Raises:
        CheckpointNotFoundError: if nothing checkpoint-like is there.
        CorruptCheckpointError: if the path is a file that is not a checkpoint.
        UnsupportedFormatError: a URL spelled so that it names no one location (see
            :func:`~ckpt_tools.formats._io.canonical_location`).
    """
    path = canonical_location(path)
    if is_url(path):
        return _locate_url(path)
    if _FILE_NAME_RE.search(path) or not os.path.isdir(path):
        require_regular(path)  # a FIFO must fail here, not hang in open() or read as missing
    if os.path.isdir(path) and not path.endswith(("/", os.sep)) and \
            os.path.isfile(path + ".index"):
        # A directory named like a checkpoint beside its .index (run/model.ckpt-4/ next to
        # run/model.ckpt-4.index): the prefix, as a state file or TensorFlow means it, is
        # the checkpoint; the directory is read only when named with a trailing "/".
        return _saved_model_around(path) or _prefix_location(path, path)
    if os.path.isdir(path):
        # The parent as the user typed it (fixtures/sm for fixtures/sm/variables), so that
        # every path shown stays relative; "." or ".." fall back to the absolute parent.
        norm = os.path.normpath(path)
        parent = os.path.dirname(norm) if os.path.basename(norm) == "variables" \
            else os.path.dirname(os.path.abspath(path))
        saved = saved_model_file(path)
        if not saved:
            version, skipped = serving_versions(path)  # a TF Serving model's parent folder
            saved = saved_model_file(version) if version else None
            if saved and skipped:
                return replace(_saved_model_location(saved), choice=(
                    f"{path}: using version {os.path.basename(version)}; skipped higher "
                    f"version(s) {', '.join(skipped[:3])}"
                    f"{f' and {len(skipped) - 3} more' if len(skipped) > 3 else ''}: no "
                    "saved_model.pb there"))
        saved = saved or (os.path.basename(os.path.abspath(path)) == "variables"
                          and saved_model_file(parent))  # a SavedModel's variables/ folder
        if saved:
            return _saved_model_location(saved)
        state = os.path.join(path, STATE_FILE)
        if os.path.isfile(state):
            return _prefix_location(read_state_file(path)[-1], path, state)
        indexes = [f for f in os.listdir(path) if f.endswith(".index")]
        if indexes:
            newest = max(indexes, key=lambda f: (os.path.getmtime(os.path.join(path, f)), f))
            found = _prefix_location(os.path.join(path, newest[: -len(".index")]), path)
            return _chosen(found, path, indexes, newest)
        names = os.listdir(path)
        shards: dict[str, float] = {}  # sharded V1 checkpoints, e.g. an old session bundle
        for f in names:
            pattern = None if _DATA_RE.match(f) else shard_pattern(f)
            if pattern and os.path.isfile(os.path.join(path, f)):
                mtime = os.path.getmtime(os.path.join(path, f))
                shards[pattern] = max(mtime, shards.get(pattern, mtime))
        if shards:
            return _prefix_location(os.path.join(path, max(shards, key=shards.get)), path)
        # Keras runs keep no state file: take the newest .keras (it records the optimizer
        # config, so use_ema is known rather than inferred), else the newest .h5.
        h5 = [f for f in names if f.endswith((".h5", ".hdf5"))]
        keras = [f for f in names if f.endswith(".keras")] or h5
        if keras:
            newest = max(keras, key=lambda f: (os.path.getmtime(os.path.join(path, f)), f))
            found = locate(os.path.join(path, newest))
            candidates = sorted(set(keras) | set(h5))
            return _chosen(found, path, candidates, newest)
        raise CheckpointNotFoundError(
            f"{path}: directory holds no checkpoint (no 'checkpoint' state file, no .index, "
            ".keras or .h5 files)")
    if os.path.basename(path) in SAVED_MODEL_FILES:
        if not os.path.isfile(path):
            raise CheckpointNotFoundError(f"{path}: no such file")
        return _saved_model_location(path)
    if path.endswith(".index"):
        if not os.path.isfile(path):
            raise CheckpointNotFoundError(f"{path}: no such file")
        return _saved_model_around(path[: -len(".index")]) or _prefix_location(
            path[: -len(".index")], path)
    m = _DATA_RE.match(path)
    if m:
        if not os.path.isfile(path):
            raise CheckpointNotFoundError(f"{path}: no such file")
        return _saved_model_around(m.group(1)) or _prefix_location(m.group(1), path)
    if path.endswith(".meta"):
        if not os.path.isfile(path):
            raise CheckpointNotFoundError(f"{path}: no such file")
        prefix = path[: -len(".meta")]
        if not _exists(prefix):
            raise CheckpointNotFoundError(
                f"{path}: no checkpoint beside this graph (expected {prefix}.index or {prefix})")
        return _prefix_location(prefix, path)
    if os.path.isfile(path):
        from .formats.keras.h5 import (
            sniff,  # cheap: h5py is imported only when a Keras file is opened
        )

        kind = sniff(path)  # "h5" (HDF5 signature) or "keras" (zip with Keras members)
        if kind:
            return Location(path, kind, None)
        if path.endswith(".keras"):  # say what is wrong with it, not "not a checkpoint"
            raise CorruptCheckpointError(
                "not a readable .keras archive: the zip is truncated or damaged (no central "
                "directory), or holds neither config.json nor model.weights.h5", path=path)
    return _saved_model_around(path) or _prefix_location(path, path)


def _saved_model_around(prefix: str) -> Location | None:
    """Returns the SavedModel whose weights ``prefix`` is (``<dir>/variables/variables`` with
    ``<dir>/saved_model.pb``), so that its collections are read from there, else ``None``."""
    head, name = os.path.split(os.path.normpath(prefix))
    if name != "variables" or os.path.basename(os.path.abspath(head or ".")) != "variables":
        return None
    # Relative as typed where the path allows it (fixtures/sm/variables/variables).
    top = os.path.dirname(head) if os.path.basename(head) == "variables" \
        else os.path.dirname(os.path.abspath(head or "."))
    saved = saved_model_file(top)
    return _saved_model_location(saved) if saved else None


def _locate_url(url: str) -> Location:
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
    named_file = _FILE_NAME_RE.search(bare) or os.path.basename(bare) == STATE_FILE
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
            return _url_prefix(store, _state_target(bare, read_state_file_at(state)[-1]),
                               url, state)
        indexes = sorted(n for n in names if n.endswith(".index"))
        if indexes:
            newest = max(indexes, key=lambda n: (str(names[n].get("LastModified", "")), n))
            found = _url_prefix(store, remote.url_join(bare, newest[: -len(".index")]), url)
            return _chosen(found, url, indexes, newest)
        if "saved_model.pb" in names or any(n.endswith((".keras", ".h5")) for n in names):
            raise UnsupportedFormatError(
                f"{url}: only TensorFlow V2 checkpoints (.index + .data) are read from URLs; "
                "copy SavedModels and Keras files locally")
        raise CheckpointNotFoundError(
            f"{url}: no checkpoint there (no 'checkpoint' state file, no .index)")
    if os.path.basename(bare) == STATE_FILE:
        return _url_prefix(store, _state_target(remote.url_parent(bare),
                                                read_state_file_at(bare)[-1]), url, bare)
    m = _DATA_RE.match(bare)
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
    if store.size(state) is not None:
        try:
            entries = read_state_file_at(state)
        except CorruptCheckpointError:
            # Without the slash the URL may be a prefix, and what answered for the state
            # file a server's page for any path (a web app's fallback): the prefix's .index
            # decides; a URL ending in '/' names the run directory, whose state file is bad.
            if url.endswith("/") or store.size(bare + ".index") is None:
                raise
            return _url_prefix(store, bare, url)
        return _url_prefix(store, _state_target(bare, entries[-1]), url, state)
    if not url.endswith("/") and store.size(bare + ".index") is not None:
        return _url_prefix(store, bare, url)
    tried = state if url.endswith("/") else f"{state}, no {bare}.index"
    raise CheckpointNotFoundError(
        f"{url}: not found (no {tried}; an http(s):// directory cannot be listed, so a run "
        "directory needs its 'checkpoint' state file, or give the checkpoint prefix URL)")


def _state_target(directory: str, name: str) -> str:
    """The URL of the checkpoint a remote state file in URL ``directory`` names: a relative
    name inside ``directory``; a URL or an absolute local path (the training machine's, or
    another bucket's after a copy) by its base name in ``directory`` when that checkpoint is
    there; a URL in the same bucket as written.

    A state file in a bucket is not trusted to send reads elsewhere: a name outside the
    bucket (another bucket or host, ``file://``, a local path, ``..`` above the bucket) is
    refused unless its base name exists in ``directory``.

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
        target = remote.normalize(directory + "/" + name)
        if remote.same_bucket(target, directory):
            return target
    local = directory + "/" + posixpath.basename(name.rstrip("/"))
    if remote.session().size(local + ".index") is not None:
        return local  # a copied run: its state file still names where it was written
    raise UnsupportedFormatError(
        f"{state}: names checkpoint {name!r}, outside {remote.bucket_of(directory)}; a "
        "remote state file may only name checkpoints in its own bucket (refusing to read "
        "elsewhere); open the checkpoint by its URL instead")


def _url_prefix(store, prefix: str, original: str, state: str | None = None) -> Location:
    from .formats import remote

    if store.size(prefix + ".index") is not None:
        meta = prefix + ".meta"
        return Location(prefix, "v2", meta if store.size(meta) is not None else None, state)
    if store.size(prefix) is not None or store.info(prefix + "-00000-of-00001") is not None:
        raise UnsupportedFormatError(
            f"{original}: only TensorFlow V2 checkpoints (.index + .data) are read from URLs; "
            "copy V1 checkpoints locally")
    if state:
        raise CheckpointNotFoundError(
            f"{state} names checkpoint {prefix!r}, but {prefix}.index does not exist")
    if not store.is_dir(remote.url_parent(prefix)):
        raise CheckpointNotFoundError(f"{original}: not found")
    raise CheckpointNotFoundError(f"{original}: no checkpoint found (no {prefix}.index)")


def _saved_model_location(saved_model: str) -> Location:
    """Returns where the weights of the SavedModel described by ``saved_model`` are."""
    directory = os.path.dirname(saved_model)
    prefix = variables_prefix(directory)
    # exists(): a FIFO or directory in the index's place is refused by the reader (exit 4).
    if not (os.path.exists(prefix + ".index") or os.path.isfile(prefix)):
        raise CheckpointNotFoundError(
            f"{directory}: SavedModel has no variables ({prefix}.index is missing)")
    loc = _prefix_location(prefix, directory)
    return Location(loc.prefix, loc.format, None, None, saved_model)



_PLAIN_WORD = re.compile(r"[A-Za-z0-9_./:@%+=,-]+")


def shell_word(name: str) -> str:
    """Returns ``name`` as one word a shell (bash, zsh) reads back as exactly ``name``, printable
    ASCII: as it is when it needs no quoting (``conv1/weights``), in single quotes when it is
    printable (``'a[/]b'``), else ANSI-C quoted with escapes (``$'t\\x1bx'``), so a suggestion
    in an error can be typed back even when the name holds control characters."""
    if _PLAIN_WORD.fullmatch(name):
        return name
    if name.isprintable() and "'" not in name and not _INVISIBLE.search(name):
        return f"'{name}'"
    out = []
    for c in name:
        if c in "\\'":
            out.append("\\" + c)
        elif c in _C_ESCAPES:
            out.append(_C_ESCAPES[c])
        elif c.isprintable() and (c.isascii() or not _INVISIBLE.match(c)):
            out.append(c)
        elif ord(c) < 0x100:
            out.append(f"\\x{ord(c):02x}")
        elif ord(c) < 0x10000:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(f"\\U{ord(c):08x}")
    return "$'" + "".join(out) + "'"


_C_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
# Printable to Python but invisible or reordering on a terminal (bidi marks, zero-width).
_INVISIBLE = re.compile("[\xad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")

class Checkpoint:
    """An open checkpoint: metadata is read up front, tensor data only on request.

    Use :func:`open_checkpoint` to create one. Usable as a context manager.

    Attributes:
        path: the checkpoint prefix (V2) or file (V1).
        format: ``"v2"``, ``"v1"`` or ``"object"`` (a V2 bundle with a TF2 object graph).
        meta: the :class:`~ckpt_tools.formats.meta.MetaGraph` from the ``.meta`` beside it
            (or, for a TF1 SavedModel, from its ``saved_model.pb``), or ``None``.
        meta_source: the file ``meta`` was read from, or ``None``.
        objects: the TF2 :class:`~ckpt_tools.formats.objgraph.ObjectGraph`, or ``None``.
    """

    def __init__(self, location: Location, *, verify: bool = True, meta: bool = True,
                 use_ema: bool | None = None, trainable: Sequence[str] | None = None):
        self.location = location
        self.path = location.prefix
        with _errors_in(location.prefix):
            self._reader: Reader = open_reader(location.format, location.prefix, verify=verify)
            if (use_ema is not None or trainable) and getattr(self._reader, "keras",
                                                                None) is not None:
                self._reader.restate_use_ema(use_ema, trainable=trainable)
            elif use_ema is not None or trainable:
                self._reader.close()
                given = "--trainable" if trainable else (
                    "--use-ema" if use_ema else "--no-use-ema")
                raise OptionError(
                    f"{location.prefix}: {given} (Python: "
                    f"{'trainable' if trainable else 'use_ema'}=) decides only for Keras "
                    "files (.keras, .weights.h5, .h5), which may not record it; this "
                    "TensorFlow checkpoint's names and object graph record what it would "
                    "state, so it cannot apply: omit it")
        self.format = location.format
        self.meta: MetaGraph | None = None
        self.meta_source: str | None = None  # the file the collections came from
        if meta and location.meta_path:
            self.meta = read_meta_graph(location.meta_path)
        elif meta and location.saved_model:
            self.meta = read_saved_model(location.saved_model).collections_graph()
        if self.meta is not None:
            self.meta_source = location.meta_path or location.saved_model
        self.objects: ObjectGraph | None = None
        self._qualified: dict[str, str] | None = None  # see _named_paths
        if OBJECT_GRAPH_KEY in self._reader.entries:
            self.format = "object"
            graph = self._reader.entries[OBJECT_GRAPH_KEY]
            if graph.dtype != STRING or graph.num_elements != 1:  # bytes(int) would allocate
                raise CorruptCheckpointError(f"{OBJECT_GRAPH_KEY} is not a scalar string",
                                             path=self.path)
            with _errors_in(self.path):
                raw = self._reader.read(OBJECT_GRAPH_KEY)
            self.objects = parse_object_graph(bytes(raw.reshape(-1)[0]), self.path)
        self._variables: list[Variable] | None = None
        self._fragment_alias: dict[str, str] | None = None  # see stored_key()
        self._ema_names: list[str] | None = None  # see ema_names()

    # -- mapping-like access --------------------------------------------------------------
    def keys(self) -> list[str]:
        """Returns every stored key in storage order: sorted for TensorFlow checkpoints, save
        order for Keras files (slices of partitioned variables are hidden)."""
        return list(self._reader.entries)

    def entries(self) -> dict[str, TensorEntry]:
        """Returns checkpoint key -> :class:`~ckpt_tools.formats.entry.TensorEntry`
        (storage details)."""
        return self._reader.entries

    def stored_key(self, key: str) -> str:
        """Returns the key under which ``key`` (a key TensorFlow saved, or a graph variable's
        checkpoint key) is read: the group's key for one part of a tensor TF1 saved under one
        key per part (``net/w//w/part_0/avg`` -> ``net/w//w/part_*/avg``, see
        :func:`~ckpt_tools.formats.slices.fragment_groups`), else ``key`` itself."""
        alias = self._fragment_alias
        if alias is None:
            alias = self._fragment_alias = {
                m: k for k, e in self._reader.entries.items()
                if e.extra and e.extra.get("fragments") for m in e.extra["fragments"]}
        return alias.get(key, key)

    def __contains__(self, name: str) -> bool:
        return name in self._reader.entries

    def __len__(self) -> int:
        return len(self._reader.entries)

    def __iter__(self):
        return iter(self._reader.entries)

    def entry(self, name: str) -> TensorEntry:
        try:
            return self._reader.entries[name]
        except KeyError:
            raise self._missing(name) from None

    def _missing(self, name: str) -> VariableNotFoundError:
        import difflib

        close = difflib.get_close_matches(name, self._reader.entries, n=3)
        hint = f"; did you mean {', '.join(map(shell_word, close))}?" if close else ""
        return VariableNotFoundError(f"{self.path}: no variable named {name!r}{hint}")

    def tensor(self, name: str) -> np.ndarray:
        """Returns the value stored under ``name`` as a NumPy array.

        Numeric tensors are read-only views over the memory-mapped data file (copy them to
        modify); strings come back as an ``object`` array of ``bytes``, like TensorFlow's.

        Raises:
            VariableNotFoundError: if ``name`` is not stored.
            CorruptCheckpointError: if the data fails its checksum or lies outside the file.

        Example:
            >>> with open_checkpoint("fixtures/linear_v2") as ckpt:  # doctest: +SKIP
            ...     ckpt.tensor("W/ExponentialMovingAverage")
            array([0.0998], dtype=float32)
        """
        if name not in self._reader.entries:
            raise self._missing(name)
        with _errors_in(self.path):
            return self._reader.read(name)

    def plan_reads(self, names: list[str]) -> None:
        """Announces the tensors about to be read, in the order they will be: a checkpoint
        behind a URL then fetches the next ones ahead of each read, in a few large range
        requests instead of one per tensor. A no-op for local files and other formats.

        Raises:
            CheckpointNotFoundError: a data shard of a remote checkpoint is missing.
        """
        plan_reads = getattr(self._reader, "plan_reads", None)
        if plan_reads is not None and is_url(self.location.prefix):
            with _errors_in(self.path):
                plan_reads(list(names))

    def chunks(self, name: str, max_bytes: int = 1 << 20, *, verify: bool | None = None,
               release: bool = False) -> Iterator[np.ndarray]:
        """Yields the flat values of ``name`` in chunks of at most ``max_bytes`` (one element
        at least), for one streaming pass over a tensor of any size.

        For TensorFlow bundles the chunks are read-only views of the mapped data file, each
        CRC-checked just before it is yielded (the consumer then reads it from cache) and the
        checksum verdict comes with the last one; other formats read the tensor whole and
        slice it. Do not act on what was computed from the chunks until the iterator is done.
        ``verify=False`` skips the CRC (for a second pass over bytes already checked);
        ``None`` follows ``open_checkpoint(verify=...)``. ``release=True`` unmaps each chunk
        of a TensorFlow bundle once the next is asked for, so resident memory stays at one
        chunk (for writers that stream a whole checkpoint).

        Raises:
            VariableNotFoundError: if ``name`` is not stored.
            CorruptCheckpointError: if the data fails its checksum (at the end) or lies outside
                the file.
        """
        if name not in self._reader.entries:
            raise self._missing(name)
        with _errors_in(self.path):
            iter_chunks = getattr(self._reader, "iter_chunks", None)
            stream = (iter_chunks(name, max_bytes, verify, release) if iter_chunks is not None
                      else None)
            if stream is None:
                flat = self._reader.read(name).reshape(-1)
                step = max(1, max_bytes // max(flat.dtype.itemsize, 1))
                stream = (flat[i : i + step] for i in range(0, flat.size, step))
            yield from stream

    # -- listing ---------------------------------------------------------------------------
    def variables(self) -> list[Variable]:
        """Returns a :class:`Variable` for every key, with roles, collections and EMA links.

        Reads only metadata (the index, the ``.meta`` collections, the TF2 object graph).
        """
        if self._variables is None:
            self._variables = self._build_variables()
        return list(self._variables)

    def ema_names(self) -> list[str]:
        """Returns :func:`ckpt_tools.roles.detect_ema_names` of the stored keys, computed
        once (``list`` classifies roles and then pairs averages, and both need it)."""
        if self._ema_names is None:
            self._ema_names = _roles.detect_ema_names(self._reader.entries)
        return list(self._ema_names)

    def _build_variables(self) -> list[Variable]:
        entries = self._reader.entries
        colls = self.meta.collections_by_key() if self.meta else {}
        plain = self._reader.keras is None and not (self.objects and self.objects.full_names)
        info = _roles.classify(entries, self.meta, self.objects, keras=self._reader.keras,
                               ema_names=self.ema_names() if plain else None,
                               collections=colls)
        # A variable's averages: proven ones (their names say whose) and unpaired ones that
        # name it as a candidate. Only a variable with exactly one, proven, gets ``ema``; with
        # several (two EMA objects, or an average the file cannot pair) which one is its
        # average is not proven here: ``ema`` stays None and ``ema_candidates`` lists them
        # (``ckpt_tools.emamap.decide_pairing`` applies what --ema-name... decide).
        averages: dict[str, list[str]] = {}
        unproven: set[str] = set()
        for key, ri in info.items():
            if ri.role != _roles.EMA:
                continue
            if ri.ema_of:
                averages.setdefault(ri.ema_of, []).append(key)
            for cand in ri.candidates if not ri.ema_of else ():
                averages.setdefault(cand, []).append(key)
                unproven.add(cand)
        shadow_of = {k: a[0] for k, a in averages.items() if len(a) == 1 and k not in unproven}
        out = []
        # One Variable per tensor (3,000 in a large listing): loop invariants hoisted, dtype
        # names looked up once per dtype, fields passed by position.
        v2, objects, dtype_names = self.format == "v2", self.objects, {}
        for key, entry in entries.items():
            ri = info[key]
            dtype = dtype_names.get(entry.dtype)
            if dtype is None:
                dtype = dtype_names[entry.dtype] = entry.dtype_name
            if objects is None:  # path_of without the call: readers that know a path
                path = entry.extra.get("path") if entry.extra else None
            else:
                path = self.path_of(key, entry)
            parts = len(entry.slices)
            shadow = shadow_of.get(key)
            open_averages = () if ri.role == _roles.EMA or shadow is not None else tuple(
                sorted(averages.get(key, ())))
            out.append(Variable(
                key, dtype, entry.shape, ri.role, tuple(colls.get(key, ())), ri.ema_of, shadow,
                ri.slot_of, entry.nbytes, parts if v2 or parts > 1 else 0, path,
                ri.ema_style or (info[shadow].ema_style if shadow is not None else None),
                ri.candidates if ri.role == _roles.EMA else open_averages))
        return out

    def path_of(self, key: str, entry: TensorEntry | None = None) -> str | None:
        """Returns the readable object path :class:`Variable` shows for ``key`` (TF2 object
        checkpoints, Keras files), or ``None`` when the key is the name (TF1 checkpoints).

        Needs no roles, so ``ckpt list -q`` can name 100,000 variables without classifying
        them. ``entry`` saves a lookup when the caller has it.
        """
        if self.objects is None:
            if entry is None:
                entry = self._reader.entries[key]
            return entry.extra.get("path") if entry.extra else None  # readers that know one
        path = self.objects.paths.get(key) or (readable_name(key) if key != OBJECT_GRAPH_KEY
                                               else None)
        full = self.objects.full_names.get(key)
        if path and full and _LIST_ITEM.search(path):
            # Keras 3 models are reachable only through list attributes
            # ("optimizer/_trainable_variables/0"): the variable's own name says more, unless
            # another variable has it too (two models named "net": a GAN's generator and
            # critic), where the object path's leading segments tell them apart.
            path = self._named_paths().get(key, full)
        return path

    def _named_paths(self) -> dict[str, str]:
        """Key -> ``<root>/<own name>`` for the list-reachable variables whose own name
        (``net/h/kernel``) another such variable shares: the fewest leading segments of their
        object paths that tell them apart (``gen_opt/net/h/kernel``,
        ``critic_opt/net/h/kernel``). Computed once."""
        if self._qualified is not None:
            return self._qualified
        groups: dict[str, list[tuple[str, list[str]]]] = {}
        for key, full in self.objects.full_names.items():
            path = self.objects.paths.get(key)
            if path and _LIST_ITEM.search(path):
                groups.setdefault(full, []).append((key, path.split("/")))
        self._qualified = {}
        for full, members in groups.items():
            if len(members) < 2:
                continue
            longest = max(len(parts) for _, parts in members)
            for n in range(1, longest + 1):
                heads = ["/".join(parts[:n]) for _, parts in members]
                if len(set(heads)) == len(heads):
                    self._qualified.update({key: f"{head}/{full}" for (key, _), head
                                            in zip(members, heads, strict=True)})
                    break
        return self._qualified

    def files(self) -> list[str]:
        """Returns the files this checkpoint consists of (index, data shards, meta)."""
        files = self._reader.files()
        for extra in (self.location.meta_path, self.location.saved_model):
            if extra:
                files.append(extra)
        return files

    def input_files(self) -> list[str]:
        """Returns every file a command using this checkpoint reads: :meth:`files` plus the
        ``checkpoint`` state file that led to it (writers refuse to replace any of them)."""
        files = self.files()
        if self.location.state_file:
            files.append(self.location.state_file)
        return files + self._history_files()

    def _history_files(self) -> list[str]:
        """The run's history beside this checkpoint: the ``checkpoint`` state file in its
        directory (read or not) and the files of every checkpoint that state file lists. A
        writer's ``--force`` must not replace them either (``export --out`` onto a sibling
        checkpoint's ``.index`` would destroy it)."""
        import glob

        index = next((f for f in self._reader.files() if f.endswith(".index")), None)
        if index is None or is_url(index):
            return []
        directory = os.path.dirname(index) or "."
        state = os.path.join(directory, STATE_FILE)
        if not os.path.isfile(state):
            return []
        found = [state]
        try:
            listed = read_state_file(directory)
        except (CorruptCheckpointError, FileNotFoundError, OSError):
            return found
        for prefix in listed[-1000:]:
            found += [prefix + ".index", prefix + ".meta"]
            found += glob.glob(glob.escape(prefix) + ".data-*")
        return found

    @property
    def name(self) -> str:
        """The checkpoint's own name (``model.ckpt-1000``), the default name of outputs."""
        return self.location.name

    @property
    def reader(self):
        """The format reader (``BundleReader`` or ``V1Reader``), for low-level access."""
        return self._reader

    def close(self) -> None:
        self._reader.close()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Checkpoint({self.path!r}, format={self.format!r}, variables={len(self)})"


def open_checkpoint(path: str | os.PathLike, *, verify: bool = True,
                    meta: bool = True, use_ema: bool | None = None,
                    trainable: Sequence[str] | None = None) -> Checkpoint:
    """Opens a TensorFlow checkpoint without importing TensorFlow.

    Args:
        path (`str`): a training directory, checkpoint prefix, or ``.index``/``.data-*``/``.meta``
            file, a V1 checkpoint file or shard, a SavedModel (or TF Serving model) directory
            or its ``saved_model.pb``, or a Keras ``.keras``/``.h5`` file.
        verify (`bool`, *optional*, defaults to `True`): check CRC32C of index blocks and of each
            tensor read.
        meta (`bool`, *optional*, defaults to `True`): read the ``.meta`` graph beside the
            checkpoint, when there is one, for collection membership.
        use_ema (`bool`, *optional*): Keras files only: state whether the optimizer ran with
            ``use_ema=True`` (a bare ``.weights.h5`` may not tell; ``ckpt --use-ema``); a
            statement that contradicts the file's config is refused. Other formats refuse it
            (``OptionError``).
        trainable (`list[str]`, *optional*): Keras 3 files only: the weights the optimizer was
            built with, in ``model.trainable_variables`` order, as ``ckpt list`` names them (a
            layer name stands for its weights): what a bare ``.weights.h5`` does not record
            (frozen layers, the order of a subclassed model's sublayers); ``ckpt --trainable``.
            Other formats refuse it (``OptionError``).

    Returns:
        `Checkpoint`: metadata loaded, tensor data read lazily.

    Raises:
        CheckpointNotFoundError: nothing checkpoint-like at ``path``.
        CorruptCheckpointError: the files are malformed.
        VariableNotFoundError: a name in ``trainable`` matches no weight, or matches weights
            another name already matched.
        OptionError: ``use_ema`` or ``trainable`` given for a TensorFlow checkpoint (exit 2).
        EmaError: ``use_ema`` contradicts the Keras file's config (exit 6).

    Example:
        >>> import ckpt_tools
        >>> with ckpt_tools.open_checkpoint("fixtures/linear_v2") as ckpt:  # doctest: +SKIP
        ...     [v.name for v in ckpt.variables() if v.role == "ema"]
        ['W/ExponentialMovingAverage', 'b/ExponentialMovingAverage']
    """
    return Checkpoint(locate(path), verify=verify, meta=meta, use_ema=use_ema,
                      trainable=trainable)
