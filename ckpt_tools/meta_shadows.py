"""TF1 averages whose EMA name holds a slash (``ExponentialMovingAverage(name="ema/slow")``):
the shadow of ``W`` is ``W/ema/slow``, which by its last part alone reads as ``W/ema``'s
average under the name ``slow`` wherever the graph also holds a ``W/ema``.

``ema.apply()`` adds every variable it averages to ``moving_average_variables``, so a
``.meta`` whose collection lists ``W`` and not ``W/ema`` proves whose average it is.
"""

from __future__ import annotations

from collections.abc import Mapping

from .formats.entry import TensorEntry
from .formats.meta import MetaGraph
from .roles import EMA, LOSS_AVERAGE, RoleInfo


def slashed_name_shadows(entries: Mapping[str, TensorEntry], roles: Mapping[str, RoleInfo],
                         meta: MetaGraph | None) -> dict[str, RoleInfo]:
    """Returns new roles for the keys that are the average of a variable the ``.meta``'s
    ``moving_average_variables`` lists, under an EMA name of several parts, where the
    name-based reading (``roles``) gave them to a variable that list leaves out (or to a loss,
    when their head is no stored variable). Exactly one averaged variable, stored with the
    key's dtype and shape, must prefix the key; otherwise the reading stays.

    Example:
        >>> # W, b, a trainable W/ema; ExponentialMovingAverage(name="ema/slow").apply([W, b])
        >>> slashed_name_shadows(entries, roles, meta)  # doctest: +SKIP
        {'W/ema/slow': RoleInfo(role='ema', ema_of='W', ...), 'b/ema/slow': ...}
    """
    averaged = set(meta.keys_in("moving_average_variables")) if meta else set()
    if not averaged:  # no .meta, or no ema.apply() in its graph: nothing proves a split
        return {}
    out: dict[str, RoleInfo] = {}
    for key, ri in roles.items():
        head = key.rpartition("/")[0]
        if ri.role == EMA and ri.ema_style == "tf1" and ri.ema_of == head:
            if head in averaged:
                continue  # the one-part name the graph proves
        elif ri.role != LOSS_AVERAGE:
            continue
        entry, parts = entries[key], key.split("/")
        owners = [own for own in ("/".join(parts[:i]) for i in range(1, len(parts) - 1))
                  if own in averaged and own in entries
                  and entries[own].dtype == entry.dtype and entries[own].shape == entry.shape]
        if len(owners) == 1:
            out[key] = RoleInfo(EMA, ema_of=owners[0], ema_style="tf1")
    return out
