"""tf_keras ``.weights.h5`` (``ModelCheckpoint(save_weights_only=True)`` with a
``.weights.h5`` name: tf_keras' own h5 weights format, no config beside it) read as what it
is: its weights named by their layer (``batch_normalization/gamma``, was bare ``gamma``), its
compiled metrics' state not model weights (was listed and exported as weights), its
optimizer's variables in tf_keras' layout (``iteration``, one average per trainable weight,
then the slots; was read as Keras 3's, "cannot tell", exit 6 even with ``--use-ema``), and
its averages exported bit for bit; where the layout fits ``use_ema=True`` and ``False``
alike, refused naming ``--use-ema``. Files and truth from
``fixtures/make_tfk_weights_h5.py`` (real tf_keras, averages recorded at save time from
``optimizer._model_variables_moving_average``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli, run_generator

pytest.importorskip("tf_keras")

WEIGHTS = ["dense/kernel", "dense/bias", "batch_normalization/gamma", "batch_normalization/beta",
           "dense_1/kernel", "dense_1/bias"]
STATS = ["batch_normalization/moving_mean", "batch_normalization/moving_variance"]


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    out = tmp_path_factory.mktemp("tfk_weights_h5")
    return out, run_generator("make_tfk_weights_h5.py", out)


def test_list_names_weights_by_layer_and_metrics_as_other(made):
    """``list --json``: every weight under its layer, metric state ``other``, each average
    paired with its weight, ``use_ema`` read from the tf_keras layout."""
    out, _ = made
    code, text, err = run_cli(["list", str(out / "adam.e2.weights.h5"), "--json",
                               "--optimizer", "adam"])
    assert code == 0, err
    doc = json.loads(text)
    by_path = {v["path"]: v for v in doc["variables"]}
    roles = {p: v["role"] for p, v in by_path.items()}
    assert [p for p, r in roles.items() if r in ("weight", "bn_stat")] == WEIGHTS[:4] + STATS \
        + WEIGHTS[4:], roles
    metrics = [p for p in roles if p.startswith("metrics/")]
    assert len(metrics) == 4 and all(roles[p] == "other" for p in metrics), roles
    path_of = {v["key"]: v["path"] for v in doc["variables"]}
    averages = {path_of[v["ema_of"]] for v in doc["variables"] if v["role"] == "ema"}
    assert averages == set(WEIGHTS), averages
    assert doc["ema_evidence"]["use_ema"] is True, doc["ema_evidence"]
    assert doc["ema_evidence"]["source"] == "layout", doc["ema_evidence"]


@pytest.mark.parametrize("stated", [[], ["--use-ema"]])
def test_export_gives_the_library_averages(made, stated, tmp_path):
    """``export --optimizer adam``: the six averages tf_keras kept, bit for bit, the
    BatchNorm statistics raw, no metric state (``--use-ema`` agrees); the file records no
    optimizer name, so without ``--optimizer`` exit 6 naming it
    (``tests/test_tfk_stated_optimizer.py``)."""
    out, truth = made
    target = tmp_path / "e.npz"
    code, _, err = run_cli(["export", str(out / "adam.e2.weights.h5"), "--out", str(target),
                            *stated])
    assert code == 6 and "--optimizer" in err and not target.exists(), err
    code, _, err = run_cli(["export", str(out / "adam.e2.weights.h5"), "--out", str(target),
                            "--optimizer", "adam", *stated])
    assert code == 0, err
    with np.load(target) as z:
        assert sorted(z.files) == sorted(WEIGHTS + STATS)
        for name in WEIGHTS:
            assert z[name].tobytes() == truth[f"adam:ema:{name}"].tobytes(), name
            assert z[name].tobytes() != truth[f"adam:raw:{name}"].tobytes(), name
        for name in STATS:
            assert z[name].tobytes() == truth[f"adam:raw:{name}"].tobytes(), name


def test_layout_both_settings_write_is_refused_naming_use_ema(made, tmp_path):
    """``SGD(use_ema=True)`` without momentum writes what RMSprop with momentum and no
    averages would: exit 6 naming ``--use-ema``, nothing written; stated, bit for bit."""
    out, truth = made
    path = str(out / "sgd.e2.weights.h5")
    target = tmp_path / "e.npz"
    code, _, err = run_cli(["export", path, "--out", str(target)])
    assert code == 6 and "--use-ema" in err and path in err, err
    assert not target.exists()
    code, _, err = run_cli(["export", path, "--use-ema", "--out", str(target)])
    assert code == 6 and "--optimizer" in err and not target.exists(), err
    code, _, err = run_cli(["export", path, "--use-ema", "--optimizer", "sgd", "--out",
                            str(target)])
    assert code == 0, err
    assert "only because you stated --use-ema" in err, err
    with np.load(target) as z:
        assert sorted(z.files) == sorted(WEIGHTS + STATS)
        for name in WEIGHTS:
            assert z[name].tobytes() == truth[f"sgd:ema:{name}"].tobytes(), name


@pytest.mark.parametrize("case", ["adam", "sgd"])
def test_apply_keras_ema_with_the_live_model_gives_the_library_averages(made, case):
    """``apply_keras_ema(model, path)`` (``use_ema=True`` stated for ``sgd``): every
    trainable weight gets its average, bit for bit (was: refused, the layout read as Keras
    3's)."""
    out, truth = made
    assert not (out / f"api_error.{case}.txt").exists(), (
        out / f"api_error.{case}.txt").read_text()
    for name in WEIGHTS:
        assert truth[f"{case}:api:{name}"].tobytes() == truth[f"{case}:ema:{name}"].tobytes()


def _file_names(out: Path, truth, case: str, tmp_path: Path) -> dict[str, str]:
    """Each weight's name in the file (as ``ckpt list`` shows it) -> its truth name, matched
    by the raw values the file holds."""
    target = tmp_path / "raw.npz"
    code, _, err = run_cli(["export", str(out / f"{case}.e2.weights.h5"), "--raw", "--out",
                            str(target)])
    assert code == 0, err
    head = f"{case}:raw:"
    raw = {v.tobytes(): k[len(head):] for k, v in truth.items() if k.startswith(head)}
    with np.load(target) as z:
        return {name: raw[z[name].tobytes()] for name in z.files}


def test_subclassed_model_sublayers_are_refused_naming_what_decides(made, tmp_path):
    """A subclassed model's file records neither its sublayers' classes nor their order: the
    weights are named by what the file says (``dense/kernel`` for ``layers/dense``, not a
    bare ``kernel``), ``use_ema`` is read from the layout in any sublayer order, the averages
    of the two equal sublayers are refused (exit 6 naming ``--trainable`` and
    ``apply_keras_ema(model, path)``), and ``--trainable`` in training order gives tf_keras'
    averages bit for bit."""
    out, truth = made
    path = str(out / "sub.e2.weights.h5")
    names = _file_names(out, truth, "sub", tmp_path)
    assert "dense/kernel" in names and "kernel" not in names, names
    target = tmp_path / "e.npz"
    code, _, err = run_cli(["export", path, "--optimizer", "adam", "--out", str(target)])
    assert code == 6 and "--trainable" in err and "apply_keras_ema(model, path)" in err, err
    assert "use_ema" not in err.split("error:")[1][:200], err  # not "cannot tell use_ema"
    assert not target.exists()
    order = sorted(names, key=lambda n: ["z", "a", "out"].index(names[n].split("/")[0]) * 2
                   + (names[n].endswith("bias")))
    code, _, err = run_cli(["export", path, "--trainable", ",".join(order), "--optimizer",
                            "adam", "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        assert sorted(z.files) == sorted(names)
        for name, real in names.items():
            assert z[name].tobytes() == truth[f"sub:ema:{real}"].tobytes(), name


def test_apply_keras_ema_pairs_a_subclassed_models_sublayers(made):
    """``apply_keras_ema(fresh_model, path)``: the live model's order pairs what the file
    leaves open, bit for bit."""
    out, truth = made
    assert not (out / "api_error.sub.txt").exists(), (out / "api_error.sub.txt").read_text()
    for name in ("z/kernel", "z/bias", "a/kernel", "a/bias", "out/kernel", "out/bias"):
        assert truth[f"sub:api:{name}"].tobytes() == truth[f"sub:ema:{name}"].tobytes(), name


def test_frozen_layer_is_refused_naming_trainable_which_decides(made, tmp_path):
    """The first ``Dense`` frozen when the optimizer was built: 4 averages, while the file
    records no trainable flags: exit 6 naming ``--trainable``; ``--use-ema --trainable`` with
    the weights it was built with gives tf_keras' averages bit for bit and the frozen
    layer's raw weights; ``apply_keras_ema`` with the live (frozen) model alike."""
    out, truth = made
    path = str(out / "frozen.e2.weights.h5")
    target = tmp_path / "e.npz"
    for stated in ([], ["--use-ema"]):
        code, _, err = run_cli(["export", path, "--out", str(target), "--optimizer", "adam",
                                *stated])
        assert code == 6 and "--trainable" in err, (stated, err)
        assert not target.exists()
    code, _, err = run_cli(["export", path, "--use-ema", "--trainable",
                            "batch_normalization,dense_1", "--optimizer", "adam", "--out",
                            str(target)])
    assert code == 0, err
    with np.load(target) as z:
        for name in WEIGHTS[2:]:
            assert z[name].tobytes() == truth[f"frozen:ema:{name}"].tobytes(), name
        for name in WEIGHTS[:2] + STATS:
            assert z[name].tobytes() == truth[f"frozen:raw:{name}"].tobytes(), name
    assert not (out / "api_error.frozen.txt").exists(), (
        out / "api_error.frozen.txt").read_text()
    for name in WEIGHTS[2:]:
        assert truth[f"frozen:api:{name}"].tobytes() == truth[f"frozen:ema:{name}"].tobytes()
