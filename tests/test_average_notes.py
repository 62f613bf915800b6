"""``ckpt average``'s notes: NaN/Inf averages are named in a warning (values as NumPy's mean),
and the progress bar counts the same binary units as the summary line."""

from __future__ import annotations

import json

import numpy as np
from _corpus import run_cli, write_bundle
from _in_process import run_in_process
from helpers import set_terminal


def _bundles(tmp_path):
    a = write_bundle(tmp_path / "a" / "m", {
        "global_step": np.array(1, np.int64), "w": np.array([np.inf, 1.0, np.nan], np.float32),
        "ok": np.arange(4000, dtype=np.float32)})
    b = write_bundle(tmp_path / "b" / "m", {
        "global_step": np.array(2, np.int64), "w": np.array([-np.inf, 3.0, 0.0], np.float32),
        "ok": np.ones(4000, np.float32)})
    return a, b


def test_nonfinite_averages_are_named_in_one_warning(tmp_path, tf):
    a, b = _bundles(tmp_path)
    proc = run_in_process(["average", str(a), str(b), "--out", str(tmp_path / "o"), "--json"])
    assert proc.returncode == 0, proc.stderr
    assert "RuntimeWarning" not in proc.stderr and "Traceback" not in proc.stderr
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "NaN or Inf" in warnings[0] and ": w" in warnings[0], proc.stderr
    result = json.loads(proc.stdout)
    assert result["nonfinite"] == ["w"]
    reader = tf.train.load_checkpoint(result["output"])
    inputs = [tf.train.load_checkpoint(str(p)) for p in (a, b)]
    with np.errstate(invalid="ignore"):  # inf + -inf: NumPy's NaN is the expected value
        want = np.mean([r.get_tensor("w").astype(np.float64) for r in inputs], 0)
    want = want.astype(np.float32)
    np.testing.assert_array_equal(reader.get_tensor("w"), want)  # NaN where NumPy has NaN
    assert np.isnan(want[0]) and np.isnan(want[2]) and want[1] == 2.0


def test_progress_bar_counts_binary_units_like_the_summary(tmp_path, capsys, monkeypatch):
    from ckpt_tools.cli._output import Output

    a, b = _bundles(tmp_path)
    set_terminal(monkeypatch)
    monkeypatch.setattr(Output, "PROGRESS_MIN_BYTES", 0)
    code, _, err = run_cli(["average", str(a), str(b), "--out", str(tmp_path / "o")], capsys)
    assert code == 0, err
    assert "KiB" in err, err  # 2 x 16 KB of tensors: rich's binary units, as "wrote … KiB"
    assert " kB" not in err and " MB" not in err, err


def test_dynamic_loss_scale_is_copied_from_the_newest(tmp_path, tf):
    """tf_keras mixed precision: the loss scale is training state (a power of two moving with
    ``good_steps``), copied from the newest like the step, never averaged."""
    import tf_keras as keras

    opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    v = tf.Variable([1.0, 2.0])
    ckpt = tf.train.Checkpoint(v=v, optimizer=opt)
    saved = []
    for scale in (1.0, np.inf):  # the second step overflows: TF halves the loss scale
        with tf.GradientTape() as tape:
            loss = opt.get_scaled_loss(tf.reduce_sum(v * v) * scale)
        grads = opt.get_unscaled_gradients(tape.gradient(loss, [v]))
        opt.apply_gradients(zip(grads, [v], strict=True))
        saved.append((ckpt.save(str(tmp_path / "run" / "ckpt")), float(opt.loss_scale)))
    assert saved[0][1] != saved[1][1]
    proc = run_in_process(["average", *(p for p, _ in saved), "--out", str(tmp_path / "o"),
                           "--json"])
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    key = "optimizer/loss_scale/current_loss_scale/.ATTRIBUTES/VARIABLE_VALUE"
    assert key in result["copied"]
    assert tf.train.load_checkpoint(result["output"]).get_tensor(key) == saved[1][1]
