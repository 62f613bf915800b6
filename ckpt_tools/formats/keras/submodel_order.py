"""Nested Sequential/Functional models inside a subclassed model (or a custom layer): the
order the file stores their layers in does not prove the order the optimizer was built in.

Keras 3 saves a layer once, under the first path its saving walk reaches: attributes
alphabetically (private ones last), a model's ``layers`` list among them under the name
``layers``. ``model.trainable_variables`` of a subclassed model follows its own tracking
order instead (the order ``__init__`` assigned its sublayers), depth first, each variable
where first met. So where a layer is reachable from two attributes, the file and the
optimizer place it apart:

- ``self.decoder``, ``self.encoder``, then ``self.ae = Sequential([encoder, decoder])``: the
  file stores both under ``ae/`` in the Sequential's order (encoder first), the optimizer
  holds the decoder's averages first; nothing is stored under ``decoder/``/``encoder/``, so
  the file cannot show it;
- two Functional sub-models sharing a layer: it is stored under the one whose attribute sorts
  first, the optimizer counts it with the one tracked first.

Where a model holds sublayers as attributes (a subclassed model, a custom layer), each layer
of a nested model (recursively) is therefore its own part of the bag of sublayers whose order
the file does not record: a layer's own variables keep their order (Keras fixes it), the
layers' order is proven only where their shapes leave one (``_settle_sublayers``), and
otherwise the caller states it (``--trainable`` in ``model.trainable_variables`` order, or
``apply_keras_ema(model, path)`` with the live model). A model whose sublayers all sit in its
``layers`` list (Sequential, Functional, or a subclassed model whose attributes all sort after
``layers``) stores them in tracking order: nothing changes there.
"""

from __future__ import annotations

from dataclasses import replace

from ...wording import noun

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .model_tree import Node


def submodel_units(node: Node) -> list[Node] | None:
    """The parts of ``node``'s bag of sublayers where it holds attributes and one of its
    sublayers is a nested model that holds weights: every layer of such a model (recursively)
    a part of its own, its own weights (``replace``d without sublayers) another; ``None``
    where nothing changes (no attributes, or no nested model).

    Returns:
        The parts in file order, or ``None``.
    """
    children = node.ordered + node.bag
    if not node.attrs or not any(_is_model(c) and _holds(c) for c in children):
        return None
    out: list[Node] = []

    def expand(child: Node) -> None:
        if not _is_model(child):
            out.append(child)
            return
        if child.keys:
            out.append(replace(child, ordered=[], bag=[]))
        for sub in child.ordered + child.bag:
            expand(sub)

    for child in children:
        expand(child)
    return out


def _is_model(node: Node) -> bool:
    """Whether ``node`` lists layers (``<path>/layers/<name>``): a Sequential/Functional model,
    or a subclassed one's ``layers`` list."""
    return any(c.path.startswith(node.path + "/layers/") for c in node.ordered + node.bag)


def _holds(node: Node) -> bool:
    return bool(node.keys) or any(_holds(c) for c in node.ordered + node.bag)


def nested_models(node: Node) -> list[tuple[str, list[str]]]:
    """The nested models (recursively) whose stored order :func:`submodel_units` reads as
    unknown: (the name the file records for the model, or its path; the model weight keys
    under it), outermost first."""
    out: list[tuple[str, list[str]]] = []
    if submodel_units(node) is not None:
        for child in node.ordered + node.bag:
            if _is_model(child) and _holds(child):
                out.append((child.name or child.path, _keys(child)))
    for child in node.ordered + node.bag:
        out += nested_models(child)
    return out


def note_nested(lay, root: Node) -> None:
    """Notes, for the first EMA copy left unpaired (``lay.averages``), that nested models of
    a subclassed model may be why: the refusal then names the cause and what decides."""
    open_ = [a for a, w in lay.averages.items() if w is None]
    nested = nested_models(root)
    if not open_ or not nested:
        return
    names = ", ".join(n for n, _ in nested[:4]) + (" ..." if len(nested) > 4 else "")
    lay.notes.append(
        f"{open_[0]} and the other open copies: the model holds nested "
        f"{noun(len(nested), 'model')} {names} as "
        "attributes (a subclassed model); Keras saves each layer once, under the attribute "
        "whose name sorts first, while the optimizer was built in the model's own tracking "
        "order (the order its __init__ assigned the sublayers), so the order the file stores "
        "a nested model's layers in does not prove the optimizer's where equal-shaped weights "
        "could trade places: pass --trainable with every weight the optimizer was built with, "
        "in model.trainable_variables order, each by its key as 'ckpt list --json' shows it "
        f"(\"name\": {nested[0][0]}/layers/<layer>/vars/<i>; the paths Keras prints, "
        "[v.path for v in "
        "model.trainable_variables], carry layer names Keras numbers per process), "
        "or apply_keras_ema(model, path) with the live model")


def _keys(node: Node) -> list[str]:
    return list(node.keys) + [k for c in node.ordered + node.bag for k in _keys(c)]
