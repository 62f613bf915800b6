"""On-disk formats: one reader per format behind one :class:`Reader` protocol.

The layers, bottom to top (each imports only the ones below it)::

    formats/_io, _wire, _protos, crc, dtypes, strings, slices   safe I/O and codecs, once
    formats/table(+_builder), bundle(+_writer), v1, meta, objgraph, savedmodel, keras/
    checkpoint.py      open_checkpoint(): finds the files, picks a reader from READERS
    roles, emamap, keras_ema                                   what each variable is
    bake, restore, export, verify, stats, diff   ->   cli/, train/

Nothing above this package touches a file except through a reader or :mod:`._io`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from .entry import TensorEntry
    from .keras.layout import KerasLayout


@runtime_checkable
class Reader(Protocol):
    """What every format reader provides.

    Attributes:
        format: the format's short name (``"v2"``, ``"v1"``, ``"h5"``, ``"keras"``).
        prefix: what the reader was opened on (a V2 prefix or a file).
        entries: checkpoint key -> :class:`~ckpt_tools.formats.entry.TensorEntry`, metadata only.
        keras: what the file tells about EMA when it is a Keras file (its
            :class:`~ckpt_tools.formats.keras.layout.KerasLayout`), else ``None``; TensorFlow
            bundles carry that knowledge in their ``.meta`` graph and object graph instead.
    """

    format: str
    prefix: str
    entries: dict[str, TensorEntry]
    keras: KerasLayout | None

    def read(self, name: str) -> np.ndarray:
        """Returns the value stored under ``name`` (raises ``KeyError`` when absent)."""

    def files(self) -> list[str]:
        """Returns every file the reader reads from (index, shards, the archive...)."""

    def close(self) -> None:
        """Releases maps and handles; arrays already returned stay valid."""


def _bundle(path: str, verify: bool) -> Reader:
    from .bundle import BundleReader

    return BundleReader(path, verify=verify)


def _v1(path: str, verify: bool) -> Reader:
    from .v1 import V1Reader

    return V1Reader(path, verify=verify)


def _keras(path: str, verify: bool) -> Reader:
    from .keras.h5 import H5Reader  # h5py is imported only when a Keras file is opened

    return H5Reader(path)


# Format name (as :func:`ckpt_tools.checkpoint.locate` reports it) -> reader factory.
READERS: dict[str, Callable[[str, bool], Reader]] = {
    "v2": _bundle,
    "v1": _v1,
    "h5": _keras,
    "keras": _keras,
}


def open_reader(fmt: str, path: str, *, verify: bool = True) -> Reader:
    """Returns the reader registered for ``fmt`` opened on ``path``.

    Raises:
        KeyError: ``fmt`` has no registered reader (a programming error, not a user one).
    """
    return READERS[fmt](path, verify)


__all__ = ["READERS", "Reader", "open_reader"]
