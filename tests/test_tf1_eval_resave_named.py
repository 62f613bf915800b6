"""The average of TF1 evaluation-graph re-saves (``Saver(ema.variables_to_restore())`` in a
graph with no ``ema.apply()``, restoring a training checkpoint's averages and saving them) of
an EMA object NAMED by hand (``ExponentialMovingAverage(decay, name="fast")``: keys
``fc/w/fast``) was marked as if a swapping Saver's graph doubted its keys, only TF's default
name being read as an average's (review-31-attack-r115 F1): its ``.index`` + ``.data`` copy
was refused with that false reason even with ``--ema-name fast --averages-only``, which reads
the input's own copy. Where the graph cannot tell which averages its keys hold, the mark
stays: the restoring Saver of one object and the saving Saver of another in one graph (whose
averages do ``fc/w/ExponentialMovingAverage`` hold?), and an EMA name with a scope
(``tower/ExponentialMovingAverage``: read alone, the average of ``fc/w/tower``); read through
that graph, the former is refused even under ``--averages-only``. Made here by TensorFlow (a
subprocess), the truth read from the training session (``ema.average(v)``)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli, run_script
from test_marked_outputs import _copy

SCRIPT = r'''
import os
import sys

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()
out = sys.argv[1]
truth = {}
NAMES = ("fast", "ExponentialMovingAverage", "tower/ExponentialMovingAverage")


def model():
    x = tf1.placeholder_with_default(tf.ones([2, 3]), [None, 3], name="x")
    w = tf1.get_variable("fc/w", [3, 3], initializer=tf1.random_normal_initializer())
    b = tf1.get_variable("fc/b", [3], initializer=tf1.random_normal_initializer())
    return w, b, tf.matmul(x, w) + b


with tf.Graph().as_default():  # training: three EMA objects, their shadows all saved
    gs = tf1.train.get_or_create_global_step()
    w, b, y = model()
    step = tf1.train.GradientDescentOptimizer(0.05).minimize(tf.reduce_sum(tf.square(y)),
                                                             global_step=gs)
    emas = [tf1.train.ExponentialMovingAverage(d, num_updates=gs, name=n)
            for d, n in zip((0.5, 0.7, 0.9), NAMES)]
    with tf.control_dependencies([step]):
        train_op = tf.group(*[e.apply([w, b]) for e in emas])
    saver = tf1.train.Saver()
    with tf1.Session() as s:
        s.run(tf1.global_variables_initializer())
        for i in (1, 2, 3, 4):
            s.run(train_op)
            if i > 2:
                saver.save(s, f"{out}/train/model.ckpt", global_step=gs)
                for e in emas:
                    for v in (w, b):
                        truth[f"{i}:{e.name}:{v.op.name}"] = s.run(e.average(v).read_value())
                for v in (w, b):
                    truth[f"{i}:raw:{v.op.name}"] = s.run(v.read_value())
# each evaluation graph: no ema.apply(); (the Saver restoring, the Saver saving)
EVAL = {"fast": ("fast", "fast"), "crossed": ("fast", "ExponentialMovingAverage"),
        "tower": ("tower/ExponentialMovingAverage",) * 2}
for kind, (restore, save) in EVAL.items():
    for i in (3, 4):
        with tf.Graph().as_default():
            gs = tf1.train.get_or_create_global_step()
            model()
            savers = {n: tf1.train.Saver(tf1.train.ExponentialMovingAverage(
                0.5, name=n).variables_to_restore()) for n in {restore, save}}
            os.makedirs(f"{out}/{kind}", exist_ok=True)
            with tf1.Session() as s:
                savers[restore].restore(s, f"{out}/train/model.ckpt-{i}")
                savers[save].save(s, f"{out}/{kind}/model.ckpt", global_step=gs)
with tf.Graph().as_default():  # the RAW weights restored (a plain Saver), saved under tower's
    gs = tf1.train.get_or_create_global_step()  # average names by its vtr Saver
    w, b, _ = model()
    plain = tf1.train.Saver({"fc/w": w, "fc/b": b, "global_step": gs})
    saver = tf1.train.Saver(tf1.train.ExponentialMovingAverage(
        0.5, name=NAMES[2]).variables_to_restore())
    os.makedirs(f"{out}/tower_raw", exist_ok=True)
    with tf1.Session() as s:
        plain.restore(s, f"{out}/train/model.ckpt-4")
        saver.save(s, f"{out}/tower_raw/model.ckpt", global_step=gs)
for kind, name in (("part", "ExponentialMovingAverage"), ("part_fast", "fast")):
    for i in (3, 4):  # a partitioned layer: each part saved under its own key, p/part_0/<name>
        with tf.Graph().as_default():
            gs = tf1.train.get_or_create_global_step()
            model()
            with tf1.variable_scope("fc2", partitioner=tf1.fixed_size_partitioner(2)):
                tf1.get_variable("p", [4, 2])
            saver = tf1.train.Saver(tf1.train.ExponentialMovingAverage(
                0.5, name=name).variables_to_restore())
            os.makedirs(f"{out}/{kind}", exist_ok=True)
            with tf1.Session() as s:  # what Saver(vtr).restore would give (it cannot: parts)
                s.run(tf1.global_variables_initializer())
                s.run(tf1.assign(gs, i))
                saver.save(s, f"{out}/{kind}/model.ckpt", global_step=gs)
# no Saver restores: init_from_checkpoint / warm_start read fast's averages into fc/w, fc/b
FAST = {"fc/w": "fc/w/fast", "fc/b": "fc/b/fast"}
for kind, save in (("init", "ExponentialMovingAverage"), ("warm", "ExponentialMovingAverage"),
                   ("init_fast", "fast"), ("init_net", "ExponentialMovingAverage")):
    for i in (3, 4):
        with tf.Graph().as_default():
            gs = tf1.train.get_or_create_global_step()
            if kind == "init_net":  # mapped onto other names (review-32-attack-r124 F1)
                with tf1.variable_scope("net"):
                    w, b, _ = model()
            else:
                w, b, _ = model()
            ckpt = f"{out}/train/model.ckpt-{i}"
            if kind == "warm":
                tf1.train.warm_start(ckpt, vars_to_warm_start=list(FAST),
                                     var_name_to_prev_var_name=FAST)
            else:
                tf1.train.init_from_checkpoint(ckpt, {FAST["fc/w"]: w, FAST["fc/b"]: b})
            saver = tf1.train.Saver(tf1.train.ExponentialMovingAverage(
                0.5, name=save).variables_to_restore())
            os.makedirs(f"{out}/{kind}", exist_ok=True)
            with tf1.Session() as s:
                s.run(tf1.global_variables_initializer())
                s.run(tf1.assign(gs, i))
                saver.save(s, f"{out}/{kind}/model.ckpt", global_step=gs)
# restores outside a Saver the names alone do not show (review-33-attack-r126): fast's keys
# mapped onto the variables of another scope (a rename: read), onto another variable (fc/w's
# average into fc2/w), remapped by a vocabulary warm start, or restored into a staging
# variable then assigned
for kind in ("fast_net", "fast_cross", "vocab", "hop", "sv_fast_net", "sv_net", "sv_cross",
             "sv_swap", "hop_cast", "hop_saver", "hop_scatter"):
    for i in (3, 4):
        with tf.Graph().as_default():
            gs = tf1.train.get_or_create_global_step()
            ckpt = f"{out}/train/model.ckpt-{i}"
            with tf1.variable_scope("net" if kind.endswith("net") else ""):
                w, b, _ = model()
            restoring = None  # a Saver of other names restoring the training keys
            if kind == "sv_fast_net":
                restoring = tf1.train.Saver({"fc/w/fast": w, "fc/b/fast": b})
            elif kind == "sv_net":  # the default object's averages, saved as fast's
                restoring = tf1.train.Saver({"fc/w/ExponentialMovingAverage": w,
                                             "fc/b/ExponentialMovingAverage": b})
            elif kind == "sv_cross":
                w2 = tf1.get_variable("fc2/w", [3, 3])
                restoring = tf1.train.Saver({"fc/w/fast": w2, "fc/b/fast": b})
            elif kind == "sv_swap":  # a Saver writing the saved keys from crossed variables
                w2 = tf1.get_variable("fc2/w", [3, 3])
                tf1.train.Saver({"global_step": gs, "fc/w/fast": w2, "fc2/w/fast": w,
                                 "fc/b/fast": b})
            if kind == "fast_net":
                tf1.train.init_from_checkpoint(ckpt, {"fc/w/fast": w, "fc/b/fast": b})
            elif kind == "fast_cross":
                w2 = tf1.get_variable("fc2/w", [3, 3])
                tf1.train.init_from_checkpoint(ckpt, {"fc/w/fast": w2, "fc/b/fast": b})
            elif kind == "vocab":
                with open(f"{out}/vocab.txt", "w") as f:
                    f.write("a\nb\nc\n")
                vocab = tf1.train.VocabInfo(new_vocab=f"{out}/vocab.txt", new_vocab_size=3,
                                            num_oov_buckets=0, old_vocab=f"{out}/vocab.txt")
                tf1.train.warm_start(ckpt, vars_to_warm_start=["fc/w"],
                                     var_name_to_vocab_info={"fc/w": vocab},
                                     var_name_to_prev_var_name={"fc/w": "fc/w/fast"})
            elif kind.startswith("hop"):  # through * 1.0 too (review-33-attack-r130 C2)
                stage = tf1.get_variable("stage/w", [3, 3], trainable=False,
                                         collections=[tf1.GraphKeys.LOCAL_VARIABLES])
                if kind == "hop_saver":  # filled by a restoring Saver (r131 C1)
                    restoring = tf1.train.Saver({"fc/w/fast": stage})
                else:
                    tf1.train.init_from_checkpoint(ckpt, {"fc/w/fast": stage})
                hop = (w.assign(stage * 1.0) if kind == "hop_cast" else
                       w.scatter_update(tf.IndexedSlices(stage, tf.range(3)))
                       if kind == "hop_scatter" else w.assign(stage))
            name = "fast" if kind in ("fast_net", "fast_cross", "sv_fast_net", "sv_net",
                                      "sv_cross", "sv_swap") \
                else "ExponentialMovingAverage"
            saver = tf1.train.Saver(tf1.train.ExponentialMovingAverage(
                0.5, name=name).variables_to_restore())
            os.makedirs(f"{out}/{kind}", exist_ok=True)
            with tf1.Session() as s:
                s.run(tf1.global_variables_initializer())
                s.run(tf1.local_variables_initializer())
                if restoring is not None:
                    restoring.restore(s, ckpt)
                if kind.startswith("hop"):
                    s.run(hop)
                s.run(tf1.assign(gs, i))
                saver.save(s, f"{out}/{kind}/model.ckpt", global_step=gs)
np.savez(f"{out}/truth.npz", **truth)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_eval_resave_named")
    return out, run_script(SCRIPT, out)


def _average(out, kind: str, tmp_path):
    """``ckpt average`` of ``kind``'s two re-saves; returns (the output, its ``.index`` +
    ``.data`` copy, the newest input's copy)."""
    avg = tmp_path / kind
    code, _, err = run_cli(["average", str(out / kind / "model.ckpt-4"),
                            str(out / kind / "model.ckpt-3"), "--out", str(avg)])
    assert code == 0, err
    return (avg / "model.ckpt-4",
            _copy(avg, "model.ckpt-4", tmp_path / f"{kind}-out", "model.ckpt",
                  only=(".index", ".data")),
            _copy(out / kind, "model.ckpt-4", tmp_path / f"{kind}-in", "model.ckpt",
                  only=(".index", ".data")))


