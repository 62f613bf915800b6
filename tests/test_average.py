"""``ckpt average``: checked against NumPy on what TensorFlow reads, and restored by TensorFlow."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
from _in_process import run_in_process

from ckpt_tools import EmaError, average_checkpoints, open_checkpoint
from ckpt_tools.average import checkpoints_of_run

STEPS = 4  # checkpoints kept by the run


@pytest.fixture(scope="session")
def tf1_run(tmp_path_factory, tf):
    """A TF1 run: partitioned variable, EMA, sharded Saver, STEPS checkpoints kept."""
    v1 = tf.compat.v1
    run = tmp_path_factory.mktemp("tf1_run")
    with tf.Graph().as_default():
        step = v1.train.get_or_create_global_step()
        w = v1.get_variable("emb", shape=[6, 3], partitioner=v1.fixed_size_partitioner(2),
                            initializer=v1.random_normal_initializer(seed=1))
        b = v1.get_variable("b", shape=[3], initializer=v1.zeros_initializer())
        h = v1.get_variable("half", shape=[2], dtype=tf.float16,
                            initializer=v1.ones_initializer())
        loss = tf.reduce_sum(tf.square(tf.reduce_sum(w, 0) + b - 1.0)) + tf.reduce_sum(
            tf.cast(h, tf.float32) ** 2)
        opt = v1.train.MomentumOptimizer(0.1, 0.9).minimize(loss, global_step=step)
        ema = v1.train.ExponentialMovingAverage(0.5, step)
        with tf.control_dependencies([opt]):
            train = ema.apply(v1.trainable_variables())
        saver = v1.train.Saver(sharded=True, max_to_keep=STEPS)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            for _ in range(STEPS + 1):
                sess.run(train)
                saver.save(sess, str(run / "model.ckpt"), global_step=step)
    return run


def _tf_values(tf, prefix: str) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(prefix)
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()}


def _mean(values: list[np.ndarray]) -> np.ndarray:
    acc = np.zeros(values[0].shape, np.float64)
    for v in values:
        acc += v
    return (acc / len(values)).astype(values[0].dtype)


def test_average_matches_numpy_and_tensorflow_restores_it(tf1_run, tmp_path, tf):
    inputs = checkpoints_of_run(tf1_run, 3)
    assert [p.rsplit("-", 1)[1] for p in inputs] == ["3", "4", "5"]
    result = average_checkpoints(inputs, tmp_path / "avg")
    truth = [_tf_values(tf, p) for p in inputs]
    out = _tf_values(tf, result.prefix)
    assert set(out) == set(truth[-1])
    for key, value in out.items():
        if truth[-1][key].dtype.kind == "f" and key != "global_step":
            np.testing.assert_array_equal(value, _mean([t[key] for t in truth]), err_msg=key)
            assert key in result.averaged
        else:
            np.testing.assert_array_equal(value, truth[-1][key], err_msg=key)
    assert out["global_step"] == 5 and "global_step" in result.copied
    assert out["half"].dtype == np.float16
    # The partitioned variable is still partitioned, and TensorFlow's Saver restores it.
    with open_checkpoint(result.prefix) as ckpt:
        assert ckpt.entry("emb").slices and len(ckpt.entry("emb").slices) == 2
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        saver = v1.train.import_meta_graph(result.prefix + ".meta")
        with v1.Session() as sess:
            saver.restore(sess, result.prefix)
            parts = sorted((v for v in v1.global_variables()
                            if re.fullmatch(r"emb/part_\d+", v.op.name)), key=lambda v: v.op.name)
            emb = np.concatenate(sess.run(parts), 0)
    np.testing.assert_array_equal(emb, _mean([t["emb"] for t in truth]))


def test_ema_average_and_bake(tf1_run, tmp_path, tf):
    inputs = checkpoints_of_run(tf1_run, 2)
    result = average_checkpoints(inputs, tmp_path / "ema", ema=True, bake=True)
    truth = [_tf_values(tf, p) for p in inputs]
    out = _tf_values(tf, result.prefix)
    shadow = "b/ExponentialMovingAverage"
    np.testing.assert_array_equal(out[shadow], _mean([t[shadow] for t in truth]))
    np.testing.assert_array_equal(out["b"], out[shadow])  # baked under the plain name
    assert result.baked["b"] == shadow
    np.testing.assert_array_equal(out["b/Momentum"], truth[-1]["b/Momentum"])  # not averaged


def test_ema_without_shadows_is_exit_6(tmp_path):
    import shutil

    from helpers import FIXTURES

    copy = tmp_path / "copy"
    shutil.copytree(FIXTURES / "linear_trainable_only", copy)
    with pytest.raises(EmaError, match="no EMA shadows"):
        average_checkpoints([FIXTURES / "linear_trainable_only", copy],
                            tmp_path / "x", ema=True, newest=copy)


def test_last_without_a_state_file_says_what_last_reads(tf1_run, tmp_path):
    """A run directory copied without its 'checkpoint' state file (or a Keras run, which
    writes none): --last said only "DIR/checkpoint: no such file"; it says what --last reads
    and to name the checkpoints, and that Keras files cannot be averaged where the directory
    holds them (review-22-user-u24 F4)."""
    from helpers import FIXTURES

    run = tmp_path / "run"
    shutil.copytree(tf1_run, run, ignore=shutil.ignore_patterns("checkpoint"))
    proc = run_in_process(["average", str(run), "--last", "2", "--out", str(tmp_path / "a")])
    assert proc.returncode == 3, proc.stderr
    line = proc.stderr.strip()
    assert line == (f"error: {run}: --last N takes the checkpoints the 'checkpoint' state file "
                    "lists, and there is none: name them (ckpt average A B ...)"), line
    shutil.copy(FIXTURES / "keras_ema" / "model.keras", run / "ckpt-10.keras")
    proc = run_in_process(["average", str(run), "--last", "2", "--out", str(tmp_path / "a")])
    assert proc.returncode == 3 and "\n" not in proc.stderr.strip(), proc.stderr
    assert "name them" in proc.stderr and "Keras files here cannot be averaged" in proc.stderr
    assert not (tmp_path / "a").exists()


def test_different_shapes_are_exit_6_naming_the_variable(tmp_path):
    from helpers import FIXTURES

    proc = run_in_process(["average", str(FIXTURES / "linear_v2"), str(FIXTURES / "towers_bn"),
                           "--out", str(tmp_path / "x")])
    assert proc.returncode == 6, proc.stderr
    assert proc.stderr.startswith("error:") and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_cli_last_n_json_and_refusals(tf1_run, tmp_path):
    before = {p.name: p.read_bytes() for p in tf1_run.iterdir()}
    proc = run_in_process(["average", str(tf1_run), "--last", "4", "--out",
                           str(tmp_path / "avg"), "--json"])
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert len(doc["inputs"]) == 4 and "emb" in doc["averaged"]
    assert (tmp_path / "avg" / "checkpoint").is_file()
    # Too few checkpoints listed: exit 3; output exists: exit 7; input directory: exit 7.
    assert run_in_process(["average", str(tf1_run), "--last", "9", "--out",
                           str(tmp_path / "b")]).returncode == 3
    again = run_in_process(["average", str(tf1_run), "--last", "2", "--out",
                            str(tmp_path / "avg")])
    assert again.returncode == 7 and "already exists" in again.stderr
    inside = run_in_process(["average", str(tf1_run), "--last", "2", "--out", str(tf1_run)])
    assert inside.returncode == 7
    assert {p.name: p.read_bytes() for p in tf1_run.iterdir()} == before
    assert run_in_process(["average", str(tf1_run), "--out", str(tmp_path / "c")]
                          ).returncode == 2


def test_tf2_object_checkpoints(tmp_path, tf):
    """A CheckpointManager run; TensorFlow's tf.train.Checkpoint restores the average."""
    run = tmp_path / "tf2_run"
    w = tf.Variable(tf.random.stateless_normal([3, 2], seed=[1, 2]), name="w")
    ema = tf.train.ExponentialMovingAverage(0.5)
    ema.apply([w])
    step = tf.Variable(0, dtype=tf.int64)
    ckpt = tf.train.Checkpoint(w=w, w_ema=ema.average(w), step=step)
    manager = tf.train.CheckpointManager(ckpt, str(run), max_to_keep=3)
    for _ in range(3):
        w.assign_add(tf.ones_like(w))
        ema.apply([w])
        step.assign_add(1)
        manager.save()
    inputs = checkpoints_of_run(run, 3)
    result = average_checkpoints(inputs, tmp_path / "avg")
    truth = [_tf_values(tf, p) for p in inputs]
    key = "w/.ATTRIBUTES/VARIABLE_VALUE"
    w2 = tf.Variable(tf.zeros([3, 2]))
    e2 = tf.Variable(tf.zeros([3, 2]))
    s2 = tf.Variable(0, dtype=tf.int64)
    tf.train.Checkpoint(w=w2, w_ema=e2, step=s2).restore(result.prefix).assert_consumed()
    np.testing.assert_array_equal(w2.numpy(), _mean([t[key] for t in truth]))
    np.testing.assert_array_equal(
        e2.numpy(), _mean([t["w_ema/.ATTRIBUTES/VARIABLE_VALUE"] for t in truth]))
    assert s2.numpy() == 3


