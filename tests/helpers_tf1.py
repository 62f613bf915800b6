"""TF1 graphs trained with an ``ExponentialMovingAverage`` and saved by a ``Saver`` of the
test's choosing, built by real TensorFlow (graph mode), with the truth read from the session
at save time: in-process (:func:`tf1_ema_run`, shared by the tests of Savers whose keys are not
their variables' names) or by a generator script in a subprocess (:func:`run_tf1_script`, whose
prelude imports this module, so the scripts share :func:`cnn_towers`, :func:`trained`,
:func:`nudged_wbc`, :func:`saved_trained`, :func:`swap_ema_graph` and :func:`wv_ema_saves`)."""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

E = "ExponentialMovingAverage"

# What every TF1 generator script starts with: TF in graph mode, its output folder ``out``
# (argv[1]) and the ``truth`` it fills; :func:`run_tf1_script` saves ``truth`` after the body.
PRELUDE = f"""
import os
import sys

import numpy as np
import tensorflow as tf

sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from helpers_tf1 import (  # noqa
    cnn_towers, nudged_wbc, saved_trained, swap_ema_graph, trained, wv_ema_saves)

tf1 = tf.compat.v1
tf1.disable_eager_execution()
out = sys.argv[1]
truth = {{}}
"""


def run_tf1_script(body: str, out: Path, *args: str) -> dict[str, np.ndarray]:
    """Runs ``body`` (a TF1 graph-building script) after :data:`PRELUDE` in a subprocess, with
    ``out`` (and ``args``) as its arguments, and returns the ``truth`` it recorded (saved as
    ``out/truth.npz`` after the body)."""
    from helpers import run_script

    script = PRELUDE + textwrap.dedent(body) + '\nnp.savez(f"{out}/truth.npz", **truth)\n'
    return run_script(script, out, *args)


def trained(tf, step, steps: int = 3):
    """A ``tf.compat.v1.Session`` of the default graph, its variables initialized and ``step``
    run ``steps`` times (use it as ``with trained(tf, step) as s:``, which closes it)."""
    sess = tf.compat.v1.Session()
    sess.run(tf.compat.v1.global_variables_initializer())
    for _ in range(steps):
        sess.run(step)
    return sess


def nudged_wbc(tf, use_resource: bool | None = None) -> tuple[tuple, object, list]:
    """The EMA-decay tests' variables in the default graph: ``w`` [1, 2, 3], ``b`` [0.5] and
    ``c`` [7, 8] (``use_resource`` as ``get_variable`` takes it), the global step, and the ops
    adding 1.25 to each (what the tests' ``apply()`` calls run after).

    Returns:
        ``((w, b, c), global step, [update op per variable])``.
    """
    tf1 = tf.compat.v1
    made = tuple(tf1.get_variable(n, initializer=tf.constant(v), use_resource=use_resource)
                 for n, v in (("w", [1., 2., 3.]), ("b", [0.5]), ("c", [7., 8.])))
    step = tf1.train.get_or_create_global_step()
    return made, step, [tf1.assign_add(v, tf.ones_like(v) * 1.25) for v in made]


@contextlib.contextmanager
def saved_trained(tf, train, prefix: str, var_list=None, steps: int = 3) -> Iterator[tuple]:
    """Builds ``tf.compat.v1.train.Saver(var_list)``, runs ``train`` ``steps`` times in a new
    session (:func:`trained`) and saves it to ``prefix`` at global step 1.

    Yields:
        ``(session, saver)``, for the truth read at save time; the session is closed on
        leaving.
    """
    saver = tf.compat.v1.train.Saver(var_list)
    with trained(tf, train, steps) as sess:
        saver.save(sess, prefix, global_step=1)
        yield sess, saver


def swap_ema_graph(tf, devices: tuple[str, str] | None = None) -> tuple:
    """``W`` [3, 2] and ``b`` [2] (zeros) trained by gradient descent (0.1) with the global
    step, each step followed by ``ExponentialMovingAverage(0.5).apply([W, b])``, and what a
    swapping Saver (``swapping_saver()``) writes: every key ``Saver()`` writes, ``W`` and
    ``b``'s exchanged with their averages'. ``devices``: where the global step and ``W``, and
    where ``b``, are placed (default: nowhere stated).

    Returns:
        ``((W, b), global step, ema, the training step, the swapping Saver's var_list)``.
    """
    tf1 = tf.compat.v1
    with tf.device(devices[0]) if devices else contextlib.nullcontext():
        gs = tf1.train.get_or_create_global_step()
        W = tf1.get_variable("W", [3, 2])
    with tf.device(devices[1]) if devices else contextlib.nullcontext():
        b = tf1.get_variable("b", [2], initializer=tf1.zeros_initializer())
    loss = tf.reduce_sum(tf.square(tf.matmul(tf.ones([4, 3]), W) + b - 1.0))
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
    ema = tf1.train.ExponentialMovingAverage(0.5)
    with tf.control_dependencies([train]):
        step = ema.apply([W, b])
    swap = {"global_step": gs}
    for v in (W, b):
        swap[v.op.name] = ema.average(v)
        swap[ema.average_name(v)] = v
    return (W, b), gs, ema, step, swap


