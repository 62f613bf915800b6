"""Keys read as averages of tensors that the save op wrote from a model variable.

A fine-tune that loaded the averages into its variables (``init_from_checkpoint``, a partial
or crossed restoring Saver, or its own ``ema.apply()`` beside a fresh object's
``variables_to_restore()``) and saved with a renaming Saver (``{"model/" + k: v for k, v in
vtr.items()}``) wrote ``model/fc/w/ExponentialMovingAverage`` from ``fc/w``: the key is named
as an average, and with no shadow variable of that name in the graph it reads as a tensor's
average (``tensor_average``). ``export --raw --tensor-averages`` wrote those fine-tuned raw
weights as "averaged", exit 0 (review-26-attack-r91 F1). The save op is the proof: a key it
wrote from a trainable variable, from a variable ``ema.apply()`` averages, or from the very
variable its name sits under, holds that variable's raw value, never a tensor's average.
"""

from __future__ import annotations

from collections.abc import Iterable

from .checkpoint import Checkpoint
from .errors import UnprovenPairingError
from .save_op import graph_named, written_sources
from .wording import counted


def raw_written(ckpt: Checkpoint, keys: Iterable[str]) -> dict[str, str]:
    """Of ``keys``, those the save op that wrote ``ckpt`` (its own graph file's) wrote from a
    model variable: a trainable one, one ``ema.apply()`` averages, or the variable the key's
    name sits under (``model/fc/w/ExponentialMovingAverage`` from ``fc/w``).

    Returns:
        `dict[str, str]`: key -> the variable (op name) it was written from; ``{}`` where no
        save op of the checkpoint is read.

    Raises:
        CheckpointError: the graph file cannot be opened or mapped.
    """
    keys = list(keys)
    sources = written_sources(ckpt) if keys else None
    if not sources or ckpt.meta is None:
        return {}
    colls = ckpt.meta.collections
    model = set(colls.get("trainable_variables", ())) | set(
        colls.get("moving_average_variables", ()))
    out = {}
    for key in keys:
        src = sources.get(key) or []
        if len(src) != 1:
            continue
        head = key.rpartition("/")[0]
        if src[0] in model or head == src[0] or head.endswith("/" + src[0]):
            out[key] = src[0]
    return out


def refuse_raw_tensor_averages(ckpt: Checkpoint, keys: Iterable[str]) -> None:
    """Refuses where some of ``keys`` (read as averages of tensors, which an export would
    write as averages or name as left out) were written by the save op from a model
    variable (:func:`raw_written`): their names say average, the graph says raw.

    Raises:
        UnprovenPairingError: (exit 6, option ``--keys-are-raw``) naming the keys, the
            variables the save op read them from, ``--raw --keys-are-raw`` and ``--exclude``.
    """
    found = raw_written(ckpt, keys)
    if not found:
        return
    shown = sorted(found)
    said = ", ".join(f"{k} <- {found[k]}" for k in shown[:3]) + (" ..." if len(shown) > 3
                                                                else "")
    raise UnprovenPairingError(
        f"{ckpt.path}: the {graph_named(ckpt)}'s save op wrote {counted(len(shown), 'key')} named "
        "as "
        f"averages from model variables ({said}): they hold those variables' raw values (a "
        "fine-tune that loaded the averages and saved with a renaming Saver writes them so), "
        "not averages of tensors; --raw --keys-are-raw states they are raw weights, or "
        + " ".join(f"--exclude '{k}'" for k in shown[:3]) + " leaves them out",
        option="--keys-are-raw", undecided={k: (found[k],) for k in shown}, raw=tuple(shown))
