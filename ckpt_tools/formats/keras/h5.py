"""Reader for Keras weight files: legacy HDF5 ``.h5``, Keras 3 ``.weights.h5`` and ``.keras``.

Keys (what ``ckpt list`` shows and :meth:`H5Reader.read` takes):

- Keras 3 (``.weights.h5``, and the ``model.weights.h5`` inside a ``.keras`` zip): the HDF5
  dataset path, e.g. ``layers/dense/vars/0`` or ``optimizer/vars/3``. Keras stores values by
  position only; :mod:`ckpt_tools.formats.keras.layout` works out what each one is and gives it a
  readable Keras path (``dense/kernel``, ``sgd/dense_kernel_average``) in ``entry.extra["path"]``.
- legacy ``.h5`` (``layer_names``/``weight_names`` attributes): the dataset path without the
  ``:0`` suffix, e.g. ``dense/dense/kernel`` (``save_weights``) or
  ``model_weights/dense/dense/kernel`` and ``optimizer_weights/adam/dense_kernel_average``
  (full-model ``model.save('x.h5')``); the path is the weight name (``dense/kernel``).

Contiguous datasets are returned as read-only NumPy views over a memory map of the file (for a
``.keras`` archive, of the stored zip member's bytes, never extracted); others are read through
h5py. h5py is imported only when a Keras file is opened, and TensorFlow/Keras never.
"""

from __future__ import annotations

import io
import json
import lzma
import math
import re
import struct
import zipfile
import zlib

import numpy as np

from ...errors import (
    CheckpointError,
    CheckpointNotFoundError,
    CorruptCheckpointError,
    EmaError,
    UnsupportedFormatError,
    VariableNotFoundError,
)
from .. import dtypes
from .._io import close_map, map_file, open_binary
from ..entry import TensorEntry

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
ZIP_SIGNATURE = b"PK\x03\x04"
_HDF5_BASES = (0, 512, 1024, 2048)  # where HDF5 looks for its superblock (after a user block)
_WEIGHTS_MEMBER = "model.weights.h5"  # saving_lib._VARS_FNAME_H5
_CONFIG_MEMBER = "config.json"
_METADATA_MEMBER = "metadata.json"
_ZIP_LOCAL_HEADER = 30
_SUFFIX_RE = re.compile(r":\d+$")
# What a damaged or hostile zip makes zipfile raise besides BadZipFile.
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OverflowError,
               NotImplementedError, struct.error, OSError, lzma.LZMAError)
# Compressed data may expand to at most BASE + RATIO x its compressed size: an archive member
# relative to the archive (a deflate bomb is refused from its declared size, before anything is
# decompressed), a chunked HDF5 dataset relative to its stored bytes. Keras itself writes
# neither compressed members nor compressed datasets, so honest files stay far below this.
_EXPAND_BASE, _EXPAND_RATIO = 8 << 20, 16
_MAX_JSON_DEPTH = 200  # Keras configs nest a few dozen levels; json itself fails near 1000
_NO_WEIGHTS = ("HDF5 file has no Keras weights (no layer_names attribute, no layers/ or vars/ "
               "groups)")


def sniff(path: str) -> str | None:
    """Returns ``"h5"`` for an HDF5 file, ``"keras"`` for a Keras zip archive, else ``None``.

    Reads at most a few header bytes (and a zip's directory); does not import h5py.

    Example:
        >>> sniff("fixtures/keras_ema/model.keras")  # doctest: +SKIP
        'keras'
    """
    try:
        with open_binary(path) as f:  # regular files only: a FIFO must not block here
            head = f.read(8)
            if head == HDF5_SIGNATURE:
                return "h5"
            if head[:4] == ZIP_SIGNATURE:
                try:
                    with zipfile.ZipFile(f) as zf:
                        names = set(zf.namelist())
                except _ZIP_ERRORS:
                    return None
                if _CONFIG_MEMBER in names or any(n.startswith("model.weights") for n in names):
                    return "keras"
                return None
            for base in _HDF5_BASES[1:]:
                f.seek(base)
                if f.read(8) == HDF5_SIGNATURE:
                    return "h5"
    except (OSError, CheckpointError):
        return None
    return None


