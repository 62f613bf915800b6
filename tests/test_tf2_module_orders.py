"""``--apply-order trainable`` on a ``tf.Module`` of unnamed variables holding a list and a
dict of blocks: TensorFlow itself gives two programs that write the same object graph with
different ``trainable_variables`` orders (a block as a ``tf.Module`` or as a dict of the same
variables: ``fixtures/make_tf2_module_orders.py``), so the statement cannot decide and is
refused, saying why, never paired in one of the two orders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli, run_generator

pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    out = tmp_path_factory.mktemp("module_orders")
    return out, run_generator("make_tf2_module_orders.py", out)


def test_module_and_dict_twins_have_different_orders_and_are_refused(made, tmp_path):
    out, truth = made
    # The real library's orders differ: which one a file holds is not in the file.
    assert list(truth["mixed_modules:order"]) != list(truth["mixed_dicts:order"])
    for case in ("mixed_modules", "mixed_dicts"):
        target = tmp_path / f"{case}.npz"
        code, _, err = run_cli(["export", str(out / case), "--apply-order", "trainable",
                                "--out", str(target)])
        assert code == 6, err
        assert "leaves two orders" in err and "model/z_blocks/0" in err, err
        assert "tf.Modules" in err and "dicts" in err, err
        assert not target.exists()
