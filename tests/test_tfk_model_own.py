"""tf_keras TF-format ``save_weights`` of a subclassed ``Model`` holding a weight of its own
(``add_weight`` on the model) and a sublayer's weight of the same name, dtype and shape,
``Adam(use_ema=True)``: tf_keras ``Model.trainable_variables`` lists the sublayers' weights
first and the model's own after (a ``Layer`` the other way round), so ``--apply-order
tracked`` must place the root model's own weights last (was: own first, each weight given
the other's average, exit 0), and refuse where a nested object with own weights may be a
``Model`` or a ``Layer`` (the TF format records no types). A tf_keras ``.keras`` /
``.weights.h5`` of such a model was paired own weights first with no option at all (exit 0,
swapped): now such a layer's own weights are one more part of its bag of sublayers, refused
where shapes leave the order open, and the true ``--trainable`` (sublayers, then the
model's own) is accepted (was: refused as contradicting config.json). Files and truth from
``fixtures/make_tfk_model_own.py`` (real tf_keras, averages recorded at save time from
``optimizer._model_variables_moving_average``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import assert_npz_holds, run_cli, run_generator

pytest.importorskip("tf_keras")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    out = tmp_path_factory.mktemp("tfk_model_own")
    return out, run_generator("make_tfk_model_own.py", out)


def _truth(truth, case: str, kind: str) -> dict[str, np.ndarray]:
    head = f"{case}:{kind}:"
    return {k[len(head):]: v for k, v in truth.items() if k.startswith(head)}


@pytest.mark.parametrize("case", ["own_first", "sub_first"])
def test_tracked_places_the_model_own_weights_after_its_sublayers(made, case, tmp_path):
    """``--apply-order tracked``: the model's own ``kernel`` and ``lin/kernel`` each get
    their own average, bit for bit, whichever was assigned first."""
    out, truth = made
    target = tmp_path / "e.npz"
    code, _, err = run_cli(["export", str(out / case / "ckpt"), "--apply-order", "tracked",
                            "--out", str(target)])
    assert code == 0, err
    ema = _truth(truth, case, "ema")
    assert sorted(ema) == ["kernel", "lin/kernel"]
    for name, value in ema.items():
        assert not np.array_equal(value, truth[f"{case}:raw:{name}"]), name
    assert_npz_holds(target, ema)


def test_nested_model_with_own_weights_is_refused(made, tmp_path):
    """A nested object holding such a weight of its own and another in a sublayer may be a
    ``Model`` (own weights last) or a ``Layer`` (own first): exit 6 naming it and the live
    model, nothing written."""
    out, _ = made
    target = tmp_path / "e.npz"
    code, _, err = run_cli(["export", str(out / "nested" / "ckpt"), "--apply-order",
                            "tracked", "--out", str(target)])
    assert code == 6, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "blk holds such a weight of its own" in lines[0], lines[0]
    assert "apply_ema(model, path)" in lines[0], lines[0]
    assert not target.exists()


@pytest.mark.parametrize("name,args", [("own_build.keras", []),
                                       ("own_build.weights.h5",
                                        ["--use-ema", "--optimizer", "adam"]),
                                       ("seq.keras", [])])
def test_keras_file_of_model_with_own_weights_is_refused(made, tmp_path, name, args):
    """A tf_keras ``.keras``/``.weights.h5`` whose (root or nested) model holds a weight of
    its own of a sublayer weight's shape: exit 6 naming ``--trainable`` and
    ``apply_keras_ema(model, path)``, nothing written."""
    out, _ = made
    target = tmp_path / "e.npz"
    code, _, err = run_cli(["export", str(out / name), *args, "--out", str(target)])
    assert code == 6, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "apply_keras_ema(model, path)" in lines[0] and "--trainable" in lines[0], lines[0]
    assert not target.exists()


def test_true_trainable_order_of_model_is_accepted(made, tmp_path):
    """``--trainable lin/0,0`` (tf_keras' real order: sublayers, then the model's own) gives
    every weight its own average bit for bit."""
    out, truth = made
    target = tmp_path / "e.npz"
    code, _, err = run_cli(["export", str(out / "own_build.keras"), "--trainable", "lin/0,0",
                            "--out", str(target)])
    assert code == 0, err
    ema = _truth(truth, "own_build", "ema")
    assert sorted(ema) == ["0", "lin/0"]
    assert_npz_holds(target, ema)