def _export(ckpt, *options: str, dst) -> tuple[int, str]:
    code, _, err = run_cli(["export", *options, str(ckpt), "--out", str(dst)])
    return code, " ".join(err.replace(str(ckpt), "CKPT").split())


def test_average_of_custom_named_evaluation_resaves_reads_as_they_do(made, tmp_path):
    """In place and copied, the average reads as its inputs' copy: refused naming
    ``--averages-only``, no swapping Saver's mark; ``--ema-name fast --averages-only`` reads
    the mean of ``fast``'s averages the re-saves hold, bit for bit. ``--ema --bake`` said
    "average the raw weights instead" of keys named as averages (review-33-attack-r126 N3):
    it now offers the plain average read so, as done here."""
    out, truth = made
    code, _, err = run_cli(["average", "--ema", "--bake", "--ema-name", "fast",
                            *(str(out / "fast" / f"model.ckpt-{i}") for i in (4, 3)),
                            "--out", str(tmp_path / "bk")])
    line = " ".join(err.split())
    assert code == 6 and "raw weights instead" not in line, line
    assert "ckpt average without --ema averages these keys as stored, and ckpt export " \
           "--ema-name fast --averages-only of its output reads them" in line, line
    avg, copied, given = _average(out, "fast", tmp_path)
    said = {}
    for name, ckpt in (("avg", avg), ("out", copied), ("in", given)):
        code, line = _export(ckpt, "--ema-name", "fast", dst=tmp_path / f"{name}.npz")
        assert code == 6, line
        assert "--averages-only" in line and "swapping" not in line, line
        assert "_CKPT_TOOLS_RECORD" not in line, line  # was: the mark's refusal
        said[name] = line
        code, line = _export(ckpt, "--ema-name", "fast", "--averages-only",
                             dst=tmp_path / f"{name}.npz")
        assert code == 0, line  # the output's copy was refused, exit 6
        with np.load(tmp_path / f"{name}.npz") as z:
            assert sorted(z.files) == ["fc/b", "fc/w"]
            for n in z.files:
                held = [truth[f"{i}:fast:{n}"] for i in ((4,) if name == "in" else (3, 4))]
                mean = np.mean([h.astype(np.float64) for h in held], axis=0)
                assert z[n].tobytes() == mean.astype(held[0].dtype).tobytes(), (name, n)
    assert said["out"] == said["in"]


