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

This module opens the file (an archive's members within bounds), reads tensors and has the
layout worked out; :mod:`~ckpt_tools.formats.keras.h5_scan` scans the HDF5 tree into entries,
refusing data that lies outside the file.
"""

from __future__ import annotations

import io
import math
import os
import re
import zipfile

import numpy as np

from ...errors import (
    CheckpointNotFoundError,
    CorruptCheckpointError,
    EmaError,
    UnprovenPairingError,
    UnsupportedFormatError,
    VariableNotFoundError,
)
from .. import dtypes
from .._io import close_map, map_file
from ..entry import TensorEntry
from .h5_files import (
    CONFIG_MEMBER,
    EXPAND_BASE,
    MEMBER_EXPAND_RATIO,
    METADATA_MEMBER,
    WEIGHTS_MEMBER,
    ZIP_ERRORS,
    ZIP_SIGNATURE,
    Window,
    check_archive,
    check_one_reading,
    check_stored_crc,
    stored_start,
)
from .h5_scan import H5Scan
from .model_configs import json_attr, model_dir_of, parse_json_object, read_model_dir


class H5Reader:
    """Reads one Keras weight file (the :class:`~ckpt_tools.formats.Reader` protocol).

    Args:
        path (`str`): a ``.h5``/``.weights.h5`` HDF5 file or a ``.keras`` archive.
        verify (`bool`, *optional*, defaults to `True`): check a ``.keras`` archive's weights
            member against its zip CRC-32 before the first value is read
            (:meth:`check_member`); a bare HDF5 file records no checksum.

    Attributes:
        format: ``"h5"`` or ``"keras"``.
        kind: ``"keras3"`` (``vars`` groups) or ``"legacy"`` (``layer_names`` attributes).
        model_dir: the unzipped Keras model directory (``model.save(dir, zipped=False)``)
            whose ``model.weights.h5`` this is, read with its ``config.json`` and
            ``metadata.json`` as a ``.keras`` archive is; else ``None``.
        config: the model config (``config.json`` of a ``.keras`` or model directory; for a
            legacy full-model
            ``.h5`` ``{"model_config": ..., "training_config": ...}``), or ``None``.
        keras: the :class:`~ckpt_tools.formats.keras.layout.KerasLayout` (what each key is).

    Raises:
        CheckpointNotFoundError: if the file does not exist.
        CorruptCheckpointError: if it is not a readable HDF5 file or zip archive (or its
            weights member fails its CRC-32 where they cannot be parsed).
        UnsupportedFormatError: if it holds no Keras weights (or keeps them in ``.npz``).

    Example:
        >>> r = H5Reader("fixtures/keras_ema/model.weights.h5")
        >>> r.read("layers/dense/vars/0").shape
        (4, 8)
    """

    def __init__(self, path: str, *, verify: bool = True):
        import h5py  # deferred: only Keras files need it

        self._verify = verify
        # A stored member's (start, size, zip CRC-32) in the archive's mapping, checked once
        # before its first value is read; then _checked holds the bytes checked, or the
        # message every later read raises again.
        self._stored_crc: tuple[int, int, int] | None = None
        self._checked: int | str | None = None
        self.prefix = self.path = path
        self.config: dict | None = None
        self._owner_names: dict[str, str] = {}
        self.metadata: dict | None = None
        self._zip = self._fileobj = self._zip_window = None
        self._buf, self._base, self._end = b"", 0, 0
        self._archive = b""  # the archive's own mapping, once a member replaces _buf
        self.model_dir: str | None = None
        try:
            self._buf = map_file(path)
        except FileNotFoundError:
            raise CheckpointNotFoundError(f"{path}: no such file") from None
        self.format = "keras" if bytes(self._buf[:4]) == ZIP_SIGNATURE else "h5"
        self._end = len(self._buf)
        try:
            source = self._open_archive() if self.format == "keras" else self._one_reading()
            self._h5 = h5py.File(source, "r")
        except OSError as exc:
            try:
                self._blame_crc()
            finally:
                self.close()
            raise CorruptCheckpointError(f"cannot read HDF5 data: {exc}", path=path) from None
        except BaseException:
            self.close()
            raise
        try:
            try:
                scan = H5Scan(self._h5, path, self._base, self._end)
                self._owner_names = scan.owner_names
                scan.check_links()
                entries, self.kind = scan.scan()
                if self.kind == "legacy" and self.config is None:
                    self.config = self._legacy_config()
                    version = self._h5.attrs.get("keras_version", b"")
                    self._legacy_version = (version.decode("utf-8", "replace")
                                            if isinstance(version, bytes) else str(version))
                elif self.format == "h5" and model_dir_of(path):
                    self.model_dir = model_dir_of(path)
                    self.config, self.metadata = read_model_dir(self.model_dir)
            except (OSError, RuntimeError, KeyError, UnicodeDecodeError) as exc:
                # h5py's errors for damaged metadata (visititems, attributes, object headers)
                self._blame_crc()
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

    def _analyze(self, use_ema: bool | None, trainable=None, optimizer=None):
        from . import layout as keras_layout
        from . import tf_keras
        from .stated import check_stated_model_name, check_stated_use_ema

        try:
            if trainable:  # paths printed in another process name other layers
                names = self._owner_names
                check_stated_model_name(self.config, trainable, names.get(""),
                                        [n for o, n in names.items() if o])
            legacy = tf_keras.is_tf_keras(self.metadata) if self.metadata is not None else (
                self.config is None and self.kind != "legacy"
                and tf_keras.is_tf_keras_weights(self._scanned))
            layout = keras_layout.analyze(self._scanned, self.kind, self.config,
                                          self._owner_names, read=self._read_scanned,
                                          use_ema=use_ema, tf_keras=legacy or (
                                              self.kind == "legacy" and self.by_version_2),
                                          trainable=trainable, optimizer=optimizer)
            if legacy:
                tf_keras.adjust(layout, self._scanned, use_ema, trainable)
            check_stated_use_ema(layout, use_ema, "config.json" if self.has_config_json
                                 else "the file's training config")
            return layout
        except (EmaError, VariableNotFoundError) as exc:  # a --trainable that contradicts
            # config.json or names no weight: name the file
            if isinstance(exc, UnprovenPairingError):  # keep the option that decides
                raise UnprovenPairingError(f"{self.path}: {exc}", exc.option,
                                           exc.undecided) from None
            raise type(exc)(f"{self.path}: {exc}") from None
        except (AttributeError, TypeError, RecursionError) as exc:
            if self.config is None:
                raise
            # A JSON object of the wrong shape ({"compile_config": [1]}...).
            raise CorruptCheckpointError(
                f"{CONFIG_MEMBER if self.has_config_json else 'model config'} does not "
                f"describe a Keras model ({type(exc).__name__}: {exc})", path=self.path) from None

    @property
    def by_tf_keras(self) -> bool:
        """Whether tf_keras (Keras 2) wrote the file, as far as it tells: a tf_keras archive
        or bare ``.weights.h5`` (:attr:`keras` ``.tf_keras``), or a legacy ``.h5`` whose
        ``keras_version`` attribute is 2.x."""
        return bool(self.keras.tf_keras) or self.by_version_2

    @property
    def by_version_2(self) -> bool:
        """Whether a legacy ``.h5``'s ``keras_version`` attribute is 2.x (tf_keras wrote it)."""
        return re.match(r"2\.\d", getattr(self, "_legacy_version", "")) is not None

    @property
    def has_config_json(self) -> bool:
        """Whether :attr:`config` is a Keras 3 ``config.json`` (of an archive or directory)."""
        return self.format == "keras" or self.model_dir is not None

    def restate_use_ema(self, use_ema: bool | None, *, trainable=None,
                        optimizer=None) -> None:
        """Re-derives :attr:`keras` with the optimizer's ``use_ema`` stated by the caller
        (``ckpt ... --use-ema``; ``None`` infers it again) and, optionally, the weights the
        optimizer was built with (``--trainable``, see :func:`~.layout.analyze`).

        Raises:
            CorruptCheckpointError: the file's config does not describe a Keras model.
            VariableNotFoundError: a ``trainable`` name matches no weight (or one already
                matched).
        """
        if optimizer is not None:  # --optimizer: kept for later restatements
            self.stated_optimizer = optimizer
        self.keras = self._analyze(use_ema, trainable,
                                   getattr(self, "stated_optimizer", None))
        for key, entry in self.entries.items():
            entry.extra["path"] = self.keras.paths.get(key)

    def _read_scanned(self, name: str) -> np.ndarray:
        return self._read_entry(name, self._scanned[name])

    # -- opening ---------------------------------------------------------------------------
    def _open_archive(self):
        try:
            # Read the archive from the mapping already checked to be a regular file, not by
            # opening its name again.
            self._zip_window = Window(memoryview(self._buf))
            self._zip = zipfile.ZipFile(self._zip_window)
            check_archive(self._zip, self.path)  # every member as zipfile would open it
            # an HDF5 file too: Keras reads it as the one its name says (r54 F1)
            check_one_reading(self._zip_window, self.path, len(self._buf), self._zip)
            names = set(self._zip.namelist())
            if CONFIG_MEMBER in names:
                self.config = parse_json_object(self._member(CONFIG_MEMBER), CONFIG_MEMBER,
                                                self.path)
            if METADATA_MEMBER in names:
                self.metadata = parse_json_object(self._member(METADATA_MEMBER),
                                                  METADATA_MEMBER, self.path)
        except ZIP_ERRORS as exc:
            raise CorruptCheckpointError(f"not a readable .keras archive: {exc}",
                                         path=self.path) from None
        if WEIGHTS_MEMBER not in names:
            other = sorted(n for n in names if n.startswith("model.weights"))
            raise UnsupportedFormatError(
                f"{self.path}: .keras archive has no {WEIGHTS_MEMBER} (expected HDF5 weights; "
                f"found {', '.join(other) or 'no weights'})")
        info = self._zip.getinfo(WEIGHTS_MEMBER)
        if info.compress_type == zipfile.ZIP_STORED:
            # Keras stores members uncompressed: map the member's bytes in place (check_archive
            # read its local header, and found its stored size to be its size).
            self._base = stored_start(self._zip_window, info)
            if self._base + info.file_size > len(self._buf):
                raise CorruptCheckpointError(f"{WEIGHTS_MEMBER} runs past the end of the file",
                                             path=self.path, offset=self._base)
            self._end = self._base + info.file_size
            view = memoryview(self._buf)[self._base : self._end]
            self._fileobj = Window(view)
            self._stored_crc = (self._base, info.file_size, info.CRC)
        else:  # a re-zipped archive: decompress the member into memory (never to disk)
            try:
                data = self._member(WEIGHTS_MEMBER)
            except ZIP_ERRORS as exc:
                raise CorruptCheckpointError(f"cannot decompress {WEIGHTS_MEMBER}: {exc}",
                                             path=self.path) from None
            self._archive = self._buf
            self._buf, self._base, self._end = data, 0, len(data)
            self._checked = len(data)  # zipfile checked its CRC-32 reading it to the end
            self._fileobj = io.BytesIO(self._buf)
        return self._fileobj

    def _one_reading(self) -> str:
        """Returns the path of the HDF5 file to open, after refusing one that is a zip archive
        too (:func:`~.h5_files.check_one_reading`)."""
        with memoryview(self._buf) as view:
            check_one_reading(Window(view), self.path, len(view))
        return self.path

    def _member(self, name: str) -> bytes:
        """Returns one archive member's bytes, refusing more than the archive can reasonably
        expand to (checked on the declared size first, then while reading, since zipfile stops
        at the declared size and a lying header then fails its CRC).

        Raises:
            CorruptCheckpointError: the member would pass the cap (a decompression bomb).
        """
        info = self._zip.getinfo(name)
        cap = EXPAND_BASE + MEMBER_EXPAND_RATIO * len(self._buf)
        # what a real model compressed past the cap can do: be read as Keras writes it
        way_out = ("; if Keras loads it, unzip it and pass the model directory, or re-zip it "
                   "with zip -0 (stored, as Keras writes it)")
        if info.file_size > cap:
            raise CorruptCheckpointError(
                f"archive member {name} claims {info.file_size} bytes, more than {cap} that a "
                f"{len(self._buf)}-byte archive may expand to (a decompression bomb?){way_out}",
                path=self.path)
        with self._zip.open(info) as member:
            data = member.read(cap + 1)
        if len(data) > cap:
            raise CorruptCheckpointError(
                f"archive member {name} expands past {cap} bytes{way_out}", path=self.path)
        return data

    def check_member(self) -> int:
        """Checks a ``.keras`` archive's ``model.weights.h5`` against the CRC-32 its zip
        directory records, once (memoised): Keras stores it uncompressed and this reader maps
        its bytes in place, so nothing else would notice a flipped bit that ``load_model``
        refuses. Every value read (:meth:`read`, and the layout's own reads) checks it first;
        reading metadata only (``ckpt list`` of a file whose layout needs no value) does not
        pay the one pass over the member.

        Returns:
            the bytes the CRC-32 covered (0 for a bare HDF5 file, which records no checksum,
            or a stored member read with ``verify=False``).

        Raises:
            CorruptCheckpointError: naming the file and the member, on a mismatch (again on
                every later call).
        """
        if self._checked is None and self._stored_crc is not None and self._verify:
            try:
                self._checked = check_stored_crc(self._buf, *self._stored_crc, WEIGHTS_MEMBER)
            except CorruptCheckpointError as exc:
                self._checked = str(exc)
        if isinstance(self._checked, str):  # a new error each time: callers append to one
            raise CorruptCheckpointError(self._checked, path=self.path)
        return self._checked or 0

    @property
    def root_attrs(self):
        """The attributes of the HDF5 root this reader reads the values from (a ``.keras``
        archive's ``model.weights.h5``): where restore-ema's mark is read, so that one reading
        decides both (:func:`ckpt_tools.restored_mark.read_mark`)."""
        return self._h5.attrs

    def _blame_crc(self) -> None:
        """Where h5py cannot parse a stored member: a CRC-32 mismatch is the cause to name."""
        if self._verify and self._zip is not None:
            self.check_member()

    def _legacy_config(self) -> dict | None:
        found = {k: json_attr(self._h5.attrs[k]) for k in ("model_config", "training_config")
                 if k in self._h5.attrs}
        return found or None

    # -- data ------------------------------------------------------------------------------
    def read(self, name: str) -> np.ndarray:
        """Returns the tensor stored under ``name`` (a read-only view when contiguous).

        Raises:
            KeyError: if ``name`` is not stored.
            CorruptCheckpointError: if the data lies outside the file, or a ``.keras``
                archive's weights member fails its CRC-32.
        """
        return self._read_entry(name, self.entries[name])

    def _read_entry(self, name: str, entry: TensorEntry) -> np.ndarray:
        if self._verify:  # no value from a member whose bytes fail the archive's CRC-32
            self.check_member()
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
        """Returns the file (``.h5`` or ``.keras`` archive), and for a model directory's
        weights the ``config.json`` and ``metadata.json`` read beside it."""
        if self.model_dir is None:
            return [self.path]
        return [self.path] + [f for f in (os.path.join(self.model_dir, n) for n in (
            CONFIG_MEMBER, METADATA_MEMBER)) if os.path.lexists(f)]

    def close(self) -> None:
        h5 = getattr(self, "_h5", None)
        if h5 is not None:
            h5.close()
        for obj in (self._fileobj, self._zip, self._zip_window):
            if isinstance(obj, Window):
                obj._view.release()
            if obj is not None:
                obj.close()
        close_map(self._buf)
        close_map(self._archive)
