"""``--saver-def-wrote`` beyond export/map/restore-ema (s27a/s27c leftovers), on the
``MonitoredTrainingSession`` checkpoints of :mod:`test_tf1_saver_def_wrote` (a plain Scaffold
Saver beside the user's swapping Saver, ``plaindef``; a swapping Scaffold Saver beside a plain
``Saver()``, ``swapdef``), made by real TensorFlow, truth read from the session at save time:

* list, show, stats, diff --ema and average --ema --bake meet the same crossed-Savers doubt
  (refused, or the pairing left unproven) and take the statement, pairing as the SaverDef's
  Saver wrote the keys; diff without --ema and average without --bake pair nothing and refuse
  it (exit 2);
* restore-ema's (and average --bake's) output keeps the .meta of both Savers: its record
  (``<name>.restored.json``) states the statement for exactly its bytes, so the output is read
  without it; a record beside other bytes vouches for nothing;
* a restore-ema --averages-only output (a training ``Saver(ema.variables_to_restore())``,
  :mod:`test_tf1_r94_minor`'s ``vtr_train``) repeats the statement's caveat wherever it is read
  (review-26-attack-r94 F4 tail).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script
from test_tf1_r94_minor import SCRIPT as R94_SCRIPT
from test_tf1_saver_def_wrote import SCRIPT

CASES = ("plaindef", "swapdef")
VARS = ("W", "b")
E = "ExponentialMovingAverage"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("saver_def_more")
    return out, run_tf1_script(SCRIPT, out)


@pytest.fixture(scope="module")
def vtr(tmp_path_factory):
    out = tmp_path_factory.mktemp("vtr_record")
    return out, run_tf1_script(R94_SCRIPT, out)


def _cli(*args: str) -> tuple[int, str, str]:
    code, text, err = run_cli([str(a) for a in args])
    return code, text, " ".join(err.split())


def _average_key(case: str, var: str) -> str:
    """The key the SaverDef's Saver wrote ``var``'s average under."""
    return f"{var}/{E}" if case == "plaindef" else var


def _raw_key(case: str, var: str) -> str:
    return var if case == "plaindef" else f"{var}/{E}"


def _rel(truth, case, var) -> float:
    ema, raw = (truth[f"{case}:{k}:{var}"].astype(np.float64) for k in ("ema", "raw"))
    return float(np.linalg.norm(ema - raw) / np.linalg.norm(raw))


@pytest.mark.parametrize("case", CASES)
def test_show_stats_diff_list_take_the_statement(made, case):
    """Without it: show of the average refused, stats leaves its drift '?', diff --ema refused,
    list's pairing assumed; with it each pairs the SaverDef Saver's keys: the drift and the
    difference are those of the average from its raw weight at save time."""
    out, truth = made
    ckpt = out / case / "model.ckpt-3"
    code, _, err = _cli("show", ckpt, f"W/{E}")
    assert code == 6 and "--saver-def-wrote" in err, err
    code, _, err = _cli("diff", ckpt, "--ema")
    assert code == 6 and "--saver-def-wrote" in err, err
    code, text, err = _cli("stats", ckpt, "--json")
    assert code == 0 and all(t["drift"] is None for t in json.loads(text)["tensors"]), text
    code, text, err = _cli("list", ckpt)
    assert code == 0 and "saver_not_swapped" in " ".join((text + err).split()), err

    code, text, err = _cli("show", ckpt, _average_key(case, "W"), "--saver-def-wrote")
    assert code == 0 and "because you stated --saver-def-wrote" in err, err
    code, text, err = _cli("stats", ckpt, "--saver-def-wrote", "--json")
    assert code == 0, err
    drift = {t["key"]: (t["ema_of"], t["drift"]) for t in json.loads(text)["tensors"]
             if t["drift"] is not None}
    assert sorted(drift) == sorted(_average_key(case, v) for v in VARS), drift
    for var in VARS:
        of, rel = drift[_average_key(case, var)]
        assert of == _raw_key(case, var) and rel == pytest.approx(_rel(truth, case, var),
                                                                  rel=1e-5), (var, of, rel)
    code, text, err = _cli("diff", ckpt, "--ema", "--saver-def-wrote", "--json")
    assert code == 0 and "because you stated --saver-def-wrote" in err, err
    rows = {t["name"]: t for t in json.loads(text)["tensors"]}
    assert sorted(rows) == sorted(_raw_key(case, v) for v in VARS), rows
    for var in VARS:
        row = rows[_raw_key(case, var)]
        gap = np.abs(truth[f"{case}:ema:{var}"].astype(np.float64)
                     - truth[f"{case}:raw:{var}"]).max()
        assert row["other"] == _average_key(case, var), row
        assert row["max_abs"] == pytest.approx(gap, rel=1e-6), row
    code, text, err = _cli("list", ckpt, "--saver-def-wrote", "--json")
    assert code == 0 and "because you stated --saver-def-wrote" in err, err
    listed = {v["key"]: v for v in json.loads(text)["variables"]}
    for var in VARS:
        assert listed[_average_key(case, var)]["ema_of"] == _raw_key(case, var), listed
    assert not json.loads(text).get("assumed"), text


def test_commands_that_pair_nothing_refuse_it(made, tmp_path):
    """diff A B and average without --bake pair no average: the statement is a usage error
    there (exit 2), as --strict is."""
    out, _ = made
    run = out / "plaindef"
    code, _, err = _cli("diff", run / "model.ckpt-3", run / "model.ckpt-0", "--saver-def-wrote")
    assert code == 2 and "only with --ema" in err, err
    code, _, err = _cli("average", run / "model.ckpt-0", run / "model.ckpt-3", "--ema",
                        "--saver-def-wrote", "--out", tmp_path / "a")
    assert code == 2 and "--ema --bake" in err, err
    assert not (tmp_path / "a").exists()


def _tf_read(tf, prefix):
    reader = tf.train.load_checkpoint(str(prefix))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()}


@pytest.mark.parametrize("case", CASES)
def test_restore_ema_output_is_read_without_the_statement(made, tmp_path, case, tf):
    """restore-ema --saver-def-wrote's output, whose copied .meta builds both Savers, exports
    its averages without the statement (bit for bit), naming the record; the record copied
    beside the input's own files (other bytes) vouches for nothing: refused as before."""
    out, truth = made
    baked = tmp_path / "baked"
    code, text, err = _cli("restore-ema", out / case, "--saver-def-wrote", "--out", baked)
    assert code == 0, err
    record = baked / "model.ckpt-3.restored.json"
    assert "(record: model.ckpt-3.restored.json" in text, text  # named when written (u30 F2)
    assert json.loads(record.read_text())["stated"] == {"saver_def_wrote": True}
    for var, value in _tf_read(tf, baked / "model.ckpt-3").items():
        if var in VARS:  # the variables TF restores hold the averages
            assert value.tobytes() == truth[f"{case}:ema:{var}"].tobytes(), var
    code, _, err = _cli("export", baked, "--out", tmp_path / "e.npz")
    assert code == 0, err
    assert str(record) in err and "restore-ema's record" in err, err
    with np.load(tmp_path / "e.npz") as z:
        assert sorted(z.files) == list(VARS)
        for var in VARS:
            assert z[var].tobytes() == truth[f"{case}:ema:{var}"].tobytes(), var
    for args in (["map", baked], ["list", baked], ["stats", baked],
                 ["show", baked, _average_key(case, "W")], ["diff", baked, "--ema"]):
        code, text, err = _cli(*args)
        assert code == 0 and "restore-ema's record" in err, (args, err)
    # --json says what the pairing rests on: the record's statement, and the record (u30 F4)
    for args in (["list", baked, "--json"], ["list", baked, "--json", "--role", "weight"],
                 ["export", baked, "--json", "--out", tmp_path / "j.npz"]):
        code, text, err = _cli(*args)
        doc = json.loads(text)
        assert code == 0 and doc["stated_saver_def_wrote"] is True, (args, err)
        assert doc["saver_def_wrote_record"] == str(record), (args, doc)
    code, text, err = _cli("list", out / case, "--saver-def-wrote", "--json")
    doc = json.loads(text)
    assert code == 0 and doc["stated_saver_def_wrote"] is True, err
    assert "saver_def_wrote_record" not in doc
    # the record beside the input's own files (its name, other bytes): no statement
    other = tmp_path / "other"
    shutil.copytree(out / case, other)
    shutil.copy(record, other / record.name)
    code, _, err = _cli("export", other / "model.ckpt-3", "--out", tmp_path / "o.npz")
    assert code == 6 and "--saver-def-wrote" in err, err
    assert not (tmp_path / "o.npz").exists()
    # --not-swapped, the user's own statement, comes first (the record is not read)
    code, _, err = _cli("export", baked, "--not-swapped", "--out", tmp_path / "n.npz")
    assert code == 0 and "restore-ema's record" not in err, err


