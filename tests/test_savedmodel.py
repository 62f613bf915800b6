"""SavedModel directories and sharded V1 checkpoints: every path a user passes, every command.

Fixtures come from real TensorFlow (``fixtures/make_savedmodel_fixtures.py`` and
``make_fixtures.py --only sharded_v1``); their expected files hold what TensorFlow, Keras and
``tf.saved_model.load`` reported at save time. Tests marked with the ``tf`` fixture also re-read
the files with ``tf.train.load_checkpoint`` now.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from _corpus import run_cli
from helpers import FIXTURES, expected, expected_values

from ckpt_tools import ema_map, open_checkpoint
from ckpt_tools.errors import CheckpointNotFoundError, ExitCode
from ckpt_tools.formats.savedmodel import read_saved_model
from ckpt_tools.locate import locate

SV1 = FIXTURES / "sharded_v1"
SHARDS = ["model.ckpt-7-00000-of-00002", "model.ckpt-7-00001-of-00002"]
TF1_SM = FIXTURES / "savedmodel_tf1"
KERAS_SM = FIXTURES / "savedmodel_keras"
SERVING = FIXTURES / "savedmodel_serving" / "model"


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _check_against_record(ckpt, listing, dtypes, values: dict[str, np.ndarray]) -> None:
    """Names, shapes, dtypes as TF listed them; every recorded value bit for bit."""
    assert {k: list(ckpt.entry(k).shape) for k in ckpt.keys()} == {n: s for n, s in listing}
    assert {k: ckpt.entry(k).dtype_name for k in ckpt.keys()} == dtypes
    for key, value in values.items():
        assert _same_bits(ckpt.tensor(key), value), key


# -- sharded V1 --------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [
    "", "checkpoint_dir", "model.ckpt-7-?????-of-00002", "model.ckpt-7.meta", "model.ckpt-7",
    SHARDS[0], SHARDS[1]])
def test_sharded_v1_opens_whole_from_any_path(path):
    exp = expected("sharded_v1")
    target = SV1 if path in ("", "checkpoint_dir") else SV1 / path
    values = {k: v for k, v in expected_values("sharded_v1").items() if ":" not in k}
    with open_checkpoint(target) as ckpt:
        assert ckpt.format == "v1"
        assert ckpt.path == str(SV1 / "model.ckpt-7-?????-of-00002")
        assert sorted(ckpt.files()) == sorted(str(SV1 / f) for f in
                                              [*SHARDS, "model.ckpt-7.meta"])
        _check_against_record(ckpt, exp["list_variables"], exp["dtypes"], values)
        assert set(values) == set(ckpt.keys())
        # Each shard alone holds only part of the keys: opening one must not shrink the set.
        assert all(set(keys) < set(ckpt.keys()) for keys in exp["keys_per_shard"].values())


def test_sharded_v1_matches_tensorflow_now(tf):
    reader = tf.train.load_checkpoint(str(SV1 / "model.ckpt-7-?????-of-00002"))
    with open_checkpoint(SV1) as ckpt:
        assert sorted(ckpt.keys()) == sorted(reader.get_variable_to_shape_map())
        for key in ckpt.keys():
            assert _same_bits(ckpt.tensor(key), reader.get_tensor(key)), key


def test_sharded_v1_collections_and_ema_map_come_from_its_meta():
    exp = expected("sharded_v1")
    with open_checkpoint(SV1 / SHARDS[1]) as ckpt:
        assert ckpt.meta is not None
        colls = {v.name: v.collections for v in ckpt.variables()}
        for op in exp["collections"]["moving_average_variables"]:
            assert "moving_average_variables" in colls[op]
        m = ema_map(ckpt)
        assert m.source == "meta"
        assert {k: v for k, v in m.mapping.items() if k != v} == exp["ema_of"]


@pytest.mark.parametrize("missing", [0, 1])
@pytest.mark.parametrize("via", ["dir", "shard", "meta"])
def test_sharded_v1_missing_shard_is_exit_3_naming_it(fixture_copy, capsys, missing, via):
    d = fixture_copy("sharded_v1")
    (d / SHARDS[missing]).unlink()
    target = {"dir": d, "shard": d / SHARDS[1 - missing], "meta": d / "model.ckpt-7.meta"}[via]
    with pytest.raises(CheckpointNotFoundError, match=SHARDS[missing]):
        open_checkpoint(target)
    for cmd in (["list"], ["verify"], ["map"]):
        code, out, err = run_cli([*cmd, str(target)], capsys)
        assert code == ExitCode.NOT_FOUND, (cmd, out, err)
        assert SHARDS[missing] in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1


def test_old_session_bundle_layout(tmp_path):
    """export-0000N-of-00002 + export.meta, no state file (TF Serving's session bundles)."""
    for i, shard in enumerate(SHARDS):
        shutil.copy(SV1 / shard, tmp_path / f"export-{i:05d}-of-00002")
    shutil.copy(SV1 / "model.ckpt-7.meta", tmp_path / "export.meta")
    values = {k: v for k, v in expected_values("sharded_v1").items() if ":" not in k}
    for target in (tmp_path, tmp_path / "export.meta", tmp_path / "export-00001-of-00002"):
        with open_checkpoint(target) as ckpt:
            assert ckpt.path == str(tmp_path / "export-?????-of-00002")
            assert ckpt.meta is not None and ckpt.name == "export"
            for key, value in values.items():
                assert _same_bits(ckpt.tensor(key), value)


# -- SavedModels -------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["", "saved_model.pb", "variables", "variables/variables.index",
                                  "variables/variables",
                                  "variables/variables.data-00000-of-00001"])
