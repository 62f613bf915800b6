"""Which keys ``ckpt average --ema`` averages as EMA shadows: the ``.meta``'s save op's word
where it shows them, else the keys' names.

A swapping Saver stores an average under its variable's name and the variable under the
average's (``{"W": ema.average(W), "W/ExponentialMovingAverage": W}``): read by the names,
``--ema`` copied ``W`` (the average) from the newest input unaveraged and averaged the raw
weight, exit 0. :func:`~ckpt_tools.saved_swaps.shadow_keys` reads the keys through the save
op and update ops where they pair (one EMA object, or each of several:
``{"W": fast.average(W), "W/fast": W, "W/slow": slow.average(W)}``), and
:func:`~ckpt_tools.saved_swaps.graph_named_averages` the averages stored under another
variable's name where nothing pairs: each average is averaged, never one input's value handed
back as the mean.
"""

from __future__ import annotations

from . import roles as R
from .checkpoint import Checkpoint
from .saved_swaps import graph_named_averages, shadow_keys


def ema_shadows(newest: Checkpoint, variables: dict, floats: set[str]
                ) -> tuple[set[str], dict[str, bool]]:
    """The keys of ``floats`` (the averaged float keys of ``newest``; ``variables``: key ->
    :class:`~ckpt_tools.variable.Variable`) that hold EMA averages.

    Returns:
        ``(shadows, read_otherwise)``: ``read_otherwise`` maps each key the save op reads
        against its name to ``True`` (an average not named as an EMA shadow: averaged) or
        ``False`` (named as an EMA shadow, holding no average: copied from the newest);
        ``{}`` where the names decide alone.
    """
    named = {k for k in floats if variables[k].role == R.EMA}
    held = shadow_keys(newest, variables) if newest.meta is not None else None
    shadows = named if held is None else floats & held  # the save op's word, where it pairs
    # an average under another variable's name where nothing pairs (``{"W": slow.average(W),
    # "W/fast": fast.average(W)}``, W itself not saved): read by the names, W was copied from
    # the newest input unaveraged, exit 0; the update ops prove it an average
    shadows = shadows | (floats & set(graph_named_averages(newest)))
    return shadows, {**{k: True for k in sorted(shadows - named)},
                     **{k: False for k in sorted(named - shadows)}}
