"""``ckpt average`` of inputs whose OWN graphs say the same key holds different things
(review-30-attack-r110 F5 CRITICAL): a run resumed with a swapping Saver after a plain one (one
directory, a ``.meta`` at every save), and a "soup" of a swapping run's and a plain run's
checkpoints. The average was written (exit 0) and, read through the newest input's graph,
exported the mean of one input's RAW weights and another's averages as the "EMA values";
``--ema --bake`` baked the same mix. Refused now (exit 6), naming both inputs and the key.
Truth: ``sess.run`` of ``ema.average(v)`` / ``v`` at each save of real TF1 Savers
(``_sibling_runs.RUN``)."""

from __future__ import annotations

import numpy as np
import pytest
from _sibling_runs import RUN
from helpers import run_cli
from helpers_tf1 import run_tf1_script
from test_marked_outputs import NAMES, _copy

SCRIPT = RUN + '''
run("swap", True, every=True)
run("plain", False, every=True)
# two same-shaped variables under a swapping Saver, and under a Saver crossing their averages
# (a/<EMA> holds b's): a bake reading each input's own pairing must refuse the pair (r128 M1)
for name in ("xswap", "xcross"):
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        a = tf1.get_variable("model/a", initializer=np.array([1., 2.], np.float32))
        b = tf1.get_variable("model/b", initializer=np.array([5., 7.], np.float32))
        ema = tf1.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([a.assign_add([1., 1.]), b.assign_add([3., 3.])]):
            step = ema.apply([a, b])
        avg = {x: ema.average(x) for x in (a, b)}
        keys = ({"model/a": avg[a], "model/b": avg[b], ema.average_name(a): a,
                 ema.average_name(b): b} if name == "xswap" else
                {"model/a": a, "model/b": b, ema.average_name(a): avg[b],
                 ema.average_name(b): avg[a]})
        with trained(tf, step, 0) as s:
            s.run(step)
            tf1.train.Saver({**keys, "global_step": gs}).save(
                s, f"{out}/{name}/model.ckpt", global_step=1)
'''

REFUSED = ("their own graphs say the same key holds different things",
           "Average the checkpoints each Saver wrote separately")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("average_own_graphs")
    truth = run_tf1_script(SCRIPT, out)
    # one run directory whose training was resumed with the swapping Saver after step 2 of a
    # plain Saver(): each checkpoint as its Saver wrote it, with its own .meta
    _copy(out / "plain", "model.ckpt-1", out / "resumed")
    _copy(out / "plain", "model.ckpt-2", out / "resumed")
    _copy(out / "swap", "model.ckpt-3", out / "resumed")
    return out, truth


def _refused(args: list[str], out_dir) -> str:
    code, _, err = run_cli(["average", *args, "--out", str(out_dir)])
    line = " ".join(err.split())
    assert code == 6, err  # was 0: the mean of raw weights and averages as "EMA values"
    assert all(r in line for r in REFUSED) and "'model/" in line, err
    assert not out_dir.exists()
    return line


def test_average_across_a_saver_change_in_one_run_is_refused(made, tmp_path):
    out, _ = made
    r = out / "resumed"
    line = _refused([str(r / "model.ckpt-3"), str(r / "model.ckpt-2")], tmp_path / "a")
    assert str(r / "model.ckpt-3") in line and str(r / "model.ckpt-2") in line
    # the newest input's graph the plain one
    _refused([str(r / "model.ckpt-3"), str(r / "model.ckpt-2"), str(r / "model.ckpt-1"),
              "--newest", str(r / "model.ckpt-2")], tmp_path / "b")


@pytest.mark.parametrize("newest", ["swap", "plain"])
def test_soup_of_a_swapping_and_a_plain_run_is_refused(made, tmp_path, newest):
    out, _ = made
    _refused([str(out / "plain/model.ckpt-3"), str(out / "swap/model.ckpt-3"),
              "--newest", str(out / newest / "model.ckpt-3")], tmp_path / "a")


def _baked(inputs: list[tuple[str, str, int]], newest: int, made, tmp_path, name: str) -> None:
    """``average --ema --bake`` of ``inputs`` (``(directory, run, step)``; ``newest``: the
    index of the newest) exits 0 and writes under every name, read in place and as stored,
    the mean of the averages each input's own graph pairs (truth: ``ema.average(v)``)."""
    out, truth = made
    paths = [str(out / d / f"model.ckpt-{i}") for d, _run, i in inputs]
    code, _, err = run_cli(["average", *paths, "--newest", paths[newest], "--ema", "--bake",
                            "--out", str(tmp_path / name)])
    assert code == 0, err  # was 6, the plain average's reason (review-33-attack-r128 M1)
    prefix = tmp_path / name / f"model.ckpt-{inputs[newest][2]}"
    for opts in ([], ["--raw"]):
        dest = tmp_path / f"{name}{len(opts)}.npz"
        code, _, err = run_cli(["export", str(prefix), *opts, "--out", str(dest)])
        assert code == 0, err
        with np.load(dest) as z:
            for key in NAMES:
                want = (sum(truth[f"{run}:{i}:avg:{key}"].astype(np.float64)
                            for _d, run, i in inputs) / len(inputs)).astype(np.float32)
                np.testing.assert_array_equal(z[key], want, err_msg=f"{name} {opts} {key}")


