"""Access to the committed TensorFlow-made fixtures and what TensorFlow recorded for them."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TF_CASES = ["linear_v2", "linear_v1", "linear_trainable_only", "towers_bn", "partitioned",
            "dtypes", "many_keys", "sharded", "tf2_object", "custom_ema_name", "keras3_object",
            "trainer_v1", "model_garden_slot"]
# What a fixture's file cannot tell, stated as the fixture script did it (ckpt refuses, exit 6,
# without it): tf2_object has two unnamed-scope biases of one name and shape (dense/bias,
# heads/0/bias) and ran ema.apply(model.trainable_variables); custom_ema_name holds three EMA
# objects (avg, ExponentialMovingAverage, ExponentialMovingAverage_1) on W and b.
DECIDE = {"tf2_object": {"apply_order": "trainable"},
          "custom_ema_name": {"ema_name": "ExponentialMovingAverage"}}


def decide_args(case: str) -> list[str]:
    """The command-line form of :data:`DECIDE` for ``case``."""
    return [a for k, v in DECIDE.get(case, {}).items()
            for a in ("--" + k.replace("_", "-"), v)]


META_CASES = ["linear_v2", "linear_v1", "linear_trainable_only", "towers_bn", "partitioned",
              "sharded", "custom_ema_name"]


def expected(case: str) -> dict:
    return json.loads((FIXTURES / case / "expected.json").read_text())


def expected_values(case: str) -> dict[str, np.ndarray]:
    """Values TensorFlow computed at save time, keyed by checkpoint key (bit views undone)."""
    exp = expected(case)
    with np.load(FIXTURES / case / "expected.npz", allow_pickle=False) as npz:
        values = {k: npz[k] for k in npz.files}
    for key, dtype in exp.get("npz_bit_views", {}).items():
        import ml_dtypes

        values[key] = values[key].view(getattr(ml_dtypes, dtype))
    return values


def expected_strings(case: str) -> dict[str, np.ndarray]:
    out = {}
    for key, nested in expected(case).get("string_values", {}).items():
        arr = np.array(nested, dtype=object)
        out[key] = np.vectorize(base64.b64decode, otypes=[object])(arr) if arr.size else arr
    return out


def prefix(case: str) -> str:
    return str(FIXTURES / case / expected(case)["prefix"])
