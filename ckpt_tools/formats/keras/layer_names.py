"""The names Keras 3 gives a layer's weights (``dense/kernel``, ``bn/moving_mean``), read from
the layer's class and config.json, and whether each is trainable.

A weights file stores a layer's variables by index only (``layers/dense/vars/0``); the names a
user states and ``list`` shows come from the class's own variable order, with the flags that
drop one (``use_bias``, ``scale``/``center``) taken from config.json only: without it a name is
given only where the count leaves no choice.
"""

from __future__ import annotations

from .optimizer_slots import FLOATS
from .quantized import FLOAT8_STATE, INT_NAMES, bare_quantized, float8, int_quantized

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .layout import KerasLayout
    from .model_tree import Node

BN = frozenset({"batch_normalization", "sync_batch_normalization"})
# gamma if config.json says scale, beta if center (LayerNormalization: rms_scaling, gamma only)
SCALED = frozenset({"layer_normalization", "group_normalization"})
# Variable names per layer class (snake_case), in vars/<i> order; None: non-trainable names.
VAR_NAMES = {
    **{c: ("kernel", "bias") for c in (
        "dense", "einsum_dense", "conv1d", "conv2d", "conv3d", "conv1d_transpose",
        "conv2d_transpose", "conv3d_transpose", "depthwise_conv1d", "depthwise_conv2d")},
    "separable_conv1d": ("depthwise_kernel", "pointwise_kernel", "bias"),
    "separable_conv2d": ("depthwise_kernel", "pointwise_kernel", "bias"),
    "embedding": ("embeddings",),
    "layer_normalization": ("gamma", "beta"),  # scale/center may drop either: SCALED
    "group_normalization": ("gamma", "beta"),
    "p_re_lu": ("alpha",),
}
# Recurrent cells (the ``cell`` of LSTM/GRU/SimpleRNN/ConvLSTM, which name it themselves):
# not in ``ORDERS``, since a 3-variable layer of unknown class need not be a cell.
CELL_NAMES = {c: ("kernel", "recurrent_kernel", "bias") for c in (
    "lstm_cell", "gru_cell", "simple_rnn_cell", "conv_lstm_cell")}
FROZEN_CLASSES = {"normalization": ("mean", "variance", "count")}
# Built-in layers whose sublayers Keras saves by attribute name (alphabetically) but tracks,
# and so trains, in the order their code creates them (Keras 3.15 source): (attribute, the
# name the layer gives that sublayer, or a prefix of it ending in "_") in tracking order.
# MultiHeadAttention/GroupedQueryAttention.build: query, key, gate (use_gate), value, output;
# Bidirectional.__init__: forward_layer, then backward_layer.
ATTENTION = (("query_dense", "query"), ("key_dense", "key"), ("gate_dense", "gate"),
              ("value_dense", "value"), ("output_dense", "attention_output"))
FIXED_SUBLAYERS = {
    "multi_head_attention": ATTENTION,
    "grouped_query_attention": ATTENTION,
    "bidirectional": (("forward_layer", "forward_"), ("backward_layer", "backward_")),
}


def var_names(node: Node, n: int, first_dtype: str | None = None
               ) -> list[tuple[str | None, bool]]:
    """The names (``None``: not proven, shown by index) and trainability of a layer's ``n``
    variables in vars/<i> order. A flag that drops a variable (``scale``/``center``,
    ``use_bias``) is taken from config.json only; without it a name is given only where the
    count leaves no choice (one variable of a LayerNormalization is gamma or beta; a quantized
    layer, ``first_dtype`` (vars/0's) not a float or more variables than its names, as
    :func:`~.quantized.bare_quantized` reads it)."""
    cfg = node.cfg or {}
    lead = _lead(cfg, node.cls == "layer_normalization") if node.cfg else None
    if node.cls in BN:
        if lead is None or len(lead) + 2 != n:  # 3 variables: gamma or beta, unknown here
            lead = {4: ["gamma", "beta"], 3: [None]}.get(n, [None] * max(n - 2, 0))
        out = [(v, True) for v in lead] + [("moving_mean", False), ("moving_variance", False)]
        return (out + [(None, True)] * n)[:n]
    if node.cls in FROZEN_CLASSES:
        return [(v, False) for v in FROZEN_CLASSES[node.cls][:n]] + [(None, False)] * (
            n - len(FROZEN_CLASSES[node.cls]))
    if node.cls in SCALED:
        if lead is None or len(lead) != n:  # not recorded: only both name themselves
            lead = ["gamma", "beta"] if n == 2 else []
        return [(v, True) for v in lead] + [(None, True)] * (n - len(lead))
    cls = node.cls or node.names_from
    names = list(VAR_NAMES.get(cls, CELL_NAMES.get(cls, ())))
    if "bias" in names and (cfg.get("use_bias") is False or node.cls == "einsum_dense"
                            and "bias_axes" in cfg and cfg["bias_axes"] is None):
        names.remove("bias")
    if node.cfg and node.cls in ("dense", "einsum_dense") and float8(cfg) \
            and n == len(names) + len(FLOAT8_STATE):  # no optimizer variables: not trainable
        return [(v, True) for v in names] + [(v, False) for v in FLOAT8_STATE]
    quantized = int_quantized(node.cls, node.cfg, "bias" in names, n) if node.cfg else \
        bare_quantized(node.cls, first_dtype, n)
    if quantized is not None:
        return quantized
    float_first = first_dtype is None or first_dtype in FLOATS
    if "bias" in names and not node.cfg and (n > len(names) or not float_first):
        names = names[:names.index("bias")]
    return [(v, True) for v in names[:n]] + [(None, True)] * (n - len(names))