def test_bake_across_a_saver_change_reads_each_inputs_own_averages(made, tmp_path):
    """--ema --bake averages the averages, not the keys: read through its own graph, each
    input proves which key holds each weight's average, so the resumed run's and the soup's
    bakes write the mean of those averages (both newest orders), where the plain average
    stays refused (review-33-attack-r128 M1: refused with the plain average's reason)."""
    r3, r2, r1 = ("resumed", "swap", 3), ("resumed", "plain", 2), ("resumed", "plain", 1)
    _baked([r3, r2], 0, made, tmp_path, "r")
    _baked([r3, r2, r1], 1, made, tmp_path, "r3")
    for newest in (0, 1):
        _baked([("plain", "plain", 3), ("swap", "swap", 3)], newest, made, tmp_path, f"s{newest}")


@pytest.mark.parametrize("run", ["swap", "plain"])
def test_inputs_of_one_saver_are_still_averaged(made, tmp_path, run):
    """Inputs whose own graphs agree (steps of one Saver, in the resumed directory too):
    accepted, the export in place the mean of the averages, bit for bit."""
    out, truth = made
    d = out / "resumed" if run == "plain" else out / run
    steps = (1, 2) if run == "plain" else (2, 3)
    code, _, err = run_cli(["average", *(str(d / f"model.ckpt-{i}") for i in steps[::-1]),
                            "--out", str(tmp_path / "a")])
    assert code == 0, err
    code, _, err = run_cli(["export", str(tmp_path / f"a/model.ckpt-{steps[-1]}"),
                            "--out", str(tmp_path / "a.npz")])
    assert code == 0, err
    with np.load(tmp_path / "a.npz") as z:
        for key in NAMES:
            want = (sum(truth[f"{run}:{i}:avg:{key}"].astype(np.float64) for i in steps)
                    / len(steps)).astype(np.float32)
            np.testing.assert_array_equal(z[key], want)


def test_ema_over_marked_averages_read_through_their_recorded_graph(made, tmp_path):
    """F3: average --ema --bake of own-graph-marked averages IN PLACE (the graph each was
    written with beside it, SHA matching) was refused ("--no-meta does not decide that", no
    --no-meta given) though export of each in place reads the averages: accepted, every key
    the mean of the averages' means, bit for bit; their .index+.data copies stay refused."""
    out, truth = made
    s = out / "swap"
    for steps, name in (((3, 2), "a"), ((2, 1), "b")):
        code, _, err = run_cli(["average", *(str(s / f"model.ckpt-{i}") for i in steps),
                                "--out", str(tmp_path / name)])
        assert code == 0, err
    inputs = [str(tmp_path / "a/model.ckpt-3"), str(tmp_path / "b/model.ckpt-2")]
    code, _, err = run_cli(["average", *inputs, "--ema", "--bake", "--out", str(tmp_path / "e")])
    assert code == 0, err  # was 6: "... --no-meta does not decide that"
    code, _, err = run_cli(["export", str(tmp_path / "e/model.ckpt-3"),
                            "--out", str(tmp_path / "e.npz")])
    assert code == 0, err

    def mean(x, y):
        return ((x.astype(np.float64) + y) / 2).astype(np.float32)

    with np.load(tmp_path / "e.npz") as z:
        for key in NAMES:
            avg = {i: truth[f"swap:{i}:avg:{key}"] for i in (1, 2, 3)}
            np.testing.assert_array_equal(z[key], mean(mean(avg[3], avg[2]),
                                                       mean(avg[2], avg[1])))
    copies = [_copy(tmp_path / n, stem, tmp_path / "m", f"c{n}", only=(".index", ".data"))
              for n, stem in (("a", "model.ckpt-3"), ("b", "model.ckpt-2"))]
    code, _, err = run_cli(["average", *map(str, copies), "--newest", str(copies[0]), "--ema",
                            "--bake", "--out", str(tmp_path / "f")])
    assert code == 6, err


def test_baked_average_of_a_swapping_run_is_not_marked(made, tmp_path):
    """F2: average --ema --bake of a swapping run saved with its own .meta writes the
    averages' mean under every key, yet was marked names_doubted and its .index+.data copy
    refused ("a swapping Saver's graph doubts"): not marked now, the copy exports the mean
    of the averages, bit for bit."""
    out, truth = made
    s = out / "swap"
    code, _, err = run_cli(["average", str(s / "model.ckpt-3"), str(s / "model.ckpt-2"),
                            "--ema", "--bake", "--out", str(tmp_path / "e")])
    assert code == 0, err
    ckpt = _copy(tmp_path / "e", "model.ckpt-3", tmp_path / "c", only=(".index", ".data"))
    code, _, err = run_cli(["export", str(ckpt), "--out", str(tmp_path / "c.npz")])
    assert code == 0, err  # was 6: names_doubted
    with np.load(tmp_path / "c.npz") as z:
        for key in NAMES:
            want = ((truth[f"swap:2:avg:{key}"].astype(np.float64) + truth[f"swap:3:avg:{key}"])
                    / 2).astype(np.float32)
            np.testing.assert_array_equal(z[key], want)


def test_bake_refuses_inputs_whose_own_pairings_read_other_variables_averages(made, tmp_path):
    """A swapping Saver's save beside one whose Saver crossed two variables' averages under
    each other's names: each reads right alone, but the same output key names another
    variable's average in each, so the bake across them stays refused."""
    out, _ = made
    ins = [str(out / n / "model.ckpt-1") for n in ("xswap", "xcross")]
    for newest in ins:
        code, _, err = run_cli(["average", *ins, "--newest", newest, "--ema", "--bake",
                                "--out", str(tmp_path / "o")])
        assert code == 6, err
        assert not (tmp_path / "o").exists()
