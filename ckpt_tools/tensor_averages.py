"""Averages of tensors that are not variables and not scalar losses (``tensor_average``).

The hand-made TF1 batch norm copied into many repositories keeps the model's inference
statistics as an ``ExponentialMovingAverage`` of the batch moments::

    bm, bv = tf.nn.moments(h, [0]); bn_ema.apply([bm, bv])   # inference: bn_ema.average(bm)

Their shadows (``bn/moments/Squeeze/ExponentialMovingAverage``) have no stored variable, as a
loss average (``total_loss/avg``) has none; but a loss is a scalar, and these are not: they
were listed as loss averages and silently left out of every export (review-15-attack-r31 F9).
A non-scalar average of a tensor is read as ``tensor_average``; ``ckpt export
--tensor-averages`` writes them under their own key (there is no variable to name them after),
and an export that leaves them out says so, naming that option.
"""

from __future__ import annotations

from collections.abc import Mapping

from . import roles as R
from .checkpoint import Checkpoint
from .ema_updates import shadow_owners
from .errors import OutputError
from .save_op import written_sources
from .wording import counted

OPTION = "--tensor-averages"


def tensor_averages(entries: Mapping, roles: Mapping) -> dict:
    """New roles (key -> :class:`~ckpt_tools.roles.RoleInfo`): each average of a tensor
    (``loss_average`` by the name and ``.meta`` reading) that is not a scalar is a
    ``tensor_average``."""
    info = R.RoleInfo(R.TENSOR_AVERAGE)
    return {k: info for k, ri in roles.items()
            if ri.role == R.LOSS_AVERAGE and tuple(entries[k].shape)}


def updated_tensor_averages(entries: Mapping, roles: Mapping, meta) -> dict:
    """New roles for the keys read by name as weights (or other) that the ``.meta``'s update
    ops show ``ema.apply()`` writing from a tensor no variable holds, the key named as
    ``apply()`` names such a shadow (``<scope>/<tensor op>/<EMA name>``): a hand-made batch
    norm's statistics under an EMA of the user's name (``ExponentialMovingAverage(0.5,
    name="bn_ema")``: ``layer0/layer0/moments/Squeeze/bn_ema``), which TF's default name makes
    a ``tensor_average`` by name alone (review-16-attack-r33 F4). A scalar one is a
    ``loss_average``. Read only where such a key is in the graph, outside its trainable and
    averaged variables, under no stored variable."""
    if meta is None or not meta.path.endswith(".meta"):
        return {}
    ops = {v.checkpoint_key: op for op, v in meta.variables.items()}
    kept = set(meta.keys_in("trainable_variables")) | set(
        meta.keys_in("moving_average_variables"))
    keys = [k for k, ri in roles.items() if ri.role in (R.WEIGHT, R.OTHER) and k in ops
            and "/" in k and k not in kept and k.rpartition("/")[0] not in entries]
    if not keys:
        return {}
    from .formats.meta_tensor_updates import tensor_average_updates  # reads the graph: only here

    updates = tensor_average_updates(meta.path)
    out = {}
    for key in keys:
        tensor, scope = updates.get(ops[key], ("", ""))
        head, _, last = key.rpartition("/")
        if tensor and (head == tensor or head.endswith("/" + tensor)) and R.UNIQUIFIED.sub(
                "", last) == R.UNIQUIFIED.sub("", scope.rpartition("/")[2]):
            out[key] = R.RoleInfo(R.TENSOR_AVERAGE if tuple(entries[key].shape)
                                  else R.LOSS_AVERAGE)
    return out


def add_tensor_averages(variables: Mapping, plan: dict, averaged: list, export: bool,
                        left_out, renamed) -> str | None:
    """Adds to an export's ``plan`` (output name -> key) and ``averaged`` (output names) each
    ``tensor_average`` of ``variables`` the name filters keep (``left_out(key)`` false),
    under its key as ``renamed(key)`` gives it, where ``export``; otherwise returns the
    warning naming those it leaves out (``None`` where there are none).

    Raises:
        OutputError: ``renamed`` gives one an output name already in ``plan``.
    """
    chosen = sorted(k for k, v in variables.items()
                    if v.role == R.TENSOR_AVERAGE and not left_out(k))
    if not export:
        return tensor_averages_left_out(variables, chosen)
    for key in chosen:
        name = renamed(key)
        if name in plan:
            raise OutputError(f"two tensors would be exported as {name!r} ({plan[name]} and "
                              f"{key}); adjust --rename")
        plan[name] = key
        averaged.append(name)  # EMA values: none of them is raw
    return None


def tensor_averages_left_out(variables: Mapping, keys: list[str]) -> str | None:
    """The warning of an export that leaves out the averages of tensors ``keys`` (a
    hand-written batch norm's running statistics are the model's inference state: never left
    out without a word); ``None`` where there are none."""
    if not keys:
        return None
    shown = ", ".join(f"{k} {list(variables[k].shape)}" for k in keys[:3])
    more = f" (and {len(keys) - 3} more)" if len(keys) > 3 else ""
    return (f"left out {counted(len(keys), 'average')} of tensors that are not variables and "
            f"not scalar losses: {shown}{more}; such averages are often batch-norm statistics "
            "kept by ema.apply([mean, variance]), which a model needs at inference: "
            f"{OPTION} exports them under these names")


def shadow_averages_left_out(ckpt: Checkpoint, keys: list[str]) -> str | None:
    """The warning of an export that leaves out ``keys`` read by name as averages of
    tensors that the ``.meta``'s save op wrote from ``ema.apply()`` shadows of variables
    (:func:`~ckpt_tools.raw_dropped.shadow_written_keys`): another EMA object's averages of
    those variables, which ``--ema-name`` of one object leaves out and no
    ``--tensor-averages`` exports; named as what they are, never as tensors' averages
    (review-27-attack-r96 F3). ``None`` where there are none."""
    if not keys:
        return None
    sources = written_sources(ckpt) or {}
    owners = shadow_owners(ckpt) or {}
    keys = sorted(keys)

    def said(key: str) -> str:
        src = sources.get(key) or []
        of = sorted({owners.get(s, "?") for s in src})
        return f"{key} <- {', '.join(src)} (the average of {', '.join(of)})"
    shown = ", ".join(said(k) for k in keys[:3])
    more = f" (and {len(keys) - 3} more)" if len(keys) > 3 else ""
    return (f"left out {counted(len(keys), 'key')} the .meta's save op wrote from ema.apply() "
            "shadows "
            f"of variables: {shown}{more}; they are another EMA object's averages of those "
            "variables, not averages of tensors, and not of the EMA object this export reads")
