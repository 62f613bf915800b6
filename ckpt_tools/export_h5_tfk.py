"""The layers of an exported ``.h5`` for files tf_keras (Keras 2) wrote by its own layers.

tf_keras' ``load_weights("x.h5")`` (``legacy_h5_format.load_weights_from_hdf5_group``) fills
``model.layers`` that hold weights one for one with the file's ``layer_names``, each with
``layer.trainable_weights + layer.non_trainable_weights``: a nested ``Sequential``/``Functional``
model is ONE layer, holding its layers' trainable weights (in ``model.layers`` order), then
their non-trainable ones. Two inputs record that structure:

- a legacy ``.h5`` (``model.save("x.h5")``, ``save_weights("x.h5")``): its own ``layer_names``
  and each group's ``weight_names``, written back as they are (:func:`legacy_groups`);
- a TF-format checkpoint (``save_weights("ckpt")``, ``tf.train.Checkpoint(model=...)``): the
  object graph numbers a model's layers that hold weights in ``model.layers`` order
  (``layer_with_weights-N``), nested models' layers again under theirs
  (:func:`numbered_groups`). It records no trainable flags, so a nested model whose order
  depends on which of its layers are frozen is refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .errors import UnsupportedFormatError
from .formats.keras.load_order import frozen_flags_decide

# Keras fills a layer's weights from an .h5 by position, in the order the layer creates them;
# a TensorFlow checkpoint records them by name only (sorted: beta before gamma). This is that
# order for the names TensorFlow, tf_slim and Keras give weights (Keras 3 objects add a "_").
_KERAS_WEIGHT_ORDER = {n: i for i, names in enumerate((
    ("kernel", "weights"), ("depthwise_kernel",), ("pointwise_kernel",), ("recurrent_kernel",),
    ("embeddings",), ("bias", "biases"), ("gamma",), ("beta",), ("moving_mean",),
    ("moving_variance",), ("alpha",))) for n in names}
_STATS = frozenset({"moving_mean", "moving_variance"})  # BatchNormalization: non-trainable
_NUMBERED = re.compile(r"layer_with_weights-(\d+)")
_VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"
INSTEAD = "export .npz or .safetensors (read by name) instead"
# restore-ema's own default output for the input, which its loader reads by name or path
INSTEAD_KERAS = ("export .npz or .safetensors (read by name), or restore-ema to a .weights.h5 "
                 "or .keras (its default for a Keras file), instead")
INSTEAD_TF = ("export .npz or .safetensors (read by name), or restore-ema to a TensorFlow "
              "checkpoint (its default), instead")


def weight_rank(name: str) -> int | None:
    """The place of weight ``name`` (its last path part) among a Keras layer's weights, or
    ``None`` where the name is not one Keras' built-in layers give."""
    return _KERAS_WEIGHT_ORDER.get(name.rpartition("/")[2].removesuffix(":0").lstrip("_"))


def legacy_groups(path: str, of: dict[str, str], owner: Callable[[str], tuple[str, int]],
                  model: list[str]) -> dict[str, list[str]]:
    """A legacy ``.h5``'s own layer groups, each with its weights in its ``weight_names``
    order, the groups in ``layer_names`` order.

    Args:
        path: the input, for messages.
        of: output name -> the model weight's key.
        owner: key -> (the layer group holding it, its index in ``weight_names``).
        model: the file's model weight keys in file order (``layer_names`` order).

    Raises:
        UnsupportedFormatError: a weight is stored in ``top_level_model_weights`` (the
            model's own weights, which tf_keras loads apart from its layers).
    """
    place = {k: i for i, k in enumerate(model)}
    groups: dict[str, list[tuple[int, str]]] = {}
    for name in sorted(of, key=lambda n: place.get(of[n], len(place))):
        layer, index = owner(of[name])
        if not layer or layer == "top_level_model_weights":
            raise UnsupportedFormatError(
                f"{path}: {name!r} is stored outside the model's layers (tf_keras loads a "
                f"model's own weights apart from its layers); {INSTEAD}")
        groups.setdefault(layer, []).append((index, name))
    return {layer: [n for _, n in sorted(items)] for layer, items in groups.items()}


