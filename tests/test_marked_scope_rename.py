"""An average of a run whose Saver renames the scope without a swap is not marked
(review-30-attack-r110 F8): ``{"net/W": W, "net/W/ExponentialMovingAverage": ema.average(W),
...}`` (porting a model) writes each key's name's own role, yet ``names_mislead`` flagged any
key written from a variable of another name: the average was marked ``names_doubted`` and its
``.index`` + ``.data`` copy refused as "a swapping Saver's graph", though the input's own copy
reads right. A Saver that writes an average's name from another variable's average, or
from another EMA object's average of the same variable (``net/W/fast`` holding ``slow``'s:
review-31-attack-r114 F2), stays marked. Truth: ``sess.run`` at each save of real TF1
Savers (graph mode)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script
from test_marked_outputs import KEY, _copy

SCRIPT = '''
def run(name, crossed):
    e = "ExponentialMovingAverage"
    for s, i, held, objects in wv_ema_saves(tf, f"{out}/{name}/model.ckpt", {e: (0.9, "WV")}, (
            lambda w, v, o: {"net/W": w, "net/V": v,
                             f"net/W/{e}": o[e].average(v if crossed else w),
                             f"net/V/{e}": o[e].average(w if crossed else v)}), (1, 2, 3)):
        for k, x in held.items():
            truth[f"{name}:{i}:avg:net/{k}"] = s.run(objects[e].average(x))


def two_objects(name, pre):
    # slow's averages saved under fast's names and the reverse: each key's base holds the
    # average's variable, only the EMA name is another object's (review-31-attack-r114 F2)
    def keys(w, v, o):
        return {k: x for n, y in (("W", w), ("V", v)) for k, x in (
            (f"{pre}/{n}", y), (f"{pre}/{n}/fast", o["slow"].average(y)),
            (f"{pre}/{n}/slow", o["fast"].average(y)))}

    for s, i, held, objects in wv_ema_saves(tf, f"{out}/{name}/model.ckpt", {
            "slow": (0.5, "WV"), "fast": (0.9, "WV")}, keys, (1, 2, 3)):
        for k, x in held.items():
            for o in ("fast", "slow"):
                truth[f"{name}:{i}:{o}:{pre}/{k}"] = s.run(objects[o].average(x))


def raw_holds_fast(name):
    # review-32-attack-r117 F1-F3: only fast's average of W swapped with W; slow's plain
    for s, i, held, objects in wv_ema_saves(tf, f"{out}/{name}/model.ckpt", {
            "slow": (0.9, "WV"), "fast": (0.5, "WV")}, lambda w, v, o: {
            "model/W": o["fast"].average(w), "model/W/fast": w,
            "model/W/slow": o["slow"].average(w), "model/V": v,
            "model/V/fast": o["fast"].average(v), "model/V/slow": o["slow"].average(v)}):
        for k, x in held.items():
            truth[f"{name}:{i}:raw:model/{k}"] = s.run(x)
            for o in ("fast", "slow"):
                truth[f"{name}:{i}:{o}:model/{k}"] = s.run(objects[o].average(x))


def disjoint_cross(name):
    # review-32-attack-r117 F9: fast averages W only, slow V only; each one's average saved
    # under the other's name
    for s, i, held, objects in wv_ema_saves(tf, f"{out}/{name}/model.ckpt", {
            "fast": (0.5, "W"), "slow": (0.9, "V")}, lambda w, v, o: {
            "model/W": w, "model/V": v, "model/W/fast": o["slow"].average(v),
            "model/V/slow": o["fast"].average(w)}):
        truth[f"{name}:{i}:model/W"] = s.run(objects["fast"].average(held["W"]))
        truth[f"{name}:{i}:model/V"] = s.run(objects["slow"].average(held["V"]))

run("renamed", False)
run("crossed", True)
two_objects("objects_crossed", "model")
two_objects("objects_crossed_renamed", "net")
raw_holds_fast("raw_holds_fast")
disjoint_cross("disjoint_cross")
'''
NAMES = ("net/W", "net/V")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("marked_scope_rename")
    return out, run_tf1_script(SCRIPT, out)


def test_scope_renaming_savers_average_is_not_marked(made, tmp_path):
    out, truth = made
    code, _, err = run_cli(["average", str(out / "renamed/model.ckpt-3"),
                            str(out / "renamed/model.ckpt-2"), "--out", str(tmp_path / "a")])
    assert code == 0, err
    code, listed, err = run_cli(["list", str(tmp_path / "a/model.ckpt-3")])
    assert KEY not in listed  # no mark written (the record key is listed when present)
    ckpt = _copy(tmp_path / "a", "model.ckpt-3", tmp_path / "c", only=(".index", ".data"))
    code, _, err = run_cli(["export", str(ckpt), "--out", str(tmp_path / "c.npz")])
    assert code == 0, err  # was 6: "a swapping Saver's graph ... doubts"
    with np.load(tmp_path / "c.npz") as z:
        for key in NAMES:
            want = ((truth[f"renamed:2:avg:{key}"].astype(np.float64)
                     + truth[f"renamed:3:avg:{key}"]) / 2).astype(np.float32)
            np.testing.assert_array_equal(z[key], want)


@pytest.mark.parametrize("run", ["crossed", "objects_crossed", "objects_crossed_renamed"])
def test_an_average_name_written_from_another_average_stays_marked(made, tmp_path, run):
    out, _ = made
    code, _, err = run_cli(["average", str(out / run / "model.ckpt-3"),
                            str(out / run / "model.ckpt-2"), "--out", str(tmp_path / "a")])
    assert code == 0, err
    ckpt = _copy(tmp_path / "a", "model.ckpt-3", tmp_path / "c", only=(".index", ".data"))
    extra = [] if run == "crossed" else ["--ema-name", "fast"]
    # was exit 0 for the objects' crossing: slow's averages exported as fast's
    code, _, err = run_cli(["export", str(ckpt), "--out", str(tmp_path / "c.npz"), *extra])
    assert code == 6 and KEY in " ".join(err.split()), err
    assert not (tmp_path / "c.npz").exists()


BAKES = ["restore-ema", "average --ema --bake"]
#: refusal of a bake's output read through its input's graph (review-32-attack-r117)
BAKED_OVER = "no longer says what these keys hold"


def _bake(run, how, ema_name, out):
    cmd = (["restore-ema", str(run / f"model.ckpt-{ema_name[1]}")] if how == "restore-ema" else
           ["average", *(str(run / f"model.ckpt-{i}") for i in ema_name[2]), "--ema", "--bake"])
    code, _, err = run_cli([*cmd, "--ema-name", ema_name[0], "--out", str(out)])
    assert code == 0, err


@pytest.mark.parametrize("how", BAKES)
def test_a_bake_leaving_another_objects_average_under_a_name_is_marked(made, tmp_path, how):
    """restore-ema / average --ema --bake of the crossing Saver write each plain name from
    fast's average but leave ``net/W/fast`` holding slow's: its .index+.data copy is refused,
    not read as fast's (review-31-attack-r114 F2, F3). In place the graph copied beside it,
    its input's, still says what each key holds: the bake wrote fast's averages over plain
    names the graph says hold raw weights, never over a key it says holds an average, so each
    object's averages read through it are TensorFlow's (c42bf78 refused it: review-32-attack-
    r117 F9); its plain names hold fast's averages."""
    out, truth = made
    run = out / "objects_crossed_renamed"
    steps = (3,) if how == "restore-ema" else (3, 2)
    _bake(run, how, ("fast", 3, steps), tmp_path / "a")
    for name in ("fast", "slow"):
        code, _, err = run_cli(["export", str(tmp_path / "a/model.ckpt-3"), "--ema-name",
                                name, "--out", str(tmp_path / f"{name}.npz")])
        assert code == 0, err
        with np.load(tmp_path / f"{name}.npz") as z:
            for key in NAMES:
                want = sum(truth[f"objects_crossed_renamed:{i}:{name}:{key}"].astype(
                    np.float64) for i in steps) / len(steps)
                np.testing.assert_array_equal(z[key], want.astype(np.float32))
    code, _, err = run_cli(["export", str(tmp_path / "a/model.ckpt-3"), "--raw", "--no-meta",
                            "--out", str(tmp_path / "a.npz")])
    assert code == 0, err
    with np.load(tmp_path / "a.npz") as z:  # the keys as stored: the bake wrote fast's
        for key in NAMES:
            want = sum(truth[f"objects_crossed_renamed:{i}:fast:{key}"].astype(np.float64)
                       for i in steps) / len(steps)
            np.testing.assert_array_equal(z[key], want.astype(np.float32))
    ckpt = _copy(tmp_path / "a", "model.ckpt-3", tmp_path / "c", only=(".index", ".data"))
    # was exit 0: slow's averages exported as fast's
    code, _, err = run_cli(["export", str(ckpt), "--ema-name", "fast",
                            "--out", str(tmp_path / "c.npz")])
    assert code == 6 and KEY in " ".join(err.split()), err
    assert not (tmp_path / "c.npz").exists()