def test_tf1_saved_model_reads_variables_and_collections(path):
    exp = expected("savedmodel_tf1")
    values = expected_values("savedmodel_tf1")
    with open_checkpoint(TF1_SM / path) as ckpt:
        assert ckpt.path == str(TF1_SM / "variables" / "variables")
        _check_against_record(ckpt, exp["list_variables"], exp["dtypes"],
                              {k: v for k, v in values.items() if ":" not in k})
        # ...and what TF1's SavedModel loader restored into the graph.
        for key, value in values.items():
            if key.startswith("loaded:"):
                assert _same_bits(ckpt.tensor(key[len("loaded:"):]), value), key
        # The collections live in saved_model.pb, whatever path form was given.
        colls = {v.name: v.collections for v in ckpt.variables()}
        for op in exp["moving_average_variables"]:
            assert "moving_average_variables" in colls[op]
        m = ema_map(ckpt)
        assert m.source == "meta"
        assert m.mapping == exp["variables_to_restore_graph"]


def test_saved_model_pb_is_parsed_without_tensorflow():
    sm = read_saved_model(str(TF1_SM / "saved_model.pb"))
    assert sm.schema_version == 1 and [g.tags for g in sm.meta_graphs] == [("serve",)]
    graph = sm.collections_graph()
    assert graph.collections["trainable_variables"] == \
        expected("savedmodel_tf1")["collections"]["trainable_variables"]
    assert read_saved_model(str(KERAS_SM / "saved_model.pb")).collections_graph() is None


def test_keras_saved_model_pairs_ema_like_keras(tf):
    exp = expected("savedmodel_keras")
    values = expected_values("savedmodel_keras")
    with open_checkpoint(KERAS_SM) as ckpt:
        assert ckpt.format == "object"
        _check_against_record(ckpt, exp["list_variables"], exp["dtypes"],
                              {k: v for k, v in values.items() if ":" not in k})
        # Object paths come from the TF2 object graph.
        paths = {v.path for v in ckpt.variables()}
        assert {p.split("/", 1)[1] for p in exp["weights"]} <= {
            p.split("/", 1)[1] for p in paths if p and "/" in p}
        by_name = {name: key for key, name in ckpt.objects.full_names.items()}
        for name in exp["loaded_variables"]:  # as tf.saved_model.load restored them
            assert _same_bits(ckpt.tensor(by_name[name]), values["loaded:" + name]), name
        shadow_of = {v: k for k, v in ema_map(ckpt).mapping.items() if k != v}
        assert len(shadow_of) == len(exp["ema_of"])
        for weight_path in exp["ema_of"].values():
            shadow = shadow_of[by_name[weight_path]]
            assert _same_bits(ckpt.tensor(shadow), values["ema:" + weight_path]), weight_path
        reader = tf.train.load_checkpoint(str(KERAS_SM / "variables" / "variables"))
        for key in ckpt.keys():
            if key != "_CHECKPOINTABLE_OBJECT_GRAPH":
                assert _same_bits(ckpt.tensor(key), reader.get_tensor(key)), key


