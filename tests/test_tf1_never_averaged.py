"""review-29-attack-r108 F1: an EMA object over a subset of the trainables (``ema.apply([w,
b])`` beside a trainable ``c``), and an evaluation graph that restores with
``Saver(ema.variables_to_restore([w, b]))`` and saves again with
``Saver(ema.variables_to_restore())`` (renamed ``{"model/" + k: v}`` or not): TF's default
``variables_to_restore()`` maps every trainable, so the re-save writes raw ``c`` under
``c/ExponentialMovingAverage``. The offers ``--no-meta --averages-only`` (renamed) and
``--averages-only`` (unprefixed), run as printed, exported raw ``c`` as its average, exit 0;
so did ``--ema-name slow --averages-only`` where a second object ``slow`` averages only ``w``
and ``b``. The .meta's update ops show no object writing that average: the offers now leave
the key out, and the statement no longer pairs it with the .meta read. Every offer is run as
printed and compared bit for bit with ``sess.run`` at save time (real TF1 graphs)."""

from __future__ import annotations

import re
import shlex

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


def graph(two):
    gs = tf1.train.get_or_create_global_step()
    w = tf1.get_variable("w", [4, 3], initializer=tf1.random_normal_initializer(seed=1))
    b = tf1.get_variable("b", [3], initializer=tf1.random_normal_initializer(seed=2))
    c = tf1.get_variable("c", [3], initializer=tf1.random_normal_initializer(seed=3))
    loss = (tf.reduce_sum(tf.square(w)) + tf.reduce_sum(tf.square(b))
            + 0.3 * tf.reduce_sum(tf.square(c)))
    step = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
    first = tf1.train.ExponentialMovingAverage(0.5)
    slow = tf1.train.ExponentialMovingAverage(0.9, name="slow")
    with tf.control_dependencies([step]):
        if two:
            op = tf.group(first.apply([w, b, c]), slow.apply([w, b]))
        else:
            op = first.apply([w, b])
    graph.first = first
    return (w, b, c), (slow if two else first), op


for two in (False, True):
    tag = "two" if two else "one"
    with tf.Graph().as_default():
        (w, b, c), ema, op = graph(two)
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(op)
            tf1.train.Saver().save(s, f"{out}/train_{tag}/model.ckpt", global_step=3)
            truth[f"{tag}:raw:c"] = s.run(c)
            for v in (w, b):
                truth[f"{tag}:avg:{v.op.name}"] = s.run(ema.average(v))
            if two:
                for v in (w, b, c):
                    truth[f"{tag}:first:{v.op.name}"] = s.run(graph.first.average(v))
    src = tf.train.latest_checkpoint(f"{out}/train_{tag}")
    for case, pre in (((f"ev_{tag}", ""), (f"pev_{tag}", "model/")) if not two
                      else ((f"ev_{tag}", ""),)):
        with tf.Graph().as_default():
            (w, b, c), ema, op = graph(two)
            with tf1.Session() as s:
                s.run(tf1.global_variables_initializer())
                tf1.train.Saver(ema.variables_to_restore([w, b])).restore(s, src)
                saver = tf1.train.Saver({pre + k: v for k, v in ema.variables_to_restore().items()})
                saver.save(s, f"{out}/{case}/model.ckpt", global_step=3)
with tf.Graph().as_default():  # review-29-attack-r108 F4: the evaluation re-save with the
    graph(True)  # first object's Saver(variables_to_restore()): its keys hold its averages
    saver = tf1.train.Saver(graph.first.variables_to_restore())
    with tf1.Session() as s:
        saver.restore(s, tf.train.latest_checkpoint(f"{out}/train_two"))
        saver.save(s, f"{out}/evf_two/model.ckpt", global_step=3)
np.savez(f"{out}/truth.npz", **truth)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_never_averaged")
    return out, run_script(SCRIPT, out)


def _bits(a) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def _run(cmd: str, out, case: str, *options: str, dst) -> tuple[int, str]:
    code, _, err = run_cli([cmd, *options, str(out / case), ("--out" if cmd == "export"
                                                             else "-o"), str(dst)])
    return code, " ".join(err.split())


# case, the options that refuse it, the offer's pattern, the output prefix, the truth's tag
CASES = [
    ("pev_one", [], r"if they hold the averages, pass (--no-meta --averages-only[^(]*) \(",
     "model/", "one"),
    ("ev_one", [], r"pass (--averages-only[^(]*) \(", "", "one"),
    ("ev_two", ["--ema-name", "slow"], r"pass (--averages-only[^(]*) \(", "", "two"),
]