@pytest.mark.parametrize("kind, options", [
    # read alone, tower/ExponentialMovingAverage names the average of fc/w/tower
    ("tower", ("--averages-only",))])
def test_average_of_resaves_the_graph_cannot_tell_stays_marked(made, kind, options, tmp_path):
    """The graph does not prove one EMA name its keys hold the averages of: its ``.index`` +
    ``.data`` copy stays refused (exit 6) naming the mark, not read as the averages the names
    say (was exit 0: ``crossed``'s ``fc/w/ExponentialMovingAverage`` gave ``fast``'s average;
    ``tower``'s were exported as weights ``fc/w/tower``, ``fc/b/tower``)."""
    out, _ = made
    _, copied, _ = _average(out, kind, tmp_path)
    code, line = _export(copied, *options, dst=tmp_path / "e.npz")
    assert code == 6, line
    assert "_CKPT_TOOLS_RECORD" in line and "--not-swapped" in line, line
    assert not (tmp_path / "e.npz").exists()


@pytest.mark.parametrize("kind", ["crossed", "init", "sv_net"])
@pytest.mark.parametrize("options", [
    ("--averages-only",), ("--not-swapped", "--averages-only"),
    ("--no-meta", "--averages-only"),
    ("--ema-name", "ExponentialMovingAverage", "--not-swapped", "--averages-only")])
