"""``--trainable`` on a layer saved by index whose vars/0 is no float variable: a quantized
layer of a class the file does not record (a subclassed model's attribute), whose int8 kernel
comes first (``kernel, bias, kernel_scale``). Keras' rule for a layer's own variables
(trainable ones first) does not hold for it, so a stated key is taken as said, and a live
variable's name (``hid/bias``), which the file does not record, is refused rather than read as
a place (review-17-attack-r36 F1)."""

from __future__ import annotations

from ...errors import EmaError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .layout import KerasLayout


def not_float_first(lay: KerasLayout, own: list[str]) -> bool:
    """Whether a layer's first variable saved by index (``own[0]``) is one no optimizer
    trains although its layer is not frozen: no float (a quantized layer's int8 kernel)."""
    return bool(own) and not lay.trainable.get(own[0], True) and own[0] not in lay.frozen


def refuse_live_name(lay: KerasLayout, name: str, head: str, own: list[str]) -> None:
    """Refuses ``name`` (a variable name the file does not record) of layer ``head`` whose
    variables ``own`` are saved by index with no float first.

    Raises:
        EmaError: naming the keys the file holds and the Python way.
    """
    if not not_float_first(lay, own):
        return
    keys = ", ".join(lay.paths.get(k, k) for k in own[:4])
    raise EmaError(
        f"--trainable {name!r}: {head} saves its variables by index and its vars/0 is no "
        "float variable (a quantized layer's int8 kernel, which no optimizer trains), so it "
        "does not save its trainable variables first and a live variable's name does not say "
        f"which of them it is: state the ones the optimizer was built with by the names the "
        f"file holds ({keys}; 'ckpt list' shows their dtypes and shapes), in its order, or use "
        "apply_keras_ema(model, path) with the live model")
