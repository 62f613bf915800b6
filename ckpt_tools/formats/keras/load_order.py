"""The order Keras' legacy HDF5 loader fills a model in, from a Keras 3 file's tree of layers.

``load_weights("x.h5")`` (``legacy_h5_format.load_weights_from_hdf5_group``, Keras 3.15) takes
one group per weighted layer of ``model.layers``, in that order, each holding
``layer.trainable_weights + layer.non_trainable_weights`` (a nested model's over all its
layers). A Keras 3 weight file records each built-in layer's weights whole; a layer of another
class may also hold a reference to another layer (weight tying), whose weights the file
records only once, under the layer that holds them first (``saving_lib`` skips objects it has
visited): what Keras fills for it is not in the file.
"""

from __future__ import annotations

from collections.abc import Callable

from .model_tree import Node, flatten_tree, holds

# Every layer class ``keras.layers`` exports (Keras 3.15), snake_case as the weight file's
# ``layers/<name>`` groups and config.json's class names give them.
BUILTIN_LAYERS = frozenset("""
activation activity_regularization adaptive_average_pooling1d adaptive_average_pooling2d
adaptive_average_pooling3d adaptive_max_pooling1d adaptive_max_pooling2d adaptive_max_pooling3d
add additive_attention alpha_dropout attention aug_mix auto_contrast average
average_pooling1d average_pooling2d average_pooling3d batch_normalization bidirectional
category_encoding center_crop concatenate contrast_limited_adaptive_histogram_equalization
conv1d conv1d_transpose conv2d conv2d_transpose conv3d conv3d_transpose conv_lstm1d
conv_lstm2d conv_lstm3d cropping1d cropping2d cropping3d cut_mix dense depthwise_conv1d
depthwise_conv2d discretization dot dropout einsum_dense elu embedding equalization flatten
gaussian_dropout gaussian_noise global_average_pooling1d global_average_pooling2d
global_average_pooling3d global_max_pooling1d global_max_pooling2d global_max_pooling3d
group_normalization grouped_query_attention gru gru_cell hashed_crossing hashing identity
input_layer integer_lookup layer_normalization leaky_re_lu lstm lstm_cell masking
max_num_bounding_boxes max_pooling1d max_pooling2d max_pooling3d maximum mel_spectrogram
minimum mix_up multi_head_attention multiply normalization p_re_lu permute rand_augment
random_brightness random_color_degeneration random_color_jitter random_contrast random_crop
random_elastic_transform random_erasing random_flip random_gaussian_blur random_grayscale
random_hue random_invert random_perspective random_posterization random_rotation
random_saturation random_sharpness random_shear random_translation random_zoom re_lu
repeat_vector rescaling reshape resizing rms_normalization rnn separable_conv1d
separable_conv2d simple_rnn simple_rnn_cell softmax solarization spatial_dropout1d
spatial_dropout2d spatial_dropout3d spectral_normalization stacked_rnn_cells
stft_spectrogram string_lookup subtract text_vectorization time_distributed
unit_normalization up_sampling1d up_sampling2d up_sampling3d zero_padding1d zero_padding2d
zero_padding3d
""".split())
# (Lambda, Layer, Wrapper, Pipeline and the JAX/Flax/Torch/TFSM wrappers run or hold
# arbitrary objects: not in the list.)
CONTAINERS = frozenset({"sequential", "functional"})


