"""Two TF1 variables trained with an ``ExponentialMovingAverage(0.5)`` and saved by a ``Saver``
whose keys the test chooses (a swapping Saver, ``variables_to_restore()``, a misfiled or
crossed dict), built by real TensorFlow (graph mode) with the truth read from the session at
save time: the prelude the tests of such Savers shared inline."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

Keys = Callable[[object, tuple], object]  # (ema, (first, second)) -> the Saver's var_list


def swapping_keys(ema, variables) -> dict:
    """A swapping Saver's dict: each variable's name holds its average and its average's name
    holds the variable (``{v.op.name: ema.average(v), ema.average_name(v): v}``)."""
    return ({v.op.name: ema.average(v) for v in variables}
            | {ema.average_name(v): v for v in variables})


def tf1_two_var_ema(tf, prefix: str | Path, keys: Keys | None = None, *,
                    names: tuple[str, str] = ("W", "b"),
                    shapes: tuple[list, list] = ([2, 3], [3]),
                    saver_def: bool = True) -> tuple[str, dict[str, np.ndarray],
                                                      dict[str, np.ndarray]]:
    """Makes ``names[0]`` (``shapes[0]``, zeros) and ``names[1]`` (``shapes[1]``, ones), adds 2
    and 1 to them three times, each step followed by ``ema.apply()`` of both, and saves with
    ``tf.compat.v1.train.Saver(keys(ema, (first, second)))`` (``Saver(None)`` if ``keys`` is
    None) to ``prefix``. Without ``saver_def`` the ``.meta`` is written by
    ``export_meta_graph()`` with no saver, so it records no ``SaverDef``.

    Returns:
        ``(prefix, raw, avg)``: ``raw[name]`` is ``sess.run(v)`` and ``avg[name]`` is
        ``sess.run(ema.average(v))`` at save time.
    """
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        a = v1.get_variable(names[0], shapes[0], initializer=v1.zeros_initializer())
        b = v1.get_variable(names[1], shapes[1], initializer=v1.ones_initializer())
        ema = v1.train.ExponentialMovingAverage(0.5)
        update = ema.apply([a, b])
        step = tf.group(v1.assign_add(a, tf.ones(shapes[0]) * 2.0),
                        v1.assign_add(b, tf.ones(shapes[1])))
        saver = v1.train.Saver(keys(ema, (a, b)) if keys is not None else None)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for _ in range(3):
                sess.run(step)
                sess.run(update)
            raw = {v.op.name: sess.run(v) for v in (a, b)}
            avg = {v.op.name: sess.run(ema.average(v)) for v in (a, b)}
            saved = saver.save(sess, str(prefix), write_meta_graph=saver_def)
        if not saver_def:
            v1.train.export_meta_graph(saved + ".meta")  # no saver: no SaverDef
    return saved, raw, avg
