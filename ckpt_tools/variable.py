"""The :class:`Variable` record ``ckpt list`` shows for one stored tensor, and
:func:`shell_word`, how a name is written back so a shell reads it exactly. Split out of
:mod:`ckpt_tools.checkpoint`, which still exports both.
"""

from __future__ import annotations

from .formats._record import Frozen
from .lazy_re import LazyPattern


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
            ``ema_candidates`` lists them; :func:`ckpt_tools.ema_decide.decide_pairing` applies
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


_PLAIN_WORD = LazyPattern(r"[A-Za-z0-9_./:@%+=,-]+")



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
_INVISIBLE = LazyPattern("[\xad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")
