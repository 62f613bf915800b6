"""The :class:`Reader` protocol every format reader provides (see :mod:`ckpt_tools.formats`)."""

from __future__ import annotations

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