# --- which input is the newest, and what is copied from it ---------------------------------


def test_newest_is_the_largest_global_step_whatever_the_argument_order(tf1_run, tmp_path, tf):
    """A shell glob gives model.ckpt-5 before model.ckpt-3: the step decides, not the order."""
    inputs = checkpoints_of_run(tf1_run, 3)
    shuffled = [inputs[2], inputs[0], inputs[1]]  # steps 5, 3, 4
    result = average_checkpoints(shuffled, tmp_path / "avg")
    assert result.newest == inputs[2] and result.newest_by == "global_step 5"
    assert result.inputs == inputs and result.prefix.endswith("model.ckpt-5")
    truth = [_tf_values(tf, p) for p in inputs]
    out = _tf_values(tf, result.prefix)
    assert out["global_step"] == 5
    for key, value in out.items():
        if key in result.averaged:
            np.testing.assert_array_equal(value, _mean([t[key] for t in truth]), err_msg=key)
        else:
            np.testing.assert_array_equal(value, truth[-1][key], err_msg=key)
    proc = run_in_process(["average", *shuffled, "--out", str(tmp_path / "cli")])
    assert proc.returncode == 0, proc.stderr
    assert "model.ckpt-5, by global_step 5)" in proc.stdout
    assert _tf_values(tf, str(tmp_path / "cli" / "model.ckpt-5"))["global_step"] == 5


