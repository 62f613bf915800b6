"""TF1 with its ``.meta``: a key ``W/<name>`` no op of a TRAINING graph writes is no proven
average of ``W`` (review-19-attack-r45 F1-F5, CRITICAL), whatever else the graph averages.

In every refused graph below ``w0/ExponentialMovingAverage`` is a variable the user keeps as
``w0``'s gradient moment from Python (``Variable.load()``, or ``assign(placeholder)``), while
an optimizer trains ``w0``: TF says ``ema.average(w0) is None``. Read by its name it was
exported as ``w0``'s average, exit 0 under ``--strict``, where another EMA object averages
``w0`` (F1, its ``apply()`` in a variable_scope: F1b), the Saver renames the keys (F2), the
graph is a two-tag SavedModel whose ``apply()`` sits in a v2 ``tf.cond`` (F3), the graph runs
no ``apply()`` at all (F4) or the ``.meta`` is another graph's, lacking the key (F5). Now:
exit 6 naming ``--no-meta`` and ``--allow-missing``; ``--allow-missing`` keeps ``w0`` raw.
So with ``w0`` not trainable, trained by hand (``w0.assign_sub``): the contradiction refusal
offered ``--no-meta`` alone (the moment as the average) and refused ``--allow-missing`` (F8).
Legit graphs (apply() over every weight, a renamed Saver of them beside a frozen ``w9/keep``
it once asked a shadow of (F6), an eval graph's ``.meta`` from ``variables_to_restore()``,
two objects stated by name) keep exporting the averages.

Made by real TensorFlow in a subprocess; truth from the session at save time.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

import ckpt_tools
from ckpt_tools.errors import EmaError
from ckpt_tools.listing import list_variables

SCRIPT = r'''
import shutil

E = "ExponentialMovingAverage"


def base(trainable=True):
    w0 = tf1.get_variable("w0", initializer=tf.ones([4, 2]), trainable=trainable)
    w1 = tf1.get_variable("w1", initializer=tf.zeros([2]))
    loss = tf.reduce_sum(tf.square(w0 - 1.5)) + tf.reduce_sum(tf.square(w1 + 2.0))
    return w0, w1, loss


def moment(name="w0/" + E, shape=(4, 2), collections=None):
    scope, leaf = name.rsplit("/", 1)
    with tf1.variable_scope(scope):
        return tf1.get_variable(leaf, shape=list(shape), trainable=False,
                                initializer=tf1.zeros_initializer(), collections=collections)


def build(kind, where):
    """One graph: trains w0, w1 (GD); kind says what averages and what keeps w0/EMA."""
    os.makedirs(where, exist_ok=True)
    hand = kind in ("nttrained", "nt_nocoll", "nt_renamed")  # w0 not trainable, hand-trained
    w0, w1, loss = base(trainable=not hand)
    legit = kind in ("legit", "legit_renamed", "twolegit", "taken_after")
    mom = None if legit else moment(collections=[] if kind == "nt_nocoll" else None)
    if kind == "legit_renamed":  # frozen: no shadow to expect (F6)
        moment("w9/keep")
    ph = tf1.placeholder(tf.float32, [4, 2])
    setm = mom.assign(ph) if kind == "renamed_ph" else None  # a writer in the graph
    g0 = tf.gradients(loss, [w0])[0]
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    if hand:  # w0 in no collection but global, trained by hand (F8)
        train = tf.group(train, w0.assign_sub(0.1 * g0))
    ema = tf1.train.ExponentialMovingAverage(0.9)
    fast = tf1.train.ExponentialMovingAverage(0.5, name="fast")
    with tf.control_dependencies([train]):
        if kind == "twoema":
            upd = tf.group(fast.apply([w0, w1]), ema.apply([w1]))
        elif kind == "slashname":  # an EMA name holding '/': keys w*/fast/ExponentialMovingAverage
            slash = tf1.train.ExponentialMovingAverage(0.5, name="fast/" + E)
            upd = tf.group(slash.apply([w0, w1]), ema.apply([w1]))
        elif kind == "scoped":
            with tf1.variable_scope("aux"):
                u = fast.apply([w0])
            upd = tf.group(u, ema.apply([w1]))
        elif kind == "noapply":
            upd = tf.group(train)
        elif kind == "sm2cond":
            upd = tf.cond(tf.constant(True), lambda: tf.group(ema.apply([w1])), tf.no_op)
        elif kind == "twolegit":
            upd = tf.group(fast.apply([w0, w1]), ema.apply([w0, w1]))
        elif legit:
            upd = ema.apply([w0, w1])
        else:
            upd = ema.apply([w1])
    if kind == "taken_after":  # made after apply(): TF names it w0/ExponentialMovingAverage_1
        mom = tf1.Variable(tf.zeros([4, 2]), trainable=False, name="w0/" + E)
    renamed = kind in ("renamed", "renamed_ph", "legit_renamed", "nt_renamed")
    saver = tf1.train.Saver({"net/" + v.op.name: v for v in tf1.global_variables()}
                            if renamed else None)
    if kind == "nt_nocoll":  # the kept tensor in no collection, saved by var_list (r49 F1)
        saver = tf1.train.Saver(tf1.global_variables() + [mom])
    truth = {}
    with tf1.Session() as s:
        s.run(tf1.global_variables_initializer())
        if kind == "nt_nocoll":
            s.run(mom.initializer)
        m = np.zeros([4, 2], np.float32)
        for _ in range(4):
            g = s.run(g0)
            s.run(upd)
            m = 0.9 * m + 0.1 * g
            if kind == "renamed_ph":
                s.run(setm, {ph: m})
            elif mom is not None:
                mom.load(m, s)
        for v in (w0, w1):
            if ema.average(v) is not None:
                truth[f"ema:{v.op.name}"] = s.run(ema.average(v))
            if kind == "twolegit":
                truth[f"fast:{v.op.name}"] = s.run(fast.average(v))
        truth["none:w0"] = np.asarray(ema.average(w0) is None)
        for v in [*tf1.global_variables(), *([mom] if kind == "nt_nocoll" else [])]:
            truth[f"raw:{v.op.name}"] = s.run(v)
        if kind == "sm2cond":  # two tags: only the first graph's library would be read
            b = tf1.saved_model.Builder(os.path.join(where, "sm"))
            b.add_meta_graph_and_variables(s, ["train"])
            b.add_meta_graph(["serve"])
            b.save()
        else:
            saver.save(s, f"{where}/model.ckpt")
    np.savez(f"{where}/truth.npz", **truth)


def build_teacher(kind, where):
    """A frozen teacher w0 (teacher: w1 too) at the graph's root, a student net/w0, net/w1
    trained and averaged, saved under the student's standalone names (w0, w0/EMA, ...):
    keys w0 (w1) name the TEACHER's variables in the .meta (review-20-attack-r49 F2)."""
    os.makedirs(where, exist_ok=True)
    both = kind == "teacher"
    teach = [tf1.get_variable(n, initializer=tf.fill(s, 5.0), trainable=False)
             for n, s in (("w0", [4, 2]), ("w1", [2]))[:2 if both else 1]]
    with tf1.variable_scope("net"):
        w0, w1, loss = base()
    loss = loss + tf.reduce_sum(tf.square(w0 - teach[0])) * 0.01
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    ema = tf1.train.ExponentialMovingAverage(0.9)
    with tf.control_dependencies([train]):
        upd = ema.apply([w0, w1])
    keys = {v.op.name[len("net/"):]: v for v in (w0, w1, ema.average(w0), ema.average(w1))}
    if both:
        keys.update({"teacher/" + v.op.name: v for v in teach})
    truth = {}
    with tf1.Session() as s:
        s.run(tf1.global_variables_initializer())
        for _ in range(4):
            s.run(upd)
        for v in (w0, w1):
            truth[f"ema:{v.op.name}"] = s.run(ema.average(v))
        for v in tf1.global_variables():
            truth[f"raw:{v.op.name}"] = s.run(v)
        tf1.train.Saver(keys).save(s, f"{where}/model.ckpt")
    np.savez(f"{where}/truth.npz", **truth)


