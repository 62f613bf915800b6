"""Keras 3 sharded weights (``save_weights("model.weights.json", max_shard_size=...)``): a shard
read alone numbers its optimizer variables as in the whole model, so its "EMA copies" belong to
layers of other shards (review-11-attack-r10 F1: another layer's averages, exit 0). Shards, the
map and a directory of them are refused (exit 5) naming the map; the way out the message gives
(load the map in Keras, save one file) yields the optimizer's averages bit for bit. Everything is
made here by Keras 3, the truth read from the optimizer at save time."""

from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest
from helpers import keras_averages
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()


def _model(keras):
    # shapes that prove the pairing in one bare .weights.h5 (equal ones would need --trainable)
    return keras.Sequential([keras.Input((16,)), keras.layers.Dense(16, name="a"),
                             keras.layers.Dense(12, name="b"), keras.layers.Dense(8, name="c")])


def _optimizer(keras):
    return keras.optimizers.SGD(0.05, momentum=0.9, use_ema=True, ema_momentum=0.5)


@pytest.fixture(scope="module")
def sharded(keras, tmp_path_factory):
    """A directory holding ``model.weights.json`` and its shards, and the truth:
    {weight path: its EMA copy} from the optimizer at save time."""
    keras.utils.set_random_seed(3)
    model = _model(keras)
    model.compile(_optimizer(keras), "mse")
    x = np.random.RandomState(0).rand(32, 16).astype("float32")
    model.fit(x, x[:, :8], epochs=2, batch_size=8, verbose=0)
    model.train_on_batch(x[:8], x[:8, :8])  # fit() ends by copying the averages in: train past it
    opt = model.optimizer
    truth = keras_averages(opt)
    directory = tmp_path_factory.mktemp("sharded")
    model.save_weights(str(directory / "model.weights.json"), max_shard_size=2.5e-6)
    return directory, truth


def _shards(directory):
    return sorted(directory.glob("model_*.weights.h5"))


def test_a_shard_its_map_and_their_directory_are_refused(sharded, tmp_path):
    directory, _ = sharded
    assert len(_shards(directory)) >= 3
    out = tmp_path / "w.npz"
    for path in [*_shards(directory), directory / "model.weights.json", directory]:
        for argv in (["export", str(path), "--use-ema", "--out", str(out)],
                     ["list", str(path)]):
            result = runner.invoke(app, argv)
            assert result.exit_code == 5, (argv, result.output)
            text = " ".join(result.output.split())
            assert "model.weights.json" in text and "Traceback" not in text, text
            assert not out.exists()


def test_a_shard_away_from_its_map_is_refused_by_its_numbering(sharded, tmp_path):
    directory, _ = sharded
    later = [p for p in _shards(directory) if any(
        min(int(k) for k in g) > 0 for g in _vars_groups(p))]
    assert later, "no shard starts its numbering past 0"
    alone = tmp_path / "alone.weights.h5"
    shutil.copy(later[0], alone)
    result = runner.invoke(app, ["export", str(alone), "--use-ema", "--out",
                                 str(tmp_path / "w.npz")])
    assert result.exit_code == 5, result.output
    assert "one shard of Keras' sharded weights" in " ".join(result.output.split())


@pytest.fixture(scope="module")
def cut_after_a_layer(keras, tmp_path_factory):
    """Shards cut so that a later one continues layer c's group and starts the optimizer at
    vars/0 (the reviewer's layout: iteration, learning_rate and layer a's two averages)."""
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(32, name="a"),
                              keras.layers.Dense(32, name="b"), keras.layers.Dense(3, name="c")])
    model.compile(_optimizer(keras), "mse")
    x = np.random.RandomState(1).rand(64, 6).astype("float32")
    model.fit(x, x[:, :3], epochs=2, batch_size=16, verbose=0)
    directory = tmp_path_factory.mktemp("cut")
    model.save_weights(str(directory / "model.weights.json"), max_shard_size=4e-6)
    return directory


def test_a_shard_numbered_from_zero_away_from_its_map_is_refused(cut_after_a_layer, tmp_path):
    """The shard holding optimizer/vars/0.. passes the numbering check; copied away from its
    map and read with --use-ema it paired layer c with layer a's averages, exit 0
    (review-11-attack-r10 F1, residual). Only the first shard of a sharded save holds the
    model's root vars group, which every whole file has; a layer continued from the previous
    shard has an unnamed vars group. Every shard alone is refused, or holds no averages."""
    directory = cut_after_a_layer
    with_zero = [p for p in _shards(directory) if _holds(p, "optimizer/vars/0")]
    assert with_zero and not _holds(with_zero[0], "vars"), "layout of the shards changed"
    for i, shard in enumerate(_shards(directory)):
        alone = tmp_path / f"alone{i}" / "ck.weights.h5"
        alone.parent.mkdir()
        shutil.copy(shard, alone)
        out = tmp_path / f"w{i}.npz"
        result = runner.invoke(app, ["export", str(alone), "--use-ema", "--out", str(out)])
        if _holds(shard, "vars"):  # the first: its layers, no averages
            assert result.exit_code != 0 and not out.exists(), result.output
            continue
        assert result.exit_code == 5, (shard.name, result.output)
        assert "one shard of Keras' sharded weights" in " ".join(result.output.split())
        assert not out.exists()


def _holds(path, name: str) -> bool:
    with h5py.File(path, "r") as f:
        return name in f


def _vars_groups(path):
    groups = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: groups.append(list(obj)) if isinstance(
            obj, h5py.Group) and name.endswith("vars") and len(obj) else None)
    return groups


def test_the_way_out_the_refusal_gives_yields_the_averages(keras, sharded, tmp_path):
    directory, truth = sharded
    model = _model(keras)
    model.compile(_optimizer(keras), "mse")
    model.optimizer.build(model.trainable_variables)
    model.load_weights(str(directory / "model.weights.json"))
    whole = tmp_path / "model.weights.h5"
    model.save_weights(str(whole))
    out = tmp_path / "w.npz"
    # SGD(momentum): a bare file records neither use_ema nor momentum: both stated
    stated = ["--use-ema", "--optimizer", "sgd:momentum"]
    result = runner.invoke(app, ["export", str(whole), *stated, "--out", str(out)])
    assert result.exit_code == 6 and "--not-swapped" in result.output, result.output
    result = runner.invoke(app, ["export", str(whole), *stated, "--not-swapped", "--out",
                                 str(out)])  # saved mid-training, never swapped: stated
    assert result.exit_code == 0, result.output
    # every weight's shape is its own: no pairing rests on fit()'s order, and none is noted
    text = " ".join(result.output.split())
    assert "SwapEMAWeights" in text and "fit() builds" not in text, result.output
    with np.load(out) as z:
        got = {name: z[name] for name in z.files}
    assert len(got) == len(truth)
    for path, value in truth.items():
        name = path.split("/", 1)[1]  # the model's name is not in a bare .weights.h5
        assert got[name].tobytes() == value.tobytes(), path