def test_average_of_resaves_restoring_other_names_stays_refused_copied(made, kind, options,
                                                                      tmp_path):
    """review-33-attack-r126 F5: an evaluation re-save whose graph restored another EMA
    object's keys (a restoring Saver of fast's names, init_from_checkpoint of them, a Saver of
    other names) is refused in place with no option deciding; after a plain ``ckpt average``,
    its output's ``.index`` + ``.data`` copy was refused offering ``--not-swapped``, and
    ``--not-swapped --averages-only`` exported the mean of fast's averages as the default
    object's, exit 0. The mark records the crossing: refused under every statement, the
    refusal saying what the graph did, not calling it a swapping (or crossing) Saver's
    (review-33-attack-r126 N1)."""
    out, _ = made
    if kind == "sv_net":
        options = tuple(o if o != "ExponentialMovingAverage" else "fast" for o in options)
        if "--ema-name" not in options:
            options = ("--ema-name", "fast", *options)
    _, copied, _ = _average(out, kind, tmp_path)
    code, line = _export(copied, *options, dst=tmp_path / "e.npz")
    assert code == 6, line
    assert "_CKPT_TOOLS_RECORD" in line and "swapping" not in line, line
    assert "an evaluation graph re-saving averages it restored from other names" in line \
        and "restored other variables' or other EMA objects' averages into the variables" \
        in line, line
    assert "pass --not-swapped" not in line, line
    assert not (tmp_path / "e.npz").exists()


