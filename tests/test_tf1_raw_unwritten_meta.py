"""``export --raw`` of a TF1 checkpoint whose ``.meta`` records no save op that wrote it: a
``.meta`` exported before the Saver was built (``nosaveop``), or a plain ``Saver()``'s
``.meta`` beside data a second Saver then overwrote at the same prefix with
``write_meta_graph=False`` (``metaof``). Such a graph proves nothing of what the keys hold,
yet ``--raw`` read it and skipped every check that asks the save op: a
``Saver(ema.variables_to_restore())`` beside a frozen variable exported the frozen variable
alone, and a mixed Saver (``w``'s average under ``w``, raw ``b`` under ``b``'s average's name)
wrote ``w``'s AVERAGE as raw ``w``, exit 0, where ``--no-meta`` and the default export refuse
(review-24-attack-r79 F2, F8). Now ``--raw`` refuses what the keys alone refuse. Since
review-25-attack-r85 F2 the second Saver of a ``metaof`` graph, whose save op writes exactly
the checkpoint's keys, is read as their writer: its reading refuses (or, stated, answers).

A mixed Saver whose ``.meta`` records it (``w``'s average as ``model/w`` or ``w_ema``, raw
``b`` as ``model/b`` or ``b``, no raw ``w`` anywhere) exported ``b`` alone, exit 0, no word
(F1): now refused naming the key, ``--exclude`` leaving it out knowingly. Made by real
TensorFlow (graph mode), truth read from the session at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
for case in ("nosaveop_frozen_vtr", "nosaveop_halfavg", "metaof_halfavg", "metaof_frozen_vtr",
             "nosaveop_frozen_plain", "metaof_frozen_plain", "avgmixren", "emamix", "avgside"):
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        w = tf1.get_variable("w", [3, 3])
        b = tf1.get_variable("b", [3])
        x = tf.constant(np.random.RandomState(0).rand(4, 3).astype("float32"))
        y = tf.matmul(x, w) + b
        if "frozen" in case:  # never trained nor averaged: raw in every Saver
            y = y * tf1.get_variable("emb", [3], trainable=False,
                                     initializer=tf1.ones_initializer())
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(y ** 2),
                                                                 global_step=gs)
        ema = tf1.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([train]):
            step = ema.apply([w, b])
        path = f"{out}/{case}/model.ckpt"
        if case.startswith("nosaveop"):  # the graph exported before any Saver exists
            tf1.train.export_meta_graph(f"{path}-3.meta")
        else:  # metaof: a plain Saver writes step 3 and its .meta first
            plain = tf1.train.Saver()
        if case.endswith("vtr"):
            saver = tf1.train.Saver(ema.variables_to_restore())
        elif case.endswith("halfavg"):  # w's AVERAGE under w's name, raw b under b's average's
            saver = tf1.train.Saver({"w": ema.average(w), "b/ExponentialMovingAverage": b,
                                     "global_step": gs})
        elif case == "avgmixren":  # w's average as model/w, raw b as model/b: no raw w
            saver = tf1.train.Saver({"model/w": ema.average(w), "model/b": b, "global_step": gs})
        elif case == "emamix":  # w's average as w_ema, raw b as b: no raw w
            saver = tf1.train.Saver({"w_ema": ema.average(w), "b": b, "global_step": gs})
        elif case == "avgside":  # raw w, b and their averages beside them as w_avg, b_avg
            saver = tf1.train.Saver({"w": w, "b": b, "w_avg": ema.average(w),
                                     "b_avg": ema.average(b), "global_step": gs})
        else:
            saver = tf1.train.Saver()
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(step)
            if case.startswith("metaof"):
                plain.save(s, path, global_step=gs)
            saver.save(s, path, global_step=gs,
                       write_meta_graph=not case.startswith(("nosaveop", "metaof")))
            for v in tf1.global_variables():
                truth[f"{case}:raw:{v.op.name}"] = s.run(v)
                if ema.average(v) is not None:
                    truth[f"{case}:ema:{v.op.name}"] = s.run(ema.average(v))
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("unwritten_meta")
    return out, run_tf1_script(SCRIPT, out)


def _npz(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("case", ["nosaveop_frozen_vtr", "nosaveop_halfavg"])
def test_raw_export_refuses_what_the_keys_alone_refuse(made, tmp_path, case):
    out, _ = made
    prefix = str(out / case / "model.ckpt-3")
    target = tmp_path / "x.npz"
    code, _, err = run_cli(["export", prefix, "--raw", "--out", str(target)])
    assert code == 6, err
    assert "proves nothing of what the keys hold" in err, err
    assert ("records no save op" if case.startswith("nosaveop") else
            "records a save op that did not write this checkpoint") in err, err
    assert "drop --no-meta" not in err, err  # the user gave no --no-meta
    assert not target.exists()
    # the default export refuses too: --raw no longer trusts a graph it rejects
    code, _, err = run_cli(["export", prefix, "--out", str(tmp_path / "d.npz")])
    assert code == 6, err


@pytest.mark.parametrize("case,words", [
    ("metaof_halfavg", ("from the shadow w/ExponentialMovingAverage",)),
    ("metaof_frozen_vtr", ("--keys-are-raw", "--averages-only"))])
def test_the_second_savers_reading_refuses_raw_export(made, tmp_path, case, words):
    """The plain Saver's .meta records save/, the data is save_1's: its save op (the only one
    writing exactly these keys) is read, as if the .meta recorded it (review-25-attack-r85
    F2), and refuses --raw and the default export."""
    out, _ = made
    prefix = str(out / case / "model.ckpt-3")
    target = tmp_path / "x.npz"
    code, _, err = run_cli(["export", prefix, "--raw", "--out", str(target)])
    said = " ".join(err.split())
    assert code == 6, said
    assert "did not write this checkpoint" not in said, said
    for word in words:
        assert word in said, (word, said)
    assert not target.exists()
    code, _, err = run_cli(["export", prefix, "--out", str(tmp_path / "d.npz")])
    assert code == 6, err


@pytest.mark.parametrize("case", ["nosaveop_frozen_plain", "metaof_frozen_plain"])
def test_a_plain_savers_raw_weights_still_export(made, tmp_path, case):
    out, truth = made
    code, _, err = run_cli(["export", str(out / case / "model.ckpt-3"), "--raw",
                            "--out", str(tmp_path / "x.npz")])
    assert code == 0, err
    got = _npz(tmp_path / "x.npz")
    assert sorted(got) == ["b", "emb", "w"], sorted(got)
    for k, v in got.items():
        assert v.tobytes() == truth[f"{case}:raw:{k}"].tobytes(), k


@pytest.mark.parametrize("case,key,out_b", [("avgmixren", "model/w", "model/b"),
                                            ("emamix", "w_ema", "b")])
def test_an_average_of_a_weight_no_key_holds_raw_is_never_dropped_unsaid(made, tmp_path, case,
                                                                         key, out_b):
    out, truth = made
    prefix = str(out / case / "model.ckpt-3")
    code, _, err = run_cli(["export", prefix, "--raw", "--out", str(tmp_path / "x.npz")])
    said = " ".join(err.split())
    assert code == 6, said
    assert f"{key} holds w's average" in said and f"--exclude '{key}'" in said, said
    assert not (tmp_path / "x.npz").exists()
    # the offered route: w left out knowingly, b's raw value written
    code, _, err = run_cli(["export", prefix, "--raw", "--exclude", key,
                            "--out", str(tmp_path / "y.npz")])
    assert code == 0, err
    got = _npz(tmp_path / "y.npz")
    assert sorted(got) == [out_b], sorted(got)
    assert got[out_b].tobytes() == truth[f"{case}:raw:b"].tobytes()


def test_averages_beside_their_raw_weights_leave_raw_export_alone(made, tmp_path):
    out, truth = made
    code, _, err = run_cli(["export", str(out / "avgside" / "model.ckpt-3"), "--raw",
                            "--out", str(tmp_path / "x.npz")])
    assert code == 0, err
    got = _npz(tmp_path / "x.npz")
    assert sorted(got) == ["b", "w"], sorted(got)
    for k, v in got.items():
        assert v.tobytes() == truth[f"avgside:raw:{k}"].tobytes(), k


def test_keys_are_raw_reads_the_second_savers_vtr_layout(made, tmp_path):
    """metaof_frozen_vtr: save_1, Saver(ema.variables_to_restore()), wrote exactly these keys:
    --raw --keys-are-raw exports them as the raw weights, bit for bit (before r85 F2 it was
    refused as without the graph)."""
    out, truth = made
    code, _, err = run_cli(["export", str(out / "metaof_frozen_vtr" / "model.ckpt-3"), "--raw",
                            "--keys-are-raw", "--out", str(tmp_path / "x.npz")])
    assert code == 0, err
    got = _npz(tmp_path / "x.npz")
    assert sorted(got) == ["b", "emb", "w"], sorted(got)
    for k, v in got.items():
        assert v.tobytes() == truth[f"metaof_frozen_vtr:raw:{k}"].tobytes(), k


@pytest.mark.parametrize("case", ["nosaveop_frozen_vtr"])
def test_keys_are_raw_is_refused_as_without_the_graph(made, tmp_path, case):
    """r79 F2: --raw --keys-are-raw said "this checkpoint has no such key" (exit 2), false:
    the vtr Saver wrote two; the graph proves nothing of them, so the reading without it
    decides, which --keys-are-raw does not lift (no .meta)."""
    out, _ = made
    code, _, err = run_cli(["export", str(out / case / "model.ckpt-3"), "--raw",
                            "--keys-are-raw", "--out", str(tmp_path / "x.npz")])
    said = " ".join(err.split())
    assert code == 6, said
    assert "proves nothing of what the keys hold" in said and "no such key" not in said, said
    assert not (tmp_path / "x.npz").exists()
