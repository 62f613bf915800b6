"""What a nested model's name in a legacy ``.h5`` ``--trainable`` stands for.

tf_keras stores a nested model (a ``Sequential`` or ``Functional`` used as a layer of the
outer model) under one group, ``model_weights/body/``, its weights named after the inner
layers only (``b/kernel``, not ``body/b/kernel``), in the order
``body.trainable_weights + body.non_trainable_weights``. ``--trainable body`` states the
weights ``model.trainable_variables`` lists for it: those of its layers that the model
config records as trainable, in that stored order (review-16-attack-r34 F12).
"""

from __future__ import annotations

from ...errors import UnprovenPairingError


def nested_trainable(lay, config: dict | None, name: str) -> list[str] | None:
    """The trainable weight keys of the nested model ``name``, in Keras' order, or ``None``
    where ``name`` is no nested model of the file (the caller then reads it otherwise).

    Args:
        lay: the legacy layout (``model``: the weight keys, ``paths``, ``trainable``: ``False``
            for moving statistics and non-float weights).
        config: ``{"model_config": ..., ...}`` of the file, or ``None``.
        name: the name ``--trainable`` gives.

    Raises:
        UnprovenPairingError: (exit 6) the file cannot tell which of its weights are
            trainable: no model config, a weight named after no layer of the nested model,
            or a stored order that contradicts the recorded flags (a custom layer's own
            non-trainable state). A frozen nested model whose layer was set trainable again
            is stored as if that layer were trained (tf_keras records no flag of a nested
            model, and stores its weights in that order): read so, as Keras reloads it; the
            EMA copies' count and names then refuse a wrong statement.

    Example:
        >>> class Lay: pass
        >>> lay = Lay()
        >>> lay.model = ["model_weights/body/b/kernel", "model_weights/body/a/kernel"]
        >>> lay.paths = {k: k.split("/", 2)[2] for k in lay.model}
        >>> lay.trainable = dict.fromkeys(lay.model, True)
        >>> body = {"class_name": "Sequential", "config": {"name": "body", "layers": [
        ...     {"class_name": "Dense", "config": {"name": "a", "trainable": False}},
        ...     {"class_name": "Dense", "config": {"name": "b", "trainable": True}}]}}
        >>> cfg = {"model_config": {"class_name": "Functional", "config": {"layers": [body]}}}
        >>> nested_trainable(lay, cfg, "body")
        ['model_weights/body/b/kernel']
    """
    group = [k for k in lay.model if k.startswith(f"model_weights/{name}/")]
    if not group or "/" in name:
        return None
    model = (config or {}).get("model_config")
    layer = _top_layer(model, name) if isinstance(model, dict) else None
    if layer is None:
        if all((lay.paths.get(k) or "").startswith(name + "/") for k in group):
            return None  # a plain layer: its weights carry its name (the caller's rule)
        raise _cannot_tell(lay, name, group, "the file records no model config naming it"
                           if not isinstance(model, dict) else
                           "the model config records no layer of that name")
    if not isinstance((layer.get("config") or {}).get("layers"), list):
        return None  # not a nested model
    frozen: dict[str, bool | None] = {}
    _leaves(layer, True, frozen)
    out = []
    for key in group:
        path = lay.paths.get(key) or key
        head = path.removeprefix(name + "/").split("/", 1)[0]
        if frozen.get(head) is None:
            raise _cannot_tell(lay, name, group, f"its weight {path} is named after no layer "
                               "the model config records in it" if head not in frozen else
                               f"it holds layers named {head!r}, not all trainable")
        if frozen[head] and lay.trainable.get(key, False):
            out.append(key)
    if group[:len(out)] != out:
        raise _cannot_tell(lay, name, group, "the file stores a nested model's trainable "
                           "weights first, and its order contradicts the trainable flags "
                           "the model config records")
    return out


def _top_layer(model: dict, name: str) -> dict | None:
    layers = (model.get("config") or {}).get("layers")
    found = [lay for lay in layers or () if isinstance(lay, dict)
             and (lay.get("name") or (lay.get("config") or {}).get("name")) == name]
    return found[0] if len(found) == 1 else None


def _leaves(layer: dict, trainable: bool, out: dict[str, bool | None]) -> None:
    """Maps each leaf layer's name under ``layer`` to whether it is trainable: its own
    flag and every enclosing model's (a model records none in tf_keras; its flag is
    propagated to its layers' configs when set)."""
    cfg = layer.get("config") or {}
    trainable = trainable and cfg.get("trainable", True) is not False
    inner = cfg.get("layers")
    if isinstance(inner, list):
        for sub in inner:
            if isinstance(sub, dict) and sub.get("class_name") != "InputLayer":
                _leaves(sub, trainable, out)
        return
    name = cfg.get("name") or layer.get("name")
    name = str(name)
    # two layers of one name, one frozen: which weight is whose is not told (None)
    out[name] = trainable if out.get(name, trainable) == trainable else None


def _cannot_tell(lay, name: str, group: list[str], why: str) -> UnprovenPairingError:
    shown = ", ".join(lay.paths.get(k) or k for k in group[:4]) + (
        " ..." if len(group) > 4 else "")
    return UnprovenPairingError(
        f"--trainable {name!r} names a nested model whose trainable weights the file cannot "
        f"tell ({why}); name its trainable weights instead, as `ckpt list` shows them, in "
        f"model.trainable_variables order ({shown})", "--trainable")