def wv_ema_saves(tf, prefix: str, emas: dict[str, tuple[float, str]], keys_of: Callable,
                 saves: tuple[int, ...] = (1, 2)) -> Iterator[tuple]:
    """``model/W`` [2] and ``model/V`` [2] (0.3) trained by gradient descent (0.05) with the
    global step in a graph of their own, each step followed by the ``apply()`` of every EMA
    object of ``emas`` (name -> (decay, the variables it averages: ``"WV"``, ``"W"`` or
    ``"V"``), made and applied in that order), saved by ``Saver({"global_step": gs,
    **keys_of(w, v, objects)}, max_to_keep=None)`` to ``prefix`` at each global step of
    ``saves`` (the training steps run up to it first): the TF1 Savers whose keys cross EMA
    objects' averages and variables.

    Yields:
        ``(session, global step, {"W": w, "V": v}, {name: EMA object})`` after each save, for
        the truth read then (the graph stays the default meanwhile).
    """
    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        with tf1.variable_scope("model"):
            w = tf1.get_variable("W", [2])
            v = tf1.get_variable("V", [2], initializer=tf1.constant_initializer(0.3))
        loss = tf.reduce_sum(tf.square(w * 2.0 + v - 1.0))
        train = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=gs)
        held = {"W": w, "V": v}
        objects = {name: tf1.train.ExponentialMovingAverage(decay, name=name)
                   for name, (decay, _) in emas.items()}
        with tf.control_dependencies([train]):
            applied = [objects[name].apply([held[k] for k in which])
                       for name, (_, which) in emas.items()]
            # one object's apply() is the step itself, as a trainer with one EMA runs it
            step = applied[0] if len(applied) == 1 else tf.group(*applied)
        saver = tf1.train.Saver({"global_step": gs, **keys_of(w, v, objects)},
                                max_to_keep=None)
        with trained(tf, step, 0) as s:
            done = 0
            for i in saves:
                for _ in range(i - done):
                    s.run(step)
                done = i
                saver.save(s, prefix, global_step=i)
                yield s, i, held, objects


def cnn_towers(tf, towers: int = 2) -> tuple[list, object]:
    """tf_cnn_benchmarks-style replicated towers: ``v<t>/cg/conv0/kernel`` [3, 3] and
    ``v<t>/cg/conv0/bias`` [3] for each tower ``t``, and the loss over all of them.

    Returns:
        ``([(kernel, bias) per tower], loss)``.
    """
    tf1 = tf.compat.v1
    made = []
    for t in range(towers):
        with tf1.variable_scope(f"v{t}"), tf1.variable_scope("cg"):
            made.append((tf1.get_variable("conv0/kernel", [3, 3]),
                         tf1.get_variable("conv0/bias", [3])))
    loss = sum(tf.reduce_sum(tf.square(tf.matmul(tf.ones([2, 3]), k) + b)) for k, b in made)
    return made, loss