def test_ties_and_unknown_order_are_exit_6_naming_newest(tf1_run, tmp_path):
    from helpers import FIXTURES

    before = {p.name: p.read_bytes() for p in tf1_run.iterdir()}
    copy = tmp_path / "copy"
    copy.mkdir()
    newest = checkpoints_of_run(tf1_run, 1)[0]
    for f in tf1_run.glob("model.ckpt-5*"):
        (copy / f.name).write_bytes(f.read_bytes())
    tie = run_in_process(["average", newest, str(copy / "model.ckpt-5"), "--out",
                          str(tmp_path / "t")])
    assert tie.returncode == 6 and "--newest CKPT" in tie.stderr, tie.stderr
    assert len(tie.stderr.strip().splitlines()) == 1 and not (tmp_path / "t").exists()
    chosen = run_in_process(["average", newest, str(copy / "model.ckpt-5"), "--out",
                             str(tmp_path / "t"), "--newest", str(copy), "--json"])
    assert chosen.returncode == 0, chosen.stderr
    doc = json.loads(chosen.stdout)
    assert doc["newest"] == str(copy / "model.ckpt-5") and doc["newest_by"] == "--newest"
    # The same checkpoint twice (prefix and .index) is refused, not counted twice.
    dup = run_in_process(["average", newest, newest + ".index", "--out", str(tmp_path / "d")])
    assert dup.returncode == 6 and "given twice" in dup.stderr
    # --newest must be one of the inputs (usage, exit 2).
    other = run_in_process(["average", newest, str(copy / "model.ckpt-5"), "--out",
                            str(tmp_path / "o"), "--newest", str(FIXTURES / "linear_v2")])
    assert other.returncode == 2 and "--newest" in other.stderr
    assert {p.name: p.read_bytes() for p in tf1_run.iterdir()} == before


