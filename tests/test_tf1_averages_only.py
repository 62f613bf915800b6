"""TF1 checkpoints whose keys are all named as averages (``w/ExponentialMovingAverage``, no
``w``), made two ways alike in layout:

* ``avg``: a Saver of the averages alone (``Saver({ema.average_name(v): ema.average(v)})``),
  a serving export: the keys hold the averages;
* ``vtr``: the training graph saved with ``Saver(ema.variables_to_restore())``: the keys hold
  the variables' RAW values (review-11-attack-r16 F7).

With the ``.meta`` its save op tells them apart: ``avg`` is paired, exported under the model
variables' names and baked into a checkpoint a plain ``Saver()`` of the model graph restores;
``vtr`` is refused by every command and ``list --json`` shows no pairing. Without the
``.meta`` nothing proves which: every command refuses (exit 6) naming the ``.meta``, never
exit 0 with the averages dropped. Made here by TensorFlow (a subprocess); the truth is read
from the session at save time (``ema.average(v)``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli, run_script

SCRIPT = r'''
import os
import sys

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()
out = sys.argv[1]
truth = {}
for case in ("avg", "vtr"):
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        w = tf1.get_variable("w", [3, 2])
        b = tf1.get_variable("b", [2])
        x = tf.constant(np.arange(6, dtype="float32").reshape(2, 3))
        loss = tf.reduce_sum((tf.matmul(x, w) + b - 1.0) ** 2)
        train = tf1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=gs)
        ema = tf1.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([train]):
            step = ema.apply([w, b])
        if case == "vtr":  # average_name(v) -> v itself (and global_step -> itself)
            saver = tf1.train.Saver(ema.variables_to_restore())
        else:  # the same keys, read from the shadows
            saver = tf1.train.Saver({**{ema.average_name(v): ema.average(v) for v in (w, b)},
                                     "global_step": gs})
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(step)
            for meta in (True, False):
                d = f"{out}/{case}" + ("" if meta else "_nometa")
                os.makedirs(d)
                saver.save(s, f"{d}/model.ckpt", write_meta_graph=meta)
            for v in (w, b):
                truth[f"{case}:raw:{v.op.name}"] = s.run(v.read_value())
                truth[f"{case}:ema:{v.op.name}"] = s.run(ema.average(v).read_value())
np.savez(f"{out}/truth.npz", **truth)
'''

# Reads the baked checkpoint with a plain Saver of the model graph, and the averages-only
# checkpoint with ema_saver / restore_ema in the graph imported from its .meta.
CHECK = r'''
import sys

import numpy as np
import tensorflow as tf

import ckpt_tools

tf1 = tf.compat.v1
tf1.disable_eager_execution()
out, src, baked = sys.argv[1:4]
got = {}
with tf.Graph().as_default():
    tf1.train.get_or_create_global_step()
    vs = [tf1.get_variable("w", [3, 2]), tf1.get_variable("b", [2])]
    with tf1.Session() as s:
        tf1.train.Saver().restore(s, tf.train.latest_checkpoint(baked))
        for v in vs:
            got[f"saver:{v.op.name}"] = s.run(v.read_value())
for how in ("ema_saver", "restore_ema"):
    with tf.Graph().as_default():
        tf1.train.import_meta_graph(f"{src}/model.ckpt.meta")
        model = {v.op.name: v for v in tf1.global_variables()}
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            if how == "ema_saver":
                ckpt_tools.ema_saver(checkpoint=src).restore(s, tf.train.latest_checkpoint(src))
            else:
                ckpt_tools.restore_ema(s, src)
            for n in ("w", "b"):
                got[f"{how}:{n}"] = s.run(model[n].read_value())
np.savez(f"{out}/truth.npz", **got)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_avg_only")
    return out, run_script(SCRIPT, out)


def _bits(a) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def test_averages_alone_with_meta_map_and_list(made):
    out, _ = made
    code, text, err = run_cli(["map", "--json", str(out / "avg")])
    assert code == 0, err
    assert json.loads(text) == {"w/ExponentialMovingAverage": "w",
                                "b/ExponentialMovingAverage": "b",
                                "global_step": "global_step"}
    code, text, err = run_cli(["list", "--json", str(out / "avg")])
    assert code == 0, err
    doc = json.loads(text)
    assert doc["ema_unproven"] is None
    of = {v["key"]: v["ema_of"] for v in doc["variables"]}
    assert of["w/ExponentialMovingAverage"] == "w" and of["b/ExponentialMovingAverage"] == "b"
    code, text, err = run_cli(["list", str(out / "avg")])
    assert code == 0, err
    assert "of w (not stored)" in text and "does not store" in err, (text, err)


def test_averages_alone_export_writes_averages_under_variable_names(made, tmp_path):
    out, truth = made
    code, _, err = run_cli(["export", str(out / "avg"), "--out", str(tmp_path / "e.npz")])
    assert code == 0, err
    with np.load(tmp_path / "e.npz") as z:
        assert sorted(z.files) == ["b", "w"]
        for n in ("w", "b"):
            assert _bits(z[n]) == _bits(truth[f"avg:ema:{n}"]), n
            assert _bits(z[n]) != _bits(truth[f"avg:raw:{n}"]), n


def test_averages_alone_restore_ema_loads_into_the_model_graph(made, tmp_path):
    """restore-ema writes w, b holding the averages: a plain Saver() of the model graph (w, b,
    global_step) restores them; ema_saver / restore_ema in the graph imported from the .meta
    restore the averages into the model variables."""
    out, truth = made
    baked = tmp_path / "baked"
    code, text, err = run_cli(["restore-ema", str(out / "avg"), "--out", str(baked)])
    assert code == 0, err
    assert "2 variables now hold their EMA values" in text + err, (text, err)
    check = tmp_path / "check"
    check.mkdir()
    got = run_script(CHECK, check, str(out / "avg"), str(baked))
    assert sorted(got) == sorted(f"{h}:{n}" for h in ("saver", "ema_saver", "restore_ema")
                                 for n in ("w", "b"))
    for key, value in got.items():
        name = key.split(":")[1]
        assert _bits(value) == _bits(truth[f"avg:ema:{name}"]), key


@pytest.mark.parametrize("case", ["vtr", "avg_nometa", "vtr_nometa"])
@pytest.mark.parametrize("args", [["map"], ["restore-ema", "--out", "OUT"],
                                  ["export", "--out", "OUT.npz"]], ids=lambda a: a[0])
def test_unproven_or_raw_are_refused_by_every_command(made, tmp_path, case, args):
    out, _ = made
    args = [a.replace("OUT", str(tmp_path / "o")) for a in args]
    code, _, err = run_cli([args[0], str(out / case), *args[1:]])
    assert code == 6, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    text = " ".join(err.split())
    assert str(out / case) in text and "/ExponentialMovingAverage" in text, err
    assert "variables_to_restore()" in text, err
    if case.endswith("nometa"):
        assert "no .meta" in text and "keep the training .meta" in text, err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("case", ["vtr", "avg_nometa", "vtr_nometa"])
def test_list_json_shows_no_pairing_and_the_reason(made, case):
    out, _ = made
    code, text, err = run_cli(["map", str(out / case)])
    reason = err.strip().removeprefix("error: ")
    code, text, err = run_cli(["list", "--json", str(out / case)])
    assert code == 0, err
    doc = json.loads(text)
    averages = [v for v in doc["variables"] if v["role"] == "ema"]
    assert len(averages) == 2
    assert all(v["ema_of"] is None for v in averages), averages
    assert doc["ema_unproven"] is not None
    assert " ".join(doc["ema_unproven"]["reason"].split()) == " ".join(reason.split())


@pytest.mark.parametrize("case", ["vtr", "avg_nometa"])
def test_python_api_refuses(made, case):
    import ckpt_tools

    out, _ = made
    with pytest.raises(ckpt_tools.EmaError, match="named as averages"):
        ckpt_tools.ema_map(str(out / case))
    with pytest.raises(ckpt_tools.EmaError, match="named as averages"):
        ckpt_tools.export_weights(str(out / case), str(out / f"{case}.npz"))
    assert not (out / f"{case}.npz").exists()


@pytest.mark.parametrize("case", ["avg_nometa", "vtr_nometa"])
def test_without_meta_list_json_names_averages_only(made, case):
    out, _ = made
    code, text, err = run_cli(["list", "--json", str(out / case)])
    assert code == 0, err
    unproven = json.loads(text)["ema_unproven"]
    assert unproven["option"] == "--averages-only"
    assert "--averages-only" in unproven["reason"] and ".meta" in unproven["reason"]


def test_averages_only_stated_pairs_without_meta(made, tmp_path):
    """--averages-only states what no .meta records: the keys are paired, exported and baked
    as averages, and a note says the pairing rests on the statement."""
    import ckpt_tools

    out, truth = made
    src = str(out / "avg_nometa")
    code, text, err = run_cli(["map", "--json", "--averages-only", src])
    assert code == 0, err
    assert json.loads(text)["w/ExponentialMovingAverage"] == "w"
    assert "you stated --averages-only" in err, err
    code, text, err = run_cli(["list", "--json", "--averages-only", src])
    assert code == 0, err
    doc = json.loads(text)
    assert doc["ema_unproven"] is None
    assert doc["stated_averages_only"]["pairs"] == {"b/ExponentialMovingAverage": "b",
                                                    "w/ExponentialMovingAverage": "w"}
    code, _, err = run_cli(["export", "--averages-only", src, "--out", str(tmp_path / "e.npz")])
    assert code == 0 and "you stated --averages-only" in err, err
    baked = tmp_path / "baked"
    code, _, err = run_cli(["restore-ema", "--averages-only", src, "--out", str(baked)])
    assert code == 0, err
    with np.load(tmp_path / "e.npz") as z, ckpt_tools.open_checkpoint(str(baked)) as ckpt:
        for n in ("w", "b"):
            assert _bits(z[n]) == _bits(truth[f"avg:ema:{n}"]), n
            assert _bits(ckpt.tensor(n)) == _bits(truth[f"avg:ema:{n}"]), n
    with ckpt_tools.open_checkpoint(src, averages_only=True) as ckpt:
        assert ckpt_tools.ema_map(ckpt).mapping["b/ExponentialMovingAverage"] == "b"


def test_averages_only_states_what_a_vtr_savers_keys_hold(made, tmp_path):
    """The .meta's save op shows a Saver(ema.variables_to_restore()) wrote the keys from the
    variables, which held the raw weights in a training graph but the averages in an
    evaluation graph that restored them and saved again (one that built ema.apply() reads
    alike): --averages-only states the latter, and the note says what rests on it
    (review-23-attack-r70 F1, F2); without it the export stays refused."""
    out, _ = made
    code, _, err = run_cli(["export", str(out / "vtr"), "--out", str(tmp_path / "e.npz")])
    assert code == 6 and "--averages-only" in err, err
    code, _, err = run_cli(["export", "--averages-only", str(out / "vtr"),
                            "--out", str(tmp_path / "e.npz")])
    said = " ".join(err.split())
    assert code == 0, said
    assert "you stated --averages-only" in said and "they hold the raw weights" in said, said


def test_averages_only_refused_where_it_cannot_apply():
    from helpers import FIXTURES

    code, _, err = run_cli(["map", "--averages-only", str(FIXTURES / "tf2_object")])
    assert code == 2, err
    assert "--averages-only" in err and "omit it" in err, err


def test_diff_ema_lists_averages_whose_variable_is_not_stored(made):
    """Nothing raw to compare them with: each is listed as having no variable, not an error
    about a variable the checkpoint does not hold."""
    out, _ = made
    code, text, err = run_cli(["diff", "--ema", str(out / "avg")])
    assert code == 0, err
    rows = [line.split("\t") for line in text.splitlines() if "ExponentialMovingAverage" in line]
    assert [(r[1], r[2]) for r in rows] == [("b/ExponentialMovingAverage", "no variable"),
                                            ("w/ExponentialMovingAverage", "no variable")]


def test_average_ema_bake_writes_the_plain_names(made, tmp_path):
    """average --ema --bake gives each plain name its averaged average, also where only the
    average is stored (two copies of one checkpoint: the mean is the value itself)."""
    import shutil

    import ckpt_tools

    out, truth = made
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(out / "avg", a)
    shutil.copytree(out / "avg", b)
    code, _, err = run_cli(["average", str(a), str(b), "--ema", "--bake", "--newest", str(b),
                            "--out", str(tmp_path / "o")])
    assert code == 0, err
    with ckpt_tools.open_checkpoint(str(tmp_path / "o")) as ckpt:
        for n in ("w", "b"):
            assert _bits(ckpt.tensor(n)) == _bits(truth[f"avg:ema:{n}"]), n


def test_ema_saver_restore_refusal_says_how_to_state_it(made, tf):
    """review-23-attack-r71 F3: restore() of an ema_saver() built without checkpoint= refuses
    the averages-only checkpoint without a .meta (its keys read as a vtr Saver's would) and
    named open_checkpoint(path, averages_only=True), which a caller of ema_saver() never
    calls: it now names ema_saver(checkpoint=open_checkpoint(path, averages_only=True)), and
    the Saver so built restores the averages bit for bit."""
    import ckpt_tools

    out, truth = made
    prefix = str(out / "avg_nometa" / "model.ckpt")
    v1 = tf.compat.v1

    def restored(**kw) -> dict[str, np.ndarray]:
        with tf.Graph().as_default():
            v1.train.get_or_create_global_step()
            vs = {"w": v1.get_variable("w", [3, 2]), "b": v1.get_variable("b", [2])}
            saver = ckpt_tools.ema_saver(**kw)
            with v1.Session() as sess:
                saver.restore(sess, prefix)
                return {n: sess.run(v) for n, v in vs.items()}

    with pytest.raises(ckpt_tools.UnprovenPairingError) as refused:
        restored()
    assert refused.value.option == "--averages-only"
    assert "ema_saver(checkpoint=open_checkpoint(path, averages_only=True))" in str(
        refused.value), str(refused.value)
    with ckpt_tools.open_checkpoint(prefix, averages_only=True) as ckpt:
        got = restored(checkpoint=ckpt)
    for n in ("w", "b"):
        assert _bits(got[n]) == _bits(truth[f"avg:ema:{n}"]), n


def test_python_says_what_the_pairing_rests_on(made, tmp_path, tf):
    """review-33-attack-r128 F5: of restore-ema --averages-only's output of the vtr training
    run (in place, and its .index+.data copy, where only the _CKPT_TOOLS_RECORD key states
    it), export_weights / ema_map / restore_ema said nothing of the statement every CLI read
    repeats, and called the keys' values averaged: they are the RAW weights (truth from the
    session). Each now issues a RecordedStatementWarning and says it in ``stated``; the
    caller's own averages_only=True over keys the .meta's save op wrote from their variables
    a StatementWarning, as the CLI warns."""
    import shutil
    import warnings

    import ckpt_tools

    out, truth = made
    code, _, err = run_cli(["restore-ema", "--averages-only", str(out / "vtr"),
                            "--out", str(tmp_path / "r")])
    assert code == 0, err
    (tmp_path / "c").mkdir()
    for f in (tmp_path / "r").glob("model.ckpt.*"):
        if f.suffix == ".index" or ".data" in f.name:
            shutil.copy(f, tmp_path / "c" / f.name)
    v1 = tf.compat.v1

    def caught(call, *args, **kw):
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            got = call(*args, **kw)
        return got, [w for w in said if issubclass(w.category, (
            ckpt_tools.RecordedStatementWarning, ckpt_tools.StatementWarning))]

    def restored(path, **kw):
        with tf.Graph().as_default():
            w = v1.get_variable("w", [3, 2])
            v1.get_variable("b", [2])
            with v1.Session() as sess:
                sess.run(v1.global_variables_initializer())
                result = ckpt_tools.restore_ema(sess, path, **kw)
                return result, sess.run(w)

    for d in ("r", "c"):
        path = str(tmp_path / d / "model.ckpt")
        got, said = caught(ckpt_tools.export_weights, path, tmp_path / f"{d}.npz")
        assert [w.category for w in said] == [ckpt_tools.RecordedStatementWarning], said
        assert said[0].message.stated == ["averages_only"], said[0].message
        assert "--averages-only" in str(said[0].message) and "raw weights" in str(said[0].message)
        assert got.stated["stated_averages_only"]["raw_if_trained"], got.stated
        assert got.to_dict()["averages_only_record"] == got.stated["averages_only_record"]
        assert _bits(np.load(tmp_path / f"{d}.npz")["w"]) == _bits(truth["vtr:raw:w"])
        _, said = caught(ckpt_tools.ema_map, path)
        assert [w.category for w in said] == [ckpt_tools.RecordedStatementWarning], said
        (result, w), said = caught(restored, path)
        assert [w.category for w in said] == [ckpt_tools.RecordedStatementWarning], said
        assert result.stated["stated_averages_only"]["raw_if_trained"], result
        assert _bits(w) == _bits(truth["vtr:raw:w"])  # what the statement, not the file, made
    (result, w), said = caught(restored, str(out / "vtr"), averages_only=True)
    assert [w.category for w in said] == [ckpt_tools.StatementWarning], said
    assert "raw weights" in str(said[0].message), said[0].message
    assert result.stated["stated_averages_only"]["raw_if_trained"], result
    assert _bits(w) == _bits(truth["vtr:raw:w"])
