"""Layers whose variables a Keras file may store in another order than the layer made them.

Keras saves a layer's variables with ``Layer.save_own_variables``: by default
``_trainable_variables + _non_trainable_variables`` (creation order), which is also the order
the optimizer gets them in. A layer class that is not a Keras built-in may override
``save_own_variables``/``load_own_variables`` (keras.io documents it) and store them in any
order: ``store["0"] = self.scale; store["1"] = self.shift`` for a ``shift`` made first. Where
two or more of such a layer's variables share shape and dtype, which one is ``vars/0`` is then
not recorded, so their EMA copies are not paired from the file (values never decide it). The
layer's variables are read as unordered (a bag of one-variable parts): a copy whose shape and
dtype only one of them has is still paired.

Which classes are Keras' own: config.json records it (``registered_name`` ``pkg>Class`` or a
module outside Keras is a custom class); a bare ``.weights.h5`` records a Functional/Sequential
model's layers as ``layers/<snake_case class name>``, and a sublayer held as an attribute by
the ``name`` its ``vars`` group records (Keras' default name is the snake_case class name).
A class outside :data:`BUILTIN_LAYERS` (Keras 3.15's ``keras.layers``) is read as custom.
"""

from __future__ import annotations

import re
from collections import Counter

from ...wording import noun
from .optimizer_slots import FLOATS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .model_tree import Node

# snake_case names of Keras 3.15's keras.layers classes (and the RNN cells and the class
# name GroupedQueryAttention saves under), less the bases and wrappers of user code (Layer,
# Lambda, Wrapper, JaxLayer, FlaxLayer, TorchModuleWrapper, TFSMLayer): their variables are
# stored in an order Keras fixes.
BUILTIN_LAYERS = frozenset("""
activation activity_regularization adaptive_average_pooling1d adaptive_average_pooling2d
adaptive_average_pooling3d adaptive_max_pooling1d adaptive_max_pooling2d
adaptive_max_pooling3d add additive_attention alpha_dropout attention aug_mix auto_contrast
average average_pooling1d average_pooling2d average_pooling3d batch_normalization
bidirectional category_encoding center_crop concatenate
contrast_limited_adaptive_histogram_equalization conv1d conv1d_transpose conv2d
conv2d_transpose conv3d conv3d_transpose conv_lstm1d conv_lstm2d conv_lstm3d conv_lstm_cell
cropping1d cropping2d cropping3d cut_mix dense depthwise_conv1d depthwise_conv2d
discretization dot dropout einsum_dense elu embedding equalization flatten gaussian_dropout
gaussian_noise global_average_pooling1d global_average_pooling2d global_average_pooling3d
global_max_pooling1d global_max_pooling2d global_max_pooling3d group_normalization
group_query_attention grouped_query_attention gru gru_cell hashed_crossing hashing identity
input_layer integer_lookup layer_normalization leaky_re_lu lstm lstm_cell masking
max_num_bounding_boxes max_pooling1d max_pooling2d max_pooling3d maximum mel_spectrogram
minimum mix_up multi_head_attention multiply normalization p_re_lu permute pipeline
rand_augment random_brightness random_color_degeneration random_color_jitter random_contrast
random_crop random_elastic_transform random_erasing random_flip random_gaussian_blur
random_grayscale random_hue random_invert random_perspective random_posterization
random_rotation random_saturation random_sharpness random_shear random_translation
random_zoom re_lu repeat_vector rescaling reshape resizing reversible_embedding
rms_normalization rnn separable_conv1d separable_conv2d simple_rnn simple_rnn_cell softmax
solarization spatial_dropout1d spatial_dropout2d spatial_dropout3d spectral_normalization
stacked_rnn_cells stft_spectrogram string_lookup subtract text_vectorization
time_distributed unit_normalization up_sampling1d up_sampling2d up_sampling3d
zero_padding1d zero_padding2d zero_padding3d sync_batch_normalization
""".split())
_MODELS = ("functional", "sequential")


def custom_class(entry: dict) -> str:
    """The class a config.json layer entry records when it is not Keras' (or tf_keras')
    own (``a11>Affine``), else ``""``.

    Example:
        >>> custom_class({"class_name": "Affine", "registered_name": "a11>Affine"})
        'a11>Affine'
        >>> custom_class({"class_name": "Dense", "module": "keras.layers"})
        ''
    """
    cls = entry.get("class_name") or ""
    registered = entry.get("registered_name")
    if registered not in (None, cls) or not str(entry.get("module") or "keras").startswith(
            ("keras", "tf_keras")):
        return str(registered or cls)
    return ""


def mark_loose(root: Node, model: dict, config: dict | None) -> dict[str, str]:
    """Marks the layers (``Node.loose``) whose own variables' stored order is not proven:
    a class not known as Keras' own holding two or more float variables of one shape and
    dtype. Returns weight key -> the class in words, for each such layer's variables."""
    out: dict[str, str] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        stack += node.ordered + node.bag
        what = _unknown_class(node, root, config)
        if not what or len(node.keys) < 2:
            continue
        specs = Counter((tuple(model[k].shape), model[k].dtype_name) for k in node.keys
                        if model[k].dtype_name in FLOATS and model[k].extra.get("index")
                        is not None)
        if any(n > 1 for n in specs.values()):
            node.loose = True
            out.update(dict.fromkeys(node.keys, what))
    return out