def test_counters_and_non_floats_come_from_the_newest(tmp_path, tf):
    """towers_bn: zero-debias ``local_step``/``biased`` (float32) and int64 global_step are
    copied from the newest, never averaged; every float weight is the NumPy mean."""
    from helpers import FIXTURES

    run = FIXTURES / "towers_bn"
    old, new = (str(run / "model.ckpt-20"), str(run / "model.ckpt-30"))
    result = average_checkpoints([new, old], tmp_path / "avg")
    truth = [_tf_values(tf, p) for p in (old, new)]
    out = _tf_values(tf, result.prefix)
    debias = [k for k in out if k.endswith(("/local_step", "/biased"))]
    assert debias and "global_step" in out
    for key in debias + ["global_step"]:
        assert key in result.copied
        np.testing.assert_array_equal(out[key], truth[1][key], err_msg=key)
    assert not np.array_equal(truth[0][debias[0]], truth[1][debias[0]])
    for key, value in out.items():
        if value.dtype.kind != "f":
            assert key in result.copied
            np.testing.assert_array_equal(value, truth[1][key], err_msg=key)
        elif key not in debias:
            np.testing.assert_array_equal(value, _mean([t[key] for t in truth]), err_msg=key)


def test_state_file_names_the_output_relative(tf1_run, tmp_path, tf):
    """TF1 Savers write absolute paths into the run's state file; the output's names only
    its own prefix, relative, so the output directory can be moved."""
    assert str(tf1_run) in (tf1_run / "checkpoint").read_text()
    result = average_checkpoints(checkpoints_of_run(tf1_run, 2), tmp_path / "avg")
    state = (tmp_path / "avg" / "checkpoint").read_text()
    assert state == ('model_checkpoint_path: "model.ckpt-5"\n'
                     'all_model_checkpoint_paths: "model.ckpt-5"\n')
    moved = tmp_path / "moved"
    (tmp_path / "avg").rename(moved)
    assert tf.train.latest_checkpoint(str(moved)) == str(moved / "model.ckpt-5")
    assert result.prefix == str(tmp_path / "avg" / "model.ckpt-5")


def test_sharded_v1_output_has_real_shard_names(tmp_path, tf):
    from helpers import FIXTURES

    src = FIXTURES / "sharded_v1"
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in src.glob("model.ckpt-7*"):
        (copy / f.name).write_bytes(f.read_bytes())
    result = average_checkpoints([src, copy], tmp_path / "avg", newest=copy)
    names = sorted(p.name for p in (tmp_path / "avg").iterdir())
    assert names == ["checkpoint", "model.ckpt-7.data-00000-of-00001", "model.ckpt-7.index",
                     "model.ckpt-7.meta"]
    assert result.prefix == str(tmp_path / "avg" / "model.ckpt-7")
    truth = _tf_values(tf, str(src / "model.ckpt-7-?????-of-00002"))
    out = _tf_values(tf, tf.train.latest_checkpoint(str(tmp_path / "avg")))
    assert set(out) == set(truth)
    for key, value in truth.items():
        np.testing.assert_array_equal(out[key], value, err_msg=key)