@pytest.mark.parametrize("case", CASES)
def test_average_bake_takes_it_and_records_it(made, tmp_path, case, tf):
    """average --ema --bake: refused without it (naming it), with it each plain name holds the
    mean of the inputs' averages (read by TensorFlow from each input, under the key the
    SaverDef's Saver wrote them); its output is read without the statement too."""
    out, _ = made
    run = out / case
    inputs = [run / "model.ckpt-0", run / "model.ckpt-3"]
    code, _, err = _cli("average", *inputs, "--ema", "--bake", "--out", tmp_path / "x")
    assert code == 6 and "--saver-def-wrote" in err, err
    said = " ".join(err.split())  # the options first, the setups after (u30 F6)
    assert said.index("--saver-def-wrote") < 600 < said.index("Such Savers"), said
    assert said.index("--not-swapped") < said.index("Such Savers"), said
    avg = tmp_path / "avg"
    code, text, err = _cli("average", *inputs, "--ema", "--bake", "--saver-def-wrote",
                           "--out", avg)
    assert code == 0 and "because you stated --saver-def-wrote" in err, err
    assert "(record: model.ckpt-3.restored.json" in text, text  # named when written (u30 F2)
    code, text, err = _cli("average", *inputs, "--ema", "--bake", "--saver-def-wrote",
                           "--out", avg, "--force", "--json")
    assert code == 0 and json.loads(text)["records"] == [
        str(avg / "model.ckpt-3.restored.json")], text
    held = [_tf_read(tf, p) for p in inputs]
    got = _tf_read(tf, avg / "model.ckpt-3")
    for var in VARS:
        mean = (held[0][_average_key(case, var)].astype(np.float64)
                + held[1][_average_key(case, var)]) / 2
        assert np.allclose(got[var], mean, rtol=1e-6, atol=0), var
    code, _, err = _cli("export", avg, "--out", tmp_path / "e.npz")
    assert code == 0 and "ckpt average's record" in err, err
    with np.load(tmp_path / "e.npz") as z:
        for var in VARS:
            assert z[var].tobytes() == got[var].tobytes(), var