def _parse(key: str) -> tuple[tuple[str, ...], tuple[int, ...], tuple[str, ...]] | None:
    """(prefix, ``layer_with_weights`` numbers, the rest) of a TF-format key, or ``None``."""
    parts = key.removesuffix(_VALUE).split("/")
    start = next((i for i, p in enumerate(parts) if _NUMBERED.fullmatch(p)), None)
    if start is None:
        return None
    end = start
    while end < len(parts) - 1 and _NUMBERED.fullmatch(parts[end]):
        end += 1
    chain = tuple(int(_NUMBERED.fullmatch(p).group(1)) for p in parts[start:end])
    return tuple(parts[:start]), chain, tuple(parts[end:])


def numbered_groups(path: str, of: dict[str, str], spec: Callable[[str], tuple]
                    ) -> dict[str, list[str]] | None:
    """The layers of a tf_keras model saved in TF format, as its ``layer_with_weights-N``
    numbers order them; ``None`` where no exported weight is under such a number.

    Args:
        path: the input, for messages.
        of: output name -> the model weight's key.
        spec: key -> (shape, dtype).

    Raises:
        UnsupportedFormatError: some weights are under a numbered layer and others not; a
            layer holds weights of sublayers kept as attributes, or of its own beside its
            layers' (their order is not recorded); a layer's weights have names whose order
            in Keras is not known; which layers of a nested model are frozen decides its
            order (not recorded in a TF checkpoint).
    """
    parsed = {n: _parse(key) for n, key in of.items()}
    if not any(parsed.values()):
        return None
    prefixes = {p[0] for p in parsed.values() if p}
    lost = [n for n, p in parsed.items() if p is None]
    if lost or len(prefixes) > 1:
        raise UnsupportedFormatError(
            f"{path}: {(lost or sorted(parsed))[0]!r} is not under the model's numbered "
            "layers (layer_with_weights-N), by whose order tf_keras' load_weights fills an "
            f".h5; {INSTEAD_TF}")
    top: dict[int, list[str]] = {}
    for name, (_, chain, _) in sorted(parsed.items(), key=lambda kv: kv[1][1]):
        top.setdefault(chain[0], []).append(name)
    out: dict[str, list[str]] = {}
    for number, names in sorted(top.items()):
        label = f"layer_with_weights-{number}"
        leaves: dict[tuple[int, ...], list[str]] = {}
        subs: dict[tuple[int, ...], set[tuple[str, ...]]] = {}
        for name in names:
            _, chain, rest = parsed[name]
            leaves.setdefault(chain, []).append(name)
            subs.setdefault(chain, set()).add(rest[:-1])
        nested = any(len(chain) > 1 for chain in leaves)
        if any(len(s) > 1 for s in subs.values()) or (nested and any(
                len(c) < 2 or any(o[:len(c)] == c for o in leaves if o != c) for c in leaves)):
            raise UnsupportedFormatError(
                f"{path}: layer {label!r} holds {', '.join(repr(n) for n in names[:4])}, of "
                "sublayers (or of its own beside them) whose order in the layer a TensorFlow "
                "checkpoint does not record, and tf_keras' load_weights fills an .h5 layer "
                f"by position; {INSTEAD_TF}")
        ordered = []
        for leaf in leaves.values():
            ranks = [weight_rank(parsed[n][2][-1]) for n in leaf]
            if (len(leaf) > 1 or nested) and (None in ranks or len(set(ranks)) != len(ranks)):
                raise UnsupportedFormatError(
                    f"{path}: layer {label!r} holds {', '.join(repr(n) for n in leaf)}, whose "
                    "order (and trainability) in the Keras layer is not recorded in a "
                    "TensorFlow checkpoint, and an .h5 is loaded by position within each "
                    f"layer; {INSTEAD_TF}")
            ordered.append([n for _, n in sorted(zip(ranks, leaf, strict=True),
                                                 key=lambda rn: rn[0] or 0)])
        if nested:  # trainable weights over its layers, then the non-trainable ones
            trainable = {of[n]: parsed[n][2][-1] not in _STATS for leaf in ordered
                         for n in leaf}
            if not frozen_flags_decide([[of[n] for n in leaf] for leaf in ordered],
                                       trainable, spec):
                raise UnsupportedFormatError(
                    f"{path}: which layers of the nested model {label!r} are frozen decides "
                    "the order tf_keras' load_weights fills its weights in, and a TensorFlow "
                    f"checkpoint does not record it (a .keras archive does); {INSTEAD_TF}")
            flat = [n for leaf in ordered for n in leaf]
            out[label] = [n for n in flat if trainable[of[n]]] + [n for n in flat
                                                                 if not trainable[of[n]]]
        else:
            out[label] = ordered[0]
    return out
