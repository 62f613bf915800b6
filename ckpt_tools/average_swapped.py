"""The ``SwapEMAWeights`` / ``swap_weights()`` question of every input of ``ckpt average --ema
--bake``, not of the newest alone (review-33-attack-r132 C2).

A bake averages each input's averages into the plain names, reading in every input the keys
the newest input's pairing reads. That pairing asks ``--not-swapped`` of the newest input
only; beside a newest input that needs no answer (a ``ckpt restore-ema --not-swapped``
output, whose mark carries the statement), an older input saved swapped had its copies (its
raw weights) averaged in as "the averages", exit 0. Each older input is now asked as the
newest is, by its own pairing: only the caller's ``--not-swapped`` or the input's own mark
answers it.
"""

from __future__ import annotations

import warnings

from .checkpoint import Checkpoint
from .emamap import ema_map
from .errors import UnprovenPairingError

__all__ = ["refuse_older_unswapped"]


def refuse_older_unswapped(older: list[Checkpoint], pairing: dict | None) -> None:
    """Asks the swap question of each input in ``older`` (every input but the newest, whose
    own pairing :func:`~ckpt_tools.average_write.plan_average` asked it of) under the bake's
    ``pairing`` options.

    Raises:
        UnprovenPairingError: (exit 6) ``--not-swapped`` decides, naming the first input
            (the newest first) that needs it, as :func:`~ckpt_tools.ema_map` says it.
    """
    pairing = pairing or {}
    for c in reversed(older):
        try:
            # its notes were said of the newest already; only its refusal matters here
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ema_map(c.with_meta(pairing.get("use_meta", True)), non_averaged="keep",
                        **pairing)
        except UnprovenPairingError as e:
            if e.option == "--not-swapped":
                raise
            # another doubt of an older input's pairing is no answer to this question: the
            # newest input's pairing, which every input is read by, decides those
