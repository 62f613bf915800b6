"""The Python API takes the file statements the CLI takes (review-16-attack-r32 F1):
``export_weights``, ``bake_ema``, ``ema_map``, ``diff_ema`` and ``checkpoint_stats`` accept
``use_ema=``, ``optimizer=``, ``trainable=``, ``fit_order=`` (and ``loop_order=``,
``averages_only=``) as ``ckpt export/restore-ema/map/diff --ema/stats`` take ``--use-ema``...;
they raised a bare ``TypeError`` (and ``bake_ema`` "does not apply to a Keras file") while the
refusal they gave said "use_ema=True/False in the Python API".

The file is Keras 3's own bare ``.weights.h5`` of ``Adam(use_ema=True)`` saved mid-``fit()``
(``fixtures/make_keras_fixtures.py``), with ``model.weights`` and the optimizer's
``_model_variables_moving_average`` recorded at save time in ``expected.npz``: the bare file
does not tell use_ema=True from gradient accumulators, so it needs the statement.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import FIXTURES

import ckpt_tools as C
from ckpt_tools.emamap import UnprovenPairingError

SRC = FIXTURES / "keras_ema" / "adam.weights.h5"
ORDER = ["seq/dense/kernel", "seq/dense/bias", "seq/batch_normalization/gamma",
         "seq/batch_normalization/beta", "seq/dense_1/kernel", "seq/dense_1/bias"]
STATEMENTS = [{"use_ema": True}, {"optimizer": "adam"}, {"use_ema": True, "fit_order": True},
              {"use_ema": True, "trainable": ORDER},
              {"use_ema": True, "trainable": ORDER, "loop_order": True}]


@pytest.fixture(scope="module")
def truth():
    z = np.load(FIXTURES / "keras_ema" / "expected.npz")
    weights = {k[len("adam:weight/"):]: z[k] for k in z.files if k.startswith("adam:weight/")}
    ema = {k[len("adam:ema/"):]: z[k] for k in z.files if k.startswith("adam:ema/")}
    assert sorted(ema) == sorted(ORDER)
    return weights, ema


def _average_of(ckpt, key, truth):
    """The recorded average of the weight stored under ``key`` (found by its recorded value)."""
    weights, ema = truth
    path = next(p for p, w in weights.items() if np.array_equal(ckpt.tensor(key), w))
    return ema[path]


def _quiet():
    warnings.simplefilter("ignore")  # the AssumptionWarning of a fit() build order


@pytest.mark.parametrize("said", STATEMENTS, ids=lambda s: "+".join(s))
def test_export_weights_takes_the_statements(said, truth, tmp_path):
    _quiet()
    with pytest.raises(UnprovenPairingError, match=r"use_ema=True/False in the Python API"):
        C.export_weights(SRC, tmp_path / "refused.npz", not_swapped=True)
    r = C.export_weights(SRC, tmp_path / "w.npz", not_swapped=True, **said)
    weights, ema = truth
    z = np.load(tmp_path / "w.npz")
    assert len(r.averaged) == len(ema)
    for name in z.files:  # Keras names them without the model's name
        path = "seq/" + name
        assert np.array_equal(z[name], ema.get(path, weights.get(path))), name
    assert any(not np.array_equal(weights[p], ema[p]) for p in ema)  # mid-fit: they differ


@pytest.mark.parametrize("said", STATEMENTS[:2], ids=lambda s: "+".join(s))
def test_map_diff_stats_and_bake_take_the_statements(said, truth, tmp_path):
    _quiet()
    m = C.ema_map(SRC, not_swapped=True, **said)
    pairs = {t: s for s, t in m.pairs if s != t}
    assert len(pairs) == len(ORDER)
    with C.open_checkpoint(SRC) as ckpt:
        for weight, average in pairs.items():
            assert np.array_equal(ckpt.tensor(average), _average_of(ckpt, weight, truth))
    d = C.diff_ema(SRC, not_swapped=True, **said)
    assert {(t.name, t.other) for t in d.tensors} == set(pairs.items())
    stats = {r.name: r.ema_of for r in C.checkpoint_stats(SRC, not_swapped=True, **said)}
    assert {a: w for a, w in stats.items() if w} == {a: w for w, a in pairs.items()}
    baked = C.bake_ema(SRC, tmp_path / "baked", not_swapped=True, **said)
    C.export_weights(baked.prefix, tmp_path / "baked.npz", ema=False)
    z = np.load(tmp_path / "baked.npz")
    for path, average in truth[1].items():
        assert np.array_equal(z[path[len("seq/"):]], average), path


def test_statements_on_an_open_checkpoint_reopen_it(truth, tmp_path):
    _quiet()
    with C.open_checkpoint(SRC) as ckpt:
        r = C.export_weights(ckpt, tmp_path / "w.npz", not_swapped=True, use_ema=True)
        assert len(r.averaged) == len(ORDER)
        with pytest.raises(UnprovenPairingError):  # the caller's checkpoint states nothing
            C.ema_map(ckpt)
        assert len([1 for s, t in C.ema_map(ckpt, use_ema=True).pairs if s != t]) == len(ORDER)


def test_a_statement_the_file_contradicts_or_an_unknown_keyword_is_refused(tmp_path):
    with pytest.raises(C.EmaError, match="contradicts"):  # config.json records use_ema=True
        C.export_weights(FIXTURES / "keras_ema" / "adam.keras", tmp_path / "w.npz",
                         use_ema=False, not_swapped=True)
    with pytest.raises(C.OptionError, match="loop_order"):
        C.ema_map(SRC, use_ema=True, loop_order=True)
    for f in (C.ema_map, C.diff_ema, C.checkpoint_stats):
        with pytest.raises(TypeError, match="use_emma"):
            list(f(SRC, use_emma=True))
    # the CLI's --force: named as export_weights' own overwrite=, not ema_map's (u26 F12)
    with pytest.raises(TypeError, match=r"^export_weights\(\).*'force'.*overwrite=True"):
        C.export_weights(SRC, tmp_path / "f.npz", use_ema=True, not_swapped=True, force=True)
