"""Whether a ``--trainable`` name that selects a layer by the name Keras numbered for it
(``dense_1``) can be trusted to mean the layer the file gives that name.

Keras names a layer it is not given a name for by its class and a per-process counter:
``dense``, ``dense_1``, ... for the Dense layers in the order the process made them. The
file records the names of the process that saved it; ``[v.path for v in
model.trainable_variables]`` printed elsewhere gives that process's. A notebook that made
another Dense first names the model's layers ``dense_1..3`` where a fresh process names
them ``dense..dense_2``, so a stated ``dense_1`` may be the file's first or second Dense:
each average one layer off. The weight file's own keys (``layers/dense_1/vars/0``, numbered
per container by class by saving_lib) do not depend on the process, and are never checked.

:func:`check_numbering` accepts such names where both numberings provably agree (the
file's layers of that class are numbered as a fresh process numbers them, ``dense``,
``dense_1``, ... with no gap, and either the statement names the first of them, ``dense``: no
other Dense was made before in the process that printed it either, or config.json's
``trainable`` flags select exactly the layers stated), or where no other numbering keeps the
statement's shapes and dtypes, so no other layers could fit the averages. A name the file
gives one layer of its class only, or several layers (given by code), is not numbered.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from ...errors import EmaError
from .model_tree import Node

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .layout import KerasLayout

def _layers(node: Node, chain: tuple[Node, ...] = ()) -> Iterator[tuple[Node, tuple]]:
    """Every layer below ``node`` with the layers holding it (outermost first)."""
    for child in node.ordered + node.bag:
        yield child, chain
        yield from _layers(child, chain + (child,))


def _label(node: Node) -> str | None:
    """The name ``ckpt`` shows ``node`` by: the one the file records, or where it records none
    (Keras before name attributes), saving_lib's ``layers/dense_1``, numbered per container
    and class, which a process's names match only where it numbered them alike."""
    if node.name:
        return node.name
    last = node.path.rsplit("/", 1)[-1]
    return last if node.cls and re.fullmatch(re.escape(node.cls) + r"(_\d+)?", last) else None


def _stem(node: Node) -> str | None:
    """The class stem of ``node``'s name where Keras numbered it (``dense`` for ``dense_3``
    of a Dense); ``None`` for a name the model's code gave, or none recorded."""
    name = _label(node)
    if not name:
        return None
    stem = re.sub(r"_\d+$", "", name)
    if node.cls:
        return node.cls if stem == node.cls else None
    # A sublayer of a class the file does not record (a custom layer held as an attribute,
    # block_1/block_2): any stem may be its class's; one it shares with no other layer
    # cannot select another.
    return stem


def _number(name: str) -> int:
    m = re.search(r"_(\d+)$", name)
    return int(m.group(1)) if m else 0


def check_numbering(lay: KerasLayout, used: Sequence[tuple[str, list[str]]],
                    keys: list[str]) -> None:
    """Refuses stated names that select layers by names Keras numbered per process where the
    file does not prove the stating process numbered them as the saving one did.

    ``used``: each stated name that is not a key of the file, with the weight keys it
    selected; ``keys``: every stated weight key, in order.

    Raises:
        EmaError: naming the stated name, the file's numbering and the way out (the file's
            keys, or ``trainable=model.trainable_variables``, matched by position).
    """
    if lay.named is None or not used:
        return
    nodes = list(_layers(lay.named))
    count: dict[str | None, int] = {}
    for n, _ in nodes:
        count[_label(n)] = count.get(_label(n), 0) + 1
    # Keras gives each name once per process: a name the file repeats (LSTM's own
    # "lstm_cell") was given by code, not numbered.
    stem = {id(n): _stem(n) if count[_label(n)] == 1 else None for n, _ in nodes}
    by_stem: dict[str, list[Node]] = {}
    for n, _ in nodes:
        if stem[id(n)]:
            by_stem.setdefault(stem[id(n)], []).append(n)
    holder = {k: (n, chain) for n, chain in nodes for k in n.keys}
    checked: set[str] = set()
    for name, hit in used:
        segments = set(name.split("/"))
        for k in hit:
            owner, chain = holder.get(k, (None, ()))
            for n in (*chain, owner) if owner else ():
                s = stem[id(n)]
                if s and _label(n) in segments and s not in checked:
                    checked.add(s)
                    _check_stem(lay, name, s, by_stem[s], keys)