def test_saved_model_inputs_give_a_saved_model_tensorflow_loads(tmp_path, tf):
    """Two SavedModels (the second's variables rewritten by TensorFlow's SaveV2): the output
    is a SavedModel whose variables TF1's loader restores as the NumPy mean."""
    import shutil

    from helpers import FIXTURES, expected

    src = FIXTURES / "savedmodel_tf1"
    other = tmp_path / "sm2"
    shutil.copytree(src, other)
    first = _tf_values(tf, str(src / "variables" / "variables"))
    second = {k: (v * 3 + 1).astype(v.dtype) for k, v in first.items()}
    for f in (other / "variables").iterdir():
        f.unlink()
    keys = sorted(second)
    tf.raw_ops.SaveV2(prefix=str(other / "variables" / "variables"), tensor_names=keys,
                      shape_and_slices=[""] * len(keys),
                      tensors=[tf.constant(second[k]) for k in keys])
    out = tmp_path / "avg"
    # No step recorded: which is newest cannot be told without --newest.
    with pytest.raises(EmaError, match="--newest"):
        average_checkpoints([src, other], out)
    result = average_checkpoints([src, other], out, newest=other)
    assert result.saved_model == str(out) and result.prefix == str(out / "variables/variables")
    assert sorted(p.name for p in out.iterdir()) == ["saved_model.pb", "variables"]
    v1 = tf.compat.v1
    with tf.Graph().as_default(), v1.Session() as sess:
        v1.saved_model.load(sess, expected("savedmodel_tf1")["tags"], str(out))
        loaded = sess.run({v.op.name: v for v in v1.global_variables()})
    assert set(loaded) == set(first)
    for key in first:
        np.testing.assert_array_equal(loaded[key], _mean([first[key], second[key]]), err_msg=key)
    proc = run_in_process(["average", str(src), str(other), "--newest", str(other), "--name",
                           "x", "--out", str(tmp_path / "n")])
    assert proc.returncode == 5 and "--name" in proc.stderr


def test_tf2_newest_by_save_counter(tmp_path, tf):
    run = tmp_path / "tf2"
    w = tf.Variable(tf.zeros([2]))
    n = tf.Variable(0, dtype=tf.int32)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(w=w, n=n), str(run), 3)
    for i in range(3):
        w.assign_add(tf.ones([2]) * (i + 1))
        n.assign(10 - i)  # an integer that does not grow: the save counter decides
        manager.save()
    inputs = checkpoints_of_run(run, 3)
    result = average_checkpoints(inputs[::-1], tmp_path / "avg")
    assert result.newest == inputs[-1] and result.newest_by == "save_counter 3"
    out = _tf_values(tf, result.prefix)
    assert out["n/.ATTRIBUTES/VARIABLE_VALUE"] == 8
    assert out["save_counter/.ATTRIBUTES/VARIABLE_VALUE"] == 3
    w2, n2 = tf.Variable(tf.zeros([2])), tf.Variable(0, dtype=tf.int32)
    tf.train.Checkpoint(w=w2, n=n2).restore(result.prefix).assert_consumed()
    np.testing.assert_array_equal(w2.numpy(), np.full([2], (1 + 3 + 6) / 3, np.float32))
    assert n2.numpy() == 8


