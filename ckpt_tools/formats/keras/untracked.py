"""Keras 3 optimizer variables made outside ``add_variable``, which a ``LossScaleOptimizer``
leaves out of the file: Adafactor's placeholders for rank < 2 weights, Nadam's ``u_product``.

``Adafactor.build`` (Keras 3.15) gives each trainable weight a factored ``r`` and ``c`` and a
``velocity``; for a weight of rank < 2, ``r`` and ``c`` are placeholder scalars
``backend.Variable(0)`` (int32). ``Nadam.build`` makes its ``u_product`` scalar (after the
slots) as ``backend.Variable(1.0)``. The optimizer tracks such variables only through automatic
attribute tracking; ``LossScaleOptimizer.build`` (``mixed_float16``) builds the wrapped
optimizer under ``no_automatic_dependency_tracking``, so there they are not tracked and the
file holds none. The layouts with and without them never fit the same file (Adafactor's
placeholders are int32 scalars, which no other Adafactor variable is, unless no weight has
rank < 2 and the layouts are the same; Nadam's count of variables is two per weight plus the
blocks, odd by one with ``u_product``), so trying both where a LossScaleOptimizer wraps the
optimizer proves as much as trying one.
"""

from __future__ import annotations

Spec = tuple[tuple[int, ...], int]  # (shape, TensorFlow dtype enum)
INT32 = 3  # DataType DT_INT32: the placeholders' dtype
TRACKED, UNTRACKED = "f", "fu"  # slot-group kinds: placeholders stored / not stored
_PARSES = 64  # readings of an untracked layout enumerated; beyond, nothing is paired


def as_loss_scaled(groups: list | None) -> list | None:
    """``groups`` (an optimizer's slot groups) as a LossScaleOptimizer's build leaves them:
    Adafactor's placeholders and Nadam's ``u_product`` (an ``"s"`` scalar group) left out;
    ``None`` when they hold neither."""
    if not groups or not any(kind in (TRACKED, "s") for kind, _ in groups):
        return None
    return [(UNTRACKED if kind == TRACKED else kind, names) for kind, names in groups
            if kind != "s"]


def expand(kind: str, names: tuple, j: int, var: Spec) -> list[tuple[Spec, int, str, bool]]:
    """Weight ``j``'s Adafactor variables in creation order: ``(spec, j, slot name, spec equals
    the weight's)`` for ``r``, ``c`` (placeholders below rank 2, where ``kind`` tracks them)
    and ``velocity``."""
    shape, dt = var
    out = []
    if len(shape) >= 2:
        out += [((shape[:-1], dt), j, names[0], False),
                ((shape[:-2] + shape[-1:], dt), j, names[1], False)]
    elif kind == TRACKED:
        out += [(((), INT32), j, names[0], False), (((), INT32), j, names[1], False)]
    out.append(((shape, dt), j, names[2], True))
    return out


def weight_specs(blocks: int, rest: list[Spec], limit: int) -> tuple[list[list[Spec]], bool]:
    """Every list of weight specs (fewer than ``limit``, at least one) an optimizer whose
    variables are ``blocks`` per-weight blocks (averages, gradient accumulators) then one
    untracked Adafactor group may have been built with to write exactly ``rest``, and whether
    more readings exist than were enumerated. The caller checks each against ``rest``; with
    ``blocks`` the weights are the first block, else every reading of ``rest`` as groups."""
    if blocks:
        return [rest[:n] for n in range(1, min(limit, len(rest) // blocks + 1))], False
    out: list[list[Spec]] = []
    stack: list[tuple[int, list[Spec]]] = [(0, [])]
    while stack:
        i, acc = stack.pop()
        if i == len(rest):
            if 1 <= len(acc) < limit:
                out.append(acc)
                if len(out) >= _PARSES:
                    return out, True
            continue
        if len(rest[i][0]) < 2:  # a velocity alone: a weight of rank < 2
            stack.append((i + 1, acc + [rest[i]]))
        if i + 2 < len(rest) and len(rest[i + 2][0]) >= 2 and expand(
                UNTRACKED, ("r", "c", "v"), 0, rest[i + 2])[:2] == [
                (rest[i], 0, "r", False), (rest[i + 1], 0, "c", False)]:
            stack.append((i + 3, acc + [rest[i + 2]]))
    return out, False
