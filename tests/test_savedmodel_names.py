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
    assert f"any of its {len(weights)} weight(s): " in err
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
    assert code == 6 and f"any of its {trainable} weight(s)" in err, err
    assert "moving_mean" not in err
