"""Whether every EMA copy of a Keras file equals a distinct weight of the file bit for bit, as
after ``fit()`` ends (it copies the averages into the weights): then a ``model.save()`` after
``fit()`` holds the averages as its weights, and ``--raw`` writes them as they are
(review-15-user-u17 F9). Values only hint: a pairing the file does not prove stays refused,
and ``--raw``'s warning and summary say this case rather than send the user back to the
refusal (review-16-user-u18 F3)."""

from __future__ import annotations

from collections import Counter

#: The refusal's hint where :func:`weights_are_copies` (appended to the refusal).
AFTER_FIT_HINT = (
    "; every EMA copy equals a weight of the file bit for bit, as after fit() ends (it copies "
    "the averages into the weights): if it was saved then (model.save() after fit()), its "
    "weights are the averages: ckpt export --raw writes them as they are")


def weights_are_copies(ckpt, layout) -> bool:
    """Whether each EMA copy of ``layout`` (a :class:`~ckpt_tools.formats.keras.layout.
    KerasLayout` of ``ckpt``) equals a distinct model weight of the file bit for bit."""
    copies = list(layout.averages) if layout is not None else []
    if not copies:
        return False

    import numpy as np  # not on list's import path (keras_assumed imports this module)

    def bits(key):
        a = np.asarray(ckpt.tensor(key))
        return str(a.dtype), a.shape, a.tobytes()

    weights = Counter(bits(k) for k in layout.model if k in ckpt)
    for key in copies:
        b = bits(key)
        if not weights[b]:
            return False
        weights[b] -= 1
    return True
