"""``ckpt eval`` closes the loop on restore-ema's Keras outputs (review 13 attack-r23 F4).

The reference model is trained with Keras' own ``fit()`` (``use_ema=True``); at save time a
callback records Keras' own averages (``optimizer._model_variables_moving_average`` zipped with
``optimizer._trainable_variables``). ``restore-ema --out x.weights.h5`` (and ``--format h5``)
must give a file whose raw accuracy under ``ckpt eval`` is the accuracy of those averages.
A bare ``.weights.h5`` cannot tell use_ema, so eval takes ``--use-ema/--no-use-ema`` (the options
its refusal names); a file that is neither a checkpoint nor a Keras file is exit 4, not 1.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from helpers_keras import fit_saving_mid_fit
from typer.testing import CliRunner

NUM = 200


def _ckpt(*args: str):
    from ckpt_tools.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def _ckpt_env(env: dict[str, str], *args: str):
    from ckpt_tools.cli import app

    return CliRunner().invoke(app, [str(a) for a in args], env=env)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A ``.keras`` of the reference model saved mid-fit, and Keras' averages at that time."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    from ckpt_tools.train import data as data_lib
    from ckpt_tools.train import keras_fit
    from ckpt_tools.train.common import TrainConfig

    out = tmp_path_factory.mktemp("evalk")
    keras.utils.set_random_seed(1)
    net = keras_fit.compile_model(TrainConfig(ema_decay=0.9))
    ds = data_lib.load(None)
    x = data_lib.normalize(ds.train_images[:96])
    y = ds.train_labels[:96]
    truth = fit_saving_mid_fit(keras, net, x, y, out / "m.keras")
    assert truth
    # The accuracy of Keras' averages: the file's raw weights with the averages assigned.
    ref = keras_fit.compile_model(TrainConfig(ema_decay=0.9))
    ref.load_weights(str(out / "m.keras"))
    for v in ref.trainable_variables:
        v.assign(truth[v.path])
    images = data_lib.normalize(ds.test_images[:NUM])
    want = float((np.argmax(ref(images, training=False).numpy(), 1)
                  == ds.test_labels[:NUM]).mean())
    return out, truth, want


def test_eval_reads_restore_ema_weights_h5_with_the_options_it_names(saved):
    out, truth, want = saved
    (out / "o").mkdir(exist_ok=True)
    dst = out / "o" / "w.weights.h5"
    r = _ckpt("restore-ema", out / "m.keras", "--out", dst, "--not-swapped")  # mid-fit()
    assert r.exit_code == 0, r.output
    import h5py

    from ckpt_tools.train import keras_fit
    from ckpt_tools.train.common import TrainConfig

    net = keras_fit.compile_model(TrainConfig())
    net.load_weights(str(dst))
    for v in net.trainable_variables:  # the output's weights are Keras' averages, bit for bit
        assert np.array_equal(v.numpy(), truth[v.path]), v.path
    assert h5py.is_hdf5(str(dst))
    # restore-ema's own output evaluates without a statement: its weights are the averages
    # (review-16-attack-r32 F4), and the report says so (never "holds no averages")
    plain = _ckpt("eval", dst, "--num-examples", NUM, "--json")
    assert plain.exit_code == 0, plain.output
    doc = json.loads(plain.stdout)
    assert doc["raw_accuracy"] == want and doc["ema_accuracy"] == want, doc
    assert doc["weights_are_averages"] is True
    # the table keeps its rows (EMA = raw, EMA - raw +0.0000) at 80 and 60 columns; why EMA
    # equals raw is a note under it, never a cell spanning the terminal (review-17-user-u19 F11)
    for columns in (80, 60):
        table = _ckpt_env({"COLUMNS": str(columns), "TTY_COMPATIBLE": "1", "NO_COLOR": "1"},
                          "eval", dst, "--num-examples", NUM)
        assert table.exit_code == 0, table.output
        lines = table.stdout.splitlines()
        # the file's path is printed whole on its own line, never folded (it is copied from
        # there), so it alone may pass the width: pytest-xdist's tmp paths are long
        assert all(len(line) <= columns for line in lines if line != str(dst)), table.stdout
        rows = [line.split() for line in lines]
        assert ["raw", f"{want:.4f}"] in rows and ["EMA", f"{want:.4f}"] in rows, table.stdout
        assert ["EMA", "-", "raw", "+0.0000"] in rows, table.stdout
        assert "ckpt restore-ema wrote this file, its weights are the averages" in " ".join(
            table.stdout.split()), table.stdout
        assert max(len(line) for line in lines[lines.index("") - 3:lines.index("")]) <= 20
    table = _ckpt("eval", dst, "--num-examples", NUM, "--no-use-ema")
    assert table.exit_code == 0 and "holds no averages" not in table.output, table.output
    assert "its weights are the averages" in table.output
    # Without restore-ema's mark (as any Keras save leaves it), a bare .weights.h5 cannot
    # tell use_ema: the refusal names options eval takes.
    resaved = out / "o" / "resaved.weights.h5"
    shutil.copyfile(dst, resaved)
    with h5py.File(resaved, "r+") as f:
        del f.attrs["ckpt_tools"]
    plain = _ckpt("eval", resaved, "--num-examples", NUM)
    assert plain.exit_code == 6, plain.output
    assert "--use-ema" in plain.stderr
    # the trainer's SGD(momentum=0.9): a bare file records the optimizer only by its name
    said = _ckpt("eval", resaved, "--num-examples", NUM, "--use-ema")
    assert said.exit_code == 6 and "--optimizer sgd:momentum" in said.stderr, said.output
    for stated in ("--use-ema", "--no-use-ema"):
        r = _ckpt("eval", dst, "--num-examples", NUM, stated, "--optimizer", "sgd:momentum",
                  "--json")
        assert r.exit_code == 0, (stated, r.output)
        doc = json.loads(r.stdout)
        assert doc["raw_accuracy"] == want, (stated, doc)
        if stated == "--use-ema":  # restore-ema kept the copies: EMA of the output = its raw
            assert doc["ema_accuracy"] == want
        else:
            assert doc["ema_accuracy"] is None
    table = _ckpt("eval", resaved, "--num-examples", NUM, "--no-use-ema")
    assert table.exit_code == 0 and "--no-use-ema" in table.output, table.output


def test_eval_reads_restore_ema_format_h5(saved):
    out, truth, want = saved
    (out / "o2").mkdir(exist_ok=True)
    dst = out / "o2" / "w.h5"
    r = _ckpt("restore-ema", out / "m.keras", "--format", "h5", "--out", dst,
              "--not-swapped")  # saved during fit(), never swapped
    assert r.exit_code == 0, r.output
    # restore-ema marks its weights-only .h5 too: evaluated as it is, EMA = raw (u19 F10)
    r = _ckpt("eval", dst, "--num-examples", NUM, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["raw_accuracy"] == want == doc["ema_accuracy"] and doc["weights_are_averages"]
    # what its input was read under, which the mark records, said as list/export say it (F3)
    assert doc["written_under"] == {"not_swapped": True}, doc
    assert "read under --not-swapped, as its mark records" in " ".join(r.stderr.split())
    r = _ckpt("eval", dst, "--num-examples", NUM, "--no-use-ema", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["raw_accuracy"] == want
    # without the mark, a weights-only .h5 holds no averages: the refusal names eval's way
    # out (r26 F2)
    import h5py

    unmarked = out / "o2" / "unmarked.h5"
    shutil.copyfile(dst, unmarked)
    with h5py.File(unmarked, "r+") as f:
        del f.attrs["ckpt_tools"]
    r = _ckpt("eval", unmarked, "--num-examples", NUM)
    assert r.exit_code == 6 and "ckpt eval --no-use-ema" in r.stderr, r.output


def test_a_damaged_keras_archive_is_exit_4_in_eval_and_restore_ema(saved, tmp_path):
    """One bit of an EMA copy flipped in the stored model.weights.h5, its zip CRC-32 kept:
    Keras' load_weights raises BadZipFile, which eval says as exit 4 naming the file, and
    restore-ema refuses it so too, never an internal error (review-20-user-u22 F6)."""
    from helpers import flip_in_keras_member, one_line_error

    from ckpt_tools import open_checkpoint

    out, _, _ = saved
    with open_checkpoint(out / "m.keras", not_swapped=True) as ckpt:
        key = next(v.name for v in ckpt.variables() if v.role == "ema")
    bad = tmp_path / "bad.keras"
    flip_in_keras_member(out / "m.keras", bad, key)
    for args in (["eval", bad, "--num-examples", NUM, "--not-swapped"],
                 ["eval", bad, "--num-examples", NUM, "--no-use-ema"],
                 ["restore-ema", bad, "--not-swapped", "--out", tmp_path / "o" / "m.keras"]):
        one_line_error(_ckpt(*args), 4, str(bad), "CRC-32", "model.weights.h5")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("flag,local_name,said", [
    (0x01, None, "is encrypted (zip flag bit 0)"),
    (0, b"xodel.weights.h5", "differ: the archive is corrupt"),
], ids=["encrypted", "local-name"])
def test_a_member_zipfile_refuses_is_exit_4_in_eval(saved, tmp_path, flag, local_name, said):
    """The fit()-saved model file with model.weights.h5's zip header patched (an encrypted
    flag; a local header naming another file), its bytes and CRC-32 intact: Keras'
    load_weights raises RuntimeError / BadZipFile, which eval says as exit 4, one line naming
    the file and the member, with and without the averages (review-20-attack-r50 F5, F1)."""
    from helpers import damage_keras_header, one_line_error

    out, _, _ = saved
    bad = tmp_path / "bad.keras"
    damage_keras_header(out / "m.keras", bad, "model.weights.h5", flag=flag,
                        local_name=local_name)
    for args in (["eval", bad, "--num-examples", NUM, "--not-swapped"],
                 ["eval", bad, "--num-examples", NUM, "--no-use-ema"]):
        one_line_error(_ckpt(*args), 4, f"{bad}: archive member model.weights.h5", said)


@pytest.mark.parametrize("how,said", [
    ("hdf5-then-zip", "is both an HDF5 file (superblock at byte 0) and a zip archive"),
    ("stored-size", "archive member model.weights.h5 is stored uncompressed"),
])
def test_a_file_keras_reads_two_ways_is_exit_4_in_eval(saved, tmp_path, how, said):
    """The fit()-saved model file made both an HDF5 file and a zip (its model.weights.h5 at
    byte 0 with the archive after it; zipfile finds the archive's end record, h5py the
    weights), or with its weights' stored size lowered: eval refuses it as every command does,
    exit 4, one line naming the file, before reading restore-ema's mark from either reading
    (review-21-attack-r54 F1, F2)."""
    from helpers import hdf5_then_zip, one_line_error, patch_keras_sizes

    out, _, _ = saved
    src = out / "m.keras"
    bad = tmp_path / "bad.keras"
    if how == "hdf5-then-zip":
        hdf5_then_zip(src, src.read_bytes(), bad)
    else:
        patch_keras_sizes(src, bad, "model.weights.h5", central_stored=-100)
    for args in (["eval", bad, "--num-examples", NUM, "--not-swapped"],
                 ["eval", bad, "--num-examples", NUM, "--no-use-ema"]):
        one_line_error(_ckpt(*args), 4, f"{bad}: {said}")


def test_eval_reads_a_weights_file_after_a_user_block(saved, tmp_path):
    """The fit()-saved model's weights copied (h5py) behind a 4096-byte HDF5 user block, as
    Keras' load_weights reads them: eval reads them as it reads the archive, not "not an HDF5
    file" (review-21-attack-r54 F7)."""
    import io
    import zipfile

    import h5py

    out, _, _ = saved
    path = tmp_path / "u.weights.h5"
    with zipfile.ZipFile(out / "m.keras") as z, \
            h5py.File(io.BytesIO(z.read("model.weights.h5")), "r") as src, \
            h5py.File(path, "w", userblock_size=4096) as f:
        for key, value in src.attrs.items():
            f.attrs[key] = value
        for name in src:
            src.copy(src[name], f, name=name)
    docs = []
    for target in (path, out / "m.keras"):  # the raw weights, as Keras' load_weights reads
        r = _ckpt("eval", target, "--num-examples", NUM, "--json", "--no-use-ema")
        assert r.exit_code == 0, r.output
        docs.append(json.loads(r.stdout))
    assert docs[0]["raw_accuracy"] == docs[1]["raw_accuracy"]


