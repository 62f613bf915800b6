"""``ckpt export --out`` into a directory that does not exist yet creates it, as ``restore-ema
--out`` does (review-19-user-u21 F4: export exited 7 "output directory does not exist" where
restore-ema wrote); a refused export creates nothing."""

from __future__ import annotations

import numpy as np
from helpers import FIXTURES, expected_values, run_cli


def test_export_creates_missing_parent_directories(tmp_path):
    out = tmp_path / "new" / "deeper" / "ema.npz"
    code, _, err = run_cli(["export", str(FIXTURES / "linear_v2"), "--out", str(out)])
    assert code == 0, err
    want = expected_values("linear_v2")  # TensorFlow's values at save time
    with np.load(out) as z:
        assert sorted(z.files) == ["W", "b"]
        for name in z.files:
            assert z[name].tobytes() == want[f"{name}/ExponentialMovingAverage"].tobytes()


def test_refused_export_leaves_no_directory(tmp_path):
    out = tmp_path / "new" / "ema.npz"
    # a name filter selecting nothing is refused (exit 3) before anything is written
    code, _, err = run_cli(["export", str(FIXTURES / "linear_v2"), "--include", "nothing*",
                            "--out", str(out)])
    assert code != 0, err
    assert not (tmp_path / "new").exists()
