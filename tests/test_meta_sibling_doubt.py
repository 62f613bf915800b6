"""A TF1 checkpoint saved without its own ``.meta``, beside other checkpoints' ``.meta`` files of
its prefix: nothing in the directory says which run wrote them (review-24-attack-r78), so such a
graph is never read as the checkpoint's; one whose save op writes exactly its keys otherwise
than their names say only refuses the pairing by names (exit 6, naming the file, --not-swapped
and --raw --no-meta). Each layout below exported the raw weights as the averages, exit 0, when
the ``checkpoint`` state file decided which graph to read: a resumed MonitoredTrainingSession
lists the earlier run's checkpoints (F1), and the run's own graph is missed under
``max_to_keep=None`` (F8), ``write_state=False`` (F6), a symlinked directory (F2) or a damaged
collection (F9); nor a swapping Saver its graph built beside the one its SaverDef records
(review-25-attack-r83 F2). Truth: ``sess.run`` of ``ema.average(v)`` and ``v`` at the last save."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

import ckpt_tools
from ckpt_tools.errors import UnprovenPairingError

SCRIPT = r'''
def model(part=False, slow=False):
    gs = tf1.train.get_or_create_global_step()
    with tf1.variable_scope("net"):  # part: w in two parts, their shadows net/w/part_N/<ema>
        w = tf1.get_variable("w", [4 if part else 3, 2],
                             partitioner=tf1.fixed_size_partitioner(2) if part else None)
        b = tf1.get_variable("b", [2], initializer=tf1.constant_initializer(0.3))
    loss = tf.reduce_sum(tf.square(tf.matmul(tf.ones([4, 4 if part else 3]), w) + b - 1.0))
    train = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=gs)
    ema = tf1.train.ExponentialMovingAverage(0.5)
    with tf.control_dependencies([train]):
        step = ema.apply(tf1.trainable_variables())
    if slow:  # a second object's averages, saved by ema's vtr Saver under their own names
        with tf.control_dependencies([step]):
            step = tf1.train.ExponentialMovingAverage(0.9, name="slow").apply(
                tf1.trainable_variables())
    return gs, step, ema


def saver_of(kind, gs, ema, **kw):
    tv = tf1.trainable_variables()
    if kind == "swap":
        keys = {v.op.name: ema.average(v) for v in tv}
        keys.update({ema.average_name(v): v for v in tv})
        return tf1.train.Saver({**keys, "global_step": gs}, **kw)
    if kind == "avgonly":
        keys = {ema.average_name(v): ema.average(v) for v in tv}
        return tf1.train.Saver({**keys, "global_step": gs}, **kw)
    if kind == "vtr":
        return tf1.train.Saver(ema.variables_to_restore(), **kw)
    if kind == "renamed":  # keys under a scope of another codebase: model/net/w, ...
        return tf1.train.Saver({f"model/{v.op.name}": v for v in tf1.global_variables()}, **kw)
    if kind == "swap_renamed":
        keys = {f"model/{v.op.name}": ema.average(v) for v in tv}
        keys.update({f"model/{ema.average_name(v)}": v for v in tv})
        return tf1.train.Saver({**keys, "global_step": gs}, **kw)
    return tf1.train.Saver(**kw)


def record(name, s, ema):
    got = {}
    for v in tf1.trainable_variables():  # a partitioned variable's parts, in order
        n = v.op.name.split("/part_")[0]
        got.setdefault(n, []).append((s.run(ema.average(v)), s.run(v)))
    for n, each in got.items():
        truth[f"{name}:avg:{n}"] = np.concatenate([a for a, _ in each])
        truth[f"{name}:raw:{n}"] = np.concatenate([r for _, r in each])


def loop(name, kind, steps, resume=False, meta=True, saver_kw=None, part=False, slow=False,
         **save_kw):
    # saver.save(..., write_meta_graph=(i == first)): the usual TF1 loop (meta=False: never)
    d = f"{out}/{name}"
    with tf.Graph().as_default():
        gs, step, ema = model(part, slow)
        saver = saver_of(kind, gs, ema, **(saver_kw or {}))
        with trained(tf, step, 0) as s:
            if resume:  # TF's documented resume: the earlier run's checkpoints are listed
                state = tf1.train.get_checkpoint_state(d)
                saver.restore(s, state.model_checkpoint_path)
                saver.recover_last_checkpoints(state.all_model_checkpoint_paths)
            for i in steps:
                s.run(step)
                saver.save(s, f"{d}/model.ckpt", global_step=i,
                           write_meta_graph=meta and i == steps[0], **save_kw)
            record(name, s, ema)


def no_step(name):
    # the last save without a step (save(sess, "model.ckpt")) beside model.ckpt-1.meta
    d = f"{out}/{name}"
    with tf.Graph().as_default():
        gs, step, ema = model()
        saver = saver_of("swap", gs, ema)
        with trained(tf, step, 1) as s:
            saver.save(s, f"{d}/model.ckpt", global_step=1)
            s.run(step)
            saver.save(s, f"{d}/model.ckpt", write_meta_graph=False)
            record(name, s, ema)


def mts(name, kind, last, graph_def):
    # MonitoredTrainingSession resumes the directory: SessionManager calls
    # saver.recover_last_checkpoints(), so run B's state file lists run A's checkpoints
    d = f"{out}/{name}"
    with tf.Graph().as_default():
        gs, step, ema = model()
        scaffold = tf1.train.Scaffold(saver=saver_of(kind, gs, ema))
        tv = tf1.trainable_variables()
        with tf1.train.MonitoredTrainingSession(
                checkpoint_dir=d, scaffold=scaffold, save_checkpoint_steps=2,
                save_checkpoint_secs=None, save_summaries_steps=None, save_summaries_secs=None,
                log_step_count_steps=None, save_graph_def=graph_def,
                hooks=[tf1.train.StopAtStepHook(last_step=last)]) as s:
            while not s.should_stop():
                s.run(step)
                got = s.run_step_fn(
                    lambda step_context: step_context.session.run(
                        [[ema.average(v) for v in tv], tv]))
        for v, a, r in zip(tv, *got):  # what the hook's end() saves at the last step
            truth[f"{name}:avg:{v.op.name}"] = a
            truth[f"{name}:raw:{v.op.name}"] = r


def two_savers(name):
    # a graph building a plain Saver (its .meta at step 1) and a swapping one (the later saves)
    d = f"{out}/{name}"
    with tf.Graph().as_default():
        gs, step, ema = model()
        plain, swap = saver_of("plain", gs, ema), saver_of("swap", gs, ema)
        with trained(tf, step, 0) as s:
            s.run(step)
            plain.save(s, f"{d}/model.ckpt", global_step=1)
            for i in (2, 3):
                s.run(step)
                swap.save(s, f"{d}/model.ckpt", global_step=i, write_meta_graph=False)
            record(name, s, ema)


mts("mts_plain_after_swap", "swap", 3, True)
two_savers("two_savers")
mts("mts_plain_after_swap", "plain", 5, False)
keep = {"max_to_keep": 10}  # model.ckpt-1 and its .meta stay listed
loop("rec_vtr_after_avgonly", "avgonly", (1, 2, 3), saver_kw=keep)
loop("rec_vtr_after_avgonly", "vtr", (4, 5, 6), resume=True, meta=False, saver_kw=keep)
loop("swap_listed", "swap", (1, 2, 3))
loop("swap_keep_all", "swap", (1, 2, 3), saver_kw={"max_to_keep": None})
loop("swap_no_state", "swap", (1, 2, 3), write_state=False)
loop("plain_listed", "plain", (1, 2, 3))
loop("plain_part", "plain", (1, 2, 3), part=True)
loop("plain_renamed", "renamed", (1, 2, 3))
loop("swap_part", "swap", (1, 2, 3), part=True)
loop("swap_renamed", "swap_renamed", (1, 2, 3))
no_step("swap_no_step")
loop("vtr_listed", "vtr", (1, 2, 3))  # a training Saver(ema.variables_to_restore()) (r81 F9)
loop("vtr_slow", "vtr", (1, 2, 3), slow=True)
loop("vtr_after_avgonly", "avgonly", (1, 2, 3), saver_kw=keep)  # two graphs of the keys
loop("vtr_after_avgonly", "vtr", (4, 5, 6), resume=True, saver_kw=keep)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("meta_sibling_doubt")
    return out, run_tf1_script(SCRIPT, out)


def _layout(made, tmp_path, layout: str) -> tuple[str, str]:
    """``(directory to read, name of the run in the truth)`` for ``layout``: a generated
    run, or one of the swapping run's copies (``symlink``, ``damaged``)."""
    out, _ = made
    if layout == "symlink":  # the same files named through a link (F2)
        os.symlink(out / "swap_listed", tmp_path / "link")
        return str(tmp_path / "link"), "swap_listed"
    if layout == "damaged":  # the run's graph, a collection entry damaged (F9)
        shutil.copytree(out / "swap_listed", tmp_path / "damaged")
        with open(tmp_path / "damaged" / "model.ckpt-1.meta", "ab") as f:
            f.write(b"\x22\x09\x0a\x01x\x12\x04\x0a\xff\xff\xff")
        return str(tmp_path / "damaged"), "swap_listed"
    if layout == "dashed_no_step":  # swap_no_step's files saved as resnet-50-1, resnet-50
        (tmp_path / "dashed").mkdir()
        for f in (out / "swap_no_step").iterdir():
            if f.name.startswith("model.ckpt"):
                shutil.copy(f, tmp_path / "dashed" / f.name.replace("model.ckpt", "resnet-50"))
        return str(tmp_path / "dashed"), "swap_no_step"
    return str(out / layout), layout


