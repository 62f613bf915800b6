"""``--numbered-lists`` (review-13-user-u14 F1): a ``tf.Module`` holding more than ten unnamed
variables (or blocks of them) in a *list*, averages saved as ``ema_vars=[ema.average(v) for v
in m.trainable_variables]`` (``fixtures/make_tf2_digit_dicts.py``, ``numlist_*``). The object
graph cannot tell that list from a dict keyed ``"0"``…, so ``--apply-order`` alone is refused;
the first refusal and ``list --json``'s ``ema_unproven.option`` name the whole statement, and
with it every command and the Python API give each variable its ``ema.average(v)`` bit for bit
(truth recorded by TF at save time). Candidates are listed in natural order (vs/2 before
vs/10)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli, run_generator

import ckpt_tools

tf = pytest.importorskip("tensorflow")

CASES = ["numlist_vars", "numlist_blocks"]


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    out = tmp_path_factory.mktemp("numbered_lists")
    return out, run_generator("make_tf2_digit_dicts.py", out)


def _truth(truth: dict, case: str) -> dict[str, np.ndarray]:
    return {k.split(":", 1)[1]: v for k, v in truth.items()
            if k.startswith(case + ":") and not k.endswith(":order")}


@pytest.mark.parametrize("case", CASES)
def test_first_refusal_names_the_whole_statement(made, case):
    out, _ = made
    code, _, err = run_cli(["map", str(out / case)])
    assert code == 6, err
    assert "--apply-order trainable --numbered-lists" in err, err
    code, doc, err = run_cli(["list", str(out / case), "--json"])
    assert code == 0, err
    assert json.loads(doc)["ema_unproven"]["option"] == "--apply-order trainable --numbered-lists"
    code, _, err = run_cli(["list", str(out / case)])
    assert "pass --apply-order trainable --numbered-lists to decide" in " ".join(err.split())


@pytest.mark.parametrize("order", ["trainable", "tracked"])
def test_order_alone_refuses_naming_numbered_lists(made, tmp_path, order):
    out, _ = made
    code, _, err = run_cli(["export", str(out / "numlist_vars"), "--apply-order", order,
                            "--out", str(tmp_path / "x.npz")])
    assert code == 6, err
    assert f"--apply-order {order} --numbered-lists" in err, err
    assert not (tmp_path / "x.npz").exists()


def test_candidates_in_natural_order(made):
    out, _ = made
    code, _, err = run_cli(["map", str(out / "numlist_vars")])
    assert code == 6
    flat = " ".join(err.split())
    assert "model/ws/8 or model/ws/9 or model/ws/10 or model/ws/11;" in flat, flat
    assert flat.index("ema_vars/2 may average") < flat.index("(and 9 more)"), flat
    assert "ema_vars/10 may average" not in flat, flat


@pytest.mark.parametrize(("case", "order"), [("numlist_vars", "trainable"),
                                             ("numlist_blocks", "trainable"),
                                             ("numlist_vars", "tracked")])
def test_stated_lists_pair_bit_exact_everywhere(made, tmp_path, case, order):
    # (tracked of the blocks stays open: a block's w and b may be a dict's or a layer's)
    out, truth = made
    want = _truth(truth, case)
    assert len(want) in (12, 24)
    stated = ["--apply-order", order, "--numbered-lists"]
    target = tmp_path / "ema.npz"
    code, _, err = run_cli(["export", str(out / case), "--out", str(target), *stated])
    assert code == 0, err
    assert f"you stated --apply-order {order} --numbered-lists" in " ".join(err.split()), err
    with np.load(target) as z:
        assert sorted(z.files) == sorted(want)
        for name, value in want.items():
            assert z[name].tobytes() == value.tobytes(), name
    code, doc, err = run_cli(["map", str(out / case), "--json", *stated])
    assert code == 0, err
    pairs = {s.split("/.ATTR")[0]: t.split("/.ATTR")[0] for s, t in json.loads(doc).items()
             if s != t}
    assert sorted(pairs.values()) == sorted(want)
    code, doc, err = run_cli(["list", str(out / case), "--json", *stated])
    assert code == 0, err
    listing = json.loads(doc)
    assert listing["ema_unproven"] is None
    assert listing["stated_apply_order"]["numbered_lists"] is True
    assert listing["stated_apply_order"]["order"] == order
    baked = tmp_path / "baked"
    code, _, err = run_cli(["restore-ema", str(out / case), "--out", str(baked), *stated])
    assert code == 0, err
    reader = tf.train.load_checkpoint(str(baked))
    for name, value in want.items():
        got = reader.get_tensor(f"{name}/.ATTRIBUTES/VARIABLE_VALUE")
        assert got.tobytes() == value.tobytes(), name


def test_python_api_states_numbered_lists(made, tmp_path):
    out, truth = made
    want = _truth(truth, "numlist_blocks")
    path = str(out / "numlist_blocks")
    with pytest.raises(ckpt_tools.UnprovenPairingError, match="numbered_lists"):
        ckpt_tools.ema_map(path, apply_order="trainable")
    stated = ckpt_tools.numbered_lists("trainable")
    m = ckpt_tools.ema_map(path, apply_order=stated)
    got = {t.split("/.ATTR")[0] for s, t in m.pairs if s != t}
    assert got == set(want)
    ckpt_tools.export_weights(path, str(tmp_path / "w.npz"), apply_order=stated)
    with np.load(tmp_path / "w.npz") as z:
        for name, value in want.items():
            assert z[name].tobytes() == value.tobytes(), name
    with pytest.raises(ValueError, match="apply_order"):
        ckpt_tools.numbered_lists("creation")


def test_numbered_lists_needs_an_order(made):
    out, _ = made
    code, _, err = run_cli(["export", str(out / "numlist_vars"), "--numbered-lists",
                            "--out", "x.npz"])
    assert code == 2 and "--apply-order" in err, err


def test_no_averages_message_names_the_statement(tmp_path):
    class M(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.zeros([2]))

    tf.train.Checkpoint(model=M()).write(str(tmp_path / "ckpt"))
    code, _, err = run_cli(["export", str(tmp_path), "--out", str(tmp_path / "x.npz")])
    assert code == 6, err
    flat = " ".join(err.split())
    assert "tf.Variable(..., name=...)" in flat and "--numbered-lists" in flat, flat