class _Window(io.RawIOBase):
    """A read-only, seekable file over a byte range of a buffer (a stored zip member)."""

    def __init__(self, view: memoryview):
        self._view = view
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._view)}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def readinto(self, b) -> int:
        chunk = self._view[self._pos : self._pos + len(b)]
        b[: len(chunk)] = chunk
        self._pos += len(chunk)
        return len(chunk)


def _attr_list(group, name: str) -> list[str]:
    """Reads a list attribute that Keras may split into ``name0``, ``name1``… (> 64 KB)."""
    if name in group.attrs:
        raw = list(np.atleast_1d(group.attrs[name]))
    else:
        raw, i = [], 0
        while f"{name}{i}" in group.attrs:
            raw.extend(np.atleast_1d(group.attrs[f"{name}{i}"]))
            i += 1
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in raw]


def _has_attr_list(group, name: str) -> bool:
    return name in group.attrs or f"{name}0" in group.attrs


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


def _json_attr(value):
    """Returns a legacy file's JSON attribute as a dict, or None when it is not a sound one."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    try:
        return parse_json_object(value, "attribute", "")
    except CorruptCheckpointError:
        return None


class H5Reader:
    """Reads one Keras weight file (the :class:`~ckpt_tools.formats.Reader` protocol).

    Args:
        path (`str`): a ``.h5``/``.weights.h5`` HDF5 file or a ``.keras`` archive.

    Attributes:
        format: ``"h5"`` or ``"keras"``.
        kind: ``"keras3"`` (``vars`` groups) or ``"legacy"`` (``layer_names`` attributes).
        config: the model config (``config.json`` of a ``.keras``; for a legacy full-model
            ``.h5`` ``{"model_config": ..., "training_config": ...}``), or ``None``.
        keras: the :class:`~ckpt_tools.formats.keras.layout.KerasLayout` (what each key is).

    Raises:
        CheckpointNotFoundError: if the file does not exist.
        CorruptCheckpointError: if it is not a readable HDF5 file or zip archive.
        UnsupportedFormatError: if it holds no Keras weights (or keeps them in ``.npz``).

    Example:
        >>> r = H5Reader("fixtures/keras_ema/model.weights.h5")  # doctest: +SKIP
        >>> r.read("layers/dense/vars/0").shape
        (4, 8)
    """

    def __init__(self, path: str):
        import h5py  # deferred: only Keras files need it


        self.prefix = self.path = path
        self.config: dict | None = None
        self._owner_names: dict[str, str] = {}
        self.metadata: dict | None = None
        self._zip = self._fileobj = self._zip_window = None
        self._buf, self._base, self._end = b"", 0, 0
        self._archive = b""  # the archive's own mapping, once a member replaces _buf
        try:
            self._buf = map_file(path)
        except FileNotFoundError:
            raise CheckpointNotFoundError(f"{path}: no such file") from None
        self.format = "keras" if bytes(self._buf[:4]) == ZIP_SIGNATURE else "h5"
        self._end = len(self._buf)
        try:
            source = self._open_archive() if self.format == "keras" else path
            self._h5 = h5py.File(source, "r")
        except OSError as exc:
            self.close()
            raise CorruptCheckpointError(f"cannot read HDF5 data: {exc}", path=path) from None
        except BaseException:
            self.close()
            raise
        try:
            try:
                self._check_links()
                entries, self.kind = self._scan()
                if self.kind == "legacy" and self.config is None:
                    self.config = self._legacy_config()
            except (OSError, RuntimeError, KeyError, UnicodeDecodeError) as exc:
                # h5py's errors for damaged metadata (visititems, attributes, object headers)
                raise CorruptCheckpointError(f"cannot read HDF5 metadata: {exc}",
                                             path=path) from exc
            self._scanned = entries
            self.keras = self._analyze(None)
        except BaseException:
            self.close()
            raise
        self.entries: dict[str, TensorEntry] = {k: entries[k] for k in self.keras.order}
        for key, entry in self.entries.items():
            entry.extra["path"] = self.keras.paths.get(key)

    def _analyze(self, use_ema: bool | None, trainable=None):
        from . import layout as keras_layout
        from . import tf_keras

        try:
            legacy = self.format == "keras" and tf_keras.is_tf_keras(self.metadata)
            layout = keras_layout.analyze(self._scanned, self.kind, self.config,
                                          self._owner_names, read=self._read_scanned,
                                          use_ema=use_ema, tf_keras=legacy,
                                          trainable=trainable)
            if legacy:
                tf_keras.adjust(layout, self._scanned, use_ema, trainable)
            self._check_stated_use_ema(layout, use_ema)
            return layout
        except (EmaError, VariableNotFoundError) as exc:  # a --trainable that contradicts
            # config.json or names no weight: name the file
            raise type(exc)(f"{self.path}: {exc}") from None
        except (AttributeError, TypeError, RecursionError) as exc:
            if self.config is None:
                raise
            # A JSON object of the wrong shape ({"compile_config": [1]}...).
            raise CorruptCheckpointError(
                f"{_CONFIG_MEMBER if self.format == 'keras' else 'model config'} does not "
                f"describe a Keras model ({type(exc).__name__}: {exc})", path=self.path) from None

    def _check_stated_use_ema(self, layout, use_ema: bool | None) -> None:
        """Refuses a ``--use-ema``/``--no-use-ema`` that contradicts the optimizer config the
        file records (config.json of a ``.keras``, a legacy ``.h5``'s training config).

        Raises:
            EmaError: the statement differs from the recorded ``use_ema`` (a tf_keras legacy
                optimizer has none: it counts as ``use_ema=False``).
        """
        cfg = layout.optimizer_config
        if use_ema is None or cfg is None:
            return
        from .tf_keras import is_legacy, legacy_name

        legacy_opt = layout.tf_keras and is_legacy(layout)
        if "use_ema" not in cfg and not legacy_opt:
            return
        recorded = bool(cfg.get("use_ema")) and not legacy_opt
        if recorded == use_ema:
            return
        where = "config.json" if self.format == "keras" else "the file's training config"
        what = (f"{legacy_name(layout)}, a legacy optimizer without use_ema"
                if legacy_opt else
                f"its {layout.optimizer or 'optimizer'} with use_ema={recorded}")
        # keras.io's GAN: the averages are in optimizers the model keeps, not the compiled one
        kept = next((n for n in layout.notes if n.startswith("the model keeps")), None)
        raise EmaError(
            f"--{'' if use_ema else 'no-'}use-ema contradicts {where}, which records {what}; "
            f"omit --{'' if use_ema else 'no-'}use-ema (the file records it)"
            + (f"; {kept}" if kept else ""))

    def restate_use_ema(self, use_ema: bool | None, *, trainable=None) -> None:
        """Re-derives :attr:`keras` with the optimizer's ``use_ema`` stated by the caller
        (``ckpt ... --use-ema``; ``None`` infers it again) and, optionally, the weights the
        optimizer was built with (``--trainable``, see :func:`~.layout.analyze`).

        Raises:
            CorruptCheckpointError: the file's config does not describe a Keras model.
            VariableNotFoundError: a ``trainable`` name matches no weight (or one already
                matched).
        """
        self.keras = self._analyze(use_ema, trainable)
        for key, entry in self.entries.items():
            entry.extra["path"] = self.keras.paths.get(key)

    def _read_scanned(self, name: str) -> np.ndarray:
        return self._read_entry(name, self._scanned[name])

    # -- opening ---------------------------------------------------------------------------
    def _open_archive(self):
        try:
            # Read the archive from the mapping already checked to be a regular file, not by
            # opening its name again.
            self._zip_window = _Window(memoryview(self._buf))
            self._zip = zipfile.ZipFile(self._zip_window)
            names = set(self._zip.namelist())
            if _CONFIG_MEMBER in names:
                self.config = parse_json_object(self._member(_CONFIG_MEMBER), _CONFIG_MEMBER,
                                                self.path)
            if _METADATA_MEMBER in names:
                self.metadata = parse_json_object(self._member(_METADATA_MEMBER),
                                                  _METADATA_MEMBER, self.path)
        except _ZIP_ERRORS as exc:
            raise CorruptCheckpointError(f"not a readable .keras archive: {exc}",
                                         path=self.path) from None
        if _WEIGHTS_MEMBER not in names:
            other = sorted(n for n in names if n.startswith("model.weights"))
            raise UnsupportedFormatError(
                f"{self.path}: .keras archive has no {_WEIGHTS_MEMBER} (expected HDF5 weights; "
                f"found {', '.join(other) or 'no weights'})")
        info = self._zip.getinfo(_WEIGHTS_MEMBER)
        if info.compress_type == zipfile.ZIP_STORED:
            # Keras stores members uncompressed: map the member's bytes in place.
            header = bytes(self._buf[info.header_offset : info.header_offset + _ZIP_LOCAL_HEADER])
            if len(header) < _ZIP_LOCAL_HEADER or header[:4] != ZIP_SIGNATURE:
                raise CorruptCheckpointError(f"bad zip header for {_WEIGHTS_MEMBER}",
                                             path=self.path, offset=info.header_offset)
            name_len, extra_len = struct.unpack("<HH", header[26:30])
            self._base = info.header_offset + _ZIP_LOCAL_HEADER + name_len + extra_len
            if self._base + info.file_size > len(self._buf):
                raise CorruptCheckpointError(f"{_WEIGHTS_MEMBER} runs past the end of the file",
                                             path=self.path, offset=self._base)
            self._end = self._base + info.file_size
            view = memoryview(self._buf)[self._base : self._end]
            self._fileobj = _Window(view)
        else:  # a re-zipped archive: decompress the member into memory (never to disk)
            try:
                data = self._member(_WEIGHTS_MEMBER)
            except _ZIP_ERRORS as exc:
                raise CorruptCheckpointError(f"cannot decompress {_WEIGHTS_MEMBER}: {exc}",
                                             path=self.path) from None
            self._archive = self._buf
            self._buf, self._base, self._end = data, 0, len(data)
            self._fileobj = io.BytesIO(self._buf)
        return self._fileobj

    def _member(self, name: str) -> bytes:
        """Returns one archive member's bytes, refusing more than the archive can reasonably
        expand to (checked on the declared size first, then while reading, since zipfile stops
        at the declared size and a lying header then fails its CRC).

        Raises:
            CorruptCheckpointError: the member would pass the cap (a decompression bomb).
        """
        info = self._zip.getinfo(name)
        cap = _EXPAND_BASE + _EXPAND_RATIO * len(self._buf)
        if info.file_size > cap:
            raise CorruptCheckpointError(
                f"archive member {name} claims {info.file_size} bytes, more than {cap} that a "
                f"{len(self._buf)}-byte archive may expand to (a decompression bomb?)",
                path=self.path)
        with self._zip.open(info) as member:
            data = member.read(cap + 1)
        if len(data) > cap:
            raise CorruptCheckpointError(f"archive member {name} expands past {cap} bytes",
                                         path=self.path)
        return data

    def _legacy_config(self) -> dict | None:
        found = {k: _json_attr(self._h5.attrs[k]) for k in ("model_config", "training_config")
                 if k in self._h5.attrs}
        return found or None

    # -- scanning --------------------------------------------------------------------------
    def _check_links(self) -> None:
        """Refuses external links anywhere in the file and soft links that do not resolve
        inside it, before any object is opened through a link: data comes from this file only.

        Raises:
            CorruptCheckpointError: naming the link.
        """
        import h5py

        links: list[tuple[str, object]] = []
        self._h5.visititems_links(lambda name, link: links.append((name, link)))
        for name, link in links:  # all of them first: resolving a soft link may cross one
            if isinstance(link, h5py.ExternalLink):
                raise CorruptCheckpointError(
                    f"{name!r} is an external link to {link.filename}:{link.path}; only data "
                    "inside this file is read", path=self.path)
        for name, link in links:
            if isinstance(link, h5py.SoftLink):
                try:
                    target = self._h5.get(name)
                except (KeyError, RuntimeError, OSError, ValueError):
                    target = None
                if target is None:
                    raise CorruptCheckpointError(
                        f"soft link {name!r} points to {link.path!r}, which is not in this file",
                        path=self.path)

    def _scan(self) -> tuple[dict[str, TensorEntry], str]:
        f = self._h5
        if _has_attr_list(f, "layer_names"):
            return self._scan_legacy(f, ""), "legacy"
        if "model_weights" in f and _has_attr_list(f["model_weights"], "layer_names"):
            return self._scan_legacy(f["model_weights"], "model_weights/"), "legacy"
        entries = self._scan_keras3(f)
        if entries is None:
            raise UnsupportedFormatError(f"{self.path}: {_NO_WEIGHTS}")
        return entries, "keras3"

    def _scan_legacy(self, root, prefix: str) -> dict[str, TensorEntry]:
        entries: dict[str, TensorEntry] = {}
        layers = _attr_list(root, "layer_names")
        if "top_level_model_weights" in root and "top_level_model_weights" not in layers:
            layers.append("top_level_model_weights")
        for layer in layers:
            if layer not in root:
                raise CorruptCheckpointError(f"layer_names lists {layer!r}, which is not stored",
                                             path=self.path)
            for i, wname in enumerate(_attr_list(root[layer], "weight_names")):
                self._add(entries, root[layer], wname, f"{prefix}{layer}/{wname}",
                          owner=f"{prefix}{layer}", index=i, section="model",
                          weight_name=_SUFFIX_RE.sub("", wname))
        if prefix and "optimizer_weights" in self._h5:
            group = self._h5["optimizer_weights"]
            for i, wname in enumerate(_attr_list(group, "weight_names")):
                self._add(entries, group, wname, f"optimizer_weights/{wname}",
                          owner="optimizer_weights", index=i, section="optimizer",
                          weight_name=_SUFFIX_RE.sub("", wname))
        return entries

    def _scan_keras3(self, f) -> dict[str, TensorEntry] | None:
        import h5py

        entries: dict[str, TensorEntry] = {}
        owners: list[str] = []

        def visit(name: str, obj) -> None:
            head, _, last = name.rpartition("/")
            if isinstance(obj, h5py.Group) and last == "vars":
                owners.append(head)
                label = obj.attrs.get("name")
                label = label.decode() if isinstance(label, bytes) else label
                if isinstance(label, str):
                    self._owner_names[head] = label
                for key in sorted(obj, key=lambda k: (not k.isdigit(), int(k) if k.isdigit()
                                                      else 0, k)):
                    if isinstance(obj[key], h5py.Dataset):
                        section = "optimizer" if head.split("/")[0] == "optimizer" else "model"
                        self._add(entries, obj, key, f"{name}/{key}", owner=head,
                                  index=int(key) if key.isdigit() else None, section=section)

        f.visititems(visit)
        return entries if owners else None

    def _add(self, entries, group, wname: str, h5path: str, **extra) -> None:
        import h5py

        try:
            ds = group[wname]
        except KeyError:
            raise CorruptCheckpointError(f"weight {h5path!r} is listed but not stored",
                                         path=self.path) from None
        if not isinstance(ds, h5py.Dataset):
            raise CorruptCheckpointError(f"{h5path!r} is a group, expected a dataset",
                                         path=self.path)
        key = _SUFFIX_RE.sub("", h5path)
        if key in entries:
            key = h5path
        enum = self._dtype(ds, h5path)
        shape = tuple(int(d) for d in ds.shape) if ds.shape is not None else ()
        npdtype = ds.dtype
        nbytes = math.prod(shape) * npdtype.itemsize
        offset = self._check_storage(ds, h5path, nbytes)
        if offset is not None and (npdtype.kind not in "biufcV" or npdtype.hasobject
                                   or ds.id.get_storage_size() != nbytes):
            offset = None
        entries[key] = TensorEntry(
            name=key, dtype=enum, shape=shape, stored_bytes=nbytes,
            offset=(offset + self._base) if offset is not None else 0,
            extra={"h5path": h5path, "npdtype": npdtype.str,
                   "file_offset": (offset + self._base) if offset is not None else None,
                   **extra})

    def _check_storage(self, ds, h5path: str, nbytes: int) -> int | None:
        """Refuses a dataset whose bytes are not all inside this file, before anything is read.

        Returns:
            the dataset's offset in the HDF5 file when it is stored contiguously, else None.

        Raises:
            CorruptCheckpointError: naming the dataset, if it is virtual, stored in external
                files, has no storage, or claims more bytes than the file can hold.
        """
        def refuse(problem: str) -> CorruptCheckpointError:
            return CorruptCheckpointError(f"dataset {h5path!r} {problem}", path=self.path)

        if ds.is_virtual:
            raise refuse("is a virtual dataset (its data lives in other files)")
        if ds.external:
            raise refuse(f"keeps its data in external files ({ds.external[0][0]}...)")
        offset = ds.id.get_offset()
        storage = ds.id.get_storage_size()
        size = self._end - self._base  # the HDF5 file's own bytes (a .keras member's)
        if nbytes and not storage:
            raise refuse(f"of shape {ds.shape} has no stored data")
        if offset is not None:
            if offset + nbytes > size:
                raise refuse(f"of shape {ds.shape} spans bytes [{offset}, {offset + nbytes}) but "
                             f"the file has {size} bytes")
        elif storage > size or nbytes > _EXPAND_BASE + _EXPAND_RATIO * storage:
            raise refuse(f"of shape {ds.shape} claims {nbytes} bytes from {storage} stored in a "
                         f"{size}-byte file")
        return offset

    def _dtype(self, ds, h5path: str) -> int:
        tag = ds.attrs.get("dtype") if "dtype" in ds.attrs else None
        if isinstance(tag, bytes):
            tag = tag.decode()
        if ds.dtype.kind == "V":
            if isinstance(tag, str):
                return dtypes.enum_of(tag)
            if ds.dtype.itemsize == 2:
                return dtypes.enum_of("bfloat16")  # Keras' legacy writer drops the tag
            raise UnsupportedFormatError(
                f"{self.path}: dataset {h5path!r} holds untagged {ds.dtype.itemsize}-byte "
                "opaque values (expected a numeric dtype or a dtype attribute)")
        return dtypes.enum_of_numpy(ds.dtype)

    # -- data ------------------------------------------------------------------------------
    def read(self, name: str) -> np.ndarray:
        """Returns the tensor stored under ``name`` (a read-only view when contiguous).

        Raises:
            KeyError: if ``name`` is not stored.
            CorruptCheckpointError: if the data lies outside the file.
        """
        return self._read_entry(name, self.entries[name])

    def _read_entry(self, name: str, entry: TensorEntry) -> np.ndarray:
        dt = (dtypes.numpy_dtype(entry.dtype) if np.dtype(entry.extra["npdtype"]).kind == "V"
              else np.dtype(entry.extra["npdtype"]))
        offset = entry.extra["file_offset"]
        if offset is None:
            try:
                value = np.asarray(self._h5[entry.extra["h5path"]][()])
            except (OSError, RuntimeError, KeyError) as exc:  # h5py: damaged chunks, filters
                raise CorruptCheckpointError(f"cannot read tensor {name!r}: {exc}",
                                             path=self.path) from exc
            if value.dtype.kind == "V":
                value = value.view(dt)
            return value.reshape(entry.shape)
        count = math.prod(entry.shape)
        if offset + count * dt.itemsize > self._end:
            raise CorruptCheckpointError(
                f"tensor {name!r} spans bytes [{offset}, {offset + count * dt.itemsize}) but the "
                f"HDF5 data ends at byte {self._end} (truncated?)", path=self.path)
        arr = np.frombuffer(self._buf, dtype=dt, count=count, offset=offset).reshape(entry.shape)
        if not dt.isnative:
            return arr.astype(dt.newbyteorder("="))
        if offset % max(dt.alignment, 1):
            return arr.copy()
        return arr

    def files(self) -> list[str]:
        """Returns the one file (``.h5`` or ``.keras`` archive)."""
        return [self.path]

    def close(self) -> None:
        h5 = getattr(self, "_h5", None)
        if h5 is not None:
            h5.close()
        for obj in (self._fileobj, self._zip, self._zip_window):
            if isinstance(obj, _Window):
                obj._view.release()
            if obj is not None:
                obj.close()
        close_map(self._buf)
        close_map(self._archive)