for kind in sys.argv[2].split(","):
    with tf.Graph().as_default():
        (build_teacher if kind.startswith("teacher") else build)(kind, f"{out}/{kind}")
# F5: the checkpoint of the graph keeping the moment, beside the .meta of the same model code
# without the moment variable
shutil.copytree(f"{out}/onlyw0", f"{out}/foreign")
os.remove(f"{out}/foreign/model.ckpt.meta")
with tf.Graph().as_default():
    w0, w1, loss = base()
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    with tf.control_dependencies([train]):
        tf1.train.ExponentialMovingAverage(0.9).apply([w1])
    tf1.train.export_meta_graph(f"{out}/foreign/model.ckpt.meta",
                                saver_def=tf1.train.Saver().as_saver_def())
# an eval graph's .meta (variables_to_restore(): nothing writes w0) beside legit's checkpoint
shutil.copytree(f"{out}/legit", f"{out}/evalmeta")
os.remove(f"{out}/evalmeta/model.ckpt.meta")
with tf.Graph().as_default():
    base()
    saver = tf1.train.Saver(tf1.train.ExponentialMovingAverage(0.9).variables_to_restore())
    tf1.train.export_meta_graph(f"{out}/evalmeta/model.ckpt.meta",
                                saver_def=saver.as_saver_def())
