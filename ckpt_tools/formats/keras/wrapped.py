"""The layers a built-in Keras wrapper holds, as a ``.keras``'s config.json records them
(review-16-attack-r32 F14).

The weight file names a wrapper's layers by attribute only (``layers/bidirectional/
forward_layer``, ``layers/time_distributed/layer``), so their class was unknown, and an ``.h5``
export refused them as "of a class outside Keras"; config.json records it in the wrapper's
own config (``Bidirectional``: ``layer``, and ``backward_layer``, a copy of ``layer`` unless
given; ``TimeDistributed``: ``layer``).
"""

from __future__ import annotations

# wrapper class (snake_case) -> attribute -> the config entries that record its layer
WRAPPED = {"bidirectional": {"forward_layer": ("layer",),
                             "backward_layer": ("backward_layer", "layer")},
           "time_distributed": {"layer": ("layer",)}}


def wrapped_config(wrapper: str | None, config, attribute: str) -> dict | None:
    """The config.json entry (``{"class_name": ..., "config": ...}``) of the layer the
    built-in wrapper ``wrapper`` (snake_case class) of config ``config`` holds under
    ``attribute``, or ``None`` where it records none."""
    if not isinstance(config, dict):
        return None
    for key in WRAPPED.get(wrapper or "", {}).get(attribute, ()):
        said = config.get(key)
        if isinstance(said, dict) and isinstance(said.get("class_name"), str):
            return said
    return None