@pytest.mark.parametrize("how", ["restore-ema"])
def test_a_bake_of_one_object_is_not_read_for_another_through_the_input_graph(made, tmp_path,
                                                                               how):
    """review-32-attack-r117 F1-F3: a bake of slow's averages of a Saver saving fast's
    average of W under ``model/W`` (W under ``model/W/fast``) writes over both keys; read in
    place through the input's graph beside it, ``--ema-name fast`` gave slow's average of W
    (F1) or the newest input's un-averaged one (F2), and ``restore-ema --add-scope`` of it
    lifted the mark, writing slow's under fast's names (F3): all exit 0. Each is refused.
    (``average --ema --bake`` now averages model/W, fast's average, as the graph says:
    read through it, it gives fast's mean, test_marked_refusal_wording.py.)"""
    out, truth = made
    run = out / "raw_holds_fast"
    steps = (2,) if how == "restore-ema" else (1, 2)
    _bake(run, how, ("slow", 2, steps), tmp_path / "a")
    baked = tmp_path / "a/model.ckpt-2"
    code, _, err = run_cli(["export", str(baked), "--ema-name", "fast",
                            "--out", str(tmp_path / "f.npz")])
    assert code == 6 and BAKED_OVER in " ".join(err.split()), err
    code, _, err = run_cli(["restore-ema", str(baked), "--ema-name", "fast", "--add-scope",
                            "x/", "--out", str(tmp_path / "x")])
    assert code == 6 and BAKED_OVER in " ".join(err.split()), err
    assert not (tmp_path / "x").exists() and not (tmp_path / "f.npz").exists()
    ckpt = _copy(tmp_path / "a", "model.ckpt-2", tmp_path / "c", only=(".index", ".data"))
    code, _, err = run_cli(["export", str(ckpt), "--ema-name", "fast",
                            "--out", str(tmp_path / "c.npz")])
    assert code == 6 and "no graph says what these keys hold" in " ".join(err.split()), err
    # neither --not-swapped (a statement of the inputs' Saver, not of the bake: r117 F8)
    # nor --no-meta (r117 F10) reads its names alone, in place or copied
    for where in (baked, ckpt):
        for stated in (["--not-swapped"], ["--no-meta"]):
            code, _, err = run_cli(["export", str(where), "--ema-name", "fast", *stated,
                                    "--out", str(tmp_path / "s.npz")])
            assert code == 6 and "hold now" in " ".join(err.split()) or \
                code == 6 and BAKED_OVER in " ".join(err.split()), (where, stated, err)
            assert not (tmp_path / "s.npz").exists()
    code, _, err = run_cli(["export", str(baked), "--raw", "--no-meta",
                            "--out", str(tmp_path / "r.npz")])
    assert code == 0, err
    with np.load(tmp_path / "r.npz") as z:  # the bake wrote slow's averages
        for key in ("model/W", "model/V"):
            want = sum(truth[f"raw_holds_fast:{i}:slow:{key}"].astype(np.float64)
                       for i in steps) / len(steps)
            np.testing.assert_array_equal(z[key], want.astype(np.float32))


