"""The committed fixtures are what fixtures/make_fixtures.py makes with real TensorFlow."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from helpers import FIXTURES

# Training math (Adam, gathers on partitioned embeddings) rounds differently on CPUs with
# other vector units, so a regeneration on another machine may differ in the last bits of
# a value. Names, dtypes and shapes must still match exactly; values within float32 noise.
RTOL, ATOL = 1e-5, 1e-6


def _same_checkpoint(made, committed):
    import tensorflow as tf

    a, b = tf.train.load_checkpoint(str(made)), tf.train.load_checkpoint(str(committed))
    assert a.get_variable_to_shape_map() == b.get_variable_to_shape_map(), committed
    assert a.get_variable_to_dtype_map() == b.get_variable_to_dtype_map(), committed
    for key in b.get_variable_to_shape_map():
        x, y = np.asarray(a.get_tensor(key)), np.asarray(b.get_tensor(key))
        if x.dtype.kind in "fc":
            np.testing.assert_allclose(x, y, rtol=RTOL, atol=ATOL, err_msg=f"{committed} {key}")
        else:
            np.testing.assert_array_equal(x, y, err_msg=f"{committed} {key}")


def _same_npz(made, committed):
    with np.load(made) as a, np.load(committed) as b:
        assert sorted(a.files) == sorted(b.files), committed
        for key in b.files:
            made_as, committed_as = (a[key].dtype, a[key].shape), (b[key].dtype, b[key].shape)
            assert made_as == committed_as, f"{committed} {key}"
            if b[key].dtype.kind in "fc":
                np.testing.assert_allclose(a[key], b[key], rtol=RTOL, atol=ATOL,
                                           err_msg=f"{committed} {key}")
            else:
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"{committed} {key}")


def test_fixture_script_regenerates_the_committed_checkpoints(tmp_path):
    cases = ["linear_v2", "partitioned", "dtypes", "tf2_object", "sharded_v1"]
    proc = subprocess.run([sys.executable, str(FIXTURES / "make_fixtures.py"), "--out",
                           str(tmp_path), "--only", *cases], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for case in cases:
        committed = sorted(p.name for p in (FIXTURES / case).iterdir())
        made = sorted(p.name for p in (tmp_path / case).iterdir())
        assert made == committed, case
        for name in made:
            new, old = tmp_path / case / name, FIXTURES / case / name
            if name.endswith(".npz") and new.read_bytes() != old.read_bytes():
                _same_npz(new, old)
            elif name.endswith(".index") and new.read_bytes() != old.read_bytes():
                # the bundle's data files change with the values; compare through TF itself
                _same_checkpoint(new.with_suffix(""), old.with_suffix(""))
        # .meta graphs and TF2 state files are not byte-stable (see fixtures/README.md)