def tf1_ema_run(tf, directory: Path, saver_keys: Callable, *, partitioned: bool = False,
                steps: int = 3, momentum: str | None = None, ema: bool = True,
                debiased: bool = False, slow: str | None = None, swa: bool = False,
                momentum_cond: str | None = None, skip_part: bool = False,
                idiom: bool = False) -> tuple[str, dict[str, np.ndarray]]:
    """Trains ``W`` [4, 2] (two parts ``W/part_0``, ``W/part_1`` if ``partitioned``), ``V``
    [3, 2] and ``b`` [2] for ``steps`` steps, each followed by ``ema.apply()`` of all of them
    (an ``ExponentialMovingAverage(0.5)``; none unless ``ema``: then ``saver_keys`` gets
    ``None`` for it), and saves with
    ``tf.compat.v1.train.Saver(saver_keys(ema, variables, global_step))`` and its ``.meta``
    to ``directory/model.ckpt-<step>``. ``variables`` are the averaged variables by op name.

    Args:
        momentum: instead of plain gradient descent, a hand-written momentum optimizer of
            that name over gradients accumulated in variables ``<v>/accum``: it keeps its
            momentum in EMA form, ``assign_moving_average(m, accum.read_value(), 0.9)`` under
            its name scope (slot ``<v>/<momentum>``, as Adam's first moment), whose
            ``AssignMovingAvg`` ops average the accumulators, not the weights.
        debiased: also keep ``bn/moving_mean`` [2], a moving mean of ``x @ W``'s columns
            updated each step by ``assign_moving_average(..., zero_debias=True)`` inside
            ``variable_scope("bn")``, as tf_slim's ``batch_norm(zero_debias_moving_mean=True)``
            does: its bookkeeping is ``bn/bn/moving_mean/biased`` and ``.../local_step``.
        slow: also keep ``<v>/<slow>`` for each variable by a hand-written
            ``moving_averages.assign_moving_average(<v>/<slow>, v, decay, zero_debias=False)``
            at the graph's root (no ExponentialMovingAverage's scope), after each training
            step and before ``ema.apply()``: a Lookahead written branch-free (sync every 3
            steps: decay 0.5 on a sync step and ``v <- <v>/<slow>`` then, 1.0 otherwise; saved
            after step 3 its slow weights ARE the raw weights), or with ``swa`` an SWA running
            mean (decay ``n / (n + 1)``).
        momentum_cond: train with ``MomentumOptimizer(0.01, 0.9)`` (slots ``<v>/Momentum``)
            and average with ``ExponentialMovingAverage(0.5, name="Momentum")`` (averages
            ``<v>/Momentum_1``), one of them run inside a ``tf.cond`` (``"ema"``: its
            ``apply()``; ``"optimizer"``: its ``apply_gradients()``, so the EMA's scope is
            ``Momentum`` while its averages are ``<v>/Momentum_1``): that one's update ops live
            in a function body the ``.meta``'s graph does not show.
        skip_part: with ``partitioned``, ``ema.apply()`` leaves out ``W/part_1`` (a filter
            over the trainable variables): TF saves ``W/ExponentialMovingAverage`` with one of
            two slices (``truth["raw:W/part_1"]`` then has no ``ema:`` twin).

    Returns:
        ``(prefix, truth)``: ``truth["ema:<op name>"]`` is ``sess.run(ema.average(v))`` and
        ``truth["raw:<op name>"]`` is ``sess.run(v)``, for each averaged variable (and, with
        ``momentum``, for each slot and accumulator; with ``slow``, each ``<v>/<slow>``).
    """
    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        part = tf1.fixed_size_partitioner(2) if partitioned else None
        W = tf1.get_variable("W", [4, 2], partitioner=part)
        V = tf1.get_variable("V", [3, 2])
        b = tf1.get_variable("b", [2])
        x = tf.constant(np.arange(8, dtype="float32").reshape(2, 4))
        w = tf.convert_to_tensor(W) if partitioned else W
        loss = (tf.reduce_sum((tf.matmul(x, w) - 1.0) ** 2) + tf.reduce_sum((V - 1.0) ** 2)
                + tf.reduce_sum((b + 2.0) ** 2))
        averaged = [*(list(W) if partitioned else [W]), V, b]
        if momentum_cond:
            opt = tf1.train.MomentumOptimizer(0.01, 0.9)
            gv = opt.compute_gradients(loss, averaged)
            train = tf.cond(tf.equal(gs % 1, 0), lambda: opt.apply_gradients(gv), tf.no_op) \
                if momentum_cond == "optimizer" else opt.apply_gradients(gv)
            with tf.control_dependencies([train]):
                train = gs.assign_add(1)
            kept = []
        elif momentum is None:
            train = tf1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=gs)
            kept = []
        else:
            train, kept = _momentum_form(tf, momentum, loss, averaged, gs)
        if debiased:
            from tensorflow.python.training import moving_averages

            with tf1.variable_scope("bn"):
                mean = tf1.get_variable("moving_mean", [2], trainable=False,
                                        initializer=tf1.zeros_initializer())
                kept = [*kept, mean]
                train = tf.group(train, moving_averages.assign_moving_average(
                    mean, tf.reduce_mean(tf.matmul(x, w), 0), 0.9, zero_debias=True))
        if slow is not None:
            train, more = _hand_averages(tf, slow, swa, averaged, train, gs, idiom)
            kept = [*kept, *more]
        ema_ = tf1.train.ExponentialMovingAverage(
            0.5, name="Momentum" if momentum_cond else E) if ema else None
        step = train
        if ema_ is not None and momentum_cond == "ema":
            with tf.control_dependencies([train]):
                step = tf.cond(tf.equal(gs % 1, 0), lambda: ema_.apply(averaged), tf.no_op)
        elif ema_ is not None:
            with tf.control_dependencies([train]):
                step = ema_.apply([v for v in averaged
                                   if not (skip_part and v.op.name == "W/part_1")])
        saver = tf1.train.Saver(saver_keys(ema_, {v.op.name: v for v in averaged}, gs))
        with trained(tf, step, steps) as sess:
            prefix = saver.save(sess, str(Path(directory) / "model.ckpt"), global_step=gs)
            truth = {}
            for v in averaged:
                if ema_ is not None and ema_.average(v) is not None:
                    truth[f"ema:{v.op.name}"] = sess.run(ema_.average(v).read_value())
                truth[f"raw:{v.op.name}"] = sess.run(v.read_value())
            for v in kept:
                truth[f"raw:{v.op.name}"] = sess.run(v.read_value())
    return prefix, truth