def test_serving_parent_picks_the_highest_version():
    exp = expected("savedmodel_serving")
    values = expected_values("savedmodel_serving")
    assert locate(SERVING).prefix == str(SERVING / "00000010" / "variables" / "variables")
    for version, target in (("00000010", SERVING), ("1", SERVING / "1")):
        record = exp["versions"][version]
        own = {k.split(":", 1)[1]: v for k, v in values.items()
               if k.startswith(version + ":") and k.count(":") == 1}
        with open_checkpoint(target) as ckpt:
            _check_against_record(ckpt, record["list_variables"], record["dtypes"], own)


def test_saved_model_without_variables_is_exit_3(tmp_path, capsys):
    shutil.copy(TF1_SM / "saved_model.pb", tmp_path / "saved_model.pb")
    code, _, err = run_cli(["list", str(tmp_path)], capsys)
    assert code == ExitCode.NOT_FOUND and "variables" in err


def test_damaged_saved_model_pb_is_exit_4_naming_it(fixture_copy, capsys):
    d = fixture_copy("savedmodel_tf1")
    (d / "saved_model.pb").write_bytes(b"\xff" * 64)
    code, _, err = run_cli(["list", str(d)], capsys)
    assert code == ExitCode.CORRUPT and "saved_model.pb" in err and "Traceback" not in err


