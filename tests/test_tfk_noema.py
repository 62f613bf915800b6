"""The ordinary tf_keras ``.keras`` (an optimizer without ``use_ema``, or one never trained):
exit 6 naming ``use_ema=False`` (never an internal error), ``list`` exit 0, ``--raw`` exports
the raw weights Keras recorded at save (fixtures/make_tfk_noema.py)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import FIXTURES, run_cli

from ckpt_tools import EmaError, keras_ema_values

DIR = FIXTURES / "tfk_noema"


@pytest.mark.parametrize("case", ["sgd_noema", "adam_untrained", "sgdm_noema_metrics"])
def test_tf_keras_keras_without_use_ema(case, tmp_path):
    path = DIR / f"{case}.keras"
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(path), "--out", str(out)])
    assert code == 6 and "use_ema=False" in err, err
    assert not out.exists()
    code, _, err = run_cli(["list", str(path)])
    assert code == 0, err
    code, _, err = run_cli(["export", str(path), "--raw", "--out", str(out)])
    assert code == 0, err
    truth, got = np.load(DIR / f"{case}.truth.npz"), np.load(out)
    assert sorted(got.files) == sorted(truth.files)
    for k in truth.files:
        np.testing.assert_array_equal(got[k], truth[k], err_msg=k)
    with pytest.raises(EmaError, match="use_ema=False"):
        keras_ema_values(str(path))