'''

KINDS = ("twoema", "scoped", "noapply", "renamed", "renamed_ph", "sm2cond", "onlyw0", "legit",
         "legit_renamed", "twolegit", "slashname", "nttrained", "taken_after", "teacher",
         "teacher_one", "nt_nocoll", "nt_renamed")
KEY = "w0/ExponentialMovingAverage"

# refused: (folder, options stating the EMA name, the prefix of a renamed Saver's keys)
REFUSED = {
    "F1": ("twoema", ["--ema-name", "ExponentialMovingAverage"], ""),
    # stated as F1: unstated, the .meta proves fast's aux/w0/fast w0's average (its one
    # apply() named fast, scope aux/fast) and exports it beside ema's w1, as it does the
    # root twin's w0/fast (review-23-attack-r72 F2)
    "F1b": ("scoped", ["--ema-name", "ExponentialMovingAverage"], ""),
    "F2": ("renamed", [], "net/"),
    "F2_assign": ("renamed_ph", [], "net/"),
    "F3": ("sm2cond/sm", [], ""),
    "F4": ("noapply", [], ""),
    "F5": ("foreign", [], ""),
    # review-19-attack-r46 F2: the object named 'fast/ExponentialMovingAverage' averages w0;
    # its last name part proved nothing of the hand-kept w0/ExponentialMovingAverage
    "r46_F2": ("slashname", ["--ema-name", "ExponentialMovingAverage"], ""),
    # w0 neither trainable nor averaged, trained by hand: was the contradiction refusal's,
    # --no-meta only, --allow-missing refused (review-19-attack-r45 F8)
    "F8": ("nttrained", [], ""),
    # so with the kept w0/ExponentialMovingAverage in no collection (collections=[]) saved by
    # an explicit var_list: the graph holds it all the same (review-20-attack-r49 F1)
    "r49_F1": ("nt_nocoll", [], ""),
    # so under a renaming Saver ({"net/" + v.op.name: v}): review-20-attack-r49 F4
    "r49_F4": ("nt_renamed", [], "net/"),
}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_unwritten_training")
    run_tf1_script(SCRIPT, out, ",".join(KINDS))
    return out


def _truth(run) -> dict[str, np.ndarray]:
    base = run.parent if run.name == "sm" else run
    return dict(np.load(base / "truth.npz"))


def _export(run, dest, *options: str) -> tuple[int, str, dict[str, np.ndarray]]:
    code, _, err = run_cli(["export", str(run), "--strict", "--out", str(dest), *options])
    if code != 0:
        assert not dest.exists()
        return code, err, {}
    with np.load(dest) as got:
        arrays = {k: got[k] for k in got.files}
    dest.unlink()
    return code, err, arrays


@pytest.mark.parametrize("finding", sorted(REFUSED))
def test_a_key_no_op_of_a_training_graph_writes_is_refused(made, finding, tmp_path):
    folder, stated, prefix = REFUSED[finding]
    run = made / folder
    truth = _truth(run)
    assert bool(truth["none:w0"])  # TF: ema.average(w0) is None
    assert truth[f"raw:{KEY}"].tobytes() != truth["raw:w0"].tobytes()
    code, err, _ = _export(run, tmp_path / "x.npz", *stated)
    assert code == 6, (finding, err)
    assert prefix + KEY in err and "--no-meta" in err and "--allow-missing" in err, err
    for argv in (["map", str(run)], ["restore-ema", str(run), "--out", str(tmp_path / "b")]):
        code, _, err = run_cli([*argv, *stated])
        assert code == 6 and "--allow-missing" in err, (argv, err)
    assert not (tmp_path / "b").exists()
    with pytest.raises(EmaError, match="use_meta=False"):
        ckpt_tools.ema_map(str(run), ema_name=stated[1] if stated else None)
    if finding in ("F3", "F4"):  # w1's key is unproven too: nothing is stored to keep beside
        return
    # --allow-missing: w0 raw, w1 ema.average(w1), bit for bit
    code, err, got = _export(run, tmp_path / "x.npz", *stated, "--allow-missing")
    assert code == 0, err
    assert got[prefix + "w0"].tobytes() == truth["raw:w0"].tobytes()
    assert got[prefix + "w1"].tobytes() == truth["ema:w1"].tobytes()


def test_a_training_graph_without_apply_lists_the_key_as_no_average(made):
    code, text, err = run_cli(["list", str(made / "noapply"), "--json"])
    assert code == 0, err
    roles = {v["name"]: (v["role"], v["ema_of"]) for v in json.loads(text)["variables"]}
    assert roles[KEY] != ("ema", "w0"), roles


@pytest.mark.parametrize("folder,stated,prefix,average", [
    ("legit", [], "", "ema"),
    ("legit_renamed", [], "net/", "ema"),
    ("evalmeta", [], "", "ema"),
    ("twolegit", ["--ema-name", "fast"], "", "fast"),
    ("twolegit", ["--ema-name", "ExponentialMovingAverage"], "", "ema"),
    # a hand variable named like w0's average after apply() (TF: ..._1): r45 F7
    ("taken_after", [], "", "ema"),
    ("taken_after", ["--ema-name", "ExponentialMovingAverage"], "", "ema"),
])
def test_legit_graphs_keep_exporting_the_averages(made, folder, stated, prefix, average,
                                                  tmp_path):
    truth = _truth(made / folder)
    code, err, got = _export(made / folder, tmp_path / "x.npz", *stated)
    assert code == 0, err
    for w in ("w0", "w1"):
        assert got[prefix + w].tobytes() == truth[f"{average}:{w}"].tobytes(), w
        assert got[prefix + w].tobytes() != truth[f"raw:{w}"].tobytes(), w
    if folder == "legit_renamed":  # frozen, kept raw (F6)
        assert got["net/w9/keep"].tobytes() == truth["raw:w9/keep"].tobytes()


def test_a_renamed_savers_keys_list_the_graphs_collections(made):
    """review-19-attack-r45 F6: the .meta's collections through the save op; the frozen
    net/w9/keep expects no shadow."""
    code, text, err = run_cli(["list", str(made / "legit_renamed"), "--json"])
    assert code == 0, err
    doc = json.loads(text)
    colls = {v["name"]: set(v["collections"]) for v in doc["variables"]}
    assert {"trainable_variables", "moving_average_variables"} <= colls["net/w0"], colls
    assert colls["net/w9/keep"] == {"variables"}, colls
    listing = list_variables(str(made / "legit_renamed"))
    assert "net/w9/keep" in listing.frozen and listing.expected == listing.with_shadow == 2


@pytest.mark.parametrize("folder", ["teacher", "teacher_one"])
def test_a_students_keys_named_as_a_frozen_teachers_export_the_students_averages(
        made, folder, tmp_path):
    """review-20-attack-r49 F2 (CRITICAL): a frozen teacher w0 (w1) at the graph's root, the
    student net/* saved as w0, w0/ExponentialMovingAverage, ...: export --strict wrote the
    teacher alone (teacher_one: w1 alone), exit 0, reading key w0 as the teacher's graph
    variable (role other), not net/w0, which the save op wrote under it."""
    run = made / folder
    truth = _truth(run)
    code, err, got = _export(run, tmp_path / "x.npz")
    assert code == 0, err
    teacher = {f"teacher/w{i}" for i in range(2)} if folder == "teacher" else set()
    assert set(got) == {"w0", "w1"} | teacher, sorted(got)
    for w in ("w0", "w1"):
        assert got[w].tobytes() == truth[f"ema:net/{w}"].tobytes(), w
        assert got[w].tobytes() != truth[f"raw:net/{w}"].tobytes(), w
    for t in teacher:
        assert got[t].tobytes() == truth[f"raw:{t[len('teacher/'):]}"].tobytes(), t
    code, err, got = _export(run, tmp_path / "x.npz", "--raw")
    assert code == 0, err
    assert {w: got[w].tobytes() for w in ("w0", "w1")} == {
        w: truth[f"raw:net/{w}"].tobytes() for w in ("w0", "w1")}
    # list: key w0 shows net/w0's collections and role, not the teacher's
    code, text, err = run_cli(["list", str(run), "--json"])
    assert code == 0, err
    rows = {v["name"]: v for v in json.loads(text)["variables"]}
    assert rows["w0"]["role"] == "weight", rows["w0"]
    assert "trainable_variables" in rows["w0"]["collections"], rows["w0"]


@pytest.mark.parametrize("folder,prefix", [("nttrained", ""), ("nt_renamed", "net/"),
                                           ("renamed", "net/")])
def test_list_shows_the_refused_key_as_no_average(made, folder, prefix, tmp_path):
    """review-20-attack-r49 F4: under a renaming Saver the kept moment was listed "ema of
    net/w0" (the plain Saver's list: other) while map refuses that pairing; F3: the
    --allow-missing export called the weight trained by hand (w0.assign_sub) "frozen"."""
    truth = _truth(made / folder)
    assert bool(truth["none:w0"])  # TF: ema.average(w0) is None
    code, text, err = run_cli(["list", str(made / folder), "--json"])
    assert code == 0, err
    rows = {v["name"]: v for v in json.loads(text)["variables"]}
    kept = rows[prefix + KEY]
    assert kept["role"] != "ema" and kept["ema_of"] is None, kept
    assert rows[prefix + "w0"]["ema"] is None, rows[prefix + "w0"]
    assert rows[prefix + "w1"]["ema"] == prefix + "w1/ExponentialMovingAverage", rows
    if folder != "nttrained":
        return
    code, err, got = _export(made / folder, tmp_path / "x.npz", "--allow-missing")
    assert code == 0, err
    assert got["w0"].tobytes() == truth["raw:w0"].tobytes()
    said = " ".join(err.split())
    assert "frozen" not in said and "outside trainable_variables" in said, said
