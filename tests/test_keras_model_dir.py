"""An unzipped Keras model directory (``model.save(dir, zipped=False)``: ``config.json``,
``metadata.json``, ``model.weights.h5``) is read with its ``config.json`` exactly as a ``.keras``
archive is, by every command and by ``apply_ema`` (review-12 F6, F10): ``use_ema`` comes from the
config, a model class of its own (``train_step`` applying head before body) is refused as the
``.keras`` is, and ``restore-ema`` writes the ``.keras`` archive of the directory's members,
which ``keras.models.load_model`` reads. Made here by Keras 3 in ``fit()``; the truth is the
optimizer's averages with the variables it was built with, recorded at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_npz_holds, keras_averages, run_cli

import ckpt_tools


def _holds(model, truth: dict[str, np.ndarray], what) -> None:
    """The model's trainable variables hold the averages bit for bit (Sequential: the
    optimizer's order is the model's; names may be uniquified in a second model)."""
    live = model.trainable_variables
    assert len(live) == len(truth), what
    for v, (name, avg) in zip(live, truth.items(), strict=True):
        assert v.numpy().tobytes() == avg.tobytes(), (what, v.path, name)


@pytest.fixture(scope="module")
def plain(keras, tmp_path_factory):
    """A Sequential model saved as a directory, a .keras in a run directory, and truth."""
    def build():
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(4, name="a"),
                                 keras.layers.Dense(3, name="b")], name="seq")

    keras.utils.set_random_seed(0)
    out = tmp_path_factory.mktemp("plain")
    model = build()
    model.compile(keras.optimizers.Adam(0.02, use_ema=True, ema_momentum=0.5), "mse")
    x = np.random.RandomState(0).rand(32, 4).astype("float32")
    for _ in range(3):
        model.train_on_batch(x, x[:, :3])
    truth = keras_averages(model.optimizer)
    model.save(str(out / "unz"), zipped=False)
    (out / "run").mkdir()
    model.save(str(out / "run" / "m.keras"))
    return out, build, truth


def test_the_directory_is_read_with_its_config(plain, tmp_path):
    out, _, truth = plain
    assert sorted(p.name for p in (out / "unz").iterdir() if p.is_file()) == [
        "config.json", "metadata.json", "model.weights.h5"]
    for path in (out / "unz", out / "unz" / "model.weights.h5"):
        code, listed, err = run_cli(["list", str(path)])
        assert code == 0 and "--use-ema" not in err, err  # config.json records use_ema=True
        npz = tmp_path / f"{path.name}.npz"
        code, _, err = run_cli(["export", "--not-swapped", str(path), "--out", str(npz)])
        assert code == 0, err
        assert_npz_holds(npz, truth)
        code, _, err = run_cli(["export", "--not-swapped", str(path), "--no-use-ema", "--out",
                                str(tmp_path / "no.npz")])
        assert code == 6 and "config.json" in err, err  # contradicts what the file records
        code, mapped, err = run_cli(["map", "--not-swapped", str(path)])
        assert code == 0 and "a/kernel" in mapped, err


def test_restore_ema_writes_a_keras_archive_that_load_model_reads(keras, plain, tmp_path):
    out, build, truth = plain
    code, said, err = run_cli(["restore-ema", "--not-swapped", str(out / "unz")])
    assert code == 0, err
    written = out / "unz_ema" / "unz.keras"
    assert written.is_file() and str(written) in said + err
    _holds(keras.models.load_model(str(written)), truth, written)
    weights = tmp_path / "x.weights.h5"
    code, _, err = run_cli(["restore-ema", "--not-swapped",
                            str(out / "unz"), "--out", str(weights)])
    assert code == 0, err
    model = build()
    model.load_weights(str(weights))
    _holds(model, truth, weights)
    named = tmp_path / "y.keras"  # --out naming the archive: it was refused (exit 2)
    code, _, err = run_cli(["restore-ema", "--not-swapped", str(out / "unz"), "--out", str(named)])
    assert code == 0, err
    _holds(keras.models.load_model(str(named)), truth, named)


def test_apply_ema_delegates_every_path_that_resolves_to_a_keras_file(plain):
    out, build, truth = plain
    for path in (out / "unz", out / "run", f"{out / 'run'}/", out / "unz" / "model.weights.h5"):
        model = build()
        ckpt_tools.apply_ema(model, path, not_swapped=True)  # saved mid-fit(), unswapped
        _holds(model, truth, path)


def test_a_model_class_of_its_own_is_refused_as_its_keras_file_is(keras, tf, tmp_path):
    @keras.saving.register_keras_serializable("ckpttest_dir")
    class HNet(keras.Model):
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((self(x, training=True) - y) ** 2)
            vs = (self.get_layer("head").trainable_variables
                  + self.get_layer("body").trainable_variables)
            self.optimizer.apply(tape.gradient(loss, vs), vs)
            return {"loss": loss}

    keras.utils.set_random_seed(1)
    i = keras.Input((4,))
    model = HNet(i, keras.layers.Dense(4, name="head")(keras.layers.Dense(4, name="body")(i)),
                 name="net")
    model.compile(keras.optimizers.Adam(0.05, use_ema=True, ema_momentum=0.9))
    rng = np.random.RandomState(0)
    model.fit(rng.randn(32, 4).astype("f4"), rng.randn(32, 4).astype("f4"), epochs=2,
              batch_size=16, verbose=0)
    truth = keras_averages(model.optimizer)
    model.save(str(tmp_path / "unz"), zipped=False)
    for path in (tmp_path / "unz", tmp_path / "unz" / "model.weights.h5"):
        out = tmp_path / "w.npz"
        code, _, err = run_cli(["export", "--not-swapped",
                                str(path), "--use-ema", "--out", str(out)])
        assert code == 6 and "--trainable" in err, err  # the order is not in the file
        assert not out.exists()
        code, _, err = run_cli(["export", "--not-swapped",
                                str(path), "--trainable", "head,body", "--out",
                                str(out)])
        assert code == 0, err
        assert_npz_holds(out, truth)
        out.unlink()


def test_the_directory_resolves_to_its_model_weights_as_load_model_does(plain, tmp_path):
    import shutil

    out, _, truth = plain
    model_dir = tmp_path / "unz"
    shutil.copytree(out / "unz", model_dir)
    (model_dir / "zz_newer.weights.h5").write_bytes(b"not the model's weights")
    npz = tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped", str(model_dir), "--out", str(npz)])
    assert code == 0 and "zz_newer" not in err, err
    assert_npz_holds(npz, truth)
