"""A 4-bit integer tensor is a quantized weight whatever its name (review-16-attack-r32 F3).

An int4/uint4 variable of a TensorFlow checkpoint not named ``kernel``/``embeddings`` (a
hand-quantized ``w_q``) was left out of ``ckpt export`` without a word, exit 0, and no filter
brought it back. TensorFlow keeps no counter, seed or table in int4: it is exported as the
``kernel``-named one is (``.npz`` widened exactly and said in the comment; ``.safetensors`` and
``.h5`` refused with exit 5 naming ``.npz``). Truth: the variables' values at save time.
"""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
from typer.testing import CliRunner

from ckpt_tools.cli import app

tf = pytest.importorskip("tensorflow")
ml_dtypes = pytest.importorskip("ml_dtypes")
runner = CliRunner()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = tmp_path_factory.mktemp("int4")
    m = tf.Module()
    m.w = tf.Variable(tf.ones([2, 3]), name="w")
    m.q = tf.Variable(tf.constant(np.array([[1, -2, 3], [-4, 5, 7]]).astype(ml_dtypes.int4)),
                      name="w_q")
    m.u = tf.Variable(tf.constant(np.array([[1, 2, 3], [4, 5, 15]]).astype(ml_dtypes.uint4)),
                      name="u_q")
    ema = tf.train.ExponentialMovingAverage(0.5)
    ema.apply([m.w])
    m.w.assign(tf.fill([2, 3], 3.0))
    ema.apply([m.w])
    tf.train.Checkpoint(model=m, ema={"w": ema.average(m.w)}).write(str(out / "ckpt"))
    truth = {"model/w": ema.average(m.w).numpy(), "model/q": m.q.numpy(),
             "model/u": m.u.numpy()}
    return out / "ckpt", truth


def test_npz_holds_int4_whatever_its_name(saved, tmp_path):
    src, truth = saved
    out = tmp_path / "x.npz"
    r = runner.invoke(app, ["export", str(src), "--out", str(out), "--allow-missing"])
    assert r.exit_code == 0, r.output
    with np.load(out) as z:
        got = {k: z[k] for k in z.files}
    assert set(got) == set(truth), got.keys()
    for k, v in truth.items():
        assert np.array_equal(got[k], v.astype(np.float32 if k == "model/w" else
                                               np.int8 if k == "model/q" else np.uint8)), k
    comment = json.loads(zipfile.ZipFile(out).comment)["ckpt_tools"]
    assert comment["widened"] == {"model/q": "int4", "model/u": "uint4"}
    assert sorted(comment["raw"]) == ["model/q", "model/u"]


@pytest.mark.parametrize("ext", ["safetensors", "h5"])
def test_formats_without_int4_refuse_naming_npz(saved, tmp_path, ext):
    src, _ = saved
    out = tmp_path / f"x.{ext}"
    r = runner.invoke(app, ["export", str(src), "--out", str(out), "--allow-missing"])
    assert r.exit_code == 5, r.output
    assert "int4" in r.output and ".npz" in r.output
    assert not out.exists()