def test_a_rescoped_bake_of_a_marked_crossing_average_stays_marked(made, tmp_path):
    """review-31-attack-r114 F1's lift of a carried mark needs every key to hold what its
    name says: restore-ema --strip-scope of the crossing Saver's marked average leaves
    ``W/fast`` holding slow's average, so the output keeps the mark and is refused, not read
    as fast's."""
    out, _ = made
    run = out / "objects_crossed_renamed"
    code, _, err = run_cli(["average", str(run / "model.ckpt-3"), str(run / "model.ckpt-2"),
                            "--out", str(tmp_path / "a")])
    assert code == 0, err
    code, _, err = run_cli(["restore-ema", str(tmp_path / "a/model.ckpt-3"), "--ema-name",
                            "fast", "--strip-scope", "net/", "--out", str(tmp_path / "r")])
    assert code == 0, err
    code, _, err = run_cli(["export", str(tmp_path / "r/model.ckpt-3"), "--ema-name", "fast",
                            "--out", str(tmp_path / "r.npz")])
    assert code == 6 and KEY in " ".join(err.split()), err
    assert not (tmp_path / "r.npz").exists()


@pytest.mark.parametrize("cmd", ["export", "restore-ema", "average --ema --bake"])
def test_no_meta_over_an_own_graph_crossing_ema_objects_is_refused(made, tmp_path, cmd):
    """review-32-attack-r117 F4: ``--no-meta`` beside the checkpoint's own .meta showing
    ``model/W/fast`` written from slow's average of W read the names alone: slow's averages
    exported, restored or baked as fast's, exit 0. That graph proves the names mislead, so
    the pairing by names is refused (``export --raw --no-meta`` says what it shows)."""
    out, _ = made
    run = out / "objects_crossed"
    args = {"export": ["export", str(run / "model.ckpt-3")],
            "restore-ema": ["restore-ema", str(run / "model.ckpt-3")],
            "average --ema --bake": ["average", str(run / "model.ckpt-3"),
                                     str(run / "model.ckpt-2"), "--ema", "--bake"]}[cmd]
    dest = tmp_path / ("o.npz" if cmd == "export" else "o")
    code, _, err = run_cli([*args, "--no-meta", "--ema-name", "fast", "--out", str(dest)])
    said = " ".join(err.split())
    assert code == 6 and "another EMA object's" in said and "drop --no-meta" in said, err
    assert not dest.exists()
    if cmd == "export":
        code, _, err = run_cli([*args, "--raw", "--no-meta", "--out", str(tmp_path / "r.npz")])
        assert code == 0 and "other EMA objects' averages" in " ".join(err.split()), err


