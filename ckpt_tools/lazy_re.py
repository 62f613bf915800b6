"""Regular expressions compiled on first use.

Compiling a pattern costs 30-350 µs, paid at import by a module-level ``re.compile`` in every
process, whether the pattern is used or not: ~1 ms of each ``ckpt list`` process went to
patterns only Keras files, TF2 object graphs, error messages or the human table use.
"""

from __future__ import annotations

import re


class LazyPattern:
    """Stands in for ``re.compile(pattern, flags)``: the first access to a method of the
    compiled pattern (``match``, ``search``, ``fullmatch``, ``sub``, ``finditer`` …)
    compiles it and keeps the bound method on this object, so later calls cost what a
    compiled pattern's do.

    Attributes:
        pattern: the pattern string (available without compiling).
        flags: the flags given.
    """

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags

    def __getattr__(self, name: str):
        """Returns ``name`` of the compiled pattern, compiling it on first use.

        Raises:
            AttributeError: ``name`` is not an attribute of a compiled pattern.
        """
        if name.startswith("__"):
            raise AttributeError(name)
        value = getattr(self.compiled(), name)
        self.__dict__[name] = value  # later lookups find it without __getattr__
        return value

    def compiled(self) -> re.Pattern:
        """Returns the compiled pattern (compiled once).

        Raises:
            re.error: the pattern is invalid.
        """
        compiled = self.__dict__.get("_compiled")
        if compiled is None:
            compiled = self.__dict__["_compiled"] = re.compile(self.pattern, self.flags)
        return compiled

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern!r}, {self.flags!r})"
