"""``list`` and ``export`` read the mark ``restore-ema`` leaves in its Keras outputs
(review-17-user-u19 F10; ``ckpt_tools.restored_mark``), as ``eval`` does.

A Keras 3 model is fit with ``SGD(momentum=0.9, use_ema=True)`` (a bare ``.weights.h5`` of it
fits use_ema=True and False alike); at save time a callback records Keras' own averages
(``optimizer._model_variables_moving_average``). restore-ema's ``.weights.h5`` and its
``--format h5`` output hold those averages as their weights: ``list`` says restore-ema wrote the
file (no ``--use-ema`` question), ``export`` writes the weights as the averages without asking,
its summary, ``--json`` and the file's record say so (never the ModelCheckpoint /
SwapEMAWeights text). A Keras save of the same path drops the mark, and the claim with it.
"""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest
from helpers_keras import fit_saved_mid_fit
from typer.testing import CliRunner

SAID = "ckpt restore-ema wrote this file: its weights are the averages"


def _ckpt(*args):
    from ckpt_tools.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def baked(tmp_path_factory):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    out = tmp_path_factory.mktemp("mark")
    model, x, y, truth = fit_saved_mid_fit(keras, out, 3)
    assert len(truth) == 4
    wh5 = out / "w" / "ema.weights.h5"
    r = _ckpt("restore-ema", out / "m.keras", "--out", wh5, "--not-swapped", "-q")
    assert r.exit_code == 0, r.output
    h5 = out / "w2" / "ema.h5"
    r = _ckpt("restore-ema", out / "m.keras", "--format", "h5", "--out", h5, "--not-swapped",
              "-q")
    assert r.exit_code == 0, r.output
    return out, truth, {"weights.h5": wh5, "h5": h5}, model


@pytest.mark.parametrize("kind", ["weights.h5", "h5"])
def test_list_and_export_read_restore_emas_mark(baked, kind):
    out, truth, files, _ = baked
    path = files[kind]
    listed = _ckpt("list", path)
    assert listed.exit_code == 0, listed.output
    assert SAID in _words(listed.output), listed.output
    assert "--use-ema" not in listed.output, listed.output
    doc = json.loads(_ckpt("list", path, "--json").stdout)
    assert doc["ema_evidence"]["weights_are_averages"] is True, doc["ema_evidence"]
    for extra in ([], ["--raw"]):
        npz = out / f"{kind}{len(extra)}.npz"
        r = _ckpt("export", path, "--out", npz, "--json", *extra)
        assert r.exit_code == 0, (extra, r.output)
        doc = json.loads(r.stdout)
        assert doc["stored"] == SAID, doc
        assert "SwapEMAWeights" not in r.output and "ModelCheckpoint" not in r.output, r.output
        record = json.loads(zipfile.ZipFile(npz).comment)["ckpt_tools"]
        # and what restore-ema read its input under, which its mark records (r128 F3)
        assert record == {"values": "stored", "weights_are_averages": True,
                          "stated": ["not_swapped"]}, record
        with np.load(npz) as got:  # Keras' own averages at save time, bit for bit
            # the legacy .h5 names its weights by the model's path (sequential/mid/kernel)
            names = {n.removeprefix("sequential/"): n for n in got.files}
            assert sorted(names) == sorted(truth), got.files
            for name, want in truth.items():
                assert np.array_equal(got[names[name]], want), name
    table = _ckpt("export", path, "--out", out / f"{kind}t.npz")
    assert table.exit_code == 0 and SAID in _words(table.output), table.output


@pytest.mark.parametrize("kind", ["weights.h5", "h5"])
def test_a_keras_save_drops_the_claim(baked, tmp_path, kind):
    """Keras rewrites the file it saves to (mode "w"): the mark is gone, and the file is read
    as any other (asked, or refused as holding no averages), never as restore-ema's."""
    _, truth, files, model = baked
    path = tmp_path / files[kind].name
    path.write_bytes(files[kind].read_bytes())
    model.load_weights(str(path))
    if kind == "h5":
        model.save(str(path))  # Keras 3 writes a legacy .h5 as a whole model
    else:
        model.save_weights(str(path))
    for args in (["list", path], ["export", path, "--out", tmp_path / "x.npz"]):
        r = _ckpt(*args)
        assert SAID not in _words(r.output), (args, r.output)
    evidence = json.loads(_ckpt("list", path, "--json").stdout)["ema_evidence"]
    assert "weights_are_averages" not in evidence, evidence
    if kind == "weights.h5":  # its layout fits use_ema=True and False: asked, as any other
        assert r.exit_code == 6 and "--use-ema" in r.output, r.output