@pytest.mark.parametrize("kind", ["part", "part_fast"])
def test_average_of_partitioned_evaluation_resaves_reads_as_they_do(made, kind, tmp_path):
    """A partitioned layer's parts, each saved under ``p/part_N/<EMA name>`` from its part:
    the average of such re-saves was marked as a swapping Saver's (after 2833a38: the part
    read as the name ``part_N/<EMA name>``), its copy refused with that false reason; it reads
    as its input's copy does (each part's key read alone, under ``--averages-only``, as the
    average of the part it is named under)."""
    out, _ = made
    _, copied, given = _average(out, kind, tmp_path)
    options = ["--averages-only"] + (["--ema-name", "fast"] if kind == "part_fast" else [])
    said = []
    for name, ckpt in (("out", copied), ("in", given)):
        code, line = _export(ckpt, *options, dst=tmp_path / f"{name}.npz")
        assert "_CKPT_TOOLS_RECORD" not in line, line
        said.append((code, line))
    assert said[0] == said[1] and said[0][0] == 0, said  # the copy was refused, exit 6
    with np.load(tmp_path / "out.npz") as z:
        assert sorted(z.files) == ["fc/b", "fc/w", "fc2/p/part_0", "fc2/p/part_1"]


@pytest.mark.parametrize("command", [["export", "--out", "e.npz"],
                                     ["restore-ema", "--out", "ema"]])
@pytest.mark.parametrize("stated", [False, True])
def test_savers_of_two_objects_refused_in_place(made, command, stated, tmp_path):
    """Read through its own graph, ``crossed`` (and its average in place, the graph beside
    it) was read as the default object's averages under ``--averages-only``, exit 0: they
    held ``fast``'s (the graph's other Saver restored them). Refused (exit 6) naming both
    Savers, with or without the statement, which cannot decide it."""
    out, _ = made
    avg, _, _ = _average(out, "crossed", tmp_path)
    for ckpt in (out / "crossed" / "model.ckpt-4", avg):
        dst = tmp_path / command[-1]
        code, _, err = run_cli([command[0], *(["--averages-only"] if stated else []),
                                str(ckpt), command[1], str(dst)])
        line = " ".join(err.split())
        assert code == 6, err  # was 0 (stated): fast's averages as ExponentialMovingAverage's
        assert "two EMA objects" in line and "/fast" in line, err
        assert not dst.exists()