@pytest.mark.parametrize("option", ["--exclude", "--grep"])
def test_filters_select_a_variable_its_saver_restores_from_another_key(made, tmp_path, tf,
                                                                       option):
    """review-32-attack-r117 F5: the Saver restores ``model/W`` from key ``model/W/fast`` (key
    ``model/W`` holds fast's average), so slow's map targets ``model/W/fast``: ``--exclude
    model/W`` (the variable's name) still wrote slow's average over W (raw asked, exit 0) and
    ``--grep model/W`` selected nothing (exit 3). The filters match the variable the target
    key restores: excluded, W's keys are copied as they are (the .meta saying what they hold);
    selected, W alone gets slow's average."""
    out, truth = made
    code, _, err = run_cli(["restore-ema", str(out / "raw_holds_fast/model.ckpt-2"),
                            "--ema-name", "slow", option, "model/W", "--out", str(tmp_path / "r")])
    assert code == 0, err
    reader = tf.train.load_checkpoint(str(tmp_path / "r/model.ckpt-2"))
    got = {k: reader.get_tensor(k) for k in ("model/W", "model/W/fast", "model/V")}
    w, v = ("raw", "slow") if option == "--exclude" else ("slow", "raw")
    # the graph's Saver restores W from model/W/fast; a plain Saver() reads model/W
    np.testing.assert_array_equal(got["model/W/fast"], truth[f"raw_holds_fast:2:{w}:model/W"])
    np.testing.assert_array_equal(got["model/W"], truth[
        f"raw_holds_fast:2:{'fast' if w == 'raw' else w}:model/W"])
    np.testing.assert_array_equal(got["model/V"], truth[f"raw_holds_fast:2:{v}:model/V"])


