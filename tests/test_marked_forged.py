"""Forged or corrupt ``_CKPT_TOOLS_RECORD`` marks (review-29-attack-r107 F5): deep JSON crashed
every command (RecursionError, exit 70), parts of other types crashed (TypeError, exit 70) or
were silently passed over; each is refused as a corrupt checkpoint (exit 4) naming the file.
The mark is written by a real TF1 Saver under that key (a Saver dict key)."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

K = {"kind": "ckpt_tools record", "version": 1}
CASES = {
    "deep": "[" * 200000 + "]" * 200000,
    "graphs_int": json.dumps({**K, "names_doubted": {"graphs": 5, "inputs": 7}}),
    "keys_int": json.dumps({**K, "stated": {"averages_only": {"keys": 5}}}),
    "stated_list": json.dumps({**K, "stated": ["averages_only"]}),
    "nd_string": json.dumps({**K, "names_doubted": "yes"}),
    "averages_only_true": json.dumps({**K, "stated": {"averages_only": True}}),
    # who made a carried statement, over which output (review-30-attack-r112 F1)
    "origins_str": json.dumps({**K, "stated": {"no_meta": True,
                                               "origins": {"no_meta": "ckpt average"}}}),
    # what the inputs' graph proved: one of the values ckpt_tools writes, never another
    "proved_unknown": json.dumps({**K, "names_doubted": {"graphs": [], "inputs": [],
                                                        "graph_proved": ["maybe"]}}),
    "proved_str": json.dumps({**K, "names_doubted": {"graphs": [], "inputs": [],
                                                    "graph_proved": "crossed"}}),
}
# names_doubted as session 32's writers wrote it (one boolean flag per finding: the outputs
# users already have), and as they are written now (one "graph_proved" field): read alike
DOUBT = {"by": "ckpt restore-ema", "graphs": ["model.ckpt-1.meta"], "inputs": ["run/model.ckpt-1"],
         "graph_written": True}
PROVED = {"graph_of_input": "baking one EMA object's averages over keys that graph says hold "
                            "another's: no graph says what these keys hold now",
          "several_objects": "whose graph proves averages of several EMA objects: its names are "
                             "not read without that graph",
          "crossed": "that graph showed its Saver writing keys named as averages from other "
                     "variables' or other EMA objects' averages"}
MARKS = {"old_plain": {**K, "names_doubted": DOUBT},
         **{f"old_{p}": {**K, "names_doubted": {**DOUBT, p: True}} for p in PROVED},
         **{f"new_{p}": {**K, "names_doubted": {**DOUBT, "graph_proved": [p]}}
            for p in PROVED},
         # several: the strongest is said (a bake over another object's keys first), and
         # the graph a crossing Saver's (review-32-attack-r122 N2)
         "old_all": {**K, "names_doubted": {**DOUBT, **{p: True for p in PROVED}}},
         "new_all": {**K, "names_doubted": {**DOUBT, "graph_proved": sorted(PROVED)}}}
SCRIPT = '''
import json
cases = json.loads(sys.argv[2])
for case, val in cases.items():
    with tf.Graph().as_default():
        W = tf1.get_variable("W", [3, 2])
        ema = tf1.train.ExponentialMovingAverage(0.5)
        up = ema.apply([W])
        m = tf1.get_variable("mark", [], dtype=tf.string,
                             initializer=tf1.constant_initializer(val.encode(), dtype=tf.string))
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            s.run(up)
            vl = {x.op.name: x for x in tf1.global_variables() if x is not m}
            vl["_CKPT_TOOLS_RECORD"] = m
            tf1.train.Saver(vl).save(s, f"{out}/{case}/model.ckpt", global_step=1,
                                     write_meta_graph=False)
'''


@pytest.fixture(scope="module")
def forged(tmp_path_factory):
    out = tmp_path_factory.mktemp("forged_marks")
    run_tf1_script(SCRIPT, out, json.dumps({**CASES, **{k: json.dumps(v) for k, v in
                                                         MARKS.items()}}))
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_forged_mark_is_refused_as_corrupt(forged, case, tmp_path):
    ckpt = forged / case / "model.ckpt-1"
    for cmd in (["export", str(ckpt), "--out", str(tmp_path / "e.npz")],
                ["restore-ema", str(ckpt), "--out", str(tmp_path / "r")]):
        code, _, err = run_cli(cmd)
        assert code == 4 and "_CKPT_TOOLS_RECORD" in err and str(ckpt) in err, (cmd, err)
    assert not (tmp_path / "e.npz").exists() and not (tmp_path / "r").exists()


@pytest.mark.parametrize("case", sorted(MARKS))
def test_what_a_marks_inputs_graph_proved_is_honoured_old_flags_or_one_field(forged, case,
                                                                              tmp_path):
    """A mark's strict doubt (no statement lifts it, --no-meta does not read past it) is read
    from session 32's flags and from the one ``graph_proved`` field alike: refused under
    --not-swapped and under --no-meta, naming what was proved; a plain doubt is decided by
    --not-swapped, as before."""
    ckpt = forged / case / "model.ckpt-1"
    proved = "graph_of_input" if case.endswith("_all") else case.split("_", 1)[1]
    for extra in (["--not-swapped"], ["--no-meta"], ["--no-meta", "--not-swapped"]):
        target = tmp_path / "e.npz"
        code, _, err = run_cli(["export", str(ckpt), "--out", str(target), "--force", *extra])
        line = " ".join(err.split())
        if proved == "plain":
            assert code == (0 if "--not-swapped" in extra else 6), (extra, err)
            continue
        assert code == 6 and PROVED[proved] in line, (extra, err)
        assert "pass --not-swapped" not in line and not target.exists(), (extra, err)
        crossing = "crossed" in case or case.endswith("_all")
        assert f"a {'crossing' if crossing else 'swapping'} Saver's graph" in line, (extra, err)


def test_old_flags_carried_into_an_average_are_joined(forged, tmp_path):
    """A plain ``ckpt average`` of an input marked with session 32's ``graph_of_input`` flag
    and one marked ``crossed`` carries what their graphs proved into its output's one field,
    both: refused as before under --not-swapped and --no-meta, naming the strongest (the
    bake over another object's keys) and the graph a crossing Saver's."""
    newest = forged / "old_crossed" / "model.ckpt-1"
    code, _, err = run_cli(["average", str(forged / "old_graph_of_input" / "model.ckpt-1"),
                            str(newest), "--newest", str(newest), "--out", str(tmp_path / "a")])
    assert code == 0, err
    for extra in (["--not-swapped"], ["--no-meta"]):
        code, _, err = run_cli(["export", str(tmp_path / "a" / "model.ckpt-1"), *extra,
                                "--out", str(tmp_path / "e.npz")])
        line = " ".join(err.split())
        assert code == 6 and PROVED["graph_of_input"] in line, (extra, err)
        assert "ckpt average carried that doubt into it" in line, (extra, err)
        assert "a crossing Saver's graph" in line, (extra, err)
