"""``--apply-order trainable`` on a ``tf.Module`` whose blocks sit in a dict keyed ``"0"``…
``"11"`` (``fixtures/make_tf2_digit_dicts.py``): ``tf.Module.trainable_variables`` visits such
a dict sorted as strings (``0, 1, 10, 11, 2``…) and a list by index, and the object graph
cannot tell a list from that dict, so the statement does not prove a pairing: refused (exit
6, saying why) by every command, never paired in list order; ``apply_ema`` given the live
module reads the order from its own ``trainable_variables``. Up to ten
keys both orders agree, and the statement pairs bit-exactly with ``ema.average(v)``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli, run_generator

import ckpt_tools
from ckpt_tools import EmaError

tf = pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    out = tmp_path_factory.mktemp("digit_dicts")
    return out, run_generator("make_tf2_digit_dicts.py", out)


@pytest.mark.parametrize("case", ["numdict_vars", "numdict_blocks"])
def test_digit_keyed_dict_of_more_than_ten_is_refused_under_trainable(made, tmp_path, case):
    out, truth = made
    order = [str(p) for p in truth[f"{case}:order"]]
    # The real library visits the dict's keys as strings: not the list order.
    assert order != sorted(order, key=lambda p: [int(s) if s.isdigit() else s
                                                 for s in p.split("/")])
    for argv in (["export", str(out / case), "--apply-order", "trainable",
                  "--out", str(tmp_path / f"{case}.npz")],
                 ["restore-ema", str(out / case), "--apply-order", "trainable",
                  "--out", str(tmp_path / f"{case}_ro")]):
        code, _, err = run_cli(argv)
        assert code == 6, err
        assert "indistinguishable in the file" in err and "sorted as strings" in err, err
        assert "model/" in err and "--apply-order trainable" in err, err
    assert not (tmp_path / f"{case}.npz").exists()
    assert not (tmp_path / f"{case}_ro").exists()


def test_apply_ema_with_the_live_module_reads_its_own_order(made):
    # The live module knows its blocks sit in a dict: its own trainable_variables give the
    # order the file leaves open, bit-exact with ema.average(v); without a stated order the
    # file still decides nothing, and nothing is assigned.
    out, truth = made

    class Block(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.zeros([3, 3]))
            self.b = tf.Variable(tf.zeros([3]))

    class Model(tf.Module):
        def __init__(self):
            super().__init__()
            self.blocks = {str(i): Block() for i in range(12)}

    m = Model()
    with pytest.raises(EmaError, match="--apply-order"):
        ckpt_tools.apply_ema(m, str(out / "numdict_blocks"))
    assert all(not np.any(v.numpy()) for v in m.trainable_variables)  # nothing assigned
    ckpt_tools.apply_ema(m, str(out / "numdict_blocks"), apply_order="trainable")
    for key, blk in m.blocks.items():
        for name in ("w", "b"):
            want = truth[f"numdict_blocks:model/blocks/{key}/{name}"]
            assert getattr(blk, name).numpy().tobytes() == want.tobytes(), (key, name)


def test_digit_keyed_dict_of_ten_pairs_bit_exact(made, tmp_path):
    out, truth = made
    target = tmp_path / "small.npz"
    code, _, err = run_cli(["export", str(out / "smalldict_blocks"), "--apply-order",
                            "trainable", "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        got = {k: z[k] for k in z.files}
    want = {k.split(":", 1)[1]: v for k, v in truth.items()
            if k.startswith("smalldict_blocks:") and not k.endswith(":order")}
    assert set(want) <= set(got)
    for path, value in want.items():
        assert got[path].tobytes() == value.tobytes(), path