def _unproven(node: Node, named: bool) -> str | None:
    """Why what Keras fills for ``node`` is not proven by the file, or ``None``. ``named``:
    the node's class comes from its ``layers/<class>`` group or config.json (a layer of a
    model); an attribute's sublayer is checked only where it holds weights."""
    where = node.name or node.path
    if named or holds(node):
        if node.custom or node.cls not in BUILTIN_LAYERS | CONTAINERS:
            return (f"layer {where!r} is of a class ({node.cls}) outside Keras" if node.cls
                    else f"layer {where!r} is of a class the file does not record (perhaps "
                    "one outside Keras)") + (
                    ", which may hold a reference to another layer's weights (weight tying) "
                    "that the file records only once, so what Keras fills for it is not in "
                    "the file")
    if not holds(node):
        return None
    if sum(holds(c) for c in node.bag) > 1:
        return (f"the sublayers of {where!r} are saved by attribute name, which does not "
                "record their order in the layer")
    if node.cls in CONTAINERS and node.keys:
        return f"{where!r} holds weights of its own besides its layers'"
    return next(filter(None, (_unproven(c, node.cls in CONTAINERS) for c in node.ordered)
                       ), None) or next(filter(None, (_unproven(c, False) for c in node.bag)),
                                        None)


def frozen_flags_decide(leaves: list[list[str]], trainable: dict[str, bool],
                        spec: Callable[[str], tuple]) -> bool:
    """Whether the order Keras' legacy loader fills a nested model in (``trainable_weights``,
    then ``non_trainable_weights``) is proven without knowing which of its layers are frozen:
    every choice of frozen layers that orders them otherwise also differs in ``spec(key)``
    (shape and dtype) somewhere, so Keras refuses the file instead of loading one layer's
    weights into another. ``leaves``: each layer's own weight keys, in ``model.weights`` order.
    """
    if len(leaves) < 2:
        return True
    if len(leaves) > 12:  # 2**n choices: too many to try, so not proven
        return False

    def order(frozen: int) -> list[str]:
        live = [k for i, ks in enumerate(leaves) for k in ks
                if trainable.get(k) and not frozen >> i & 1]
        return live + [k for ks in leaves for k in ks if k not in set(live)]

    ours = order(0)
    specs = [spec(k) for k in ours]
    for frozen in range(1, 1 << len(leaves)):
        other = order(frozen)
        if other != ours and [spec(k) for k in other] == specs:
            return False
    return True


def legacy_h5_groups(root: Node, trainable: dict[str, bool], spec=None) \
        -> tuple[list[tuple[str, list[str]]], str | None]:
    """The model's weighted layers as Keras' legacy HDF5 loader fills them.

    Args:
        root: the model (:func:`~.model_tree.build_tree`).
        trainable: key -> trainable, as the file records it (config.json's flags).
        spec: key -> (shape, dtype), given where the file does not record which layers are
            frozen (a bare ``.weights.h5``): a nested model whose order that decides is then
            refused.

    Returns:
        ([(layer name, keys in ``trainable_weights + non_trainable_weights`` order)], None),
        or ([], why the file does not prove them).
    """
    if root.keys:
        return [], "the model holds weights of its own, outside its layers"
    held = [c for c in root.ordered + root.bag if holds(c)]
    if len(held) > 1 and any(holds(c) for c in root.bag):
        return [], ("the model's layers are saved by attribute name (a subclassed model), "
                    "which does not record their order in model.layers")
    why = next(filter(None, (_unproven(c, True) for c in root.ordered)), None) or next(
        filter(None, (_unproven(c, False) for c in root.bag)), None)
    if why:
        return [], why
    groups: list[tuple[str, list[str]]] = []
    names: set[str] = set()
    for child in held:
        runs: list[tuple[str, list[str]]] = []
        flatten_tree(child, runs)
        keys = [k for _, ks in runs for k in ks]
        name = child.name or child.path.rsplit("/", 1)[-1]
        if spec is not None and not frozen_flags_decide([ks for _, ks in runs], trainable,
                                                         spec):
            return [], (f"which layers of {name!r} are frozen decides the order Keras fills "
                        "its weights in, and a bare .weights.h5 does not record it (a .keras "
                        "archive does)")
        while name in names or "/" in name:
            name = child.path.replace("/", "_") + "_" + str(len(names))
        names.add(name)
        groups.append((name, [k for k in keys if trainable.get(k)]
                       + [k for k in keys if not trainable.get(k)]))
    return groups, None