def _unknown_class(node: Node, root: Node, config: dict | None) -> str:
    """Words for ``node``'s class where it is not known as Keras' own, else ``""``."""
    if node is root:
        if config:
            cls = config.get("class_name") or ""
            custom = custom_class(config) or (
                "" if cls in ("Functional", "Sequential", "Model") else cls)
            return f"model class {custom} (config.json)" if custom else ""
        return "the model's class (not recorded in a bare .weights.h5)"
    if node.custom_class:
        return f"{node.custom_class} (config.json)"
    if node.cfg is not None and node.cls is not None:
        return ""  # config.json lists it as a Keras class
    names = {node.cls, re.sub(r"_\d+$", "", node.name or "")} - {None, ""}
    if names & (BUILTIN_LAYERS | set(_MODELS)):
        return ""
    return (f"class {node.cls}" if node.cls else "a class") + (
        " (not a Keras built-in layer)")


def note_loose(lay, key: str, candidates: list[str], subject: str | None = None) -> bool:
    """Notes the refusal for EMA copy ``key`` whose ``candidates`` are variables of a layer
    whose stored order is not proven (``lay.loose``), and sets its ``lay.candidates``;
    returns ``False`` (nothing noted) where they are not such a layer's. ``subject``: the
    words the note starts with (default: ``"<key> averages one of"``)."""
    what = {lay.loose.get(c) for c in candidates}
    if len(candidates) < 2 or None in what:
        return False
    if key:
        lay.candidates[key] = tuple(candidates)
    shown = [lay.paths.get(c, c) for c in candidates]
    layer = shown[0].rsplit("/", 1)[0]
    lay.notes.append(
        f"{subject or key + ' averages one of'} {', '.join(shown)}: layer {layer} is of "
        f"{what.pop()}, whose save_own_variables may store its variables in another order "
        "than it creates them (the order the optimizer gets them in), so which of its "
        "equal-shaped variables each EMA copy belongs to is not recorded (values do not decide "
        "it): apply_keras_ema(model, path) with the live model pairs them; or pass --trainable "
        "with every weight the optimizer was built with, naming that layer's by the keys its "
        f"save_own_variables writes ({', '.join(shown)}) in the order the optimizer got them "
        "(e.g. --trainable ...," + ",".join(reversed(shown)) + ",...)")
    return True


def check_stated_loose(lay, name: str, keys: list[str]) -> None:
    """Refuses a ``--trainable`` name that would stand for variables of a layer whose stored
    order is not proven (``lay.loose``) by anything but their own keys: a layer's path (its
    variables in file order) or a live variable's path (``aff/shift``, read as a place).

    Raises:
        EmaError: naming the layer's keys to state instead.
    """
    loose = [k for k in keys if k in lay.loose]
    if not loose or len(keys) == 1 and name.strip("/") == lay.paths.get(keys[0], keys[0]):
        return
    from ...errors import EmaError

    layer = lay.paths.get(loose[0], loose[0]).rsplit("/", 1)[0]
    own = [lay.paths.get(k, k) for k in lay.model if k in lay.loose
           and lay.paths.get(k, k).rsplit("/", 1)[0] == layer]
    raise EmaError(
        f"--trainable {name!r} stands for variables of layer {layer}, of "
        f"{lay.loose[loose[0]]}, whose save_own_variables may store them in another order "
        "than it creates them, so neither the layer's name nor a live variable's path "
        "(read as its place) says which stored variable it is: state them by the keys the "
        f"file holds ({', '.join(own)}) in the order the optimizer got them, or use "
        "apply_keras_ema(model, path) with the live model")


def note_loose_layers(lay) -> None:
    """Notes the layers whose stored order is not proven (``lay.loose``), for a refusal whose
    own note does not name them (several pairings fit: frozen layers, equal shapes)."""
    if any("save_own_variables" in n for n in lay.notes):
        return
    layers: dict[str, list[str]] = {}
    for k in lay.model:
        if k in lay.loose:
            layers.setdefault(lay.paths.get(k, k).rsplit("/", 1)[0], []).append(k)
    name, keys = next(iter(layers.items()))
    lay.notes.append(
        f"{noun(len(layers), 'layer')} {', '.join(layers)} of {lay.loose[keys[0]]} may store "
        "their variables "
        f"({', '.join(lay.paths.get(k, k) for k in keys)}) in another order than they create "
        "them (save_own_variables), trainable ones or not first, so their EMA copies are not "
        "paired from the file: apply_keras_ema(model, path) with the live model pairs them; or "
        "pass --trainable with every weight the optimizer was built with, naming "
        f"{name}'s by the keys the file holds in the order the optimizer got them")