@pytest.mark.parametrize("kind", ["init", "warm", "init_net"])
@pytest.mark.parametrize("command", [["export", "--out", "e.npz"],
                                     ["restore-ema", "--out", "ema"]])
def test_averages_restored_without_a_saver_under_another_name_refused(made, kind, command,
                                                                      tmp_path):
    """``tf1.train.init_from_checkpoint`` (or ``warm_start``) read ``fast``'s averages
    (``fc/w/fast``) into ``fc/w``, ``fc/b``, then ``Saver(ema.variables_to_restore())``
    saved them as ``fc/w/ExponentialMovingAverage``: no second Saver, so the keys were read
    as the default object's averages under ``--averages-only`` (exit 0, ``fast``'s values:
    review-32-attack-r119 F2). The graph's restore ops name ``fc/w/fast``: refused (exit 6),
    the re-save and its average in place alike; the same restore of the saved object's own
    name (``init_fast``) still reads as the training session's ``fast.average(v)``."""
    out, truth = made
    avg = tmp_path / "avg"
    code, _, err = run_cli(["average", str(out / kind / "model.ckpt-4"),
                            str(out / kind / "model.ckpt-3"), "--out", str(avg)])
    assert code == 0, err
    for ckpt in (out / kind / "model.ckpt-4", avg / "model.ckpt-4"):
        dst = tmp_path / command[-1]
        code, _, err = run_cli([command[0], "--averages-only", str(ckpt), command[1],
                                str(dst)])
        line = " ".join(err.split())
        assert code == 6, err  # was 0: fast's averages as ExponentialMovingAverage's
        assert "two EMA objects" in line and "/fast" in line, err
        assert not dst.exists()
    code, line = _export(out / "init_fast" / "model.ckpt-4", "--ema-name", "fast",
                         "--averages-only", dst=tmp_path / "f.npz")
    assert code == 0, line
    with np.load(tmp_path / "f.npz") as z:
        assert sorted(z.files) == ["fc/b", "fc/w"]
        for n in z.files:
            assert z[n].tobytes() == truth[f"4:fast:{n}"].tobytes(), n


@pytest.mark.parametrize("kind", ["init", "init_net"])
def test_no_meta_does_not_read_past_two_objects_restored_by_its_own_graph(made, kind, tmp_path):
    """review-32-attack-r124 F3: --no-meta --averages-only read the re-save of fast's averages
    under the default object's names by the names alone (exit 0, fast's values), where its
    own graph, left unread, shows the restore of fast's keys: refused, as read with it."""
    out, _ = made
    code, line = _export(out / kind / "model.ckpt-4", "--no-meta", "--averages-only",
                         dst=tmp_path / "e.npz")
    assert code == 6 and "two EMA objects" in line, line
    assert not (tmp_path / "e.npz").exists()


@pytest.mark.parametrize("kind", ["fast_net", "sv_fast_net"])
def test_fast_averages_restored_onto_another_scope_refused(made, kind, tmp_path):
    """``init_from_checkpoint`` (or a restoring Saver) of ``fast``'s own keys onto variables
    of another scope (``fc/w/fast`` into ``net/fc/w``), saved by
    ``Saver(fast.variables_to_restore())``: the names cannot tell that rename from another
    layer's average mapped in (``l1/w/slow`` into ``l2/w``: review-33-attack-r130 C1), so it
    is refused under ``--averages-only`` too; the training checkpoint holds the averages."""
    out, _ = made
    code, line = _export(out / kind / "model.ckpt-4", "--ema-name", "fast",
                         "--averages-only", dst=tmp_path / "f.npz")
    assert code == 6 and "--averages-only cannot decide it" in line, line
    assert not (tmp_path / "f.npz").exists()