@pytest.mark.parametrize("case, options, offer, prefix, tag", CASES)
def test_offer_leaves_out_the_key_no_object_averages(made, case, options, offer, prefix,
                                                     tag, tmp_path):
    out, truth = made
    dst = tmp_path / "e.npz"
    code, err = _run("export", out, case, *options, dst=dst)
    assert code == 6 and not dst.exists(), err
    found = re.search(offer, err)
    assert found, err
    printed = shlex.split(found.group(1))
    assert "--exclude" in printed, err  # the key that holds raw c is left out
    code, err = _run("export", out, case, *options, *printed, dst=dst)
    assert code == 0, err
    with np.load(dst) as z:
        assert sorted(z.files) == [prefix + "b", prefix + "w"], z.files
        for n in ("b", "w"):
            assert _bits(z[prefix + n]) == _bits(truth[f"{tag}:avg:{n}"]), n
    # restore-ema takes the same offer
    code, err = _run("restore-ema", out, case, *options, *printed, dst=tmp_path / "r")
    assert code == 0, err


@pytest.mark.parametrize("case, options", [("ev_one", ["--averages-only"]),
                                           ("ev_two", ["--ema-name", "slow",
                                                       "--averages-only"])])
@pytest.mark.parametrize("cmd", ["export", "restore-ema"])
def test_statement_never_pairs_the_key_no_object_averages(made, case, options, cmd,
                                                          tmp_path):
    """With the .meta read, --averages-only no longer reads c's key (raw c, which no
    object averages) as c's average: refused, naming the key and the --exclude."""
    out, _ = made
    dst = tmp_path / ("o.npz" if cmd == "export" else "o")
    code, err = _run(cmd, out, case, *options, dst=dst)
    assert code == 6 and not dst.exists(), err
    key = "c/slow" if case == "ev_two" else "c/ExponentialMovingAverage"
    assert f"--exclude '{key}'" in err and "raw value" in err, err


def test_raw_refusal_names_the_offer_without_the_raw_key(made, tmp_path):
    """review-29-attack-r108 F2: --raw on the renamed evaluation re-save said "no option of
    ckpt export reads them as the averages"; it names --no-meta --averages-only now, with
    the --exclude of raw c's key (F1), and that offer, run as printed, gives the averages."""
    out, truth = made
    dst = tmp_path / "e.npz"
    code, err = _run("export", out, "pev_one", "--raw", dst=dst)
    assert code == 6 and not dst.exists(), err
    found = re.search(r"ckpt export (--no-meta --averages-only[^(]*) \(without --raw", err)
    assert found, err
    code, err = _run("export", out, "pev_one", *shlex.split(found.group(1)), dst=dst)
    assert code == 0, err
    with np.load(dst) as z:
        assert sorted(z.files) == ["model/b", "model/w"], z.files
        for n in ("b", "w"):
            assert _bits(z["model/" + n]) == _bits(truth[f"one:avg:{n}"]), n


@pytest.mark.parametrize("case, options, prefix", [
    ("pev_one", ["--no-meta", "--averages-only", "--exclude",
                 "model/c/ExponentialMovingAverage"], "model/"),
    ("ev_one", ["--averages-only", "--exclude", "c/ExponentialMovingAverage"], "")])
def test_restored_record_states_only_the_keys_the_statement_read(made, case, options,
                                                                   prefix, tmp_path):
    """s29i "Left" (review-29-attack-r108): restore-ema of the offer, c's key (raw c)
    excluded, exits 0; its record (restored.json, and the mark inside the bundle that a
    copy keeps) said the user stated c's key holds an average: keys listed w, b AND c, so
    every later read of the output repeated a statement the user never made. They now
    name only the keys the output's variables were read from, as every later read says."""
    import json
    import shutil

    from ckpt_tools import open_checkpoint

    out, truth = made
    dst = tmp_path / "r"
    code, err = _run("restore-ema", out, case, *options, dst=dst)
    assert code == 0, err
    stated = [f"{prefix}{n}/ExponentialMovingAverage" for n in ("b", "w")]
    with open_checkpoint(str(dst)) as ckpt:  # what the output holds: w, b's averages
        for n in ("b", "w"):
            assert _bits(ckpt.tensor(prefix + n)) == _bits(truth[f"one:avg:{n}"]), n
        if case == "pev_one":  # c's key copied as it was: raw c, never stated an average
            key = "model/c/ExponentialMovingAverage"
            assert _bits(ckpt.tensor(key)) == _bits(truth["one:raw:c"])
    (record,) = dst.glob("*.restored.json")
    said = json.loads(record.read_text())["stated"]["averages_only"]
    assert said["keys"] == stated, said
    assert set(said["raw_if_trained"]) <= set(stated), said
    copy = tmp_path / "copy"  # .index and .data only: the mark inside the bundle states it
    copy.mkdir()
    for f in dst.glob("model.ckpt-3.*"):
        if f.suffix in (".index",) or ".data-" in f.name:
            shutil.copy(f, copy / f.name)
    for where in (dst, copy):
        code, text, err = run_cli(["list", "--json", str(where)])
        assert code == 0, err
        doc = json.loads(text)
        assert doc["stated_averages_only"]["keys"] == stated, (where, doc)
        assert "averages_only_record" in doc, doc


