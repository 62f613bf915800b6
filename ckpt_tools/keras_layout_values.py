"""Whether the optimizer variables read as EMA copies of a bare ``.weights.h5`` are averages.

A bare ``.weights.h5`` (Keras 3 or tf_keras ``save_weights``, ``ModelCheckpoint(
save_weights_only=True)``) records the optimizer's variables by position and its class only by
its ``name`` attribute (``pre_sgd``; a custom class may be named ``sgd``). Where the EMA copies
sit among them is inferred from a built-in class' ``build()`` order, which a custom optimizer
does not follow: one that creates a slot of its own before ``super().build()`` puts that slot
where the averages would be, with the same shapes (review-14-attack-r26 F0). No statement
(``--use-ema``, ``--trainable``) says where the copies sit: those state whether there are
copies and which weights they average, not the slot layout.

So the values are checked, whatever was stated: an average starts as its weight and follows it
(Keras assigns the weight at the first step, then ``m * average + (1 - m) * weight``), while a
momentum or gradient slot is on the gradients' scale. Over all paired weights that have other
optimizer variables of their shape, those must sit ``MARGIN`` times farther from the weights
than the copies (``WIDE`` times for a class whose slots ckpt does not know: Muon, a custom or
renamed one). Otherwise the layout is not proven and the file is refused (exit 6): the copies
are not where a built-in puts them, or another slot follows the weights as closely (a
Lookahead's slow weights), and no option decides it. Where the copies are the only variables
of their shapes past iteration/learning_rate, there is no other reading to rule out.
"""

from __future__ import annotations

# Every other optimizer variable of a weight's shape is this many times farther from it than
# its copy (root of sums of squares over all weights): a built-in's layout, MARGIN; a class
# whose slots ckpt does not know, WIDE.
MARGIN = 2 ** 0.5
WIDE = 4.0
SAMPLE = 1 << 16


def inferred(layout) -> bool:
    """The slot layout is inferred from the optimizer's name, not recorded: a Keras 3 or
    tf_keras bare ``.weights.h5`` (no config.json, no optimizer weight names)."""
    return (layout is not None and layout.kind == "keras3" and layout.optimizer_config is None
            and bool(layout.use_ema))


def unproven_layout(ckpt, averages: dict[str, str | None] | None = None) -> str | None:
    """Why the values do not prove the EMA copies are averages, or ``None`` where they do
    (or the layout is recorded). ``averages``: the copies (keys; a dict's weights are not
    used: each copy is compared with the weight of its shape it sits nearest), by default the
    layout's."""
    layout = getattr(ckpt.reader, "keras", None)
    if not inferred(layout):
        return None
    pairs = dict(layout.averages if averages is None else averages)
    if not pairs:
        return None
    key = ("keras_layout_values", tuple(sorted(pairs)))
    return ckpt.memo(key, lambda: _unproven(ckpt, layout, pairs))


def _unproven(ckpt, layout, pairs: dict[str, str | None]) -> str | None:
    import numpy as np

    from .formats.keras.optimizer_slots import candidates

    entries = ckpt.entries()
    cache: dict = {}

    def flat(k):
        if k not in cache:
            a = np.asarray(ckpt.tensor(k))
            cache[k] = (a.reshape(-1)[:SAMPLE].astype(np.float64)
                        if a.dtype.kind in "fV" or str(a.dtype) == "bfloat16" else None)
        return cache[k]

    def spec(k):
        return tuple(entries[k].shape), entries[k].dtype

    weights = [k for k in layout.model if k in entries]
    others = [k for k in layout.optimizer_vars[layout.ema_offset:]
              if k not in pairs and k in entries]
    near = far = 0.0
    compared = 0
    for copy in pairs:
        c = flat(copy)
        rivals = [o for o in others if spec(o) == spec(copy) and flat(o) is not None]
        if c is None or not rivals:
            continue  # nothing else of its shape could be the average
        # The weight of its shape it sits nearest: which one it averages is the order's
        # question (keras_order_values; a stated --trainable order is the caller's), not the
        # layout's.
        same = [k for k in weights if spec(k) == spec(copy) and flat(k) is not None]
        if not same:
            continue
        x = flat(min(same, key=lambda k: float(np.sum((c - flat(k)) ** 2))))
        if x.shape != c.shape:
            continue
        near += float(np.sum((c - x) ** 2))
        far += min(float(np.sum((flat(o) - x) ** 2)) for o in rivals)
        compared += 1
    if not compared:
        return None  # one variable per weight past iteration/learning_rate: no other reading
    # A built-in's layout that fits the count and shapes exactly needs only to be the nearer
    # reading; a class whose slots ckpt does not know (Muon, a renamed or custom one) a wide
    # margin: the values alone decide there.
    known = layout.tf_keras or any(c[2] is not None for c in candidates(layout))
    margin = MARGIN if known else WIDE
    if not (np.isfinite(near) and np.isfinite(far)):
        return "the weights or optimizer variables hold NaN or inf"
    if far >= (margin ** 2) * near and far > 0.0:
        return None
    if far == 0.0:
        return ("other optimizer variables of the weights' shapes equal the weights, as they "
                "do: the values prove nothing")
    ratio = (far / near) ** 0.5
    if far < near:
        return (f"other optimizer variables of the weights' shapes sit {1 / max(ratio, 1e-9):.0f}x "
                "nearer the weights than they do (an average starts as its weight and follows "
                "it): they are another slot, and the averages sit elsewhere")
    return (f"other optimizer variables of the weights' shapes sit only {ratio:.1f}x farther "
            f"from the weights than they do (at least {margin:.1f}x needed"
            + ("" if known else f" for an optimizer class ckpt does not know, "
               f"{layout.optimizer or 'unnamed'}") + "), so the values do not single them out "
            "as the averages")


def refuse_unproven_layout(ckpt, averages: dict[str, str | None] | None = None) -> None:
    """Refuses (exit 6) a bare ``.weights.h5`` whose inferred EMA copies' values do not prove
    them averages (module docstring)."""
    why = unproven_layout(ckpt, averages)
    if why is None:
        return
    from .errors import UnprovenPairingError
    from .formats.keras.optimizer_slots import shown_name

    layout = ckpt.reader.keras
    name = shown_name(layout.optimizer) or "no name"
    raise UnprovenPairingError(
        f"{ckpt.path}: the optimizer variables read as EMA copies sit where a Keras built-in "
        f"optimizer keeps them, but a bare .weights.h5 records the optimizer only by its name "
        f"({name}), and a custom one may create slots of its own before Keras' EMA copies; "
        f"their values do not prove them averages: {why}; no "
        "option decides where the copies sit (--use-ema and --trainable state neither): save "
        "a tf.train.Checkpoint(model=model, optimizer=optimizer) or model.save('x.keras'), "
        "which record it; the raw weights are usable as they are (ckpt export --raw writes "
        "them to one file)",
        None, {k: (v,) if v else () for k, v in (averages or layout.averages).items()})


__all__ = ["inferred", "refuse_unproven_layout", "unproven_layout"]
