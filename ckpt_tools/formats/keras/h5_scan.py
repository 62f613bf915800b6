"""Scanning an opened Keras HDF5 file into entries (keys, dtypes, shapes, where each dataset's
bytes lie), for :class:`~ckpt_tools.formats.keras.h5.H5Reader`.

Keys are those the reader's module docstring describes: a Keras 3 file's ``vars`` datasets
(``layers/dense/vars/0``), a legacy ``.h5``'s ``layer_names``/``weight_names`` without the
``:0`` suffix. Refused here, before any data is read: links leaving the file, virtual or
external datasets, storage claiming more bytes than the file holds, untagged opaque values,
and one shard of a sharded save read without its map.
"""

from __future__ import annotations

import math
import re

from ...errors import CorruptCheckpointError, UnsupportedFormatError
from .. import dtypes
from ..entry import TensorEntry
from .h5_files import EXPAND_BASE, EXPAND_RATIO, attr_list, has_attr_list
from .sharded import lone_shard_tell

_SUFFIX_RE = re.compile(r":\d+$")
_NO_WEIGHTS = ("HDF5 file has no Keras weights (no layer_names attribute, no layers/ or vars/ "
               "groups)")


class H5Scan:
    """Scans the Keras weights of one opened HDF5 file.

    Args:
        h5: the open ``h5py.File``.
        path: the file's name, for errors.
        base: where the HDF5 file starts in the mapped bytes (a ``.keras`` member's offset).
        end: where it ends.

    Attributes:
        owner_names: Keras 3: group path -> ``name`` attribute of its ``vars`` group, filled
            by :meth:`scan`.
    """

    def __init__(self, h5, path: str, base: int, end: int):
        self.h5, self.path, self.base, self.end = h5, path, base, end
        self.owner_names: dict[str, str] = {}

    def check_links(self) -> None:
        """Refuses external links anywhere in the file and soft links that do not resolve
        inside it, before any object is opened through a link: data comes from this file only.

        Raises:
            CorruptCheckpointError: naming the link.
        """
        import h5py

        links: list[tuple[str, object]] = []
        self.h5.visititems_links(lambda name, link: links.append((name, link)))
        for name, link in links:  # all of them first: resolving a soft link may cross one
            if isinstance(link, h5py.ExternalLink):
                raise CorruptCheckpointError(
                    f"{name!r} is an external link to {link.filename}:{link.path}; only data "
                    "inside this file is read", path=self.path)
        for name, link in links:
            if isinstance(link, h5py.SoftLink):
                try:
                    target = self.h5.get(name)
                except (KeyError, RuntimeError, OSError, ValueError):
                    target = None
                if target is None:
                    raise CorruptCheckpointError(
                        f"soft link {name!r} points to {link.path!r}, which is not in this file",
                        path=self.path)

    def scan(self) -> tuple[dict[str, TensorEntry], str]:
        """Returns (key -> entry, ``"legacy"`` or ``"keras3"``).

        Raises:
            UnsupportedFormatError: no Keras weights, or one shard of a sharded save.
            CorruptCheckpointError: a listed weight not stored, or stored outside the file.
        """
        f = self.h5
        if has_attr_list(f, "layer_names"):
            return self._legacy(f, ""), "legacy"
        if "model_weights" in f and has_attr_list(f["model_weights"], "layer_names"):
            return self._legacy(f["model_weights"], "model_weights/"), "legacy"
        entries = self._keras3(f)
        if entries is None:
            raise UnsupportedFormatError(f"{self.path}: {_NO_WEIGHTS}")
        return entries, "keras3"

    def _legacy(self, root, prefix: str) -> dict[str, TensorEntry]:
        entries: dict[str, TensorEntry] = {}
        layers = attr_list(root, "layer_names")
        if "top_level_model_weights" in root and "top_level_model_weights" not in layers:
            layers.append("top_level_model_weights")
        for layer in layers:
            if layer not in root:
                raise CorruptCheckpointError(f"layer_names lists {layer!r}, which is not stored",
                                             path=self.path)
            for i, wname in enumerate(attr_list(root[layer], "weight_names")):
                self._add(entries, root[layer], wname, f"{prefix}{layer}/{wname}",
                          owner=f"{prefix}{layer}", index=i, section="model",
                          weight_name=_SUFFIX_RE.sub("", wname))
        if prefix and "optimizer_weights" in self.h5:
            group = self.h5["optimizer_weights"]
            for i, wname in enumerate(attr_list(group, "weight_names")):
                self._add(entries, group, wname, f"optimizer_weights/{wname}",
                          owner="optimizer_weights", index=i, section="optimizer",
                          weight_name=_SUFFIX_RE.sub("", wname))
        return entries

    def _keras3(self, f) -> dict[str, TensorEntry] | None:
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
                    self.owner_names[head] = label
                for key in sorted(obj, key=lambda k: (not k.isdigit(), int(k) if k.isdigit()
                                                      else 0, k)):
                    if isinstance(obj[key], h5py.Dataset):
                        section = "optimizer" if head.split("/")[0] == "optimizer" else "model"
                        self._add(entries, obj, key, f"{name}/{key}", owner=head,
                                  index=int(key) if key.isdigit() else None, section=section)

        f.visititems(visit)
        for owner in owners:
            # Keras writes vars/0..n-1; a group starting later is one shard of a sharded save
            # whose map is not beside it: its numbering belongs to the whole model.
            numbers = sorted(int(k) for k in f[f"{owner}/vars"] if k.isdigit())
            if numbers and numbers != list(range(len(numbers))):
                raise UnsupportedFormatError(
                    f"{self.path}: {owner or 'the model'} holds vars/{numbers[0]} to "
                    f"vars/{numbers[-1]} but not vars/0 to vars/{len(numbers) - 1}, as one shard "
                    "of Keras' sharded weights (save_weights(..., max_shard_size=...)) does; "
                    "its variables are numbered as in the whole model, so it cannot be read "
                    "alone: read the weights through Keras (model.load_weights of the "
                    "*.weights.json map) and save_weights them to one file")
        why = lone_shard_tell(owners, set(self.owner_names))
        if why:
            raise UnsupportedFormatError(
                f"{self.path}: looks like one shard of Keras' sharded weights (save_weights("
                f"..., max_shard_size=...)) read without its *.weights.json map: {why}; read "
                "alone, its optimizer variables would pair with the wrong layers: read the "
                "weights through Keras (model.load_weights of the map) and save_weights them "
                "to one file")
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
            offset=(offset + self.base) if offset is not None else 0,
            extra={"h5path": h5path, "npdtype": npdtype.str,
                   "file_offset": (offset + self.base) if offset is not None else None,
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
        size = self.end - self.base  # the HDF5 file's own bytes (a .keras member's)
        if nbytes and not storage:
            raise refuse(f"of shape {ds.shape} has no stored data")
        if offset is not None:
            if offset + nbytes > size:
                raise refuse(f"of shape {ds.shape} spans bytes [{offset}, {offset + nbytes}) but "
                             f"the file has {size} bytes")
        elif storage > size or nbytes > EXPAND_BASE + EXPAND_RATIO * storage:
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