def _values(made, path: str, name: str, kind: str) -> None:
    """Asserts the export at ``path`` holds ``name``'s ``kind`` values bit for bit (a
    ``*_renamed`` run's keys under ``model/``)."""
    truth = made[1]
    other = "raw" if kind == "avg" else "avg"
    scope = "model/" if name.endswith("_renamed") else ""
    with np.load(path) as npz:
        for n in ("net/w", "net/b"):  # a swapping Saver keys parts apart: net/w/part_N
            got = npz[scope + n] if scope + n in npz.files else np.concatenate(
                [npz[f"{n}/part_{i}"] for i in range(2)])
            assert got.tobytes() == truth[f"{name}:{kind}:{n}"].tobytes(), n
            assert not np.array_equal(got, truth[f"{name}:{other}:{n}"]), n


@pytest.mark.parametrize("layout, step, graph, swapped", [
    ("mts_plain_after_swap", 5, "model.ckpt-3.meta", False),  # F1: another run's graphs
    ("swap_keep_all", 3, "model.ckpt-1.meta", True),  # F8: the state file lists step 3 only
    ("swap_no_state", 3, "model.ckpt-1.meta", True),  # F6: no state file
    ("symlink", 3, "model.ckpt-1.meta", True),  # F2
    ("damaged", 3, "model.ckpt-1.meta", True),  # F9
    ("swap_part", 3, "model.ckpt-1.meta", True),  # r83 F3's twins: still refused
    ("swap_renamed", 3, "model.ckpt-1.meta", True),
    ("swap_no_step", None, "model.ckpt-1.meta", True),  # r83 F1: model.ckpt beside it
    ("dashed_no_step", None, "resnet-50-1.meta", True),  # r87 F2: resnet-50, read as step 50
    ("two_savers", 3, "model.ckpt-1.meta", True)])  # r83 F2: not its SaverDef's Saver
