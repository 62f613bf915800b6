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

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (~2.5 ms a process)
if TYPE_CHECKING:
    from .reader import Reader


def __getattr__(name: str):
    """``Reader`` is defined in :mod:`.reader` and imported on first use: a runtime-checkable
    ``typing.Protocol`` needs ``typing``, which ``ckpt list`` otherwise never imports."""
    if name == "Reader":
        from .reader import Reader

        return Reader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _bundle(path: str, verify: bool) -> Reader:
    from .bundle import BundleReader

    return BundleReader(path, verify=verify)


def _v1(path: str, verify: bool) -> Reader:
    from .v1 import V1Reader

    return V1Reader(path, verify=verify)


def _keras(path: str, verify: bool) -> Reader:
    from .keras.h5 import H5Reader  # h5py is imported only when a Keras file is opened

    return H5Reader(path, verify=verify)


# Format name (as :func:`ckpt_tools.locate.locate` reports it) -> reader factory.
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