def test_averages_only_output_keeps_the_caveat(vtr, tmp_path):
    """restore-ema --averages-only of a training Saver(ema.variables_to_restore()): the output's
    variables hold what TF held in the variables at save time (the raw weights); every command
    reading it warns so (it said 'with EMA values' and nothing else), --json too."""
    out, truth = vtr
    baked = tmp_path / "r"
    code, text, err = _cli("restore-ema", out / "vtr_train" / "model.ckpt-3",
                           "--averages-only", "--out", baked)
    assert code == 0 and "(record: model.ckpt-3.restored.json" in text, err
    code, _, err = _cli("export", baked, "--out", tmp_path / "e.npz")
    assert code == 0, err
    assert "warning: ckpt restore-ema wrote" in err and "--averages-only" in err, err
    assert "raw weights, not averages" in err, err
    with np.load(tmp_path / "e.npz") as z:
        for var in ("W", "V"):  # the statement's values: TF's raw weights at save time
            assert z[var].tobytes() == truth[f"vtr_train:raw:{var}"].tobytes(), var
    code, text, err = _cli("export", baked, "--json", "--out", tmp_path / "j.npz")
    assert code == 0 and any("--averages-only" in w for w in json.loads(text)["warnings"]), text
    for args in (["list", baked], ["map", baked], ["stats", baked]):
        code, _, err = _cli(*args)
        assert code == 0 and "--averages-only" in err and "record" in err, (args, err)
    for args in (["list", baked, "--json"], ["export", baked, "--json", "--out",
                                             tmp_path / "k.npz"]):  # u30 F4
        code, text, err = _cli(*args)
        doc = json.loads(text)
        assert code == 0 and doc["averages_only_record"] == str(
            baked / "model.ckpt-3.restored.json"), (args, doc)
        assert sorted(doc["stated_averages_only"]["keys"]) == [
            f"V/{E}", f"W/{E}"], doc["stated_averages_only"]
        assert doc["stated_averages_only"]["raw_if_trained"], doc


@pytest.mark.parametrize("case", CASES)
def test_average_ema_without_bake_says_what_the_keys_are(made, tmp_path, case):
    """s28d "Left": ``average --ema`` (no --bake) of swapdef said "2 EMA shadows averaged"
    where W/ExponentialMovingAverage holds the RAW weight (plaindef alike: the file cannot
    tell them apart). It says "keys named as EMA shadows" and notes that what they hold is
    unproven."""
    out, _ = made
    inputs = sorted(str(p)[: -len(".index")] for p in (out / case).glob("model.ckpt-*.index"))
    assert len(inputs) == 2, inputs
    code, text, said = _cli("average", *inputs, "--ema", "--out", tmp_path / "avg")
    both = " ".join(text.split()) + " " + said
    assert code == 0, both
    assert "2 keys named as EMA shadows averaged" in both, both
    assert "does not prove what the keys named as EMA shadows hold" in both, both


@pytest.mark.parametrize("case", CASES)
def test_not_swapped_note_names_the_saver_def_statement_too(made, tmp_path, case):
    """s28d "Left": the --not-swapped note for crossed Savers offered only ``--raw
    --no-meta``; the .meta records the Scaffold Saver's SaverDef, so ``--saver-def-wrote``
    is the other statement that decides."""
    out, _ = made
    code, _, said = _cli("export", out / case / "model.ckpt-3", "--not-swapped", "--out",
                         tmp_path / "n.npz")
    assert code == 0, said
    assert "stated --not-swapped" in said and "--raw --no-meta" in said, said
    assert "or pass --saver-def-wrote instead of --not-swapped" in said, said
