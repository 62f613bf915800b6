"""A weight left out of ``ema.apply()`` while others were averaged: never exported or restored
raw with exit 0. TF's own ``variables_to_restore()`` looks for its average and fails; every
command refuses (exit 6) naming ``--allow-missing``, with or without the ``.meta``, and
``apply_ema`` raises unless ``allow_missing=True``. A variable the live object proves
non-trainable restores raw, as ``variables_to_restore()`` maps it. Checkpoints are made here
by real TensorFlow; values compared with ``ema.average(v)`` read at save time."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from _tf_runner import run_python
from helpers import run_cli, train_ema
from typer.testing import CliRunner

import ckpt_tools
from ckpt_tools import EmaError
from ckpt_tools.cli import app

runner = CliRunner()


class _Net:
    @staticmethod
    def make(tf):
        class Net(tf.Module):
            def __init__(self):
                super().__init__()
                self.body = tf.Variable(tf.random.normal([3, 3]))
                self.head = tf.Variable(tf.random.normal([3]), name="head")

        return Net()


@pytest.fixture(scope="module")
def tf2_subset(tf, tmp_path_factory):
    m = _Net.make(tf)
    ema = tf.train.ExponentialMovingAverage(0.5)
    train_ema(tf, [m.body, m.head], ema, averaged=[m.body])  # the head trained, left out
    d = tmp_path_factory.mktemp("tf2_subset")
    tf.train.Checkpoint(model=m, ema=[ema.average(m.body)]).write(str(d / "ckpt"))
    return d, ema.average(m.body).numpy(), m.head.numpy()


@pytest.fixture(scope="module")
def tf1_subset(tmp_path_factory):
    d = tmp_path_factory.mktemp("tf1_subset")
    script = textwrap.dedent(f"""
        import os
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        import tensorflow as tf
        tf1 = tf.compat.v1
        tf1.disable_eager_execution()
        W = tf1.get_variable("W", [3, 3]); b = tf1.get_variable("b", [3])
        x = tf1.random_normal([4, 3])
        loss = tf1.reduce_sum(tf1.tanh(tf1.matmul(x, W) + b) ** 2)
        step = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
        ema = tf1.train.ExponentialMovingAverage(0.5)
        with tf1.control_dependencies([step]):
            train = ema.apply([W])
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(train)
            tf1.train.Saver().save(s, {str(d / "model.ckpt")!r})
    """)
    run_python(["-c", script], check=True, timeout=300)
    return d


@pytest.mark.parametrize("command", ["export", "restore-ema"])
def test_tf2_weight_left_out_is_refused_naming_allow_missing(tf2_subset, command, tmp_path):
    d, _, _ = tf2_subset
    out = tmp_path / ("w.npz" if command == "export" else "baked")
    for quiet in ([], ["--quiet"]):
        result = runner.invoke(app, [command, str(d), "--out", str(out), *quiet])
        assert result.exit_code == 6, result.output
        assert "--allow-missing" in result.stderr and "model/head" in result.stderr
        assert "ema.average(v)" in result.stderr and "<name>/" not in result.stderr
        assert not out.exists()
    result = runner.invoke(app, [command, str(d), "--out", str(out), "--allow-missing"])
    assert result.exit_code == 0, result.output


def test_tf2_export_with_allow_missing_says_what_is_raw(tf2_subset, tmp_path):
    d, body_avg, head_raw = tf2_subset
    out = tmp_path / "w.npz"
    result = runner.invoke(app, ["export", str(d), "--out", str(out), "--allow-missing",
                                 "--json"])
    assert result.exit_code == 0, result.output
    import json

    doc = json.loads(result.stdout)
    assert doc["raw"] == ["model/head"] and doc["averaged"] == ["model/body"], doc
    with np.load(out) as z:
        assert z["model/body"].tobytes() == body_avg.tobytes()
        assert z["model/head"].tobytes() == head_raw.tobytes()


def test_apply_ema_raises_unless_allow_missing(tf, tf2_subset):
    d, body_avg, head_raw = tf2_subset
    live = _Net.make(tf)
    before = live.head.numpy().copy()
    with pytest.raises(EmaError, match="allow_missing=True"):
        ckpt_tools.apply_ema(live, d)
    assert live.head.numpy().tobytes() == before.tobytes()
    ckpt_tools.apply_ema(live, d, allow_missing=True)
    assert live.body.numpy().tobytes() == body_avg.tobytes()
    assert live.head.numpy().tobytes() == head_raw.tobytes()


@pytest.mark.parametrize("meta", [[], ["--no-meta"]])
def test_tf1_weight_left_out_is_refused_with_or_without_the_meta(tf1_subset, meta, tmp_path):
    out = tmp_path / "w.npz"
    result = runner.invoke(app, ["export", str(tf1_subset), "--out", str(out), *meta])
    assert result.exit_code == 6, result.output
    assert "--allow-missing" in result.stderr and "b" in result.stderr, result.stderr
    assert not out.exists()


def test_averages_saved_without_their_model_are_refused_saying_so(tf, tmp_path):
    """``tf.train.Checkpoint(ema=[...])`` saved apart from the model: the averages are listed
    as averages (not loss averages), and map, export and restore-ema refuse (exit 6) saying
    the variables they average are not stored, instead of "no weights" (exit 7)."""
    m = _Net.make(tf)
    ema = tf.train.ExponentialMovingAverage(0.5)
    ema.apply([m.body, m.head])
    d = tmp_path / "emaonly"
    tf.train.Checkpoint(ema=[ema.average(m.body), ema.average(m.head)]).write(str(d / "ckpt"))
    listed = runner.invoke(app, ["list", str(d), "--role", "ema", "-q"])
    assert listed.exit_code == 0 and len(listed.stdout.splitlines()) == 2, listed.output
    for args in (["map", str(d)], ["export", str(d), "--out", str(tmp_path / "w.npz")],
                 ["restore-ema", str(d), "--out", str(tmp_path / "baked")]):
        result = runner.invoke(app, args)
        assert result.exit_code == 6, (args, result.output)
        assert "does not store" in result.stderr and "tf.train.Checkpoint(model=" in \
            result.stderr, result.stderr
    assert not (tmp_path / "w.npz").exists() and not (tmp_path / "baked").exists()


@pytest.mark.parametrize("args", [
    ["export", "--exclude", "model/head"], ["export", "--exclude", "model/he*"],
    ["export", "--grep", "model/body"], ["map", "--exclude", "model/head"]])
def test_tf2_weight_a_filter_leaves_out_needs_no_average(tf2_subset, args, tmp_path):
    """A weight ``--grep``/``--exclude`` leaves out is not exported: its missing average is
    no reason to refuse, as ``restore-ema --grep`` already agreed (F2)."""
    d, body_avg, _ = tf2_subset
    out = tmp_path / "w.npz"
    tail = ["--out", str(out)] if args[0] == "export" else ["--json"]
    result = runner.invoke(app, [args[0], str(d), *args[1:], *tail])
    assert result.exit_code == 0, result.output
    if args[0] == "map":
        assert "model/head" not in result.stdout, result.stdout
        return
    with np.load(out) as z:
        assert sorted(z.files) == ["model/body"], z.files
        assert z["model/body"].tobytes() == body_avg.tobytes()


@pytest.mark.parametrize("args", [
    ["export", "--grep", "model/head"], ["export", "--exclude", "model/body"],
    ["map", "--exclude", "model/body"]])
def test_tf2_filter_never_hides_a_missing_average_it_keeps(tf2_subset, args, tmp_path):
    d, _, _ = tf2_subset
    tail = ["--out", str(tmp_path / "w.npz")] if args[0] == "export" else []
    result = runner.invoke(app, [args[0], str(d), *args[1:], *tail])
    assert result.exit_code == 6, result.output
    assert "1 weight" in result.stderr and "model/head" in result.stderr, result.stderr
    assert "pass --allow-missing (allow_missing=True)" in result.stderr, result.stderr
    assert not (tmp_path / "w.npz").exists()


@pytest.fixture(scope="module")
def tf2_both(tf, tmp_path_factory):
    m = _Net.make(tf)
    ema = tf.train.ExponentialMovingAverage(0.5)
    train_ema(tf, [m.body, m.head], ema)
    d = tmp_path_factory.mktemp("tf2_both")
    tf.train.Checkpoint(model=m, ema=[ema.average(m.body), ema.average(m.head)]).write(
        str(d / "ckpt"))
    return d, ema.average(m.body).numpy(), ema.average(m.head).numpy()


@pytest.mark.parametrize("args", [["--exclude", "ema/0"], ["--exclude", "model/body"],
                                  ["--grep", "ema/1"]])
def test_tf2_exclude_of_an_averages_listed_name_leaves_its_weight_out(tf2_both, args,
                                                                       tmp_path):
    """review-27-attack-r98 F6 (3299283's regression): ``--exclude ema/0``, the name ``ckpt
    list`` shows for body's average, left nothing out of export (exit 0, body written from
    the excluded average) while ``map --exclude ema/0`` and ``--grep`` select by it. One rule
    for export and map: body is left out, head written from its average, bit for bit."""
    d, _, head_avg = tf2_both
    out = tmp_path / "w.npz"
    result = runner.invoke(app, ["export", str(d), *args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    with np.load(out) as z:
        assert sorted(z.files) == ["model/head"], z.files
        assert z["model/head"].tobytes() == head_avg.tobytes()
    mapped = runner.invoke(app, ["map", str(d), *args, "--json"])
    assert mapped.exit_code == 0 and "model/body" not in mapped.stdout, mapped.output


def test_api_export_filters_leave_out_a_weight_without_average(tf2_subset, tmp_path):
    d, body_avg, _ = tf2_subset
    with pytest.raises(EmaError, match="model/head"):
        ckpt_tools.export_weights(d, tmp_path / "a.npz", include=["model/head"])
    result = ckpt_tools.export_weights(d, tmp_path / "b.npz", exclude=["model/head"])
    assert result.averaged == ("model/body",) and list(result.tensors) == ["model/body"]


@pytest.mark.parametrize("meta", [[], ["--no-meta"]])
def test_tf1_filters_apply_before_the_missing_refusal(tf1_subset, meta, tmp_path):
    out = tmp_path / "w.npz"
    left = runner.invoke(app, ["export", str(tf1_subset), "--out", str(out), "--exclude", "b",
                               *meta])
    assert left.exit_code == 0, left.output
    with np.load(out) as z:
        assert z.files == ["W"], z.files
    kept = runner.invoke(app, ["export", str(tf1_subset), "--out", str(tmp_path / "b.npz"),
                               "--grep", "b", *meta])
    assert kept.exit_code == 6 and "b" in kept.stderr, kept.output
    mapped = runner.invoke(app, ["map", str(tf1_subset), "--exclude", "b", *meta])
    assert mapped.exit_code == 0, mapped.output


@pytest.mark.parametrize("command", ["export", "restore-ema", "map"])
def test_allow_missing_with_not_one_average_stored_is_refused(command, tmp_path):
    """--allow-missing restores raw values beside stored averages; on a checkpoint that stores
    none (a Saver that dropped every shadow) it exported only raw weights with exit 0
    (review-11-user-r11 F10, user-r9 F26): refused, the way the file's family says, naming
    --raw for raw weights on purpose."""
    out = tmp_path / ("w.npz" if command == "export" else "r")
    argv = [command, "fixtures/linear_trainable_only", "--allow-missing"]
    argv += [] if command == "map" else ["--out", str(out)]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 6, result.output
    text = " ".join(result.output.split())
    assert "--allow-missing keeps raw values only beside stored averages" in text, text
    assert "--raw" in text and not out.exists()


def test_export_of_only_unaveraged_batch_norm_statistics_is_refused(tf, tmp_path):
    """A checkpoint holding batch-norm statistics and no average at all: export went out
    raw with a warning naming --allow-missing (not passed); now refused (exit 6) as
    restore-ema refuses it, and --raw writes the values TensorFlow saved."""
    m = tf.Module()
    m.moving_mean = tf.Variable([1.0, 2.0, 3.0], name="bn/moving_mean", trainable=False)
    m.moving_variance = tf.Variable([4.0, 5.0, 6.0], name="bn/moving_variance",
                                    trainable=False)
    prefix = tf.train.Checkpoint(model=m).write(str(tmp_path / "bn" / "ckpt"))
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", prefix, "--out", str(out)])
    text = " ".join(err.split())
    assert code == 6 and "no variable has an EMA shadow" in text and "--raw" in text, text
    assert not out.exists()
    code, _, err = run_cli(["export", prefix, "--out", str(out), "--raw"])
    assert code == 0, err
    with np.load(out) as z:
        assert z["model/moving_mean"].tobytes() == m.moving_mean.numpy().tobytes()
        assert z["model/moving_variance"].tobytes() == m.moving_variance.numpy().tobytes()


def test_export_of_a_checkpoint_without_weights_says_so(tf, tmp_path):
    """Only a step counter: nothing to export, said as such (exit 7), with or without --raw;
    never a 'no averages: exporting RAW weights' warning."""
    prefix = tf.train.Checkpoint(step=tf.Variable(3, dtype=tf.int64)).write(
        str(tmp_path / "step" / "ckpt"))
    for extra in ([], ["--raw"], ["--allow-missing"]):
        code, _, err = run_cli(["export", prefix, "--out", str(tmp_path / "w.npz"), *extra])
        text = " ".join(err.split())
        assert code == 7 and "no weights to export: it holds no model weights" in text, text
        assert "RAW" not in text, text
