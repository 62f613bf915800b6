"""``.keras`` archives written by tf_keras (Keras 2, ``metadata.json`` says ``keras_version``
2.x): what differs from Keras 3, applied on top of the Keras 3 analysis.

- Compiled metrics are saved (``metrics/mean/vars/0``): metric state, not model weights.
- The optimizer saves ``optimizer.variables`` of the tf_keras optimizers (``tf.keras.optimizers``
  since TF 2.11): ``iteration``, then, with ``use_ema=True``, one average per trainable variable
  in ``model.trainable_variables`` order, then the slots of each variable in turn
  (``Adam``: ``m``, ``v``). There is no ``learning_rate`` variable.
- The variable groups carry no names, so readable paths come from the layer directories.
"""

from __future__ import annotations

import re

# Slots tf_keras optimizers create per variable, in creation order (config -> names).
_SLOTS = {
    "adam": lambda c: ["m", "v"] + (["vhat"] if c.get("amsgrad") else []),
    "adam_w": lambda c: ["m", "v"] + (["vhat"] if c.get("amsgrad") else []),
    "nadam": lambda c: ["m", "v"],
    "adamax": lambda c: ["m", "u"],
    "sgd": lambda c: ["m"] if c.get("momentum") else [],
    "lion": lambda c: ["m"],
    "adagrad": lambda c: ["accumulator"],
    "ftrl": lambda c: ["accumulator", "linear"],
    "adadelta": lambda c: ["accumulated_grad", "accumulated_delta_var"],
    "rmsprop": lambda c: ["velocity"] + (["momentum"] if c.get("momentum") else []) + (
        ["average_gradient"] if c.get("centered") else []),
}


def is_tf_keras(metadata: dict | None) -> bool:
    """Returns whether a ``.keras`` archive's ``metadata.json`` names a Keras 2 (tf_keras)."""
    version = str((metadata or {}).get("keras_version", ""))
    return re.match(r"2\.\d", version) is not None


def adjust(lay, entries) -> None:
    """Rewrites a Keras 3 :class:`~ckpt_tools.formats.keras.layout.KerasLayout` of a tf_keras
    archive in place: metric state leaves the model, the optimizer's variables get their
    tf_keras meaning, model weights get ``<layer>/<weight>`` paths."""
    metrics = [k for k in lay.model if entries[k].extra.get("owner", "").startswith("metrics")]
    for key in metrics:
        lay.model.remove(key)
        lay.trainable.pop(key, None)
        lay.paths[key] = entries[key].extra.get("owner", "metrics") + "/" + str(
            entries[key].extra.get("index"))
    lay.other = metrics + [k for k in lay.other if k not in metrics]
    for key in lay.model:
        owner = entries[key].extra.get("owner", "")
        layer = owner.rsplit("/", 1)[-1] if owner.startswith("layers/") else owner
        name = lay.paths.get(key, "").rsplit("/", 1)[-1]
        if layer and "/" not in lay.paths.get(key, ""):
            lay.paths[key] = f"{layer}/{name}"
    _optimizer(lay, entries)
    lay.order = lay.model + lay.optimizer_vars + lay.other


def _optimizer(lay, entries) -> None:
    keys = lay.optimizer_vars
    lay.averages, lay.slots, lay.learning_rate = {}, {}, None
    lay.var_names = {}
    for key in keys:  # the Keras 3 reading named them; start over
        lay.paths.pop(key, None)
    if not keys:
        return
    off = 0
    if entries[keys[0]].shape == () and entries[keys[0]].dtype_name in ("int64", "int32"):
        lay.iteration, off = keys[0], 1
        lay.var_names[keys[0]] = "iteration"
    lay.ema_offset = off
    cfg = lay.optimizer_config or {}
    trained = [k for k in lay.model if lay.trainable.get(k)]
    shape = [entries[k].shape for k in trained]
    rest = keys[off:]
    use_ema = bool(cfg.get("use_ema")) if lay.optimizer_config is not None else lay.use_ema
    slot_names = _SLOTS[lay.optimizer](cfg) if lay.optimizer in _SLOTS else None
    n = len(trained)
    fits_ema = use_ema and [entries[k].shape for k in rest[:n]] == shape
    if use_ema and not fits_ema:
        lay.notes.append(f"the {len(rest)} tf_keras optimizer variables do not start with one "
                         f"average per trainable weight ({n}): EMA copies cannot be paired")
    averages = rest[:n] if fits_ema else []
    for key, target in zip(averages, trained, strict=False):
        lay.averages[key] = target
        lay.var_names[key] = "average"
    slots = rest[len(averages):]
    per = len(slot_names) if slot_names else 0
    named = (slot_names is not None and len(slots) == per * n and all(
        entries[slots[i * per + j]].shape == shape[i] for i in range(n) for j in range(per)))
    for i, key in enumerate(slots):
        lay.slots[key] = trained[i // per] if named else None
        if named:
            lay.var_names[key] = slot_names[i % per]
    lay.use_ema = bool(averages) if use_ema is not None else None
    lay.ema_evidence = "config.json (optimizer use_ema), tf_keras variable layout"
    opt_name = cfg.get("name") or lay.optimizer or "optimizer"
    for key, what in lay.var_names.items():
        src = (lay.averages | lay.slots).get(key)
        lay.paths[key] = f"{opt_name}/{what}/{lay.paths[src]}" if src else f"{opt_name}/{what}"
    for key in rest:
        lay.paths.setdefault(key, f"{opt_name}/{keys.index(key)}")
