"""TF1 averages stored without their variable that their key's name alone does not mark.

:mod:`.raw_shadows` settles keys named ``w/ExponentialMovingAverage`` (no ``w`` stored): the
roles read them as averages by TF's default name. Two layouts of the same Saver of the
averages alone (``Saver({ema.average_name(v): ema.average(v)})``) are not read so:

* a NAMED EMA (``ExponentialMovingAverage(name="slow")``): keys ``w/slow``, ``b/slow``; with
  no ``w`` beside them nothing in the keys says ``slow`` is an EMA name (review r18 F4);
* an EMA applied inside ``variable_scope("ema_scope")``: ``average_name`` gives
  ``ema_scope/w/ExponentialMovingAverage``, whose head names no variable (review r18 F9).

:func:`unmarked_lone_averages` finds them where something records them: the ``.meta``'s update
ops (``AssignMovingAvg`` writes the shadow from ``w``: :mod:`.ema_updates`), or the caller's
``--ema-name slow`` (``<var>/slow`` exactly, TF1's ``average_name``). It only proposes: each
is then proven by the save op or stated ``--averages-only`` (:func:`~.raw_shadows.
settle_lone_averages`), since a Saver of ``ema.variables_to_restore()`` writes the same keys
holding the RAW weights.
"""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint

_PROPOSED = "unmarked_lone_averages"


def _floating(variables, key: str) -> bool:
    v = variables.get(key)
    return v is not None and v.role not in (R.OPTIMIZER_SLOT, R.EMA_DEBIAS) \
        and v.dtype.startswith(("float", "bfloat", "half", "double"))


def unmarked_lone_averages(ckpt: Checkpoint, variables, chosen: dict[str, str],
                           ema_name: str | None, use_meta: bool) -> dict[str, str]:
    """Returns average key -> variable key for TF1 keys that may hold the average of a
    variable the checkpoint does not store, not already paired in ``chosen``.

    Args:
        ckpt: the open checkpoint (``{}`` for TF2 and Keras files).
        variables: its variables by key.
        chosen: variable key -> the average chosen for it.
        ema_name: ``--ema-name`` (one name), or ``None``.
        use_meta: ``False`` under ``--no-meta``: the graph is not read.

    Returns:
        `dict[str, str]`: only proposals; :func:`~ckpt_tools.raw_shadows.settle_lone_averages`
        proves or refuses each.
    """
    if ckpt.objects is not None or getattr(ckpt.reader, "keras", None) is not None:
        return {}
    stored = ckpt.entries()
    taken = set(chosen.values())
    out: dict[str, str] = {}
    # the graph is read only where it averages a variable the checkpoint does not store
    averaged = ckpt.meta.keys_in("moving_average_variables") if use_meta and ckpt.meta else ()
    ops = None
    if any(k not in stored for k in averaged):
        from .ema_objects import last_part_reads  # the graph's reader: only where it may tell
        from .ema_updates import update_ops

        ops = update_ops(ckpt)
    if ops is not None:
        # The graph's AssignMovingAvg ops name the variable each stored shadow averages.
        by_var: dict[str, list[str]] = {}
        for shadow, (var, scope) in ops.averages.items():
            if shadow in stored and var not in stored and var not in chosen \
                    and shadow not in taken and _floating(variables, shadow):
                # the name is the shadow's tail after <var>/ only where it starts so:
                # a/net/b/fast (net/b under scope a) is never "b/fast" (s23e AB_0only)
                tail = shadow[len(var) + 1:] if shadow.startswith(var + "/") else None
                if ema_name is None or ema_name in (scope, tail) or (
                        ema_name in (shadow.rpartition("/")[2], scope.rpartition("/")[2])
                        # by a last part only where no object has the whole name (r53 F1)
                        and last_part_reads(ckpt, ema_name, use_meta)):
                    by_var.setdefault(var, []).append(shadow)
        out.update({shadows[0]: var for var, shadows in by_var.items() if len(shadows) == 1})
    if ema_name is not None:
        # TF1's average_name: <var>/<ema_name> exactly, the statement --ema-name makes; of a
        # variable (a .meta lists it), never of a tensor (a loss average, total_loss/avg)
        graph = ({v.checkpoint_key for v in ckpt.meta.variables.values()}
                 if use_meta and ckpt.meta else None)
        for key in variables:
            head, _, last = key.rpartition("/")
            if last == ema_name and head and head not in stored and head not in chosen \
                    and key not in taken and key not in out and head not in out.values() \
                    and (graph is None or head in graph) \
                    and variables[key].role not in (R.EMA, R.LOSS_AVERAGE, R.TENSOR_AVERAGE) \
                    and _floating(variables, key):
                out[key] = head
    ckpt.memo(_PROPOSED, dict).update(out)  # for the note on what rests on a statement
    return out


def proposed_lone_averages(ckpt: Checkpoint) -> dict[str, str]:
    """Returns what :func:`unmarked_lone_averages` proposed for ``ckpt`` so far (average key
    -> variable key; ``{}`` before any EMA map of it)."""
    return dict(ckpt.memo(_PROPOSED, dict))
