"""The TF2 / tf_keras / TF1 matrix: every setup of fixtures/make_matrix_tf.py, trained by the real
library, through list, map, restore-ema, export and the Python API, compared bit for bit with
the truth the library recorded at save time. A setup whose file allows several pairings must be
refused (exit 6) by every command until the deciding option is given."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest
from _tf_runner import run_python
from helpers import DECIDE, FIXTURES, prefix, same_bits
from typer.testing import CliRunner

import ckpt_tools
from ckpt_tools import EmaError
from ckpt_tools.cli import app

runner = CliRunner()
CASES = ["tf2_list_unnamed", "tf2_dict_unnamed", "tf2_attr_unnamed", "tf2_attr_named",
         "tf2_tables", "tf2_model_only", "tf2_order_user", "tf2_order_reversed",
         "tf2_apply_twice", "tf2_keras_in_module", "tfk_adam_ema", "tfk_sgd_momentum_ema",
         "tfk_legacy_adam", "tf1_graph", "tf1_sync_replicas", "tf1_slim"]
TF1_CASES = [c for c in CASES if c.startswith("tf1_")]


@pytest.fixture(scope="session")
def matrix(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("matrix_tf")
    proc = run_python([str(FIXTURES / "make_matrix_tf.py"), str(out)], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


KERAS_CASES = ["tfk_adam_ema", "tfk_sgd_momentum_ema"]  # also saved as a tf_keras .keras


def _case(matrix: Path, case: str) -> tuple[str, dict, dict[str, np.ndarray]]:
    name, _, keras = case.partition(":")
    truth = json.loads((matrix / "truth.json").read_text())[name]
    with np.load(matrix / name / "truth.npz", allow_pickle=False) as npz:
        values = {k: npz[k] for k in npz.files}
    if keras:  # the same values under the archive's keys (same order of trainable variables)
        keras_truth = truth["keras_file"]
        values = {k: values[t] for k, t in zip(keras_truth["order"], truth["order"],
                                               strict=True)}
        return str(matrix / keras_truth["path"]), keras_truth, values
    return str(matrix / truth["prefix"]), truth, values


def _options(truth: dict) -> list[str]:
    return ["--apply-order", truth["apply_order"]] if truth.get("apply_order") else []


@pytest.mark.parametrize("case", CASES + [f"{c}:keras" for c in KERAS_CASES])
def test_list_roles_and_pairs(matrix, case):
    path, truth, _ = _case(matrix, case)
    result = runner.invoke(app, ["list", path, "--json"])
    assert result.exit_code == 0, result.output
    doc = {v["name"]: v for v in json.loads(result.stdout)["variables"]}
    assert {k for k, v in doc.items() if v["role"] == "weight"} == set(truth["weights"])
    assert {k for k, v in doc.items() if v["role"] == "bn_stat"} == set(truth["bn_stats"])
    shadows = {k for k, v in doc.items() if v["role"] == "ema"}
    assert shadows == set(truth["pairs"].values())
    for var, shadow in truth["pairs"].items():
        if truth.get("refuse"):
            # Never a guess: either the right variable or no link, with the candidates.
            assert doc[shadow]["ema_of"] in (var, None)
            if doc[shadow]["ema_of"] is None:
                assert var in doc[shadow]["ema_candidates"]
        else:
            assert doc[shadow]["ema_of"] == var
            assert doc[var]["ema"] == shadow


@pytest.mark.parametrize("case", CASES + [f"{c}:keras" for c in KERAS_CASES])
def test_map_restore_export_give_the_recorded_averages(matrix, case, tmp_path, tf):
    path, truth, values = _case(matrix, case)
    if truth.get("no_ema"):
        for argv in (["map", path], ["restore-ema", path, "--out", str(tmp_path / "r")],
                     ["export", path, "--out", str(tmp_path / "w.npz")]):
            result = runner.invoke(app, argv)
            assert result.exit_code == 6, (argv, result.output)
            assert truth["no_ema_says"] in result.output, result.output
            assert "Saver" not in result.output and "tf.trainable_variables" not in result.output
        assert not (tmp_path / "w.npz").exists()
        result = runner.invoke(app, ["export", path, "--out", str(tmp_path / "w.npz"), "--raw"])
        assert result.exit_code == 0, result.output
        return
    if truth.get("refuse"):
        for argv in (["map", path], ["restore-ema", path, "--out", str(tmp_path / "r")],
                     ["export", path, "--out", str(tmp_path / "w.npz")]):
            result = runner.invoke(app, argv)
            assert result.exit_code == 6, (argv, result.output)
            assert "--apply-order" in result.output and "cannot be paired" in result.output
            # the candidates are listed, by the names `ckpt list` shows
            assert re.search(r"model/\S+ or model/", result.output), result.output
        assert not (tmp_path / "w.npz").exists() and not (tmp_path / "r").exists()
        if not truth.get("apply_order"):
            return  # apply() got an order no option states: refusing is the only right answer
    opts = _options(truth)
    result = runner.invoke(app, ["map", path, "--json", *opts])
    assert result.exit_code == 0, result.output
    mapping = json.loads(result.stdout)
    for var, shadow in truth["pairs"].items():
        assert mapping[shadow] == var

    if not path.endswith(".keras"):  # Keras in, Keras out: tested with the Keras files
        out = tmp_path / "baked"
        result = runner.invoke(app, ["restore-ema", path, "--out", str(out), *opts])
        assert result.exit_code == 0, result.output
        reader = tf.train.load_checkpoint(str(out))
        for var, value in values.items():
            assert same_bits(reader.get_tensor(var), value), var
    else:
        m = ckpt_tools.ema_map(path)
        assert {t: s for s, t in m.mapping.items() if s != t} == dict(truth["pairs"])

    listing = {v["name"]: v for v in json.loads(runner.invoke(
        app, ["list", path, "--json"]).stdout)["variables"]}
    npz = tmp_path / "w.npz"
    result = runner.invoke(app, ["export", path, "--out", str(npz), *opts])
    assert result.exit_code == 0, result.output
    with np.load(npz, allow_pickle=False) as got:
        for var, value in values.items():
            assert same_bits(got[listing[var]["path"] or var], value), var


def _matrix_module(matrix: Path):
    spec = importlib.util.spec_from_file_location("make_matrix_tf", FIXTURES / "make_matrix_tf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("case", [c for c in CASES if c not in TF1_CASES])
def test_python_api_ema_map_and_apply_ema(matrix, case, tf):
    path, truth, values = _case(matrix, case)
    order = {"apply_order": truth["apply_order"]} if truth.get("apply_order") else {}
    model = _matrix_module(matrix).build(case)
    if truth.get("no_ema"):
        with pytest.raises(EmaError, match=re.escape(truth["no_ema_says"])):
            ckpt_tools.apply_ema(model, path)
        return
    if truth.get("refuse"):
        with pytest.raises(EmaError, match="apply_order"):
            ckpt_tools.ema_map(path)
        with pytest.raises(EmaError, match="apply_order"):
            ckpt_tools.apply_ema(model, path)
        if not truth.get("apply_order"):
            return
    m = ckpt_tools.ema_map(path, **order)
    assert {t: s for s, t in m.mapping.items() if s != t} == {
        v: s for v, s in truth["pairs"].items()}
    ckpt_tools.apply_ema(model, path, **order)
    for var, key in zip(model.trainable_variables, truth["order"], strict=True):
        assert same_bits(var.numpy(), values[key]), key


def _graph_ema_check(tf, meta: str, ckpt: str, want: dict[str, np.ndarray],
                     ema_name: str | None = None) -> None:
    """The README's recipe: import the training .meta, build ema_saver(checkpoint=...), restore;
    every model variable holds its average, whatever the shadow variables hold."""
    with tf.Graph().as_default():
        tf.compat.v1.train.import_meta_graph(meta)
        saver = ckpt_tools.ema_saver(checkpoint=ckpt, ema_name=ema_name)
        config = tf.compat.v1.ConfigProto(allow_soft_placement=True)
        with tf.compat.v1.Session(config=config) as sess:
            saver.restore(sess, ckpt)
            got: dict[str, list] = {}
            for var in tf.compat.v1.global_variables():
                info = var._save_slice_info
                got.setdefault(info.full_name if info else var.op.name, []).append(
                    (info.var_offset if info else [0], var))
            for target, value in want.items():
                parts = [sess.run(v) for _, v in sorted(got[target], key=lambda p: p[0])]
                whole = np.concatenate(parts) if len(parts) > 1 else parts[0]
                assert same_bits(whole, value), target


@pytest.mark.parametrize("case", TF1_CASES)
def test_ema_saver_in_imported_graph_matrix(matrix, tf, case):
    path, truth, values = _case(matrix, case)
    _graph_ema_check(tf, path + ".meta", path, values)


META_FILES = sorted(str(p.relative_to(FIXTURES)) for p in FIXTURES.glob("*/*.meta"))


@pytest.mark.parametrize("meta", [m for m in META_FILES
                                  if not m.startswith("linear_trainable_only/")])
@pytest.mark.parametrize("ema_name", [None, "avg"])
def test_ema_saver_in_imported_graph_every_meta_fixture(meta, ema_name, tf):
    """Truth from TensorFlow: the graph's moving_average_variables() and, for each, the value
    tf.train.load_checkpoint reads under its shadow's name (TF's default name unless another
    is asked for)."""
    exp = json.loads((FIXTURES / meta).parent.joinpath("expected.json").read_text())
    if ema_name and exp.get("ema_name") != ema_name:
        pytest.skip("the checkpoint has no averages of that name")
    path = str(FIXTURES / meta)[: -len(".meta")]
    case = meta.split("/")[0]
    if ema_name is None and "ema_name" in DECIDE.get(case, {}):
        # several EMA objects: refused until one is named, then TF's default name is asked for
        with tf.Graph().as_default():
            tf.compat.v1.train.import_meta_graph(path + ".meta")
            with pytest.raises(EmaError, match="--ema-name"):
                ckpt_tools.ema_saver(checkpoint=path)
        ema_name = DECIDE[case]["ema_name"]
    data = str((FIXTURES / meta).parent / exp["prefix"])  # sharded V1: a file pattern
    reader = tf.train.load_checkpoint(data)
    want = {}
    with tf.Graph().as_default():
        tf.compat.v1.train.import_meta_graph(path + ".meta")
        for var in tf.compat.v1.moving_average_variables():
            info = var._save_slice_info
            key = info.full_name if info else var.op.name
            shadow = f"{key}/{ema_name or 'ExponentialMovingAverage'}"
            if reader.has_tensor(shadow):
                want[key] = reader.get_tensor(shadow)
    assert want
    _graph_ema_check(tf, path + ".meta", data, want, ema_name)


def test_ema_saver_refuses_checkpoint_without_shadows(tf):
    case = "linear_trainable_only"
    with tf.Graph().as_default():
        tf.compat.v1.train.import_meta_graph(prefix(case) + ".meta")
        with pytest.raises(EmaError):
            ckpt_tools.ema_saver(checkpoint=prefix(case))


def test_matrix_meta_files_read_as_protobuf_reads_them(matrix):
    """Every .meta the matrix's TF1 setups wrote: the hand-rolled walk ``ckpt list`` uses gives
    the collections, variables and saver settings protobuf's full parse gives."""
    from test_meta_wire import _expected_graph, _ours

    from ckpt_tools.formats.meta import read_meta_graph

    metas = sorted(matrix.rglob("*.meta"))
    assert metas, "the matrix wrote no .meta"
    for meta in metas:
        assert _ours(read_meta_graph(str(meta))) == _expected_graph(meta.read_bytes()), meta
