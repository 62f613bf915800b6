"""tf_keras ``.keras``: a custom layer's sublayers are trained in tf_keras' tracking order
(attributes as assigned, a list by index, a dict by sorted key), which the file does not
record (it saves them alphabetically, or a container's by insertion as ``dense``,
``dense_1``, ... sorted as strings). Where equal shapes make that order matter, the averages
are refused (exit 6, naming ``--trainable``), never paired in file order; stating the order,
or a live model, gives tf_keras' own averages bit for bit; where shapes prove it, they pair.
Files and truth from ``fixtures/make_tfk_sublayer_order.py`` (real tf_keras, averages
recorded at save from ``optimizer._model_variables_moving_average``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli, run_generator

pytest.importorskip("tf_keras")

OPEN = ["attrs", "dict", "stack"]


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    out = tmp_path_factory.mktemp("tfk_sublayer_order")
    return out, run_generator("make_tfk_sublayer_order.py", out)


def _count(truth, case: str) -> int:
    return len([k for k in truth if k.startswith(f"{case}:ema:")])


def _names_in_trainable_order(out: Path, truth, case: str, tmp_path: Path) -> list[str]:
    """The file's weight names (as ``ckpt list`` shows them) in tf_keras'
    ``model.trainable_variables`` order: matched by the raw values the file holds."""
    target = tmp_path / "raw.npz"
    code, _, err = run_cli(["export", str(out / f"{case}.keras"), "--raw", "--out",
                            str(target)])
    assert code == 0, err
    with np.load(target) as z:
        by_value = {z[k].tobytes(): k for k in z.files}
    return [by_value[truth[f"{case}:raw:{i}"].tobytes()] for i in range(_count(truth, case))]


@pytest.mark.parametrize("case", OPEN)
@pytest.mark.parametrize("command", ["export", "restore-ema"])
def test_sublayers_of_unrecorded_order_are_refused(made, case, command, tmp_path):
    """Equal-shaped sublayers: the file does not say which average is whose: exit 6, one
    line naming the file and ``--trainable``, nothing written (was: paired in file order,
    another sublayer's averages, exit 0)."""
    out, _ = made
    path = str(out / f"{case}.keras")
    target = tmp_path / ("e.npz" if command == "export" else "ema")
    code, _, err = run_cli([command, path, "--out", str(target)])
    assert code == 6, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert path in lines[0] and "--trainable" in lines[0], lines[0]
    assert "apply_keras_ema(model, path)" in lines[0], lines[0]
    assert not target.exists()


@pytest.mark.parametrize("case", OPEN)
def test_stated_trainable_order_gives_the_library_averages(made, case, tmp_path):
    """``--trainable`` with the weights in ``model.trainable_variables`` order: every exported
    weight holds the average tf_keras kept for it, bit for bit."""
    out, truth = made
    names = _names_in_trainable_order(out, truth, case, tmp_path)
    target = tmp_path / "e.npz"
    code, _, err = run_cli(["export", str(out / f"{case}.keras"), "--trainable",
                            ",".join(names), "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        assert sorted(z.files) == sorted(names)
        for i, name in enumerate(names):
            assert z[name].tobytes() == truth[f"{case}:ema:{i}"].tobytes(), name


@pytest.mark.parametrize("case", [*OPEN, "shapes"])
def test_apply_keras_ema_with_the_live_model_gives_the_library_averages(made, case):
    """``apply_keras_ema(model, path)``: the live model's own order decides, bit for bit."""
    out, truth = made
    assert not list(out.glob(f"api_error.{case}.txt")), (out / f"api_error.{case}.txt")
    for i in range(_count(truth, case)):
        assert truth[f"{case}:api:{i}"].tobytes() == truth[f"{case}:ema:{i}"].tobytes(), i


def test_sublayers_whose_shapes_prove_the_order_are_paired(made, tmp_path):
    """``zproj`` Dense(5) then ``aproj`` Dense(4): only tf_keras' order fits the averages'
    shapes, so no option is needed (was: refused, the file's order did not fit)."""
    out, truth = made
    names = _names_in_trainable_order(out, truth, "shapes", tmp_path)
    target = tmp_path / "e.npz"
    code, _, err = run_cli(["export", str(out / "shapes.keras"), "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        assert sorted(z.files) == sorted(names)
        for i, name in enumerate(names):
            assert z[name].tobytes() == truth[f"shapes:ema:{i}"].tobytes(), name
