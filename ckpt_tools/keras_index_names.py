"""Keras weights named by index (``aa/0``) beside weights named as Keras names them
(``zz/kernel``): a subclassed model's ``.keras`` stores some sublayers by attribute name with
neither their class nor their variables' names, so the index is all the file proves
(review-14-attack-r26 F6). ``list`` and ``export`` say so in the same words."""

from __future__ import annotations


def index_named_layers(paths) -> list[str]:
    """The layers (path prefixes) of ``paths`` (weights' shown names) whose weights are named
    by index, where other weights are named by Keras' variable names; empty otherwise."""
    layers: list[str] = []
    named = False
    for path in paths:
        if not path or "/" not in path:
            continue
        layer, _, last = path.rpartition("/")
        if last.isdigit():
            if layer not in layers:
                layers.append(layer)
        else:
            named = True
    return layers if named else []


def index_named_note(layers: list[str]) -> str:
    """The line that says why ``layers``' weights are named by index."""
    return (f"{', '.join(layers[:4])}{' ...' if len(layers) > 4 else ''}: weights named by "
            f"index ({layers[0]}/0 is its vars/0): the file does not record these layers' "
            "variable names (nor, for a subclassed model's attributes, their class), so Keras' "
            "own names (v.path: .../kernel) cannot be given; export writes these names")
