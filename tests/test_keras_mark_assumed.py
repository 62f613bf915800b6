"""restore-ema's mark ("its weights are the averages") carries what its pairing assumed
unstated, so the output's readers repeat the note and ``--strict`` refuses the file as it
refuses the input (review-18-attack-r40 F1).

A Keras 3 custom loop builds ``SGD(use_ema=True)`` over the model's two same-shape kernels in
REVERSED order, so the optimizer's copies are b's then a's, while the pairing restore-ema may
take without a statement is fit()'s order (``fit_order``: a note, refused under ``--strict``).
The truth is Keras' own ``optimizer._model_variables_moving_average`` at save time. Marked, the
output would let ``export --strict`` pass with each kernel holding the OTHER kernel's average;
with the assumption recorded, list and export say it and ``export --strict`` refuses (exit 6).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from typer.testing import CliRunner

SAID = "ckpt restore-ema wrote this file: its weights are the averages"


def _ckpt(*args):
    from ckpt_tools.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def reversed_loop(tmp_path_factory):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras
    import tensorflow as tf

    out = tmp_path_factory.mktemp("assumed")
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((4,)),
                              keras.layers.Dense(4, name="a", use_bias=False),
                              keras.layers.Dense(4, name="b", use_bias=False)],
                             name="sequential")  # not sequential_N after other tests
    opt = keras.optimizers.SGD(0.02, use_ema=True, ema_momentum=0.999)
    model.compile(optimizer=opt, loss="mse")
    order = list(reversed(model.trainable_variables))  # the loop lists b before a
    opt.build(order)
    x = np.random.RandomState(0).randn(32, 4).astype("float32")
    y = 20 * np.random.RandomState(1).randn(32, 4).astype("float32")
    for _ in range(20):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        opt.apply(tape.gradient(loss, order), order)
    truth = {v.path: np.asarray(a) for v, a in zip(opt._trainable_variables,
                                                   opt._model_variables_moving_average,
                                                   strict=True)}
    model.save(out / "m.keras")
    return out, truth


@pytest.mark.parametrize("form", ["weights.h5", "h5"])
def test_an_assumed_pairing_stays_assumed_in_the_marked_output(reversed_loop, form):
    out, truth = reversed_loop
    assert not np.array_equal(truth["sequential/a/kernel"], truth["sequential/b/kernel"])
    target = out / form / ("ema.weights.h5" if form == "weights.h5" else "ema.h5")
    extra = ["--format", "h5"] if form == "h5" else []
    made = _ckpt("restore-ema", out / "m.keras", "--out", target, "--not-swapped", *extra)
    assert made.exit_code == 0, made.output
    assert "fit_order" in made.output or "fit()" in made.output, made.output  # noted
    listed = _ckpt("list", target, "--json")
    evidence = json.loads(listed.output)["ema_evidence"]
    assert evidence["weights_are_averages"] is True, evidence
    assert any("fit_order" in n for n in evidence["notes"]), evidence  # said again
    npz = out / form / "e.npz"
    done = _ckpt("export", target, "--out", npz, "--strict")
    assert done.exit_code == 6 and not npz.exists(), done.output
    assert "fit_order" in done.output, done.output
    plain = _ckpt("export", target, "--out", npz)  # without --strict: written, with the note
    assert plain.exit_code == 0 and npz.exists(), plain.output
    assert "fit_order" in plain.output, plain.output


def test_eval_strict_refuses_the_marked_output_and_each_command_reads_the_mark_once(
        reversed_loop, monkeypatch):
    """``eval --strict`` refuses the marked file as ``export --strict`` does; ``list``,
    ``export`` and ``eval`` open the file for its mark once per command (a ``.keras``'s member
    is unzipped each time it is read)."""
    from ckpt_tools import restored_mark

    out, _ = reversed_loop
    target = out / "once" / "ema.weights.h5"
    made = _ckpt("restore-ema", out / "m.keras", "--out", target, "--not-swapped")
    assert made.exit_code == 0, made.output
    reads = []

    def counted(path):
        reads.append(path)
        return read(path)

    read = restored_mark.read_mark
    monkeypatch.setattr(restored_mark, "read_mark", counted)
    import ckpt_tools.train.evaluate as evaluate

    monkeypatch.setattr(evaluate, "read_mark", counted)
    refused = _ckpt("eval", target, "--strict", "--num-examples", 8)
    assert refused.exit_code == 6, refused.output
    assert "fit_order" in refused.output, refused.output
    assert len(reads) == 1, reads
    for code, args in ((0, ["list", target, "--json"]),
                       (0, ["export", target, "--out", out / "once" / "e.npz"]),
                       (6, ["export", target, "--out", out / "once" / "s.npz", "--strict"])):
        reads.clear()
        done = _ckpt(*args)
        assert done.exit_code == code and "fit_order" in done.output, done.output
        assert len(reads) == 1, (args, reads)
