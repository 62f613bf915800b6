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


@pytest.fixture(scope="module")
def tf2_rollback(tmp_path_factory, tf):
    """The layout TensorFlow itself writes after a rollback: a CheckpointManager saves ckpt-1..5;
    a new manager (as a new process would) restores ckpt-3, trains, saves: TF names the new
    save ckpt-4 (replacing the old ckpt-4), keeps ckpt-5 of the abandoned branch, and writes
    the list ckpt-1, 2, 3, 5, 4 with the latest ckpt-4. Returns the run, the values of ``w``
    at each save of the kept branch (from the live variable) and the abandoned ckpt-5's."""
    run = tmp_path_factory.mktemp("tf2rollback") / "run"
    w = tf.Variable([1.0, 2.0])
    root = tf.train.Checkpoint(w=w)
    manager = tf.train.CheckpointManager(root, str(run), max_to_keep=5)
    values = {}
    for i in range(1, 6):
        w.assign_add([1.0, -0.5])
        manager.save()
        values[i] = w.numpy().copy()
    abandoned = values.pop(5)
    values.pop(4)
    root2 = tf.train.Checkpoint(w=w)
    manager2 = tf.train.CheckpointManager(root2, str(run), max_to_keep=5)
    root2.restore(str(run / "ckpt-3")).assert_consumed()
    w.assign_add([10.0, 10.0])
    manager2.save()
    values[4] = w.numpy().copy()
    state = tf.train.get_checkpoint_state(str(run))
    assert [p.rsplit("/", 1)[1] for p in state.all_model_checkpoint_paths] == [
        "ckpt-1", "ckpt-2", "ckpt-3", "ckpt-5", "ckpt-4"]
    assert tf.train.latest_checkpoint(str(run)).endswith("ckpt-4")
    return run, values, abandoned


def test_tf_rollback_refusal_names_the_latest_and_newest(tf2_rollback, tmp_path, tf):
    run, values, _ = tf2_rollback
    code, _, err = _average(run, tmp_path / "avg", 2)
    assert code == 6, err
    line = next(x for x in err.splitlines() if x.startswith("error:"))
    assert "not in save order" in line, line
    latest = str(run / "ckpt-4")
    assert f"its latest is {latest}" in line and "tf.train.latest_checkpoint" in line, line
    assert f"--newest {latest}" in line, line
    assert not (tmp_path / "avg").exists()
    # What the message says to do: --newest decides (the largest step, 5, is the abandoned
    # branch's ckpt-5, which the user leaves out).
    code, out, err = run_cli(["average", str(run / "ckpt-3"), latest, "--newest", latest,
                              "--out", str(tmp_path / "avg"), "--json"])
    assert code == 0, err
    result = json.loads(out)
    assert result["newest"] == latest
    reader = tf.train.load_checkpoint(result["output"])
    assert reader.get_tensor("save_counter/.ATTRIBUTES/VARIABLE_VALUE") == 4
    mean = np.mean([values[3], values[4]], axis=0, dtype=np.float64).astype(np.float32)
    assert np.array_equal(reader.get_tensor("w/.ATTRIBUTES/VARIABLE_VALUE"), mean)