def test_a_graph_contradicting_the_names_refuses(made, tmp_path, layout, step, graph,
                                                 swapped):
    """The keys pair by names only where no same-prefix graph records a save op of them from
    other variables; such a graph is named in the refusal with the statements that decide:
    --not-swapped (a plain Saver wrote it: the averages by names) and --raw --no-meta (the
    keys as stored: a swapping Saver's keys named as variables are its averages)."""
    directory, name = _layout(made, tmp_path, layout)
    ckpt = os.path.join(directory, "resnet-50" if layout == "dashed_no_step" else
                        "model.ckpt" if step is None else f"model.ckpt-{step}")
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", ckpt, "--out", str(out)])
    assert code == 6, err
    assert graph in err and "--not-swapped" in err and "--raw --no-meta" in err, err
    assert not out.exists()
    code, _, err = run_cli(["export", ckpt, "--out", str(out), "--raw"])
    assert code == 6 and "--no-meta" in err, err
    with pytest.raises(UnprovenPairingError, match=graph):
        ckpt_tools.ema_map(ckpt)
    if swapped:  # what the swapping Saver stored under the variables' names: the averages
        code, _, err = run_cli(["export", ckpt, "--out", str(out), "--raw", "--no-meta"])
        assert code == 0, err
        _values(made, out, name, "avg")
    else:  # the plain Saver's: stated, the names pair the averages
        code, _, err = run_cli(["export", ckpt, "--out", str(out), "--not-swapped"])
        assert code == 0, err
        assert graph in err, err  # what the statement overrides is said
        _values(made, out, name, "avg")


