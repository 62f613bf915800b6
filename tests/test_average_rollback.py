"""``ckpt average RUN --last N`` after the run's state file was rolled back or reordered with
TensorFlow's own ``tf.train.update_checkpoint_state``: the N listed up to and including the
latest (what ``tf.train.latest_checkpoint`` restores), contiguous, the latest the newest; a
list out of save order (steps not rising) is refused naming the state file (exit 6)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli

SAVES = 5


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tf):
    """A TF1 Saver run keeping 5 checkpoints (global_step 1..5) and the value of ``w`` at
    each save, as the session had it."""
    run = tmp_path_factory.mktemp("rollback") / "run"
    v1 = tf.compat.v1
    values = {}
    with tf.Graph().as_default():
        step = v1.train.get_or_create_global_step()
        w = v1.get_variable("w", initializer=tf.constant([1.0, 2.0]))
        train = v1.group(v1.assign_add(w, [1.0, -0.5]), v1.assign_add(step, 1))
        saver = v1.train.Saver(max_to_keep=SAVES)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for _ in range(SAVES):
                sess.run(train)
                saver.save(sess, str(run / "model.ckpt"), global_step=step)
                values[int(sess.run(step))] = sess.run(w)
    return run, values


def _state(tf, run, latest: int, listed: list[int]) -> None:
    tf.compat.v1.train.update_checkpoint_state(
        str(run), str(run / f"model.ckpt-{latest}"),
        all_model_checkpoint_paths=[str(run / f"model.ckpt-{i}") for i in listed])


def _average(run, out, last: int):
    return run_cli(["average", str(run), "--last", str(last), "--out", str(out), "--json"])


def test_rolled_back_state_file_averages_up_to_its_latest(saved, tmp_path, tf):
    run, values = saved
    _state(tf, run, 3, [1, 2, 3, 4, 5])  # rolled back to 3; 4 and 5 still listed after it
    assert tf.train.latest_checkpoint(str(run)).endswith("model.ckpt-3")
    code, out, err = _average(run, tmp_path / "avg", 2)
    assert code == 0, err
    result = json.loads(out)
    assert [p.rsplit("-", 1)[1] for p in result["inputs"]] == ["2", "3"]
    assert result["newest"].endswith("model.ckpt-3")
    reader = tf.train.load_checkpoint(result["output"])
    assert reader.get_tensor("global_step") == 3
    mean = np.mean([values[2], values[3]], axis=0, dtype=np.float64).astype(np.float32)
    assert np.array_equal(reader.get_tensor("w"), mean)


def test_rolled_back_state_file_with_too_few_before_its_latest(saved, tmp_path, tf):
    run, _ = saved
    _state(tf, run, 2, [1, 2, 3, 4, 5])
    code, _, err = _average(run, tmp_path / "avg", 3)
    assert code == 3, err
    assert "rolled back" in err and "model.ckpt-2" in err


def test_state_file_older_than_the_files_present_uses_its_own_list(saved, tmp_path, tf):
    run, _ = saved
    _state(tf, run, 3, [1, 2, 3])  # a restored state file: 4 and 5 exist but are not listed
    code, out, err = _average(run, tmp_path / "avg", 3)
    assert code == 0, err
    assert [p.rsplit("-", 1)[1] for p in json.loads(out)["inputs"]] == ["1", "2", "3"]


def test_state_file_out_of_save_order_is_refused(saved, tmp_path, tf):
    run, _ = saved
    _state(tf, run, 5, [1, 2, 4, 3, 5])
    code, _, err = _average(run, tmp_path / "avg", 3)
    assert code == 6, err
    line = next(x for x in err.splitlines() if x.startswith("error:"))
    assert "checkpoint" in line and "model.ckpt-4" in line and "model.ckpt-3" in line, line
    assert "not in save order" in line
    assert not (tmp_path / "avg").exists()
    # In save order again: fine.
    _state(tf, run, 5, [1, 2, 3, 4, 5])
    code, out, err = _average(run, tmp_path / "avg", 3)
    assert code == 0, err
    assert [p.rsplit("-", 1)[1] for p in json.loads(out)["inputs"]] == ["3", "4", "5"]
