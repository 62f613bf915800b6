"""Plain value classes for what ``ckpt list`` builds: the part of ``@dataclass`` we use.

Why not ``dataclasses``: importing it brings ``inspect`` (and with it ``ast``, ``dis``,
``tokenize``, ``copy``: ~8 ms), and decorating a class generates and compiles its methods at
every import (~0.5 ms a class): ~15 ms of every ``ckpt list`` process for the 17 classes on
that path, more than listing 1,000 variables. A frozen dataclass's ``__init__`` also assigns
through ``object.__setattr__`` field by field (~1.3 µs for 13 fields, once per variable).

A :class:`Record` subclass lists its fields in ``_fields`` and writes its own ``__init__``
(compiled with the module, stored in its ``.pyc``); ``==``, ``repr`` and ``hash`` (for
:class:`Frozen`) come from here and behave as a dataclass's do: equal when of the same class
with equal compared fields; ``Class(field=value, ...)`` with the fields in ``_repr``.
"""

from __future__ import annotations


class Record:
    """Base of a mutable value class: ``==`` and ``repr`` over ``_fields`` (as ``@dataclass``).

    Subclasses set ``_fields`` (every field, in order), optionally ``_compare`` and ``_repr``
    (the fields ``==``/``hash`` and ``repr`` use, default: all), and define ``__init__``.
    """

    _fields: tuple[str, ...] = ()
    _compare: tuple[str, ...] | None = None
    _repr: tuple[str, ...] | None = None
    __hash__ = None  # mutable: unhashable, like a dataclass with eq=True

    def _key(self) -> tuple:
        d = self.__dict__
        return tuple([d[n] for n in (self._compare if self._compare is not None
                                     else self._fields)])

    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return self._key() == other._key()
        return NotImplemented

    def __repr__(self) -> str:
        d = self.__dict__
        shown = self._repr if self._repr is not None else self._fields
        return f"{type(self).__qualname__}({', '.join(f'{n}={d[n]!r}' for n in shown)})"


class FrozenError(AttributeError):
    """Raised on assigning to a field of a :class:`Frozen` record (as a frozen dataclass's
    ``FrozenInstanceError``, also an ``AttributeError``)."""


class Frozen(Record):
    """Base of an immutable, hashable value class (``@dataclass(frozen=True)``).

    ``__init__`` sets fields with ``self.__dict__.update(...)`` (assignment is refused).
    """

    def __setattr__(self, name: str, value) -> None:
        raise FrozenError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenError(f"cannot delete field {name!r}")

    def __hash__(self) -> int:
        return hash(self._key())


def replace(obj: Record, **changes):
    """A copy of ``obj`` with ``changes`` (as ``dataclasses.replace``).

    Raises:
        TypeError: a name in ``changes`` is not one of ``obj``'s fields.
    """
    unknown = [n for n in changes if n not in obj._fields]
    if unknown:
        raise TypeError(f"{type(obj).__qualname__} has no field {unknown[0]!r}")
    new = object.__new__(type(obj))
    d = new.__dict__
    d.update(obj.__dict__)
    d.update(changes)
    return new