def test_copied_run_with_absolute_state_file_reads_the_copy(tf1_run, tmp_path):
    """A TF1 run copied elsewhere keeps absolute paths to the original in its state file:
    ``--last`` reads the copy, and the copy's state file is an input ``--force`` never
    replaces."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tf1_run, copy)
    assert str(tf1_run) in (copy / "checkpoint").read_text()
    inputs = checkpoints_of_run(copy, 2)
    assert all(p.startswith(str(copy)) for p in inputs), inputs
    before = {p.name: p.read_bytes() for p in copy.iterdir()}
    proc = run_in_process(["average", str(copy), "--last", "2", "--out", str(copy), "--name",
                           "avg", "--force"])
    assert proc.returncode == 7, proc.stderr
    assert {p.name: p.read_bytes() for p in copy.iterdir()} == before


def test_keras_inputs_are_exit_5(tmp_path):
    from helpers import FIXTURES

    src = FIXTURES / "keras_ema" / "adam.keras"
    copy = tmp_path / "b.keras"
    copy.write_bytes(src.read_bytes())
    proc = run_in_process(["average", str(src), str(copy), "--out", str(tmp_path / "o")])
    assert proc.returncode == 5 and "a Keras .keras archive" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "o").exists()


def test_complex_and_float8_variables_are_averaged_not_copied(tmp_path, tf):
    """review-16-final M1: complex64/128 and float8 variables were copied from the newest input
    as "the average" (exit 0). Written by TensorFlow's SaveV2, read back by TensorFlow: each is
    the element-wise mean (complex128 / float64 accumulator) in its stored dtype."""
    import ml_dtypes

    rng = np.random.default_rng(0)
    prefixes = []
    for i in (1, 2, 3):
        values = {
            "c64": (rng.normal(size=[3]) + 1j * rng.normal(size=[3])).astype(np.complex64),
            "c128": (rng.normal(size=[2, 2]) + 1j * rng.normal(size=[2, 2])).astype(np.complex128),
            "f8": rng.normal(size=[5]).astype(ml_dtypes.float8_e4m3fn),
            "f8b": rng.normal(size=[5]).astype(ml_dtypes.float8_e5m2),
        }
        names = [*values, "global_step"]
        prefix = str(tmp_path / "run" / f"m-{i}")
        tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                          tensors=[tf.constant(v) for v in values.values()]
                          + [tf.constant(np.int64(10 * i))])
        prefixes.append(prefix)
    result = average_checkpoints(prefixes, tmp_path / "avg")
    truth = [_tf_values(tf, p) for p in prefixes]
    out = _tf_values(tf, result.prefix)
    for key in ("c64", "c128", "f8", "f8b"):
        wide = np.complex128 if key.startswith("c") else np.float64
        acc = sum(t[key].astype(wide) for t in truth) / 3
        expected = acc.astype(truth[0][key].dtype)
        assert out[key].dtype == truth[0][key].dtype, key
        assert out[key].tobytes() == expected.tobytes(), key
        assert out[key].tobytes() != truth[-1][key].tobytes(), key  # not the newest copied
        assert key in result.averaged
    assert out["global_step"] == 30 and "global_step" in result.copied


def test_one_path_instead_of_a_list_is_a_type_error(tf1_run, tmp_path):
    """review-16-final m2: a string is a sequence, so each character was taken for a checkpoint
    ("r: no checkpoint found"); the error now says what to pass, and average_run is the way
    to average a run directory's newest N."""
    with pytest.raises(TypeError, match="average_run"):
        average_checkpoints(str(tf1_run), tmp_path / "avg")
    assert not (tmp_path / "avg").exists()


def test_a_tf1_and_a_tf2_run_are_different_models_not_a_step_question(tf1_run, tmp_path, tf):
    """review-16-final m6: a TF1 run (global_step) and a TF2 run (save_counter) were refused
    as 'not every input records a global_step or save_counter'; both do: the reason is that
    they are checkpoints of different models."""
    run = tmp_path / "tf2"
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(w=tf.Variable(tf.zeros([2]))),
                                         str(run), 1)
    manager.save()
    proc = run_in_process(["average", checkpoints_of_run(tf1_run, 1)[0], str(run),
                           "--out", str(tmp_path / "avg")])
    assert proc.returncode == 6, proc.stderr
    assert "different models" in proc.stderr and "save_counter" not in proc.stderr
    assert not (tmp_path / "avg").exists()


def test_a_state_file_listing_a_checkpoint_twice_says_so(tf1_run, tmp_path):
    """review-16-final m4: a duplicate entry was reported as 'lists ckpt-5 before ckpt-5, not
    in save order'."""
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(tf1_run, copy)
    latest = checkpoints_of_run(copy, 1)[0].rsplit("/", 1)[1]
    older = checkpoints_of_run(copy, 2)[0].rsplit("/", 1)[1]
    (copy / "checkpoint").write_text(
        f'model_checkpoint_path: "{latest}"\n'
        f'all_model_checkpoint_paths: "{older}"\n'
        f'all_model_checkpoint_paths: "{older}"\n'
        f'all_model_checkpoint_paths: "{latest}"\n')
    proc = run_in_process(["average", str(copy), "--last", "3", "--out", str(tmp_path / "a")])
    assert proc.returncode == 6, proc.stderr
    assert f"lists {copy / older} twice" in proc.stderr and "save order" not in proc.stderr