def _momentum_form(tf, name: str, loss, variables: list, gs) -> tuple[object, list]:
    """The step of :func:`tf1_ema_run`'s ``momentum`` optimizer and the variables it keeps
    (accumulators and slots)."""
    from tensorflow.python.training import moving_averages

    tf1 = tf.compat.v1
    zeros = tf1.zeros_initializer()
    accs = [tf1.get_variable(f"{v.op.name}/accum", v.shape, initializer=zeros, trainable=False)
            for v in variables]
    slots = [tf1.get_variable(f"{v.op.name}/{name}", v.shape, initializer=zeros,
                              trainable=False) for v in variables]
    grads = tf.gradients(loss, variables)
    with tf.control_dependencies([a.assign_add(g) for a, g in zip(accs, grads, strict=True)]):
        updates = []
        with tf.name_scope(name):
            for a, m, v in zip(accs, slots, variables, strict=True):
                m_t = moving_averages.assign_moving_average(m, a.read_value(), 0.9,
                                                            zero_debias=False)
                with tf.control_dependencies([m_t]):
                    updates.append(v.assign_sub(0.01 * m.read_value()))
        with tf.control_dependencies(updates):
            return gs.assign_add(1), [*accs, *slots]


def _hand_averages(tf, name: str, swa: bool, variables: list, train, gs,
                   idiom: bool = False) -> tuple[object, list]:
    """The step and the variables of :func:`tf1_ema_run`'s ``slow`` averages; with ``idiom``
    written in ``ExponentialMovingAverage.apply()``'s own idiom (review-15-attack-r31 F1): in
    ``tf.name_scope(name)``, grouped by a ``NoOp`` of the scope's name, each variable added to
    ``moving_average_variables`` - only the decay is not apply()'s."""
    from tensorflow.python.training import moving_averages

    tf1 = tf.compat.v1
    made = [tf1.get_variable(f"{v.op.name}/{name}", v.shape, trainable=False,
                             initializer=tf1.zeros_initializer()) for v in variables]
    with tf.control_dependencies([train]):
        n = tf.cast(gs, tf.float32)
        sync = tf.equal(gs % 3, 0)
        decay = n / (n + 1.0) if swa else tf.where(sync, 0.5, 1.0)
        if idiom:
            with tf.name_scope(name) as scope:
                ups = [moving_averages.assign_moving_average(s, v, decay, zero_debias=False)
                       for s, v in zip(made, variables, strict=True)]
                for v in variables:
                    tf1.add_to_collection(tf1.GraphKeys.MOVING_AVERAGE_VARIABLES, v)
                ups = [tf.group(*ups, name=scope)]
        else:
            ups = [moving_averages.assign_moving_average(s, v, decay, zero_debias=False)
                   for s, v in zip(made, variables, strict=True)]
    if swa:
        return tf.group(*ups), made
    with tf.control_dependencies(ups):
        return tf.group(*[v.assign(tf.where(sync, s.read_value(), v.read_value()))
                          for s, v in zip(made, variables, strict=True)]), made


def restored_by_meta(tf, prefix: str, start: str = "") -> dict[str, np.ndarray]:
    """Every variable of the graph in ``prefix + ".meta"`` (whose op name starts with
    ``start``: a graph whose Saver leaves some out) as that graph's own Saver restores
    ``prefix`` (the README's evaluation of a baked checkpoint), by op name."""
    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        saver = tf1.train.import_meta_graph(prefix + ".meta")
        with tf1.Session() as sess:
            saver.restore(sess, prefix)
            return {v.op.name: sess.run(v.read_value()) for v in tf1.global_variables()
                    if v.op.name.startswith(start)}


def restored_by_model_saver(tf, prefix: str) -> dict[str, np.ndarray]:
    """``W``, ``V``, ``b`` (and the global step) of :func:`tf1_ema_run`'s model graph, built
    anew without its averages, as a plain ``Saver()`` of it restores ``prefix`` (how an
    averages-alone checkpoint baked under the variables' names is used), by op name."""
    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        tf1.train.get_or_create_global_step()
        vs = [tf1.get_variable(n, s) for n, s in (("W", [4, 2]), ("V", [3, 2]), ("b", [2]))]
        with tf1.Session() as sess:
            tf1.train.Saver().restore(sess, prefix)
            return {v.op.name: sess.run(v.read_value()) for v in vs}