def _check_stem(lay: KerasLayout, name: str, s: str, group: list[Node],
                keys: list[str]) -> None:
    """Refuses where the stated layers of stem ``s`` could be others of ``group`` under
    another process's numbering: each other numbering that keeps the statement's shapes and
    dtypes (so fits the averages as well) is a rival."""
    group = sorted(group, key=lambda n: _number(_label(n) or ""))
    names = [_label(n) or "" for n in group]
    if any(not n.name for n in group):
        _check_walk_labels(lay, name, s, group, names, keys)
        return
    fresh = names == [s] + [f"{s}_{i}" for i in range(1, len(names))]
    stated = set(keys)

    def picked(n: Node) -> bool:
        return any(k in stated for k in _all_keys(n))

    if fresh and picked(group[0]):
        return  # the stating process made no other such layer before the first either
    if fresh and lay.flags and all(
            picked(n) == any(lay.trainable.get(k) for k in _all_keys(n)) for n in group):
        return  # config.json's flags select the same layers
    # A process that made d more such layers first names the file's i-th one as its
    # (i+d)-th: on a fresh file only shifts down are possible, else either way.
    shifts = [d for d in range(-len(group) + 1, len(group)) if d and (d < 0 or not fresh)]
    rivals = [d for d in shifts if _fits(lay, group, keys, d)]
    if not rivals:
        return
    way = (f"state the file's keys as 'ckpt list --json' shows them ("
           f"{_example(group)}, ...: numbered by the file, not by a process)"
           + (", or in Python pass the variables, not their paths: apply_keras_ema(model, "
              "path, trainable=model.trainable_variables), as when the optimizer was built "
              "(matched by position, not by name)" if lay.ordered and lay.tree is not None
              else ", or in Python apply_keras_ema(model, path) without trainable=, the "
                   "layers frozen as when the optimizer was built (model.trainable_variables "
                   "pair by position)"))
    if not fresh:
        raise EmaError(
            f"--trainable {name!r} selects layers by the names Keras numbers per process, and "
            f"the file's {s} layers are {_span(names)}, not "
            f"{_span([s] + [f'{s}_{i}' for i in range(1, len(names))])} as a fresh process "
            f"numbers them: the process that saved it had made other {s} layers first, so "
            f"names printed in another process may select other layers of this file of the "
            f"same shapes; {way}")
    raise EmaError(
        f"--trainable {name!r} selects layers by the names Keras numbers per process, and "
        f"nothing proves the process that printed it numbered them as the one that saved the "
        f"file ({_span(names)}): the first, {s!r}, is not stated"
        + (", config.json's trainable flags select other ones" if lay.flags else "")
        + f", and a process that had made another {s} layer first prints {s}_1 for the file's "
        f"{s}, whose weights have the same shapes; {way}")


def _check_walk_labels(lay: KerasLayout, name: str, s: str, group: list[Node],
                       names: list[str], keys: list[str]) -> None:
    """Refuses names the file did not record but its saving walk made up: a model's layers
    held in a list (``model.layers``, ``self.blocks``) are saved as ``layers/dense``,
    ``layers/dense_1``, ... numbered by class in the order the walk reaches them, which is not
    the order the process created (and numbered) them in, so any two of them may be swapped
    between the file's names and the ones Keras printed. Accepted only where no stated layer
    has another in ``group`` of the same weight shapes and dtypes (no other reading fits)."""
    stated = set(keys)

    def sig(n: Node) -> tuple:  # each weight's (shape, dtype), as _fits compares them
        return tuple(lay.shapes.get(k) for k in _all_keys(n))

    picked = [n for n in group if any(k in stated for k in _all_keys(n))]
    rivals = [(a, b) for a in picked for b in group if a is not b and sig(a) == sig(b)]
    if not rivals:
        return
    a, b = rivals[0]
    raise EmaError(
        f"--trainable {name!r} selects layers by names the file does not record: "
        f"{_span(names)} are the names its saver made up for the {s} layers of a list "
        f"(numbered by class in the order it saved them, not by the layers' names), so "
        f"the names Keras printed (e.g. [v.path for v in model.trainable_variables]) may "
        f"call {_label(a)!r} what the file calls {_label(b)!r}, of the same shapes; state the "
        f"file's keys as 'ckpt list --json' shows them ({_example(group)}, ...), in the "
        f"order the optimizer was built in, or in Python apply_keras_ema(model, path) with "
        f"the live model")


def _fits(lay: KerasLayout, group: list[Node], keys: list[str], d: int) -> bool:
    """Whether the statement with each stated layer of ``group`` moved ``d`` places keeps
    every key's shape and dtype (and so fits the averages as well)."""
    moved: dict[str, str] = {}
    for i, n in enumerate(group):
        mine = _all_keys(n)
        if not any(k in set(keys) for k in mine):
            continue
        if not 0 <= i + d < len(group):
            return False
        other = _all_keys(group[i + d])
        if len(other) != len(mine):
            return False
        moved.update(zip(mine, other, strict=True))
    new = [moved.get(k, k) for k in keys]
    return len(set(new)) == len(new) and all(
        lay.shapes.get(a) == lay.shapes.get(b) for a, b in zip(keys, new, strict=True))


def _all_keys(node: Node) -> list[str]:
    return node.keys + [k for c in node.ordered + node.bag for k in _all_keys(c)]


def _span(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 3 else f"{names[0]} .. {names[-1]}"


def _example(group: list[Node]) -> str:
    keys = [k for n in group for k in _all_keys(n)]
    return ", ".join(keys[:2]) if keys else "layers/.../vars/0"


def by_position(lay: KerasLayout, shapes: Sequence[tuple[int, ...]],
                picked: Sequence[int], entry_shape) -> list[str] | None:
    """The file's keys of the live model's weights at positions ``picked`` of
    ``model.weights`` (whose shapes are ``shapes``), where position is provable: the file
    records ``model.weights`` order (a Sequential/Functional model's layers) and every weight's
    shape fits at its position; ``None`` otherwise. Unlike names, positions do not depend on
    the process that numbered the layers. ``entry_shape``: key -> the file's shape."""
    # a tf_keras .keras has no ``tree`` (its names differ) but the same order (``named``)
    if lay.kind != "keras3" or not lay.ordered or (lay.tree or lay.named) is None \
            or len(shapes) != len(lay.model):
        return None
    if any(tuple(s) != tuple(entry_shape(k)) for s, k in zip(shapes, lay.model, strict=True)):
        return None
    return [lay.model[i] for i in picked]


def numbered_alike(lay: KerasLayout, names: Sequence[str], keys: list[str]) -> bool:
    """Whether :func:`check_numbering` accepts ``names`` (layer paths of the file) standing
    for ``keys``, to suggest them; otherwise the keys are the statement to suggest."""
    holder = {k: path for path in names for k in keys
              if lay.paths.get(k, k).startswith(path + "/")}
    used = [(p, [k for k in keys if holder.get(k) == p]) for p in names]
    try:
        check_numbering(lay, used, keys)
    except EmaError:
        return False
    return True
