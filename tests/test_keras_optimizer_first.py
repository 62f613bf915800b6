"""The README's command for a Keras 3 ``.weights.h5`` of ``SGD(momentum=0.9, use_ema=True)``
without ``--optimizer`` was refused with one 1,179-character line whose fix came after ~600
characters about Lookahead and custom classes (review-27-user-u29 F3). The refusal now leads
with the option that decides and keeps the why short; with it, the export is the averages
Keras held at save time (fixtures/keras_ema, made by fixtures/make_keras_fixtures.py)."""

from __future__ import annotations

import numpy as np
from helpers import FIXTURES, run_cli

H5 = FIXTURES / "keras_ema" / "model.weights.h5"  # SGD(momentum=0.9, use_ema=True), fit()


def test_the_refusal_leads_with_the_option_and_the_option_exports_the_averages(tmp_path):
    out = tmp_path / "ema.npz"
    code, _, err = run_cli(["export", str(H5), "--use-ema", "--not-swapped", "--out",
                            str(out)])
    assert code == 6 and not out.exists(), err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {H5}: pass --optimizer sgd:momentum or --optimizer "
                               "sgd:gradient_accumulation,"), err
    assert len(lines[0]) < 500 and 'optimizer="sgd:momentum"' in lines[0], err
    code, _, err = run_cli(["export", str(H5), "--use-ema", "--not-swapped", "--optimizer",
                            "sgd:momentum", "--out", str(out)])
    assert code == 0, err
    truth = np.load(FIXTURES / "keras_ema" / "expected.npz")  # recorded by Keras at save
    with np.load(out) as got:
        for name in got.files:
            kind = "weight" if name.startswith("bn/moving_") else "ema"
            want = truth[f"model:{kind}/{name}"]
            if want.dtype == np.uint16:  # bfloat16, recorded as its bits; npz widens it
                want = (want.astype(np.uint32) << 16).view(np.float32)
            np.testing.assert_array_equal(got[name], want, err_msg=name)
        assert len(got.files) == 8
