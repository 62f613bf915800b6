"""The assumptions a Keras file's EMA pairing can rest on, in words: what each takes for
granted, why the file cannot show it, and the statement that decides it (the CLI's option and
the Python keyword). :mod:`~ckpt_tools.keras_assumed` decides which apply to a file."""

from __future__ import annotations

from .formats._record import replace
from .swap_assumed import Assumption

__all__ = ["FIT_ORDER", "LIVE_FIT_ORDER", "NOT_SWAPPED", "OBJECT_NOT_SWAPPED", "OBJECT_READ"]


FIT_ORDER = Assumption(
    "fit_order",
    "EMA copies of weights of equal shapes are paired in the order fit() builds the optimizer "
    "in (model.trainable_variables), as keras.models.load_model reads them; a custom training "
    "loop whose first apply_gradients() listed them otherwise pairs them otherwise, which the "
    "file cannot show: trained by fit(), state it with --fit-order; a custom loop, state its "
    "order with --trainable NAMES --loop-order",
    "EMA copies of weights of equal shapes are taken in the order fit() builds the optimizer "
    "in (model.trainable_variables)",
    "trained by fit(): --fit-order; a custom loop: --trainable NAMES --loop-order (Python: "
    "fit_order=True; trainable=[...], loop_order=True)",
    "assumes the order fit() builds the optimizer in; --fit-order states it, a custom "
    "loop's order: --trainable NAMES --loop-order")
NOT_SWAPPED = Assumption(
    "not_swapped",
    "if this file was saved by ModelCheckpoint after SwapEMAWeights(swap_on_epoch=True), its "
    "weights are the averages and its EMA copies the raw weights, which the file cannot show: "
    "then use the file as it is, its own weights are the averages (ckpt export --raw writes "
    "them); --not-swapped states it was not",
    "the file is taken as not saved by ModelCheckpoint after SwapEMAWeights(swap_on_epoch=True) "
    "(its weights differ from their EMA copies)",
    "if it was, use the file as it is: its own weights are the averages (ckpt export --raw "
    "writes them; Python: ema=False, or model.load_weights); if not, state it: --not-swapped "
    "(Python: not_swapped=True)",
    "assumes the file was not saved after SwapEMAWeights(swap_on_epoch=True) swapped the "
    "weights; --not-swapped states it; if it was, use the file as it is (ckpt export --raw)")

# A Keras 3 optimizer's copies in a tf.train.Checkpoint: model.load_weights cannot read that
# file (Keras 3 reads .keras/.weights.h5/.weights.json only), tf.train.Checkpoint can (u16 F5).
OBJECT_READ = "tf.train.Checkpoint(model=model).restore(path)"
OBJECT_NOT_SWAPPED = replace(NOT_SWAPPED, decides=NOT_SWAPPED.decides.replace(
    "model.load_weights", OBJECT_READ))

# apply_ema of a tf_keras TF-format checkpoint into a live model: its averages of same-named
# weights placed by the model's trainable_variables (tfk_order), as fit() built them.
LIVE_FIT_ORDER = Assumption(
    "fit_order",
    "averages of same-named weights were paired in the live model's trainable_variables "
    "order, the order fit() builds the tf_keras optimizer in, which the checkpoint cannot "
    "show: if a custom training loop listed the variables otherwise, pass trainable=<that "
    "list> (trainable=model.trainable_variables states fit()'s order)",
    "averages of same-named weights are placed in the live model's trainable_variables "
    "order, the order fit() builds the tf_keras optimizer in",
    "pass trainable=model.trainable_variables to state fit()'s order, or the list a custom "
    "training loop passed to its first apply_gradients()")