def test_a_saver_crossing_two_objects_offers_no_call_that_refuses_too(made, tmp_path, tf):
    """review-32-attack-r117 F7: the refusal of a Saver writing ``model/W/fast`` from slow's
    average offered ``ckpt_tools.restore_ema(sess, path)`` in the imported graph, which
    raised the same refusal. It offers no such call now; the graph's own Saver it names
    does restore each average into its shadow variable (TensorFlow's truth)."""
    out, truth = made
    path = str(out / "objects_crossed/model.ckpt-3")
    code, _, err = run_cli(["export", path, "--ema-name", "fast", "--out",
                            str(tmp_path / "o.npz")])
    said = " ".join(err.split())
    assert code == 6 and "restore_ema(" not in said and "no option of ckpt decides" in said, err
    v1 = tf.compat.v1
    with tf.Graph().as_default(), v1.Session() as sess:
        v1.train.import_meta_graph(path + ".meta").restore(sess, path)
        shadows = {v.op.name: v for v in v1.global_variables()}
        for key in ("model/W", "model/V"):
            got = sess.run(shadows[f"{key}/fast"])  # fast's shadow variable
            np.testing.assert_array_equal(got, truth[f"objects_crossed:3:fast:{key}"])


@pytest.mark.parametrize("how", BAKES)
def test_a_bake_of_objects_over_disjoint_variables_reads_in_place(made, tmp_path, how):
    """review-32-attack-r117 F9: fast averaged W only and slow V only, their averages saved
    under each other's names; c42bf78 refused every in-place read of a bake of both ("baking
    one EMA object's averages over keys that graph says hold another's", false: only the
    plain names, raw by the graph, were written). In place the input's graph is read again,
    giving each object's averages (TensorFlow's); the .index+.data copy stays refused."""
    out, truth = made
    run = out / "disjoint_cross"
    steps = (2,) if how == "restore-ema" else (1, 2)
    _bake(run, how, ("fast,slow", 2, steps), tmp_path / "a")
    # --not-swapped changes nothing there: the graph's save op says what each key holds, and
    # the note said "the graph file records no save op to show it" (r117 M5)
    for stated in ([], ["--not-swapped"]):
        code, _, err = run_cli(["export", str(tmp_path / "a/model.ckpt-2"), "--ema-name",
                                "fast,slow", *stated, "--out", str(tmp_path / "a.npz"),
                                "--force"])
        assert code == 0, err  # was 6
        said = " ".join(err.split())
        assert "records no save op" not in said, err
        assert not stated or "the graph file's save op shows what each key holds" in said, err
        with np.load(tmp_path / "a.npz") as z:
            for key in ("model/W", "model/V"):
                want = sum(truth[f"disjoint_cross:{i}:{key}"].astype(np.float64)
                           for i in steps) / len(steps)
                np.testing.assert_array_equal(z[key], want.astype(np.float32))
    ckpt = _copy(tmp_path / "a", "model.ckpt-2", tmp_path / "c", only=(".index", ".data"))
    # without the graph, neither --not-swapped (it read model/W/fast, slow's average of V, as
    # fast's of W, exit 0) nor --no-meta pairs the names: several objects' keys are crossed
    for stated in ([], ["--not-swapped"], ["--no-meta"]):
        code, _, err = run_cli(["export", str(ckpt), "--ema-name", "fast,slow", *stated,
                                "--out", str(tmp_path / "c.npz")])
        said = " ".join(err.split())
        assert code == 6 and KEY in said and "pass --not-swapped" not in said, (stated, err)
        assert not (tmp_path / "c.npz").exists()
    # in place, --no-meta is refused the same way, not said "copied without" its graph
    code, _, err = run_cli(["export", str(tmp_path / "a/model.ckpt-2"), "--ema-name",
                            "fast,slow", "--no-meta", "--out", str(tmp_path / "n.npz")])
    said = " ".join(err.split())
    assert code == 6 and "nor under --no-meta" in said and "copied without" not in said, err


