"""A run directory without a ``checkpoint`` state file resolves by the step or epoch its file
names record, never by modification time, which only records how the run was copied (``cp``,
``gsutil cp``, ``rsync`` without ``-t``); names that prove no order are refused (exit 6)
listing the candidates. Checkpoints made here by TensorFlow and Keras 3; the truth is the
averages recorded at save time (``ema.average(v)``, ``_model_variables_moving_average``)."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from helpers import assert_npz_holds, keras_averages, run_cli


def _copied(src, dst, order: list[str]) -> None:
    """Copies ``src``'s files to ``dst`` as a plain copy does: each file's mtime the moment
    of its copy, files matching ``order`` (name prefixes) last, in that order."""
    dst.mkdir()
    files = sorted(src.iterdir(), key=lambda f: [f.name.startswith(p) for p in order])
    for t, f in enumerate(files):
        if f.name != "checkpoint":
            shutil.copyfile(f, dst / f.name)
            os.utime(dst / f.name, (1_000_000 + t, 1_000_000 + t))


@pytest.fixture(scope="module")
def tf2_run(tf, tmp_path_factory):
    """ckpt-1..ckpt-11 of a tf.train.Checkpoint saving averages as a dict; truth per step."""
    out = tmp_path_factory.mktemp("tf2run")

    class M(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.ones([3]), name="w")
            self.b = tf.Variable(tf.zeros([2]), name="b")

    m = M()
    ema = tf.train.ExponentialMovingAverage(0.5)
    ema.apply(m.trainable_variables)
    ckpt = tf.train.Checkpoint(model=m, ema={"w": ema.average(m.w), "b": ema.average(m.b)})
    truth = {}
    for i in range(1, 12):
        m.w.assign_add(tf.ones([3]) * i)
        m.b.assign_add(tf.ones([2]) * i)
        ema.apply(m.trainable_variables)
        ckpt.save(str(out / "run" / "ckpt"))
        truth[i] = {"model/w": ema.average(m.w).numpy(), "model/b": ema.average(m.b).numpy()}
    return out / "run", truth


@pytest.mark.parametrize("last", [["ckpt-9."], ["ckpt-11.", "ckpt-10.", "ckpt-9."]],
                         ids=["cp", "reversed"])
def test_a_copied_tf2_run_exports_its_highest_step(tf2_run, tmp_path, last):
    run, truth = tf2_run
    _copied(run, tmp_path / "copy", last)  # ckpt-9's files are the newest copies
    out = tmp_path / "e.npz"
    code, _, err = run_cli(["export", str(tmp_path / "copy"), "--out", str(out)])
    assert code == 0, err
    assert "using ckpt-11.index (the highest step/epoch number in the names" in err, err
    assert_npz_holds(out, truth[11])


def test_names_that_prove_no_order_are_refused(tf, tf2_run, tmp_path):
    run, truth = tf2_run
    _copied(run, tmp_path / "copy", ["ckpt-9."])
    shutil.copyfile(run / "ckpt-3.index", tmp_path / "copy" / "best.index")
    shutil.copyfile(run / "ckpt-3.data-00000-of-00001",
                    tmp_path / "copy" / "best.data-00000-of-00001")
    code, out, err = run_cli(["export", str(tmp_path / "copy"), "--out", str(tmp_path / "x.npz")])
    assert code == 6 and not (tmp_path / "x.npz").exists(), err
    assert "do not prove which is the latest" in err and "best.index, ckpt-1.index" in err, err
    assert "name the file" in err and err.count("\n") == 1, err
    code, _, err = run_cli(["export", str(tmp_path / "copy" / "ckpt-9"), "--out",
                            str(tmp_path / "n.npz")])
    assert code == 0, err
    assert_npz_holds(tmp_path / "n.npz", truth[9])


def test_keras_model_checkpoint_epochs_not_mtime(keras, tmp_path):
    """``ModelCheckpoint("ep{epoch}-{loss:.2f}.keras")``: the epoch decides (ep10 after ep9,
    whatever the loss), also in a copy made in name order, where ep9 is the newest file."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="d")])
    model.compile(keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5), "mse")
    truth = {}

    class Record(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            truth[epoch + 1] = keras_averages(model.optimizer)

    x = np.random.RandomState(0).rand(8, 4).astype("float32")
    run = tmp_path / "mc"
    saver = keras.callbacks.ModelCheckpoint(str(run / "ep{epoch}-{loss:.2f}.keras"))
    model.fit(x, x[:, :3], epochs=10, batch_size=8, verbose=0, callbacks=[saver, Record()])
    names = sorted(p.name for p in run.iterdir())
    assert len(names) == 10 and names[-1].startswith("ep9-"), names
    _copied(run, tmp_path / "copy", [])  # name order: ep9-… is copied last
    out = tmp_path / "e.npz"
    code, _, err = run_cli(["export", str(tmp_path / "copy"), "--out", str(out),
                            "--not-swapped"])  # ModelCheckpoint alone: stated
    assert code == 0, err
    assert "using ep10-" in err and "highest step/epoch" in err, err
    assert_npz_holds(out, truth[10])


def test_a_copied_run_in_a_bucket_by_its_names(s3, tf2_run, tmp_path):
    """The same on object storage (``gsutil cp``/``aws s3 cp`` of a run without its state
    file): ``LastModified`` follows the upload order, ckpt-9's last."""
    pytest.importorskip("s3fs")
    from conftest import BUCKET

    run, truth = tf2_run
    for f in sorted(run.iterdir(), key=lambda f: f.name.startswith("ckpt-9.")):
        if f.name != "checkpoint":
            s3["client"].upload_file(str(f), BUCKET, f"copied_run/{f.name}")
    out = tmp_path / "e.npz"
    code, _, err = run_cli(["export", f"s3://{BUCKET}/copied_run/", "--out", str(out)])
    assert code == 0, err
    assert_npz_holds(out, truth[11])


def test_a_tf_series_beside_keras_files_is_refused(tmp_path):
    """ckpt-3, ckpt-12 and two weights.NN.weights.h5 in one directory without a state file:
    it used ckpt-12 and did not mention the Keras files; steps and epochs do not compare
    (review-11-attack-r13 F2). Refused (exit 6) naming both kinds."""
    fixtures = os.path.join(os.path.dirname(__file__), "..", "fixtures")
    run = tmp_path / "run"
    run.mkdir()
    for step in (3, 12):
        for ext in ("index", "data-00000-of-00001"):
            shutil.copy(os.path.join(fixtures, "linear_v2", f"model.ckpt.{ext}"),
                        run / f"ckpt-{step}.{ext}")
    for epoch in (8, 20):
        shutil.copy(os.path.join(fixtures, "keras_ema", "adam.weights.h5"),
                    run / f"weights.{epoch:02d}.weights.h5")
    code, _, err = run_cli(["list", str(run)])
    assert code == 6, err
    text = " ".join(err.split())
    assert "TensorFlow checkpoints" in text and "weights.20.weights.h5" in text, text


@pytest.mark.parametrize(("keras_name", "picked"), [
    ("ep03.keras", None), ("ep12.keras", "ep12.keras"), ("ep13.keras", "ep13.keras"),
    ("model.keras", "model.keras")])
def test_a_keras_file_older_by_its_name_than_a_weights_file(tmp_path, keras_name, picked):
    """ep03.keras beside ep12.weights.h5 (ModelCheckpoint switched to save_weights_only
    mid-run): the .keras was taken, nine epochs older, with a note saying the names record no
    step (review-11-attack-r15 F5). Refused (exit 6) naming both; a .keras of the same or a
    later epoch, or one whose name carries no epoch, is still preferred, and said so."""
    fixtures = os.path.join(os.path.dirname(__file__), "..", "fixtures", "keras_ema")
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(os.path.join(fixtures, "adam.keras"), run / keras_name)
    shutil.copy(os.path.join(fixtures, "adam.weights.h5"), run / "ep12.weights.h5")
    code, _, err = run_cli(["list", str(run)])
    text = " ".join(err.split())
    if picked is None:
        assert code == 6, err
        assert text.startswith("error:") and len(err.strip().splitlines()) == 1, err
        assert "ep03.keras" in text and "ep12.weights.h5 is later" in text, text
    else:
        assert code == 0, err
        assert f"using {picked} (" in text and "names record no step" not in text, text


@pytest.mark.parametrize("newest", ["best.", "ckpt-11."])
def test_one_numbered_name_beside_best_is_refused(tf2_run, tmp_path, newest):
    """Exactly ``ckpt-11`` and ``best`` (a copy of step 3) and no state file: ``best`` was
    read because it was copied last, with exit 0 and a note, though the names prove no order
    and a copy resets modification times (review-32-user-u34 F3). Refused (exit 6) whichever
    is newer, naming both and the prefix to pass; the prefix then reads that step."""
    run, truth = tf2_run
    copy = tmp_path / "copy"
    copy.mkdir()
    for t, (src, dst) in enumerate(sorted(
            [("ckpt-3", "best"), ("ckpt-11", "ckpt-11")],
            key=lambda p: (p[1] + ".").startswith(newest))):
        for ext in (".index", ".data-00000-of-00001"):
            shutil.copyfile(run / (src + ext), copy / (dst + ext))
            os.utime(copy / (dst + ext), (1_000_000 + t, 1_000_000 + t))
    for command in (["list", str(copy)], ["export", str(copy), "--out", str(tmp_path / "x.npz")]):
        code, _, err = run_cli(command)
        text = " ".join(err.split())
        assert code == 6 and not (tmp_path / "x.npz").exists(), err
        assert "best.index, ckpt-11.index" in text and "not evidence" in text, text
        assert f"e.g. {copy}/best)" in text and len(err.strip().splitlines()) == 1, err
    for prefix, step in (("best", 3), ("ckpt-11", 11)):
        out = tmp_path / f"{prefix}.npz"
        code, _, err = run_cli(["export", str(copy / prefix), "--out", str(out)])
        assert code == 0, err
        assert_npz_holds(out, truth[step])
