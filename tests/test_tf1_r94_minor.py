"""review-26-attack-r94 F3-F6 and two leftovers of its F1 fix (s26n), on checkpoints made by
real TensorFlow (graph mode), truth read from the session at save time:

* F3: a training ``Saver(ema.variables_to_restore())`` of a partitioned ``W`` (its parts
  averaged): export --averages-only was refused by a message that offered --averages-only;
* F4: restore-ema --averages-only of a training vtr Saver's keys said "now hold their EMA
  values";
* F5: export --averages-only --json had "warnings": [] while stderr said warning:;
* F6: the crossed-Savers refusal of a MonitoredTrainingSession whose Scaffold saver swaps
  (its SaverDef the swapping one) named the SaverDef's Saver as the plain one;
* s26n-1: crossed Savers with no stored pair, --not-swapped: the refusal said the raw weights
  are usable (ckpt export --raw), which is refused there;
* s26n-2: ``ckpt list`` of such a file showed plain weights with no word.

And review-27-attack-r99 F1 (the --saver-def-wrote note on stderr, not in --json "notes")
and its leftover (list's crossed-Savers summary did not name --saver-def-wrote).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli, set_terminal
from helpers_tf1 import run_tf1_script

SCRIPT = r'''


def build(partitioned=False):
    gs = tf1.train.get_or_create_global_step()
    if partitioned:
        W = tf1.get_variable("W", [4, 2], partitioner=tf1.fixed_size_partitioner(2))
        ws = list(W)
    else:
        W = tf1.get_variable("W", [3, 2])
        ws = [W]
    V = tf1.get_variable("V", [3, 2])
    loss = sum(tf.reduce_sum(w ** 2) for w in ws) + tf.reduce_sum((V - 1) ** 2)
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
    ema = tf1.train.ExponentialMovingAverage(0.5)
    with tf.control_dependencies([train]):
        step = ema.apply(ws + [V])
    return gs, W, ws + [V], ema, step


def record(case, s, ema, vs):
    for v in vs:
        truth[f"{case}:ema:{v.op.name}"] = s.run(ema.average(v).read_value())
        truth[f"{case}:raw:{v.op.name}"] = s.run(v.read_value())


for case in ("part_vtr", "vtr_train", "crossed"):
    with tf.Graph().as_default():
        gs, W, vs, ema, step = build(partitioned=case == "part_vtr")
        if case == "part_vtr":  # the .meta's SaverDef: Saver(); the vtr Saver wrote
            meta_saver = tf1.train.Saver()
            writer = tf1.train.Saver(ema.variables_to_restore())
        elif case == "vtr_train":  # a training graph's vtr Saver, with its own .meta
            meta_saver, writer = None, tf1.train.Saver(ema.variables_to_restore())
        else:  # Saver([W, V]) (SaverDef) beside the averages Saver that wrote: no pair stored
            meta_saver = tf1.train.Saver(vs)
            writer = tf1.train.Saver({v.op.name: ema.average(v) for v in vs})
        os.makedirs(f"{out}/{case}")
        path = f"{out}/{case}/model.ckpt"
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(step)
            if meta_saver is None:
                writer.save(s, path, global_step=gs)
            else:
                meta_saver.export_meta_graph(path + "-3.meta")
                writer.save(s, path, global_step=gs, write_meta_graph=False)
            record(case, s, ema, vs)

# a MonitoredTrainingSession whose Scaffold saver is a swapping Saver (its SaverDef the .meta
# records), beside the user's own Saver()
with tf.Graph().as_default():
    gs, W, vs, ema, step = build()
    mine = tf1.train.Saver()
    d = {"global_step": gs}
    for v in vs:
        d[v.op.name] = ema.average(v)
        d[ema.average_name(v)] = v
    scaffold = tf1.train.Scaffold(saver=tf1.train.Saver(d))
    with tf1.train.MonitoredTrainingSession(checkpoint_dir=f"{out}/mts", scaffold=scaffold,
                                            save_checkpoint_steps=3,
                                            save_summaries_steps=None) as s:
        for _ in range(3):
            s.run(step)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("r94_minor")
    return out, run_tf1_script(SCRIPT, out)


def _cli(*args: str) -> tuple[int, str, str]:
    code, text, err = run_cli(list(args))
    return code, text, " ".join(err.split())


@pytest.mark.parametrize("extra", [[], ["--averages-only"]])
def test_partitioned_vtr_refusal_never_offers_a_refused_averages_only(made, tmp_path, extra):
    """F3: --averages-only is refused for a partitioned variable's parts saved apart (ckpt does
    not assemble them), so no refusal offers it there (it did, and refused it when given)."""
    out, _ = made
    code, _, err = _cli("export", str(out / "part_vtr" / "model.ckpt-3"), *extra,
                        "--out", str(tmp_path / "e.npz"))
    assert code == 6, err
    assert "pass --averages-only" not in err, err
    assert "--averages-only cannot state it here" in err and "W/part_0/" in err, err
    assert "--raw --keys-are-raw" in err, err
    assert not (tmp_path / "e.npz").exists()


def test_partitioned_vtr_raw_keys_are_raw(made, tmp_path):
    """The route the refusal names gives the raw parts, as TF held them at save time."""
    out, truth = made
    code, _, err = _cli("export", str(out / "part_vtr" / "model.ckpt-3"), "--raw",
                        "--keys-are-raw", "--out", str(tmp_path / "r.npz"))
    assert code == 0, err
    with np.load(tmp_path / "r.npz") as z:
        assert sorted(z.files) == ["V", "W/part_0", "W/part_1"]
        for k in z.files:
            assert z[k].tobytes() == truth[f"part_vtr:raw:{k}"].tobytes(), k


def test_restore_ema_summary_keeps_the_averages_only_caveat(made, tmp_path):
    """F4: the keys hold the raw weights (a training run saved them): restore-ema's summary
    never calls them EMA values (export's did not either), and its --json carries the
    warning and the statement."""
    out, truth = made
    ckpt = str(out / "vtr_train" / "model.ckpt-3")
    code, text, err = _cli("restore-ema", ckpt, "--averages-only", "--out", str(tmp_path / "r"))
    assert code == 0, err
    said = " ".join(text.split())
    assert "EMA values" not in said, said
    assert "keys you stated hold averages" in said and "raw weights if a training" in said, said
    import ckpt_tools

    with ckpt_tools.open_checkpoint(str(tmp_path / "r")) as c:  # what TF held: raw weights
        assert c.tensor("W").tobytes() == truth["vtr_train:raw:W"].tobytes()
    code, text, err = _cli("restore-ema", ckpt, "--averages-only", "--json",
                           "--out", str(tmp_path / "j"))
    doc = json.loads(text)
    assert code == 0 and doc["stated_averages_only"]["raw_if_trained"], doc
    assert any("if a training graph saved them" in w for w in doc["warnings"]), doc


@pytest.mark.parametrize("cmd", ["export", "restore-ema", "list"])
def test_json_warnings_carry_what_stderr_warned(made, tmp_path, cmd):
    """F5: every 'warning:' stderr shows is in --json "warnings" (export's was only in
    "notes"; restore-ema's and list's documents had no "warnings")."""
    out, _ = made
    target = {"export": ["--out", str(tmp_path / "e.npz")], "list": [],
              "restore-ema": ["--out", str(tmp_path / "r")]}[cmd]
    code, text, err = _cli(cmd, str(out / "vtr_train" / "model.ckpt-3"), "--averages-only",
                           "--json", *target)
    assert code == 0, err
    warned = [w for w in err.split("warning: ")[1:]]
    assert warned, err
    doc = json.loads(text)
    assert len(doc["warnings"]) == len(warned), (doc["warnings"], err)
    for w in doc["warnings"]:
        assert " ".join(w.split()) in err, w


def test_crossed_message_does_not_say_which_saver_the_saverdef_is(made, tmp_path):
    """F6: the Scaffold's swapping Saver is the one whose SaverDef the .meta records: the
    message said it was the plain Saver(); it now claims neither."""
    out, _ = made
    ckpt = str(out / "mts" / "model.ckpt-3")
    for extra in ([], ["--raw"]):
        code, _, err = _cli("export", ckpt, *extra, "--out", str(tmp_path / "e.npz"))
        assert code == 6, err
        assert "the Saver() whose SaverDef the .meta records" not in err, err
        assert "beside a swapping Saver" not in err, err
        assert "either may be the one whose SaverDef the .meta records" in err, err


def test_crossed_not_swapped_refusal_never_offers_the_refused_raw(made, tmp_path):
    """s26n-1: --not-swapped reads the keys as raw weights with no shadow: the refusal named
    'ckpt export --raw', which is refused for these Savers; it names --raw --no-meta, which
    gives the keys as stored (here the averages the writing Saver saved)."""
    out, truth = made
    ckpt = str(out / "crossed" / "model.ckpt-3")
    code, _, err = _cli("export", ckpt, "--not-swapped", "--out", str(tmp_path / "e.npz"))
    assert code == 6, err
    assert "raw weights are usable" not in err, err
    assert "ckpt export --raw is refused here" in err and "--raw --no-meta" in err, err
    code, _, err = _cli("export", ckpt, "--raw", "--out", str(tmp_path / "r.npz"))
    assert code == 6, err  # the route is refused indeed
    code, _, err = _cli("export", ckpt, "--raw", "--no-meta", "--out", str(tmp_path / "n.npz"))
    assert code == 0, err
    with np.load(tmp_path / "n.npz") as z:
        for k in ("W", "V"):
            assert z[k].tobytes() == truth[f"crossed:ema:{k}"].tobytes(), k


def test_list_flags_crossed_savers_without_a_stored_pair(made):
    """s26n-2: list showed W, V as plain weights, "ema_unproven": null."""
    out, _ = made
    ckpt = str(out / "crossed" / "model.ckpt-3")
    code, text, err = _cli("list", ckpt, "--json")
    assert code == 0, err
    unproven = json.loads(text)["ema_unproven"]
    assert unproven and unproven["option"] == "--not-swapped", unproven
    assert unproven["crossed"]["key"] in ("V", "W"), unproven
    code, text, err = _cli("list", ckpt)
    said = " ".join((text + err).split())
    assert code == 0 and "builds Savers that write exactly these keys" in said, said
    assert "--not-swapped" in said and "--raw --no-meta" in said, said
    assert "none of 2 weights has a shadow" not in said, said
    code, text, err = _cli("list", ckpt, "--json", "--not-swapped")  # stated: nothing open
    assert code == 0 and json.loads(text)["ema_unproven"] is None, text


@pytest.mark.parametrize("cmd", ["export", "restore-ema"])
def test_json_notes_carry_every_note_stderr_showed(made, tmp_path, cmd):
    """r99 F1: the note that the keys are read as the SaverDef's Saver wrote them, because
    --saver-def-wrote states it, was on stderr only (export's "notes": [], restore-ema's
    document had no "notes")."""
    out, _ = made
    target = {"export": ["--out", str(tmp_path / "e.npz")],
              "restore-ema": ["--out", str(tmp_path / "r")]}[cmd]
    code, text, err = _cli(cmd, str(out / "mts"), "--saver-def-wrote", "--json", *target)
    assert code == 0, err
    noted = [line.removeprefix("note: ") for line in err.splitlines()
             if line.startswith("note: ")]
    assert any("because you stated --saver-def-wrote" in n for n in noted), err
    notes = json.loads(text)["notes"]
    for n in noted:
        assert n in notes, (n, notes)


def test_list_crossed_summary_names_the_saver_def_statement(made, monkeypatch):
    """r99 leftover: list --json's reason offered --saver-def-wrote (the .meta records one
    of the crossed Savers' SaverDef); the summary did not. Said on a terminal of 80 columns,
    no line wider."""
    out, _ = made
    ckpt = str(out / "crossed" / "model.ckpt-3")
    code, text, err = _cli("list", ckpt, "--json")
    unproven = json.loads(text)["ema_unproven"]
    assert code == 0 and "--saver-def-wrote" in unproven["reason"], unproven
    assert unproven["crossed"]["saver_def_wrote"] is True, unproven
    set_terminal(monkeypatch, 80)
    code, text, err = _cli("list", ckpt)
    assert code == 0, err
    said = " ".join(text.split())
    assert "--saver-def-wrote if the Saver whose SaverDef the .meta records wrote them" \
        in said, said
    assert "--not-swapped" in said and "--raw --no-meta" in said, said
    wide = [line for line in text.splitlines() if len(line) > 80]
    assert not wide, wide
