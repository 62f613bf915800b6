"""``--apply-order ORDER:ATTR`` (Python: ``apply_order="trainable:generator"``): the caller's
statement that ``ema.apply()`` got the trainable variables of the root attribute ``ATTR``
only, in ``ORDER``. A GAN saved as ``tf.train.Checkpoint(generator=g, discriminator=d,
ema=[ema.average(v) for v in g.trainable_variables])`` with unnamed variables: G's and D's
variables share one name, dtype and shape, and the root lists its objects by name, so no order
alone tells whose averages the list holds; this statement does (review-14-attack-r25 F5). Like
every stated order it is the caller's word, not a proof, and the commands say so.
"""

from __future__ import annotations


class ScopedOrder(str):
    """An apply order (``trainable``/``tracked``) over one root attribute's variables
    (``within``). Compares equal to the order it wraps, so every check of the order holds."""

    within: str

    def __new__(cls, order: str, within: str) -> ScopedOrder:
        self = super().__new__(cls, order)
        self.within = within
        return self

    def __repr__(self) -> str:
        return f"{str.__str__(self)}:{self.within}"

    __str__ = __repr__  # messages name the statement as given: --apply-order trainable:g

    def __format__(self, spec: str) -> str:
        return format(repr(self), spec)


def parse_order(apply_order):
    """``"trainable:generator"`` -> :class:`ScopedOrder`; anything else as it is.

    Example:
        >>> parse_order("trainable:generator").within
        'generator'
        >>> parse_order("trainable:generator") == "trainable"
        True

    Raises:
        ValueError: an empty order or attribute (``"trainable:"``).
    """
    if not isinstance(apply_order, str) or ":" not in apply_order or isinstance(
            apply_order, ScopedOrder):
        return apply_order
    order, _, within = apply_order.partition(":")
    if not order or not within or "/" in within:
        raise ValueError(f"apply_order {apply_order!r}: expected ORDER:ATTRIBUTE, the root "
                         "attribute whose trainable variables ema.apply() got "
                         "(trainable:generator)")
    return ScopedOrder(order, within)


def within_of(apply_order) -> str | None:
    """The root attribute an ``apply_order`` (or a live order's ``stated``) confines
    ``ema.apply()``'s variables to, or None."""
    return getattr(apply_order, "within", None) or getattr(
        getattr(apply_order, "stated", None), "within", None)
