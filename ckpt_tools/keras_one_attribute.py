"""The refusal for several Keras 3 optimizers' ``use_ema`` copies of the same weights saved
under one attribute of a ``tf.train.Checkpoint`` (``opts=[sgd, adam]``, ``{"sgd": ..,
"adam": ..}``; review-32-attack-r123 M3). Each optimizer records its own name on its copies
(``sgd/<weight>_average``), so they are several optimizers, not EMA objects of one name;
``--ema-name`` takes the attribute, which they share, so no option picks one.
"""

from __future__ import annotations

from .checkpoint import Checkpoint
from .wording import agreeing, counted

__all__ = ["one_attribute_optimizers"]


def one_attribute_optimizers(ckpt: Checkpoint, variables: int, shown: str,
                             recorded: list[str], holders: list[str]) -> str:
    """The one-line refusal: ``variables`` weights with several copies, ``shown`` the
    examples (and what ``--ema-name`` was stated), ``recorded`` the optimizers' recorded
    names, ``holders`` the attribute they share.

    Returns:
        `str`: the refusal (exit 6, no option decides).
    """
    return (f"{ckpt.path}: {counted(variables, 'variable')} "
            f"{agreeing(variables, 'has', 'have')} more than one average: "
            f"{len(recorded)} Keras optimizers with use_ema=True (recorded as "
            f"{', '.join(recorded)}) keep EMA copies of the same weights under one "
            f"attribute of the tf.train.Checkpoint ({', '.join(holders)}), and the "
            f"checkpoint does not record which to evaluate with: {shown}; no --ema-name "
            "decides (it names an attribute, which they share): save each optimizer under "
            "its own attribute (tf.train.Checkpoint(model=model, optimizer=adam, warm=sgd)) "
            "and pass --ema-name with the one to use")
