"""The Python API never hands back a pairing the file does not prove: ``open_checkpoint(p)
.variables()`` leaves ``ema`` / ``ema_of`` ``None`` where two or more pairings fit and lists
``ema_candidates`` instead (on both sides); ``ema_decide.decide_pairing`` with the deciding
argument then gives the pairing the library recorded at save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import FIXTURES, run_generator, tf2_unnamed_list_run

from ckpt_tools import open_checkpoint
from ckpt_tools.ema_decide import decide_pairing
from ckpt_tools.emamap import UnprovenPairingError


def test_several_ema_objects_leave_the_variables_average_open():
    expected = json.loads((FIXTURES / "custom_ema_name" / "expected.json").read_text())
    with open_checkpoint(FIXTURES / "custom_ema_name") as ckpt:
        by_name = {v.name: v for v in ckpt.variables()}
        for target in ("W", "b"):
            shadows = sorted(s for s, t in expected["ema_of"].items() if t == target)
            assert by_name[target].ema is None  # not the first shadow in key order
            assert by_name[target].ema_candidates == tuple(shadows)
            for shadow in shadows:  # each average's own name proves its variable
                assert by_name[shadow].ema_of == target
        variables, refusal = decide_pairing(ckpt)
        assert isinstance(refusal, UnprovenPairingError) and refusal.option == "--ema-name"
        assert all(v.ema is None for v in variables if v.role == "weight")
        avg = next(e for e in expected["emas"] if e["name"] == "avg")
        decided, refusal = decide_pairing(ckpt, ema_name="avg")
        assert refusal is None
        assert {v.name: v.ema for v in decided if v.role == "weight"} == avg["average_name"]
        assert all(not v.ema_candidates for v in decided if v.role == "weight")


@pytest.fixture(scope="module")
def unnamed_list(tmp_path_factory, tf):
    """The issue's TF2 setup (``helpers.tf2_unnamed_list_run``), one save: its prefix and
    ``ema.average(v)`` under each variable's checkpoint key."""
    run = tmp_path_factory.mktemp("unnamed")
    truth = tf2_unnamed_list_run(tf, run, saves=1)[0]
    return tf.train.latest_checkpoint(str(run)), truth


def test_tf2_unnamed_list_exposes_no_pairing_until_apply_order_decides(unnamed_list):
    prefix, truth = unnamed_list
    with open_checkpoint(prefix) as ckpt:
        variables = {v.name: v for v in ckpt.variables()}
        averages = [v for v in variables.values() if v.role == "ema"]
        assert len(averages) == 12
        for v in averages:
            assert v.ema_of is None and len(v.ema_candidates) == 6
        for key in truth:
            weight = variables[key]
            assert weight.ema is None
            # the averages it may take, its true one among them
            assert len(weight.ema_candidates) == 6
            true = next(a.name for a in averages
                        if np.array_equal(ckpt.tensor(a.name), truth[key]))
            assert true in weight.ema_candidates
        decided, refusal = decide_pairing(ckpt)
        assert refusal is not None and refusal.option == "--apply-order"
        assert all(v.ema is None and v.ema_of is None for v in decided)
        decided, refusal = decide_pairing(ckpt, apply_order="trainable")
        assert refusal is None
        for v in decided:
            if v.name in truth:
                assert np.array_equal(ckpt.tensor(v.ema), truth[v.name]), v.name
                assert not v.ema_candidates


def test_bare_weights_h5_with_a_frozen_copy_exposes_candidates_only(tmp_path):
    pytest.importorskip("keras")
    truth = run_generator("make_keras_decide.py", tmp_path)
    averaged = [str(p) for p in truth["frozen_copy:trainable"]]
    with open_checkpoint(tmp_path / "frozen_copy.weights.h5", use_ema=True) as ckpt:
        variables = ckpt.variables()
        assert not any(v.ema or v.ema_of for v in variables)
        paths = {v.name: v.path for v in variables}
        weights = [v for v in variables if v.role == "weight"]
        assert {v.path for v in weights if v.ema_candidates} == {
            "online/kernel", "online/bias", "target/kernel", "target/bias"}
        for v in variables:
            if v.role == "ema":
                cands = {paths[c] for c in v.ema_candidates}
                assert len(cands) == 2 and cands & set(averaged), cands


def test_the_refusal_is_public_and_names_the_deciding_option():
    """ckpt_tools.UnprovenPairingError (an EmaError) is what ema_map raises where the file
    does not prove the pairing; its option names what decides."""
    import ckpt_tools

    assert "UnprovenPairingError" in ckpt_tools.__all__
    assert issubclass(ckpt_tools.UnprovenPairingError, ckpt_tools.EmaError)
    with pytest.raises(ckpt_tools.UnprovenPairingError) as raised:
        ckpt_tools.ema_map(FIXTURES / "custom_ema_name")
    assert raised.value.option == "--ema-name" and raised.value.exit_code == 6
