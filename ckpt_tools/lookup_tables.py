"""Lookup tables among a checkpoint's variables: the keys and values a TF2
``DenseHashTable``/``MutableHashTable`` (also a Keras lookup layer's table) saves as
``<path>/.ATTRIBUTES/table-keys`` and ``…/table-values``. They are lookup data, not weights, so
``ckpt list`` counts them apart from its parameters.
"""

from __future__ import annotations

from collections.abc import Iterable

from .formats._record import Frozen

TABLE_KEYS = "/.ATTRIBUTES/table-keys"
TABLE_VALUES = "/.ATTRIBUTES/table-values"


class TableTotals(Frozen):
    """What a list of variables holds in lookup tables.

    Attributes:
        tables: how many tables (each counted by its ``table-keys`` tensor).
        entries: the entries they store (the length of each ``table-keys`` tensor: what the
            table's ``export()`` returns; a ``DenseHashTable`` stores every bucket, empty
            ones included).
        size: the elements of their ``table-keys`` and ``table-values`` tensors together
            (what a parameter count leaves out).
    """

    tables: int
    entries: int
    size: int
    _fields = ("tables", "entries", "size")

    def __init__(self, tables: int = 0, entries: int = 0, size: int = 0) -> None:
        self.__dict__.update(tables=tables, entries=entries, size=size)


def is_table_part(key: str) -> bool:
    """Whether checkpoint ``key`` is a TF2 lookup table's saved keys or values."""
    return key.endswith((TABLE_KEYS, TABLE_VALUES))


def table_totals(variables: Iterable) -> TableTotals:
    """Counts the lookup tables among ``variables`` (objects with ``name`` (the checkpoint
    key), ``shape`` and ``size``, such as :class:`~ckpt_tools.checkpoint.Variable`).

    Returns:
        A :class:`TableTotals` (all zero where there is no table).
    """
    tables = entries = size = 0
    for v in variables:
        if not is_table_part(v.name):
            continue
        size += v.size
        if v.name.endswith(TABLE_KEYS):
            tables += 1
            entries += int(v.shape[0]) if len(v.shape) else 1
    return TableTotals(tables, entries, size)