def test_eval_of_a_file_that_is_no_checkpoint_is_exit_4(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not a checkpoint at all")
    r = _ckpt("eval", junk)
    assert r.exit_code == 4, r.output
    fake = tmp_path / "fake.h5"
    fake.write_bytes(b"not hdf5")
    r = _ckpt("eval", fake)
    assert r.exit_code == 4, r.output


def test_eval_use_ema_is_refused_for_a_tf_checkpoint(tmp_path):
    import tensorflow as tf

    ckpt = tf.train.Checkpoint(v=tf.Variable(1.0))
    prefix = ckpt.write(str(tmp_path / "c"))
    r = _ckpt("eval", prefix, "--use-ema")
    assert r.exit_code == 2, r.output


def _pairing_keys(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k == "assumed" or k.startswith("stated_")}


def test_eval_json_says_what_the_pairing_assumed_and_was_stated_as_export_does(saved, tmp_path):
    """review-13-user-u15 F4: ``eval --json`` of a Keras file carries ``"assumed"`` and
    ``"stated_*"`` with export --json's keys and meaning."""
    out, truth, want = saved
    from ckpt_tools.train import keras_fit
    from ckpt_tools.train.common import TrainConfig

    # Keras' own model has weights of one shape and dtype in different layers (BN gamma and
    # beta): the file cannot show which copy is whose, so fit()'s order is assumed.
    net = keras_fit.compile_model(TrainConfig())
    shapes = [(tuple(v.shape), str(v.dtype)) for v in net.trainable_variables]
    assert len(set(shapes)) < len(shapes)
    for stated, assumed in ((["--not-swapped"], ["fit_order"]),
                            (["--not-swapped", "--fit-order"], None)):
        r = _ckpt("eval", out / "m.keras", "--num-examples", NUM, "--json", *stated)
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        assert doc["ema_accuracy"] == want
        assert doc.get("assumed") == assumed, doc
        assert doc["stated_not_swapped"] is True
        assert doc.get("stated_fit_order") is (True if "--fit-order" in stated else None)
        e = _ckpt("export", out / "m.keras", "--out", tmp_path / "o.npz", "--force", "--json",
                  *stated)
        assert e.exit_code == 0, e.output
        assert _pairing_keys(doc) == _pairing_keys(json.loads(e.stdout))
