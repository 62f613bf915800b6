"""Which variable each key of a TF1 checkpoint was saved from, read from its ``.meta``.

A ``tf.compat.v1.train.Saver`` writes the tensors its save op (``save/SaveV2``) is given under
the names in its ``tensor_names`` constant. A Saver built from ``ema.variables_to_restore()``
(the evaluation mapping, used by mistake to save during training) is given the model variable
``w`` under the name ``w/ExponentialMovingAverage``: the checkpoint then holds the raw weight
where the average's key says the average is, and no average at all. Only the graph records
it: the key's tensor is ``w``'s read (``w/Read/ReadVariableOp``), not the shadow's.

:func:`saved_sources` reads the ``MetaGraphDef``'s ``SaverDef`` (which save op wrote the
checkpoint) and that op's inputs from ``graph_def`` (:mod:`.graph_def`), following reads
(``Identity``, ``ReadVariableOp``) back to the variable.
"""

from __future__ import annotations

from .graph_def import MetaGraph, op_name, read_graphs, through_reads

_SAVE_OPS = {"SaveV2": 3, "SaveSlices": 3, "Save": 2}  # op -> index of its first tensor input


def saved_sources(path: str) -> dict[str, list[str]] | None:
    """Checkpoint key -> the variables (op names) its value was saved from, as the ``.meta``
    at ``path`` records the save op of its ``SaverDef``.

    Returns:
        `dict[str, list[str]]` (several sources: a partitioned variable's parts), or ``None``
        where the file does not record it (no graph, ``SaverDef`` or save op).

    Raises:
        CheckpointError: the file cannot be opened or mapped.
    """
    each = saved_sources_each(path)
    return each[0] if each else None


def saved_sources_each(path: str) -> list[dict[str, list[str]]]:
    """What :func:`saved_sources` gives, for each meta graph of the ``.meta`` (binary or
    text) or TF1 SavedModel (``saved_model.pb``) at ``path`` that records its save op.

    Returns:
        `list[dict[str, list[str]]]`, in file order (empty: none records one). Which of them
        wrote a checkpoint is the caller's question: the one whose keys are the checkpoint's.

    Raises:
        CheckpointError: the file cannot be opened or mapped.
    """
    return [s for s in map(_sources, read_graphs(path)) if s]


def _sources(graph: MetaGraph) -> dict[str, list[str]] | None:
    """Key -> sources over every save op under the ``SaverDef``'s scope (a sharded Saver has
    one per device), or ``None``."""
    scope = op_name(graph.save_tensor).rpartition("/")[0]
    if not scope:
        return None
    nodes = graph.nodes
    out: dict[str, list[str]] = {}
    for name in nodes:  # the save scope's save ops only: no other node is decoded
        if not name.startswith(scope + "/"):
            continue
        first = _SAVE_OPS.get(nodes.op(name))
        if first is None:
            continue
        node = nodes[name]
        if len(node.inputs) <= first:
            continue
        keys = nodes[node.inputs[1]].strings if node.inputs[1] in nodes else []
        tensors = node.inputs[first:]
        if len(keys) != len(tensors):
            continue  # not the layout a Saver builds: say nothing
        for key, tensor in zip(keys, tensors, strict=True):
            out.setdefault(key, []).append(through_reads(nodes, tensor))
    return out or None
