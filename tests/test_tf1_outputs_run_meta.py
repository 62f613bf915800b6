"""Where ``restore-ema``/``average`` write, and what ``.meta`` goes with it (review-13-attack-r22
F7, F9), on a TF1 run trained by real TensorFlow (MomentumOptimizer + ExponentialMovingAverage,
``Saver()``), the truth read from the session at save time.

* F7: ``--out run/sub`` (or deeper) inside the input's run directory is written: a subdirectory
  is not the run's own directory, which TensorFlow's ``latest_checkpoint(run)`` and ckpt's
  run-directory rules read (``--out run`` itself is refused); the run still resolves to its own
  latest checkpoint, untouched.
* F9: ``--slots drop`` copied the training ``.meta``, whose Saver restores the dropped slots:
  ``import_meta_graph(meta).restore(output)`` failed (NotFoundError). Now the ``.meta`` is left
  out with a warning; ``--slots keep`` still copies it and it restores the averages."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import restored_by_meta


def _train(tf, directory, steps):
    tf1 = tf.compat.v1
    truth = {}
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        w = tf1.get_variable("fc/w", [3, 2])
        b = tf1.get_variable("fc/b", [2])
        x = tf.constant(np.arange(6, dtype="float32").reshape(2, 3))
        loss = tf.reduce_sum((tf.matmul(x, w) + b - 1.0) ** 2)
        train = tf1.train.MomentumOptimizer(0.01, 0.9).minimize(loss, global_step=gs)
        ema = tf1.train.ExponentialMovingAverage(0.5, num_updates=gs)
        with tf.control_dependencies([train]):
            step = ema.apply([w, b])
        saver = tf1.train.Saver()
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(steps):
                s.run(step)
                prefix = saver.save(s, f"{directory}/model.ckpt", global_step=gs)
            for v in (w, b):
                truth[f"ema:{v.op.name}"] = s.run(ema.average(v).read_value())
                truth[f"raw:{v.op.name}"] = s.run(v.read_value())
    return prefix, truth


@pytest.fixture(scope="module")
def made(tmp_path_factory, tf):
    out = tmp_path_factory.mktemp("tf1_outputs_run_meta")
    prefix, truth = _train(tf, out / "run", 3)
    return out, prefix, truth


def _files(directory):
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


@pytest.mark.parametrize("argv", [
    lambda run, prefix: ["restore-ema", str(run), "--out", str(run / "sub")],
    lambda run, prefix: ["restore-ema", prefix, "--out", str(run / "a" / "b")],
    lambda run, prefix: ["average", f"{run}/model.ckpt-2", prefix, "--out", str(run / "avg")],
], ids=["restore-ema", "deeper", "average"])
def test_out_inside_the_input_run_is_written_and_the_run_still_reads_as_its_own(made, argv,
                                                                                 tf):
    out, prefix, _ = made
    run = out / "run"
    before = {p: p.read_bytes() for p in run.iterdir() if p.is_file()}
    latest = tf.train.latest_checkpoint(str(run))
    code, _, err = run_cli(argv(run, prefix))
    assert code == 0, err
    assert {p: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    assert tf.train.latest_checkpoint(str(run)) == latest
    import ckpt_tools
    with ckpt_tools.open_checkpoint(str(run)) as ckpt:
        assert ckpt.path == latest


def test_slots_drop_leaves_the_meta_out(made, tmp_path, tf):
    out, prefix, truth = made
    dropped, kept = tmp_path / "dropped", tmp_path / "kept"
    code, _, err = run_cli(["restore-ema", str(out / "run"), "--out", str(dropped),
                            "--slots", "drop"])
    assert code == 0, err
    assert "the .meta graph was not copied" in err and "--slots keep" in err, err
    assert not list(dropped.glob("*.meta"))
    import ckpt_tools
    with ckpt_tools.open_checkpoint(str(dropped)) as ckpt:
        assert not [k for k in ckpt.entries() if "Momentum" in k]
        for n in ("fc/w", "fc/b"):
            assert ckpt.tensor(n).tobytes() == truth[f"ema:{n}"].tobytes(), n
    code, _, err = run_cli(["restore-ema", str(out / "run"), "--out", str(kept)])
    assert code == 0, err
    got = restored_by_meta(tf, str(kept / "model.ckpt-3"))
    for n in ("fc/w", "fc/b"):
        assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), n
