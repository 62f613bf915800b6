"""Why a weight keeps its raw value beside averaged ones, where the file itself says so.

A Keras optimizer keeps EMA copies only of the weights it was built with. A ``.keras``
archive's ``config.json`` records which layers were frozen (``trainable: false``) and each
layer's class, whose code creates some variables non-trainable (``Normalization``'s ``mean``
and ``variance``): such weights staying raw is what Keras evaluates them with, so commands
say so in a note instead of warning. Weights nothing explains keep the warning.
"""

from __future__ import annotations

from .wording import agreeing, counted

#: ``config.json`` records the weight's layer ``trainable: false``.
FROZEN = "frozen"
#: The weight's layer class creates it ``trainable=False`` (as config.json records the layer).
NON_TRAINABLE = "non_trainable"
#: A float8 layer's scale or amax history: updated by ``overwrite_with_gradient``, so Keras'
#: optimizer keeps no EMA copy of it (config.json records the layer's float8 dtype policy).
FLOAT8_STATE = "float8_state"
#: An int8/int4-quantized layer's kernel or scale in a file without config.json (a bare
#: ``.weights.h5``): the layer's int8 ``vars/0`` proves the layout, whose class creates them
#: ``trainable=False`` (only the bias trains).
QUANTIZED = "quantized"

_SAID = {FROZEN: "in layers it records frozen (trainable: false)",
         NON_TRAINABLE: "created with trainable=False by their layer's class",
         FLOAT8_STATE: "float8 scales and amax histories, which Keras' optimizer keeps no EMA "
                       "copy of (overwrite_with_gradient)"}


def expected_raw(ckpt, keys) -> dict[str, str]:
    """The weights of ``keys`` (checkpoint keys without an average) whose raw value the
    file's ``config.json`` explains.

    Returns:
        `dict[str, str]`: key -> :data:`FROZEN` or :data:`NON_TRAINABLE`; empty for files
        without a Keras ``config.json`` (TF checkpoints, bare ``.weights.h5``: but for an
        int8/int4-quantized layer's kernel and scales there, :data:`QUANTIZED`) and for weights
        the caller's ``--trainable`` left out that config.json does not record frozen (that
        is a statement, not the file's record).
    """
    layout = getattr(getattr(ckpt, "reader", None), "keras", None)
    if layout is not None and not layout.configured:  # a bare .weights.h5 (s17j)
        return _bare_quantized(layout, keys)
    if layout is None:
        return {}
    frozen = set(layout.frozen) | set(getattr(layout, "frozen_left_out", ()))
    fixed = set(getattr(layout, "untrainable", ()))
    float8 = set(getattr(layout, "float8_state", ()))
    found = {}
    for key in keys:
        if layout.trainable.get(key) is not False:
            continue
        if key in frozen:
            found[key] = FROZEN
        elif key in fixed:
            found[key] = NON_TRAINABLE
        elif key in float8:
            found[key] = FLOAT8_STATE
    return found


def _bare_quantized(layout, keys) -> dict[str, str]:
    """The weights of ``keys`` of int8/int4-quantized layers no config.json records, which
    the layer's int8 ``vars/0`` proves (:func:`~ckpt_tools.formats.keras.quantized.
    bare_quantized`): its kernel and scales, created ``trainable=False``."""
    from .formats.keras.quantized import INT_NAMES

    return {k: QUANTIZED for k in keys if layout.trainable.get(k) is False
            and k in set(layout.untrainable)
            and layout.paths.get(k, "").rpartition("/")[2] in INT_NAMES}


#: The TF1 ``.meta`` lists it outside ``trainable_variables`` (:mod:`ckpt_tools.frozen_meta`).
NOT_TRAINABLE_META = "not_trainable"
#: An integer weight of a TensorFlow checkpoint (a hand-quantized ``w_q``): TF's
#: ``ExponentialMovingAverage.apply()`` takes float variables only, so none has an average.
NOT_FLOAT = "not_float"