def test_averaging_copies_of_marked_bakes_names_their_writer(made, tmp_path):
    """review-32-attack-r117 M1: ``average --ema --bake`` of restore-ema's marked outputs
    copied without their graph was refused saying "its _CKPT_TOOLS_RECORD key says ckpt
    average wrote it": restore-ema did."""
    out, _ = made
    run = out / "objects_crossed_renamed"
    copies = []
    for i in (2, 3):
        _bake(run, "restore-ema", ("fast", i, (i,)), tmp_path / f"r{i}")
        copies.append(str(_copy(tmp_path / f"r{i}", f"model.ckpt-{i}", tmp_path / f"c{i}",
                                only=(".index", ".data"))))
    code, _, err = run_cli(["average", *copies, "--ema", "--bake", "--no-meta", "--ema-name",
                            "fast", "--out", str(tmp_path / "a")])
    said = " ".join(err.split())
    assert code == 6 and "key says ckpt restore-ema wrote it" in said, err
    assert "ckpt average wrote" not in said and not (tmp_path / "a").exists()


def test_no_statement_reads_a_crossing_or_baked_over_mark_by_names(made, tmp_path):
    """review-32-attack-r119: the bake-over mark was lost by an average of the bake's copies
    (F1) and never written by a re-scoped bake, which copies no graph (F3); a Saver crossing
    averages between variables writes each variable under its own name, so --not-swapped,
    which the refusal offered, is true of it and read the crossed averages by name (F3b-F7).
    Each is refused under --not-swapped and --no-meta, and the refusal of a crossing's copy
    no longer offers --not-swapped."""
    out, _ = made
    run = out / "raw_holds_fast"
    for i in (1, 2):
        _bake(run, "restore-ema", ("slow", i, ()), tmp_path / f"r{i}")
        _copy(tmp_path / f"r{i}", f"model.ckpt-{i}", tmp_path / f"c{i}", only=(".index", ".data"))
    code, _, err = run_cli(["average", str(tmp_path / "c1/model.ckpt-1"),
                            str(tmp_path / "c2/model.ckpt-2"), "--out", str(tmp_path / "a")])
    assert code == 0, err
    code, _, err = run_cli(["restore-ema", str(run / "model.ckpt-2"), "--ema-name", "slow",
                            "--add-scope", "x/", "--out", str(tmp_path / "x")])
    assert code == 0, err
    code, _, err = run_cli(["restore-ema", str(out / "crossed/model.ckpt-3"),
                            "--out", str(tmp_path / "k")])
    assert code == 0, err
    crossed = _copy(tmp_path / "k", "model.ckpt-3", tmp_path / "kc", only=(".index", ".data"))
    code, _, err = run_cli(["export", str(crossed), "--out", str(tmp_path / "o.npz")])
    assert code == 6 and "pass --not-swapped" not in " ".join(err.split()), err
    for ckpt, name in ((tmp_path / "a/model.ckpt-2", "fast"), (tmp_path / "x/model.ckpt-2",
                                                               "fast"), (crossed, None)):
        for stated in (["--not-swapped"], ["--no-meta"]):
            code, _, err = run_cli(["export", str(ckpt), *stated,
                                    *(["--ema-name", name] if name else []),
                                    "--out", str(tmp_path / "o.npz")])
            assert code == 6, (ckpt, stated, err)  # was 0: slow's as fast's, V's as W's
            assert not (tmp_path / "o.npz").exists()


def test_python_meta_false_is_refused_as_no_meta_is(made, tmp_path):
    """review-32-attack-r122 F1: ``open_checkpoint(path, meta=False)``, the Python side of
    --no-meta, reached ema_map with use_meta=True, so none of --no-meta's refusals ran:
    export_weights of a Saver crossing EMA objects' averages, or of a bake-over output's
    copy, handed back another object's averages. Both are refused, as the CLI's are."""
    from ckpt_tools import UnprovenPairingError, export_weights, open_checkpoint

    out, _ = made
    _bake(out / "raw_holds_fast", "restore-ema", ("slow", 2, ()), tmp_path / "r")
    copy = _copy(tmp_path / "r", "model.ckpt-2", tmp_path / "c", only=(".index", ".data"))
    for path in (out / "objects_crossed/model.ckpt-3", copy):
        with open_checkpoint(str(path), meta=False) as ckpt, \
                pytest.raises(UnprovenPairingError):
            export_weights(ckpt, str(tmp_path / "o.npz"), ema_name="fast")
        assert not (tmp_path / "o.npz").exists()
