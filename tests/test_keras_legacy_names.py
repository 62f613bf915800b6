"""tf_keras legacy ``.h5`` whose layers repeat names (transfer learning: a base loaded from
disk and frozen, a new head auto-named ``dense``, ``dense_1`` again). The optimizer names its
averages after the layer only (``Adam/average/dense/kernel``), so each matches a weight of the
base and one of the head: never paired to "the first" (that put the head's averages into the
frozen base, exit 0). Refused (exit 6) naming the candidates and ``--trainable``; a stated
``--trainable`` gives the averages. Truth recorded at save by fixtures/make_tfk_transfer.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import FIXTURES, run_cli

from ckpt_tools import EmaError, keras_ema_values, open_checkpoint

H5 = FIXTURES / "tfk_transfer" / "transfer.h5"
TRUTH = FIXTURES / "tfk_transfer" / "transfer.truth.npz"
# model.trainable_variables order at save (the head; the base was frozen)
STATED = ["dense_1/dense_1/kernel", "dense_1/dense_1/bias", "dense/dense/kernel",
          "dense/dense/bias"]


@pytest.mark.parametrize("cmd", ["map", "restore-ema", "export"])
def test_same_named_head_and_frozen_base_is_refused(cmd, tmp_path):
    out = tmp_path / ("x.h5" if cmd == "restore-ema" else "x.npz")
    args = [cmd, str(H5)] + ([] if cmd == "map" else ["--out", str(out)])
    code, _, err = run_cli(args)
    assert code == 6, err
    assert "base/dense_1/kernel" in err and "dense_1/dense_1/kernel" in err, err
    assert "--trainable" in err, err
    assert not out.exists()
    with pytest.raises(EmaError, match="--trainable"):
        keras_ema_values(str(H5))


def test_names_keep_the_layers_apart():
    ckpt = open_checkpoint(H5)
    paths = {ckpt.reader.keras.paths[k] for k in ckpt.reader.keras.model}
    assert {"base/dense/kernel", "dense/dense/kernel", "dense_1/dense_1/bias"} <= paths


def test_stated_trainable_gives_the_truth(tmp_path):
    truth = np.load(TRUTH)
    out = tmp_path / "x.npz"
    code, text, err = run_cli(["export", str(H5), "--trainable", ",".join(STATED),
                               "--out", str(out), "--json"])
    assert code == 0, err
    # repeated layer names leave the pairing to the statement: said so (review-11-user-r9 F20)
    assert "paired only because you stated --trainable" in err, err
    assert len(json.loads(text)["stated_trainable"]["pairs"]) == len(STATED), text
    got = np.load(out)
    for key in truth.files:
        kind, _, h5key = key.partition(":")
        name = h5key.removeprefix("model_weights/")
        if kind == "ema":
            np.testing.assert_array_equal(got[name], truth[key], err_msg=name)
        elif "ema:" + h5key not in truth.files:  # the frozen base stays raw
            np.testing.assert_array_equal(got[name], truth[key], err_msg=name)
    ckpt = open_checkpoint(H5)
    ckpt.reader.restate_use_ema(None, trainable=STATED)
    values = keras_ema_values(ckpt)
    assert sorted(values) == sorted("model_weights/" + s for s in STATED)
    for k, v in values.items():
        np.testing.assert_array_equal(v, truth["ema:" + k])


def test_a_stated_trainable_of_the_wrong_size_is_refused(tmp_path):
    code, _, err = run_cli(["export", str(H5), "--trainable", ",".join(STATED[:2]),
                            "--out", str(tmp_path / "x.npz")])
    assert code == 6, err
    code, _, err = run_cli(["export", str(H5), "--trainable", "nope/kernel",
                            "--out", str(tmp_path / "x.npz")])
    assert code != 0 and "nope/kernel" in err, err


def test_list_marks_and_counts_the_candidates_the_names_allow():
    """Each average names its weight (dense_1/kernel), which a base layer and a head layer
    share: exactly those two are its candidates (as `map` says), never every weight of its
    shape; each weight has the one average of its name. The summary counts the '?' rows."""
    code, text, err = run_cli(["list", str(H5), "--json"])
    assert code == 0, err
    variables = json.loads(text)["variables"]
    averages = {v["path"]: v["ema_candidates"] for v in variables if v["role"] == "ema"}
    assert averages["Adam/average/dense_1/kernel"] == [
        "model_weights/base/dense_1/kernel", "model_weights/dense_1/dense_1/kernel"]
    assert all(len(c) == 2 for c in averages.values()), averages
    weights = {v["path"]: v["ema_candidates"] for v in variables if v["role"] == "weight"}
    assert weights["base/dense/kernel"] == ["optimizer_weights/Adam/average/dense/kernel"]
    assert all(len(c) == 1 for c in weights.values()), weights
    _, map_err = run_cli(["map", str(H5)])[1:]
    assert "(base/dense_1/kernel, dense_1/dense_1/kernel)" in map_err, map_err
    for extra, marked, hidden in (([], 12, None), (["--role", "ema"], 4, 8),
                                  (["--grep", "base/*"], 4, 8)):
        code, text, err = run_cli(["list", str(H5), *extra])
        assert code == 0, err
        rows = [line for line in text.splitlines() if "\t?" in line or "\tof ?" in line]
        assert len(rows) == marked, (extra, text)
        summary = next(line for line in (text + err).splitlines() if "does not prove" in line)
        assert "pairing of 8 weights and 4 averages (marked '?'" in summary, summary
        assert (f"{hidden} of them not shown" in summary) == (hidden is not None), summary


def test_evidence_names_its_source():
    """ema_evidence.source: a legacy .h5's optimizer weight names are "names"; a --use-ema
    agreeing with the use_ema a .keras config.json records leaves it "config"
    (review-11-user-r9 F10)."""
    code, text, err = run_cli(["list", str(FIXTURES / "keras_legacy_h5" / "model.h5"),
                               "--json"])
    assert code == 0, err
    assert json.loads(text)["ema_evidence"]["source"] == "names"
    for extra in ([], ["--use-ema"]):
        code, text, err = run_cli(["list", str(FIXTURES / "keras_ema" / "model.keras"),
                                   "--json", *extra])
        assert code == 0, err
        assert json.loads(text)["ema_evidence"]["source"] == "config", (extra, text)