def test_an_agreeing_graph_lifts_no_refusal(made, tmp_path):
    """F1 through a resume (Saver.restore + recover_last_checkpoints): an averages-only run's
    model.ckpt-1.meta, listed with the later training Saver(ema.variables_to_restore())'s
    model.ckpt-6, was read as its graph, and the raw weights went out as the averages, exit 0.
    A graph agreeing with the names proves nothing of a checkpoint without its own .meta: the
    keys named as averages of variables not stored are refused as without a .meta."""
    directory, _ = _layout(made, tmp_path, "rec_vtr_after_avgonly")
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", os.path.join(directory, "model.ckpt-6"), "--out",
                            str(out)])
    assert code == 6 and "--averages-only" in err, err
    assert not out.exists()


@pytest.mark.parametrize("layout", ["plain_listed", "plain_part", "plain_renamed"])
def test_graphs_agreeing_with_the_names_change_nothing(made, tmp_path, layout):
    """A plain Saver's model.ckpt-3 beside its model.ckpt-1.meta: paired by names, as a
    checkpoint without a .meta, with no note; the averages bit for bit. So too where the
    Saver keys the variables under a scope of its own, or where a partitioned variable's part
    shadows net/w/part_N/ExponentialMovingAverage are saved under net/w/ExponentialMovingAverage:
    each key is read from the variable of its name's role (review-25-attack-r83 F3: refused)."""
    directory, name = _layout(made, tmp_path, layout)
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", os.path.join(directory, "model.ckpt-3"), "--out",
                            str(out)])
    assert code == 0, err
    assert ".meta" not in err, err
    _values(made, out, name, "avg")


def _exported(args: list[str]) -> tuple[int, str]:
    """``(exit code, stderr)`` of ``ckpt export`` with ``args``."""
    code, _, err = run_cli(["export", *args])
    return code, err


def test_a_vtr_sibling_lets_keys_are_raw_export_the_raw_weights(made, tmp_path):
    """review-25-attack-r81 F9: a training Saver(ema.variables_to_restore()) writing its .meta
    at the first save only: model.ckpt-3's raw weights were refused by every option, and the
    refusal said to keep the training .meta beside it, which it is. The statement decides:
    --raw --keys-are-raw reads model.ckpt-1.meta's save op (its layout) and writes the raw
    weights at step 3 bit for bit, naming that file; unstated, the refusals name the file and
    the statement; --no-meta reads no sibling, so the statement decides nothing there."""
    directory, name = _layout(made, tmp_path, "vtr_listed")
    ckpt, out = os.path.join(directory, "model.ckpt-3"), str(tmp_path / "w.npz")
    for unstated in ([], ["--raw"]):
        code, err = _exported([ckpt, "--out", out, *unstated])
        assert code == 6 and "model.ckpt-1.meta" in err and "--raw --keys-are-raw" in err, err
    code, err = _exported([ckpt, "--out", out, "--raw", "--keys-are-raw", "--no-meta"])
    assert code == 6, err
    code, err = _exported([ckpt, "--out", out, "--raw", "--keys-are-raw"])
    assert code == 0 and "model.ckpt-1.meta" in err and "--keys-are-raw" in err, err
    _values(made, out, name, "raw")


@pytest.mark.parametrize("layout", ["vtr_slow", "vtr_after_avgonly"])
def test_keys_are_raw_beside_a_sibling_writes_no_average(made, tmp_path, layout):
    """The nearest twins of F9's route: a second EMA's averages saved under their own names by
    the vtr Saver (net/w/slow: a weight's name to the keys alone) and a directory where an
    averages-only run's graph and the vtr run's record different save ops of the same keys
    (refused). --raw --keys-are-raw writes exactly the raw weights (net/w, net/b), never
    slow's averages, at the last step bit for bit, as the first step beside its own .meta."""
    directory, name = _layout(made, tmp_path, layout)
    out = str(tmp_path / "w.npz")
    last = os.path.join(directory, f"model.ckpt-{6 if layout == 'vtr_after_avgonly' else 3}")
    code, err = _exported([last, "--out", out, "--raw", "--keys-are-raw"])
    if layout == "vtr_after_avgonly":
        assert code == 6, err
        return
    assert code == 0, err
    _values(made, out, name, "raw")
    for step in (3, 1):
        code, err = _exported([os.path.join(directory, f"model.ckpt-{step}"), "--out", out,
                               "--raw", "--keys-are-raw", "--force"])
        assert code == 0, err
        with np.load(out) as npz:
            assert sorted(npz.files) == ["net/b", "net/w"], npz.files