# -- every command -----------------------------------------------------------------------------
CASES = {
    "sharded_v1": SV1, "sharded_v1_shard": SV1 / SHARDS[0], "savedmodel_tf1": TF1_SM,
    "savedmodel_tf1_pb": TF1_SM / "saved_model.pb", "savedmodel_keras": KERAS_SM,
    "serving": SERVING,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_command_works(case, tmp_path, capsys):
    path = str(CASES[case])
    has_ema = case != "serving"  # trained without EMA: map and restore-ema refuse (exit 6)
    for argv in (["list", path, "--json"], ["verify", path, "--json"],
                 ["stats", path, "--json"], ["show", path, "*", "--json"],
                 ["diff", path, path, "--json"]):
        code, out, err = run_cli(argv, capsys)
        assert code == 0, (argv, out, err)
        json.loads(out)
    code, out, err = run_cli(["verify", path, "--json"], capsys)
    assert json.loads(out)["ok"]
    code, out, err = run_cli(["map", path, "--json"], capsys)
    assert code == (0 if has_ema else ExitCode.EMA), err
    if has_ema:
        code, out, err = run_cli(["diff", path, "--ema", "--json"], capsys)
        assert code == 0, err
    code, out, err = run_cli(["export", path, "--out", str(tmp_path / "w.npz"), "--json",
                              *([] if has_ema else ["--raw"])], capsys)
    assert code == 0, err
    with np.load(tmp_path / "w.npz") as z:
        assert z.files
    code, out, err = run_cli(["restore-ema", path, "--out", str(tmp_path / "no")], capsys)
    if not has_ema:
        assert code == ExitCode.EMA and len(err.strip().splitlines()) == 1, err
    else:
        code, out, err = run_cli(["restore-ema", path, "--out", str(tmp_path / "baked"),
                                  "--json"], capsys)
        assert code == 0, err
        doc = json.loads(out)
        assert "?" not in doc["output"]
        if doc["format"] == "saved_model":  # a SavedModel gives a SavedModel
            assert doc["output"] == str(tmp_path / "baked")
        else:
            assert Path(doc["output"]).parent == tmp_path / "baked"
        with open_checkpoint(tmp_path / "baked") as baked, open_checkpoint(path) as src:
            for target, shadow in doc["replaced"].items():
                assert _same_bits(baked.tensor(target), src.tensor(shadow))


def test_sharded_v1_gathers_a_partitioned_tensor_across_shards(tf, tmp_path, capsys):
    """One slice per shard: TensorFlow's own load_checkpoint refuses sliced V1 tensors, so the
    truth is the session's values at save time, and TF's Saver restoring our baked output."""
    v1 = tf.compat.v1
    config = v1.ConfigProto(device_count={"CPU": 2})
    with tf.Graph().as_default() as graph:
        with graph.device(lambda op: "/cpu:1" if "part_1" in op.name else "/cpu:0"):
            emb = v1.get_variable("emb", [5, 2], partitioner=v1.fixed_size_partitioner(2),
                                  initializer=v1.random_normal_initializer(seed=3))
        loss = tf.reduce_sum(tf.square(tf.convert_to_tensor(emb) - 1.0))
        opt = v1.train.GradientDescentOptimizer(0.1).minimize(loss)
        ema = v1.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([opt]):
            train = ema.apply(list(emb))
        saver = v1.train.Saver(sharded=True, write_version=v1.train.SaverDef.V1)
        with v1.Session(config=config) as sess:
            sess.run(v1.global_variables_initializer())
            sess.run(train)
            raw = np.concatenate(sess.run(list(emb)))
            avg = np.concatenate(sess.run([ema.average(p) for p in emb]))
            (tmp_path / "run").mkdir()
            saver.save(sess, str(tmp_path / "run" / "model.ckpt"))
    shards = sorted((tmp_path / "run").glob("model.ckpt-*-of-00002"))
    assert len(shards) == 2
    with open_checkpoint(shards[1]) as ckpt:
        assert len(ckpt.entry("emb").slices) == 2
        assert _same_bits(ckpt.tensor("emb"), raw)
        assert _same_bits(ckpt.tensor("emb/ExponentialMovingAverage"), avg)
    code, _, err = run_cli(["restore-ema", str(tmp_path / "run"), "--out",
                            str(tmp_path / "baked")], capsys)
    assert code == 0, err
    reader = tf.train.load_checkpoint(str(tmp_path / "baked" / "model.ckpt"))
    assert _same_bits(reader.get_tensor("emb"), avg)


def test_text_format_saved_model(tf, tmp_path):
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2

    msg = saved_model_pb2.SavedModel.FromString((TF1_SM / "saved_model.pb").read_bytes())
    shutil.copytree(TF1_SM / "variables", tmp_path / "variables")
    (tmp_path / "saved_model.pbtxt").write_text(text_format.MessageToString(msg))
    with open_checkpoint(tmp_path) as ckpt:
        assert ckpt.location.saved_model == str(tmp_path / "saved_model.pbtxt")
        assert ema_map(ckpt).source == "meta"
        assert ema_map(ckpt).mapping == expected("savedmodel_tf1")["variables_to_restore_graph"]


def test_text_format_meta_beside_sharded_v1(tf, tmp_path):
    """Text-format graphs name enums ("version: V1"); the saver settings must still parse."""
    from google.protobuf import text_format
    from tensorflow.core.protobuf import meta_graph_pb2

    msg = meta_graph_pb2.MetaGraphDef.FromString((SV1 / "model.ckpt-7.meta").read_bytes())
    for shard in SHARDS:
        shutil.copy(SV1 / shard, tmp_path / shard)
    (tmp_path / "model.ckpt-7.meta").write_text(text_format.MessageToString(msg))
    with open_checkpoint(tmp_path / "model.ckpt-7.meta") as ckpt:
        assert (ckpt.meta.saver_version, ckpt.meta.saver_sharded) == (1, True)
        assert ema_map(ckpt).source == "meta"


def test_savedmodel_script_regenerates_the_committed_tf1_saved_model(tmp_path):
    """make_savedmodel_fixtures.py rebuilds savedmodel_tf1 with identical variables and
    records (saved_model.pb itself is not byte-stable: see fixtures/README.md)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(FIXTURES / "make_savedmodel_fixtures.py"),
                           "--out", str(tmp_path), "--only", "savedmodel_tf1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    made = tmp_path / "savedmodel_tf1"
    committed = sorted(str(p.relative_to(TF1_SM)) for p in TF1_SM.rglob("*") if p.is_file())
    assert sorted(str(p.relative_to(made)) for p in made.rglob("*") if p.is_file()) == committed
    for name in committed:
        if name != "saved_model.pb":
            assert (made / name).read_bytes() == (TF1_SM / name).read_bytes(), name


def test_sharded_v1_state_file_with_another_machines_absolute_path(fixture_copy):
    d = fixture_copy("sharded_v1")
    (d / "checkpoint").write_text(
        'model_checkpoint_path: "/elsewhere/run/model.ckpt-7-?????-of-00002"\n')
    with open_checkpoint(d) as ckpt:
        assert ckpt.path == str(d / "model.ckpt-7-?????-of-00002")
        assert sorted(ckpt.files())[:2] == [str(d / s) for s in SHARDS]