@pytest.mark.parametrize("kind, options", [
    ("fast_cross", ["--ema-name", "fast"]), ("vocab", []), ("hop", []),
    ("vocab", ["--no-meta"]), ("hop", ["--no-meta"]), ("sv_net", ["--ema-name", "fast"]),
    ("sv_net", ["--ema-name", "fast", "--no-meta"]),
    ("sv_cross", ["--ema-name", "fast"]),
    ("sv_cross", ["--ema-name", "fast", "--no-meta"]),
    ("sv_swap", ["--ema-name", "fast", "--no-meta"]), ("hop_cast", []), ("hop_saver", []),
    ("hop_scatter", []), ("hop_saver", ["--no-meta"])])
@pytest.mark.parametrize("command", [["export", "--out", "e.npz"],
                                     ["restore-ema", "--out", "ema"]])
def test_averages_restored_another_way_refused(made, kind, options, command, tmp_path):
    """review-33-attack-r126 F1-F4: ``fast``'s average of ``fc/w`` restored into ``fc2/w``
    (the saved EMA name's key of ANOTHER variable), warm_start's vocabulary remap
    (LoadAndRemapMatrix) of ``fc/w/fast`` into ``fc/w``, a staging variable's hop and the same
    restores by a restoring Saver of other names (``Saver({"fc/w/fast": net/fc/w})``) were read
    under ``--averages-only`` as the saving object's averages of those variables (exit 0,
    another variable's or another object's values): refused, exit 6, nothing written."""
    out, _ = made
    dst = tmp_path / command[-1]
    code, _, err = run_cli([command[0], "--averages-only", *options,
                            str(out / kind / "model.ckpt-4"), command[1], str(dst)])
    assert code == 6, err
    line = " ".join(err.split())
    assert "--averages-only cannot decide it" in line or "drop --no-meta" in line, line
    assert any(k in line for k in ("/fast", "fc2/w", "/ExponentialMovingAverage")), line
    assert not dst.exists()


def test_tower_resave_in_place_says_what_its_save_op_wrote(made, tmp_path):
    """s32a "Left": the ``tower/ExponentialMovingAverage`` evaluation re-save read in place
    was refused with "no EMA shadow is stored at all: the Saver probably saved only
    tf.trainable_variables()", false: its save op wrote ``fc/w/tower/ExponentialMovingAverage``
    from ``fc/w``. And ``--ema-name tower/ExponentialMovingAverage`` read those keys as the
    averages with no ``--averages-only``, exit 0, where the graph restored the RAW weights
    before saving (``tower_raw``): raw weights as the averages (``fast``'s re-save asks the
    statement). Now it asks it too; the offer, run, gives tower's averages bit for bit."""
    out, truth = made
    name = "tower/ExponentialMovingAverage"
    code, line = _export(out / "tower" / "model.ckpt-4", dst=tmp_path / "e.npz")
    assert code == 6, line
    assert "no EMA shadow is stored at all" not in line, line
    assert "the .meta's saver wrote 2 keys <variable>/tower/ExponentialMovingAverage" in line
    assert f"pass --ema-name {name} --averages-only" in line, line
    code, _, err = run_cli(["export", str(out / "tower" / "model.ckpt-4"), "--ema-name", name,
                            "--averages-only", "--out", str(tmp_path / "e.npz")])
    assert code == 0, err
    assert "because you stated --averages-only" in err, err
    with np.load(tmp_path / "e.npz") as z:
        assert sorted(z.files) == ["fc/b", "fc/w"]
        for n in z.files:
            assert z[n].tobytes() == truth[f"4:{name}:{n}"].tobytes(), n
    for kind in ("tower_raw", "tower"):  # was exit 0: tower_raw's raw weights as averages
        code, line = _export(out / kind / "model.ckpt-4", "--ema-name", name,
                             dst=tmp_path / f"{kind}.npz")
        assert code == 6 and "pass --averages-only" in line, (kind, line)
        assert not (tmp_path / f"{kind}.npz").exists()
    assert truth["4:raw:fc/w"].tobytes() != truth[f"4:{name}:fc/w"].tobytes()