@pytest.mark.parametrize("args", [[], ["--raw", "--keys-are-raw"]])
def test_each_sibling_is_read_once_per_command(made, tmp_path, monkeypatch, args):
    """review-25-attack-r83 F5, r81 F4: doubting, layout_sibling (the refusal's offer) and
    stated_graph (--keys-are-raw) each read the sibling .meta again, and a checkpoint opened
    again (reopened) read it once more: one reading serves them all. A fresh copy, so no
    reading of an earlier test's files is kept."""
    import ckpt_tools.sibling_saves as sibling_saves  # meta_sibling's reading of one .meta

    shutil.copytree(made[0] / "vtr_listed", tmp_path / "run")
    parsed: dict[tuple[str, str], int] = {}

    def counted(name, real):
        def read(path):
            parsed[name, os.path.basename(path)] = parsed.get((name, os.path.basename(path)),
                                                              0) + 1
            return real(path)
        return read

    for name in ("read_meta_graph", "read_graphs", "saved_sources_all"):
        monkeypatch.setattr(sibling_saves, name, counted(name, getattr(sibling_saves, name)))
    out = str(tmp_path / "w.npz")
    code, err = _exported([str(tmp_path / "run" / "model.ckpt-3"), "--out", out, *args])
    assert code == (0 if args else 6) and "model.ckpt-1.meta" in err, err
    assert parsed == {(name, "model.ckpt-1.meta"): 1 for name in (
        "read_meta_graph", "read_graphs", "saved_sources_all")}, parsed


def test_no_meta_reads_no_sibling_in_list_and_diff(made, tmp_path):
    """review-25-attack-r81 F8: a same-prefix text .meta too large to parse is refused (exit
    4) naming --no-meta, but list --no-meta and diff --no-meta (its second checkpoint) still
    read the siblings and refused: --no-meta now reaches every open of them."""
    out, _ = made
    shutil.copytree(out / "swap_listed", tmp_path / "run")
    (tmp_path / "run" / "model.ckpt-0.meta").write_bytes(
        b"meta_info_def {" + b" " * (2 << 20) + b"\n}\n")  # a line over 1 MiB
    a, b = (str(tmp_path / "run" / f"model.ckpt-{n}") for n in (3, 2))
    for args in (["list", a], ["diff", a, b]):
        code, _, err = run_cli(args)
        assert code == 4 and "model.ckpt-0.meta" in err and "--no-meta" in err, err
        for more in ([], ["--json"]):
            code, _, err = run_cli([*args, "--no-meta", *more])
            assert code == 0, (args, more, err)


@pytest.mark.parametrize("extra", [[], ["--ema"]])
def test_average_of_doubted_inputs_refuses(made, tmp_path, extra):
    """average wrote the doubted inputs' mean with no .meta and a fresh state file, so
    exporting it paired the swapping Saver's raw weights as the averages, exit 0 (and --ema
    averaged the keys named as shadows, the raw weights): --ema is refused, naming the graph
    (review-25-attack-r83 F7); the plain average carries the doubt, the graph copied beside
    the output, whose export by names is refused as the inputs' is (review-25-attack-r87 F3).
    A plain run's checkpoints still average."""
    directory, _ = _layout(made, tmp_path, "swap_keep_all")
    out = tmp_path / "avg"
    code, _, err = run_cli(["average", os.path.join(directory, "model.ckpt-3"),
                            os.path.join(directory, "model.ckpt-2"), "--out", str(out), *extra])
    assert "model.ckpt-1.meta" in err, err
    if extra:
        assert code == 6, err
        assert not out.exists()
    else:
        assert code == 0, err
        code, _, err = run_cli(["export", str(out / "model.ckpt-3"), "--out",
                                str(tmp_path / "w.npz")])
        assert code == 6 and "model.ckpt-1.meta" in err and "--not-swapped" in err, err
    plain, _ = _layout(made, tmp_path, "plain_listed")
    code, _, err = run_cli(["average", os.path.join(plain, "model.ckpt-3"),
                            os.path.join(plain, "model.ckpt-2"), "--out",
                            str(tmp_path / "plain"), *extra])
    assert code == 0, err