def expected_raw_note(reasons: dict[str, str], shown) -> str | None:
    """The note for weights :func:`expected_raw` (or, for a TF1 ``.meta``,
    :func:`~ckpt_tools.frozen_meta.frozen_variables`) explains (``shown``: key -> display
    name), or None where there are none."""
    quantized = [shown(k) for k, r in reasons.items() if r == QUANTIZED]
    if quantized:  # a bare .weights.h5's (expected_raw): no config.json reason beside them
        quantized_note = (
            f"{counted(len(quantized), 'weight')} {agreeing(len(quantized), 'has', 'have')} no "
            "EMA copy and keep their raw values: "
            "int8/int4-quantized layers' kernels and scales (the layer's int8 kernel shows it "
            "quantized; Keras creates them trainable=False, only the bias trains): "
            f"{', '.join(quantized[:5])}" + (" ..." if len(quantized) > 5 else ""))
        reasons = {k: r for k, r in reasons.items() if r != QUANTIZED}
        rest = expected_raw_note(reasons, shown)
        return quantized_note if rest is None else f"{quantized_note}; {rest}"
    frozen = [shown(k) for k, r in reasons.items() if r == NOT_TRAINABLE_META]
    ints = [shown(k) for k, r in reasons.items() if r == NOT_FLOAT]
    reasons = {k: r for k, r in reasons.items() if r not in (NOT_TRAINABLE_META, NOT_FLOAT)}
    # by what the graph shows: not trainable, never averaged; "frozen" was said of a weight
    # the user trains by hand (w0.assign_sub) too (review-20-attack-r49 F3)
    meta_note = (f"{counted(len(frozen), 'weight')} {agreeing(len(frozen), 'keeps', 'keep')} "
                 "their raw values: the .meta lists them outside "
                 "trainable_variables (trainable=False) and no ema.apply() of the graph "
                 "averages them, so TF's variables_to_restore() restores them raw: "
                 f"{', '.join(frozen[:5])}" + (" ..." if len(frozen) > 5 else "")
                 ) if frozen else None
    if ints:
        int_note = (f"{counted(len(ints), 'integer weight')} "
                    f"{agreeing(len(ints), 'keeps', 'keep')} their raw values: "
                    "ExponentialMovingAverage.apply() averages float variables only: "
                    f"{', '.join(ints[:5])}" + (" ..." if len(ints) > 5 else ""))
        meta_note = int_note if meta_note is None else f"{meta_note}; {int_note}"
    if not reasons:
        return meta_note
    parts = []
    for why, said in _SAID.items():
        names = [shown(k) for k, r in reasons.items() if r == why]
        if names:
            parts.append(f"{len(names)} {said}: {', '.join(names[:5])}"
                         + (" ..." if len(names) > 5 else ""))
    said = (f"{_what(reasons, shown)} {agreeing(len(reasons), 'has', 'have')} no EMA copy and "
            f"keep{'s its' if len(reasons) == 1 else ' their'} raw values, as config.json "
            f"explains: {'; '.join(parts)}")
    return said if meta_note is None else f"{said}; {meta_note}"


def _what(reasons: dict[str, str], shown) -> str:
    """What :func:`expected_raw_note` says ``reasons``' variables are: ``"2 weights"``, and a
    batch norm layer's moving statistics (role ``bn_stat``) by that name, not as weights
    (review-30-user-u32 F1: "2 weight(s)" of ``bn/moving_mean`` and ``bn/moving_variance``).

    Returns:
        `str`: ``"2 BN statistics"``, ``"1 weight and 2 BN statistics"``...
    """
    from .roles import bn_statistic_name

    stats = sum(1 for k in reasons if bn_statistic_name(shown(k)))
    parts = [counted(len(reasons) - stats, "weight") if len(reasons) > stats else "",
             counted(stats, "BN statistic") + " (moving mean/variance)" if stats else ""]
    return " and ".join(p for p in parts if p)
