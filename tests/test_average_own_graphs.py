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


@pytest.mark.parametrize("extra", [[], ["--ema", "--bake"]])
def test_average_across_a_saver_change_in_one_run_is_refused(made, tmp_path, extra):
    out, _ = made
    r = out / "resumed"
    line = _refused([str(r / "model.ckpt-3"), str(r / "model.ckpt-2"), *extra], tmp_path / "a")
    assert str(r / "model.ckpt-3") in line and str(r / "model.ckpt-2") in line
    # the newest input's graph the plain one
    _refused([str(r / "model.ckpt-3"), str(r / "model.ckpt-2"), str(r / "model.ckpt-1"),
              "--newest", str(r / "model.ckpt-2"), *extra], tmp_path / "b")


@pytest.mark.parametrize("newest", ["swap", "plain"])
@pytest.mark.parametrize("extra", [[], ["--ema", "--bake"]])
def test_soup_of_a_swapping_and_a_plain_run_is_refused(made, tmp_path, newest, extra):
    out, _ = made
    _refused([str(out / "plain/model.ckpt-3"), str(out / "swap/model.ckpt-3"),
              "--newest", str(out / newest / "model.ckpt-3"), *extra], tmp_path / "a")


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
