"""A Keras 3 ``LossScaleOptimizer``'s own variables (``mixed_float16``).

``LossScaleOptimizer.variables`` is its own variables (``iteration``, ``learning_rate``
when a float, ``step_counter``, ``dynamic_scale``) followed by the wrapped optimizer's
``variables``, so a Keras 3.15 file stores the wrapped optimizer's EMA copies and slots
twice: under ``optimizer/inner_optimizer/vars/`` (read as the optimizer) and again at the
end of ``optimizer/vars/``. The outer group is optimizer state: never paired, left out with
``--slots drop`` as the wrapped optimizer's slots are.
"""

from __future__ import annotations

_OWN = ("iteration", "learning_rate", "step_counter", "dynamic_scale")


def read_outer(lay, entries: dict, inner: list[str], outer: list[str], name: str) -> None:
    """Records ``outer`` (the ``LossScaleOptimizer``'s ``vars/`` keys, in order) as
    optimizer state in ``lay.loss_scale_state``, with readable ``lay.paths`` where the
    count, shapes and dtypes show the repeat of ``inner`` (the wrapped optimizer's keys, in
    order) after its own three or four variables; and says so in ``lay.notes``.

    Returns:
        None; ``lay`` is updated.
    """
    lay.loss_scale_state = list(outer)
    own = len(outer) - len(inner)
    repeat = own in (3, 4) and all(
        tuple(entries[o].shape) == tuple(entries[i].shape)
        and entries[o].dtype_name == entries[i].dtype_name
        for o, i in zip(outer[own:], inner, strict=True))
    if not repeat:
        lay.notes.append(f"the LossScaleOptimizer's own {len(outer)} variables are optimizer "
                         "state (not paired; --slots drop leaves them out)")
        return
    names = [n for n in _OWN if own == 4 or n != "learning_rate"]
    for key, var in zip(outer, names, strict=False):
        lay.paths[key] = f"{name}/{var}"
    lay.repeats = dict(zip(outer[own:], inner, strict=True))
    lay.notes.append(f"the LossScaleOptimizer's own {len(outer)} variables are its "
                     f"{', '.join(names)} and a repeat of the wrapped optimizer's "
                     f"{len(inner)}: optimizer state, not paired (--slots drop leaves them out)")


def name_repeats(lay, name: str) -> None:
    """Gives the repeated keys of :func:`read_outer` the wrapped optimizer's variable paths
    under ``name`` (called once those paths are set)."""
    for key, of in getattr(lay, "repeats", {}).items():
        lay.paths[key] = f"{name}/{lay.paths.get(of, of)}"