def _lead(cfg: dict, rms: bool) -> list[str | None] | None:
    """``gamma``/``beta`` as config.json's ``scale``/``center`` create them (with
    LayerNormalization's ``rms_scaling``, gamma only), or ``None`` where a flag is not a
    boolean."""
    scale, center = cfg.get("scale", True), cfg.get("center", True)
    rms_scaling = cfg.get("rms_scaling", False) if rms else False
    if not all(isinstance(f, bool) for f in (scale, center, rms_scaling)):
        return None
    return (["gamma"] if scale or rms_scaling else []) + (
        ["beta"] if center and not rms_scaling else [])


def _given_name(parent: Node, child: Node) -> str | None:
    """The name a built-in layer of ``FIXED_SUBLAYERS`` gives the sublayer ``child`` where the
    file records none (tf_keras writes no name attribute): its MultiHeadAttention names
    ``_query_dense`` "query" in its code, as Keras 3 does (``mha/query/kernel``, not
    ``multi_head_attention/_query_dense/kernel``). Only for a class config.json names and no
    custom class, and a full name (not a prefix such as Bidirectional's ``forward_``)."""
    if child.name is not None or parent.cfg is None or parent.custom:
        return None
    given = dict(FIXED_SUBLAYERS.get(parent.cls or "", ())).get(
        child.path.rsplit("/", 1)[-1].lstrip("_"))
    return given if given and not given.endswith("_") else None


def name_vars(node: Node, model, lay: KerasLayout, prefix: list[str],
              given: str | None = None) -> None:
    own_name = node.name or given
    chain = prefix + ([own_name] if node.path and own_name else [])
    # A subclassed model's own weights (self.add_weight in the model): Keras' path is
    # <model name>/<variable name> (net/mix); the file records the name only, not "mix".
    own = chain or ([node.name] if not node.path and node.name else [])
    named = var_names(node, len(node.keys), model[node.keys[0]].dtype_name if node.keys
                       else None)
    for key, (var, trainable) in zip(node.keys, named, strict=False):
        e = model[key]
        # Named entries (TextVectorization's tf_idf ``idf_weights``) are constants a layer's
        # save_own_variables writes, not variables: the optimizer never sees them.
        constant = e.extra.get("index") is None
        could = trainable and not constant and e.dtype_name in FLOATS
        lay.trainable[key] = could and not node.frozen
        if could and node.frozen:
            lay.frozen.append(key)
        elif not trainable and not constant and (e.dtype_name in FLOATS or var in INT_NAMES):
            # an int8 layer's kernel_scale is no float8 state, though named like one
            (lay.float8_state if var in FLOAT8_STATE and float8(node.cfg or {})
             else lay.untrainable).append(key)
        # a named entry shows the name it is stored under (idf_weights), never "None"
        stored = key.rpartition("/")[2] if constant else str(e.extra.get("index"))
        lay.paths[key] = "/".join(own + [(not constant and var) or stored])
    for child in node.ordered + node.bag:
        name_vars(child, model, lay, chain, _given_name(node, child))


def distinct_paths(lay: KerasLayout, model) -> None:
    """Two sublayers given the same name (``self.a = Dense(4, name="fc")``, ``self.b = ...``)
    would show, export and be stated as the same ``fc/kernel``: their weights are named by the
    attributes that hold them instead (``a/kernel``, ``b/kernel``), which the file records."""
    seen: dict[str, list[str]] = {}
    for k in lay.model:
        seen.setdefault(lay.paths[k], []).append(k)
    # by layer too: one named from config.json (fc/kernel), its namesake the config does not
    # list by its variables' indices (fc/0) (review-12-attack-r18 F7)
    layers: dict[str, list[str]] = {}
    for k in lay.model:
        if "/" in lay.paths[k]:
            layers.setdefault(lay.paths[k].rsplit("/", 1)[0], []).append(k)
    for keys in layers.values():
        if len({model[k].extra.get("owner") or "" for k in keys}) > 1:
            seen[f"//{len(seen)}"] = keys
    for keys in seen.values():
        if len(keys) < 2:
            continue
        for k in keys:
            owner = model[k].extra.get("owner") or ""
            attrs = [p for p in owner.split("/") if p and p != "layers"]
            lay.paths[k] = "/".join(attrs + [lay.paths[k].rsplit("/", 1)[-1]])
