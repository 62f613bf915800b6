"""TF1 keys named as model weights that hold averages, read from the ``.meta``'s save op: a
serving or swapping Saver writes ``w`` from ``w/ExponentialMovingAverage``
(:func:`averages_under_variable_names`, which export says), or renamed keys
(``{"model/w": ema.average(w)}``) hold an average where the names say a weight
(:func:`averages_under_weight_keys`), which ``export --raw`` refuses
(:func:`refuse_averages_as_raw`) rather than writing an average as a raw weight.
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .ema_refusals import UnprovenPairingError
from .ema_updates import shadow_owners
from .formats.meta_saver import PART
from .save_op import graph_named
from .saved_keys import renamed_keys
from .wording import agreeing, counted


def averages_under_variable_names(ckpt: Checkpoint) -> dict[str, str]:
    """Returns key -> the shadow its ``.meta``'s save op saved under it, for each key named as
    a variable that holds that variable's average (a swapping Saver, or
    ``Saver({v.op.name: ema.average(v)})``): what ``export --raw`` exports there are the
    averages. ``{}`` where nothing records it."""
    return {k: h for k, h in renamed_keys(ckpt).items() if h and h.startswith(k + "/")}


def averages_under_weight_keys(ckpt: Checkpoint, keys) -> dict[str, str]:
    """Returns key -> the variable its ``.meta``'s save op saved under it, for each of
    ``keys`` (what ``export --raw`` would write as model weights) whose variable sits under
    a variable ``ema.apply()`` averaged (``w/ExponentialMovingAverage``: its average, or a
    slot of it), under a key of another name: a swapping Saver under renamed keys
    (``{"model/w": ema.average(w), "model/w/ExponentialMovingAverage": w}``) or with the
    scope stripped stores the averages where the names say weights (review-21-attack-r56
    F1). A key named as that variable (``w`` holding ``w/ExponentialMovingAverage``:
    :func:`averages_under_variable_names`, said by export's warning) is not listed. ``{}``
    where nothing records the save op or no variable is averaged."""
    meta = ckpt.meta
    if meta is None or ckpt.objects is not None:
        return {}
    averaged = {PART.sub("", k) for k in meta.keys_in("moving_average_variables")}
    # the shadows the graph's update ops write: an apply() run inside the model's
    # variable_scope names them model/model/w/ExponentialMovingAverage, under no averaged
    # variable's name (review-21-attack-r60 F1, F3)
    owners = shadow_owners(ckpt) or {}
    # a part's shadow (w/part_0/ExponentialMovingAverage) is held as its variable's
    shadows = {PART.sub("", s) for s in owners}
    if not averaged and not shadows:
        return {}
    # a variable the graph trains or averages is a model variable, whatever it is nested
    # under (w/scale beside w, both trained and averaged): its key holds its own raw value,
    # no shadow's or slot's (review-21-attack-r60 F10)
    model = {*averaged, *(PART.sub("", k) for k in meta.keys_in("trainable_variables")),
             *(PART.sub("", v) for v in owners.values())}
    renamed = renamed_keys(ckpt)
    # a key holding its own variable's average is a serving Saver's (export warns) only where
    # the save op wrote that variable under no other key; where it did (a swapping Saver that
    # renamed only the raw copies: model/w/ExponentialMovingAverage <- w), the raw value is
    # stored elsewhere and --raw would still write the average (review-21-attack-r60 F2)
    stored_elsewhere = set(renamed.values())
    # a key named as what it holds with a suffix after it (b/ExponentialMovingAverage/var
    # from that shadow) says so itself (review-21-attack-r60 F6)
    return {k: h for k in keys if (h := renamed.get(k)) and not k.startswith(h + "/")
            and (not h.startswith(k + "/") or k in stored_elsewhere)
            and (h in shadows or h not in model
                 and any(h.startswith(v + "/") for v in averaged))}


def refuse_averages_as_raw(ckpt: Checkpoint, keys) -> None:
    """Refuses (exit 6) ``export --raw`` of ``keys`` where :func:`averages_under_weight_keys`
    finds one: it would write an average (or another variable under an averaged one) as a
    model's raw weight, exit 0 (review-21-attack-r56 F1).

    Raises:
        UnprovenPairingError: such a key is among ``keys``; no option decides.
    """
    held = averages_under_weight_keys(ckpt, keys)
    if not held:
        return
    k, h = next(iter(sorted(held.items())))
    raise UnprovenPairingError(
        f"{ckpt.path}: {counted(len(held), 'key')} named as model weights "
        f"{agreeing(len(held), 'holds', 'hold')} other variables, "
        f"e.g. {k}: its {graph_named(ckpt)}'s saver wrote it from {h}, which sits under a "
        "variable ema.apply() averages or is its shadow (its average, as a swapping Saver "
        "under renamed keys stores it), so --raw would write it as a raw weight; no option "
        "decides: "
        "restore in the graph imported from the .meta and read the variables there",
        None, {key: (v,) for key, v in held.items()})