@pytest.mark.parametrize("case, options, prefix", [
    ("pev_one", ["--no-meta", "--averages-only", "--exclude",
                 "model/c/ExponentialMovingAverage"], "model/"),
    ("ev_one", ["--averages-only", "--exclude", "c/ExponentialMovingAverage"], "")])
@pytest.mark.parametrize("cmd", ["restore-ema", "export"])
def test_statement_notes_count_only_the_keys_read(made, case, options, prefix, cmd, tmp_path):
    """s30c "Left": with c's key (raw c) excluded, the statement's note said "3 key(s) named
    as averages ... read as averages" and --json's stated_averages_only pairs named c's key
    too, where only w's and b's keys were read. Both now name the two keys read."""
    import json

    out, _truth = made
    dst = tmp_path / ("o.npz" if cmd == "export" else "r")
    code, text, err = run_cli([cmd, *options, str(out / case), "--json",
                               "--out" if cmd == "export" else "-o", str(dst)])
    assert code == 0, err
    said = " ".join(err.split())
    assert "2 keys" in said and "3 keys" not in said, said
    pairs = json.loads(text)["stated_averages_only"]["pairs"]
    assert sorted(pairs) == [f"{prefix}{n}/ExponentialMovingAverage" for n in ("b", "w")], pairs


@pytest.mark.parametrize("case, prefix", [("pev_one", "model/"), ("ev_one", "")])
def test_list_names_the_export_without_the_raw_key(made, case, prefix, tmp_path):
    """review-29-attack-r108 F2 (list): list named "--averages-only ... where export's
    refusal offers it" for these re-saves: refused alone on the renamed one, and reading
    raw c's key as an average on either (F1). It now names the export the plan accepts, with
    the --exclude of c's key, and that export, run as printed, writes w's and b's averages."""
    out, truth = made
    code, text, err = run_cli(["list", str(out / case)])
    assert code == 0, err
    said = " ".join((text + err).split())
    found = re.search(r"; ckpt export (--[^;(]*?) reads them as the averages", said)
    assert found, said
    printed = shlex.split(found.group(1))
    key = f"{prefix}c/ExponentialMovingAverage"
    assert printed[-2:] == ["--exclude", key], said
    dst = tmp_path / "e.npz"
    code, err = _run("export", out, case, *printed, dst=dst)
    assert code == 0, err
    with np.load(dst) as z:
        assert sorted(z.files) == [prefix + "b", prefix + "w"], z.files
        for n in ("b", "w"):
            assert _bits(z[prefix + n]) == _bits(truth[f"one:avg:{n}"]), n


def test_two_objects_refusal_says_what_the_file_proves(made, tmp_path):
    """review-29-attack-r108 F4: an evaluation graph restored the first object's averages
    with Saver(first.variables_to_restore()) and saved again with it, beside slow's
    averages: the ExponentialMovingAverage keys hold first's averages (bit for bit), yet the
    refusal said "so those keys hold raw values and only slow's are averages". It now says
    what the save op shows: raw values if a training graph saved them, the averages if an
    evaluation graph re-saved them; its offer, run as printed, still gives slow's averages."""
    from ckpt_tools import open_checkpoint

    out, truth = made
    with open_checkpoint(str(out / "evf_two")) as ckpt:  # what the keys hold
        for n in ("w", "b", "c"):
            got = ckpt.tensor(f"{n}/ExponentialMovingAverage")
            assert _bits(got) == _bits(truth[f"two:first:{n}"]), n
        for n in ("w", "b"):
            assert _bits(ckpt.tensor(f"{n}/slow")) == _bits(truth[f"two:avg:{n}"]), n
    dst = tmp_path / "e.npz"
    code, err = _run("export", out, "evf_two", dst=dst)
    assert code == 6 and not dst.exists(), err
    assert "so those keys hold raw values" not in err, err
    assert ("so those keys hold their variables' raw values if a training graph saved them "
            "(an evaluation graph that restored the averages with that Saver and saved again "
            "writes the averages the same way, which the file cannot show) and only slow's "
            "are proven averages") in err, err
    found = re.search(r"pass (--ema-name slow[^(]*) \(Python", err)
    assert found, err
    code, err = _run("export", out, "evf_two", *shlex.split(found.group(1)), dst=dst)
    assert code == 0, err
    with np.load(dst) as z:
        assert sorted(z.files) == ["b", "w"], z.files
        for n in ("b", "w"):
            assert _bits(z[n]) == _bits(truth[f"two:avg:{n}"]), n
