"""Writes of a TF1 ``.meta``'s graph that copy a value into a variable rather than compute one
(review-18-attack-r41 F2): a plain ``Assign``/``AssignVariableOp`` whose value reads a variable
or is fed from outside (a ``Placeholder`` or ``Const``).

The writer rule of :mod:`.meta_updates` (review-17-attack-r38 F9) reads a shadow as ``W``'s
average only where nothing but ``ema.apply()``'s ``AssignMovingAvg`` update from ``W`` writes
it. Common training graphs also write ``apply()``'s own shadow with values that leave it
``ema.average(W)``:

- a reset of the average to the weights, ``tf1.assign(ema.average(w), w)``: the value is ``W``;
- swap-for-eval ops, ``W <- shadow`` and ``shadow <- W``, or through a backup variable
  (``tmp <- W; W <- shadow; shadow <- tmp``): the value is ``W``'s, or the shadow's own;
- a warm start that assigns every variable, the shadows too, from a checkpoint's values
  (``tf_slim``'s ``assign_from_checkpoint``: ``v.assign(placeholder)`` fed from the
  checkpoint), as a Saver's restore does.

Such a write is accepted where the graph's ``AssignMovingAvg`` update proves the shadow averaged
from ``W``; elsewhere it stays a writer, and the refusal says the keys' names decide
(``--no-meta``) rather than calling it a tensor kept by hand.
"""

from __future__ import annotations

from .graph_def import READS, op_name

#: The source of a copied value fed from outside the graph's variables (a ``Placeholder``
#: or a ``Const``): no op name has ``<``.
FEED = "<feed>"
_FEEDS = frozenset({"Placeholder", "PlaceholderV2", "Const"})
_COPIES = frozenset({"Assign", "AssignVariableOp"})


def copy_source(nodes, op: str, inputs: list[str], variable) -> str | None:
    """What the write ``op`` (its data ``inputs``) copies into its variable: the variable op
    its value reads (``variable`` reads a tensor back to one, or gives ``None``), :data:`FEED`
    for a ``Placeholder`` or ``Const`` value, or ``None`` where the value is computed (or
    the op is no plain assign)."""
    if op not in _COPIES or len(inputs) < 2:
        return None
    read = variable(inputs[1])
    if read is not None:
        return read
    value = op_name(inputs[1])
    for _ in range(8):
        node = nodes.get(value)
        if node is None or node.op not in READS or not node.inputs:
            break
        value = op_name(node.inputs[0])
    node = nodes.get(value)
    return FEED if node is not None and node.op in _FEEDS else None


Copy = tuple[str, str, str]  # (op, its type, the source copied: a variable op or FEED)


def settle_copies(averages: dict[str, tuple[str, str]], writers: dict[str, tuple[str, str]],
                  copies: dict[str, list[Copy]]
                  ) -> tuple[dict[str, tuple[str, str]], dict[str, tuple[Copy, ...]]]:
    """Which copying writes leave a shadow ``ema.average(W)``, and which stay writers.

    Args:
        averages: shadow -> ``(W, scope)`` of the graph's ``AssignMovingAvg`` updates.
        writers: variable -> ``(op, type)`` of a write computing its value.
        copies: variable -> ``(op, type, source)`` of each write copying a value into it
            (:func:`copy_source`).

    Returns:
        ``(writers, unproven)``: ``writers`` with each variable that a copy not accepted
        writes (and no computed write does) given that copy; ``unproven``: variable -> those
        copies. A copy into a shadow ``AssignMovingAvg`` averages ``W`` into is accepted
        where it copies ``W``, the shadow itself, a backup variable written only with
        copies of those two, or a fed value (a warm start).
    """
    out = dict(writers)
    unproven: dict[str, tuple[Copy, ...]] = {}
    for var, found in sorted(copies.items()):
        owner = averages.get(var, ("",))[0]

        def kept(source: str, var=var, owner=owner) -> bool:
            """Whether copying ``source`` into ``var`` leaves it ``owner``'s average."""
            if source == var:
                return True  # its own value: nothing new
            if not owner:
                return False  # no update proves var an average at all
            if source in (owner, FEED):
                return True
            backup = copies.get(source, ())
            return bool(backup) and source not in writers and source not in averages \
                and all(s in (owner, var) for _o, _t, s in backup)

        left = tuple(sorted(f for f in found if not kept(f[2])))
        if left:
            unproven[var] = left
            out.setdefault(var, left[0][:2])
    return out, unproven
