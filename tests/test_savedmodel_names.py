"""TF2 SavedModel names in `map`'s messages match `ckpt list` (object paths), and so do the
weight counts. Truth: the weights Keras reported at save time (fixtures/savedmodel_serving) or
a model saved by TensorFlow in the test."""

from __future__ import annotations

from _corpus import run_cli
from helpers import FIXTURES, expected

SERVING = FIXTURES / "savedmodel_serving" / "model"


def _list_summary(capsys, path) -> tuple[set[str], str]:
    code, out, err = run_cli(["list", str(path), "--wide"], capsys)
    assert code == 0, err
    names = {line.split()[0] for line in out.splitlines()[2:] if line.strip()}
    return names, (out + err).strip().splitlines()[-1]


def test_map_names_weights_as_list_does(capsys):
    """TF2 SavedModel: map's error names object paths, as list shows them, and counts alike."""
    names, summary = _list_summary(capsys, SERVING)
    code, _, err = run_cli(["map", str(SERVING)], capsys)
    assert code == 6
    weights = expected("savedmodel_serving")["versions"]["00000010"]["weights"]
    assert f"none of {len(weights)} weights" in summary
    assert f"any of its {len(weights)} weights: " in err
    for w in weights:
        assert w in names and w in err, w
    assert "optimizer/_trainable_variables" not in err


def test_bn_statistics_without_any_average_are_not_counted_as_weights(tf, tmp_path, capsys):
    """No average at all: `map` counts the weights `list` counts (BN statistics are averaged
    only by TF1 trainers that chose to)."""
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="d"),
                              keras.layers.BatchNormalization(name="bn")], name="net")
    model(tf.zeros([1, 3]))
    tf.saved_model.save(model, str(tmp_path / "sm"))
    trainable = len(model.trainable_weights)  # kernel, bias, gamma, beta: 4; 2 BN statistics
    _, summary = _list_summary(capsys, tmp_path / "sm")
    assert f"none of {trainable} weights" in summary
    code, _, err = run_cli(["map", str(tmp_path / "sm")], capsys)
    assert code == 6 and f"any of its {trainable} weights" in err, err
    assert "moving_mean" not in err


def test_tf2_savedmodel_without_averages_tells_the_serving_story(tf, tmp_path, capsys):
    """A TF2 SavedModel of a module whose EMA was not saved with it: the likely story is a
    serving export (averages assigned before saving, ``--raw``), not "a tf.train.Checkpoint
    saves only what it is given" (review-14-attack-r25 F4a)."""

    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.ones([3, 3]), name="w")
            self.b = tf.Variable(tf.zeros([3]), name="b")

        @tf.function(input_signature=[tf.TensorSpec([None, 3])])
        def __call__(self, x):
            return x @ self.w + self.b

    net = Net()
    tf.train.ExponentialMovingAverage(0.9).apply(net.trainable_variables)
    tf.saved_model.save(net, str(tmp_path / "sm"))
    for cmd in (["export", str(tmp_path / "sm"), "--out", str(tmp_path / "x.npz")],
                ["restore-ema", str(tmp_path / "sm"), "-o", str(tmp_path / "re")]):
        code, _, err = run_cli(cmd, capsys)
        assert code == 6, err
        assert "tf.saved_model.save()" in err and "may already be the averages" in err, err
        assert "ckpt export --raw" in err, err
        assert "tf.train.Checkpoint saves only what it is given" not in err, err
        assert "optimizer=optimizer" not in err, err  # a checkpoint's advice, not a SavedModel's
