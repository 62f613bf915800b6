"""``--saver-def-wrote`` (``saver_def_wrote=True``): a
``tf.compat.v1.train.MonitoredTrainingSession`` saves with its ``Scaffold``'s Saver (the
``CheckpointSaverHook`` calls its ``save()``, which records that Saver's ``SaverDef`` in the
``.meta``), while the graph also builds another Saver of exactly the same keys: the user's
swapping Saver (``{v.op.name: ema.average(v), ema.average_name(v): v}``,
``MovingAverageOptimizer``'s ``swapping_saver()``) built for an evaluation export beside a
plain Scaffold Saver (``plaindef``), or a plain ``Saver()`` beside a swapping Scaffold Saver
(``swapdef``). Since eae3ffd every such Saver is read and nothing records which wrote the keys:
refused (exit 6), now naming ``--saver-def-wrote``, the statement that decides (only the
``SaverDef``'s save op is read then). Made by real TensorFlow (graph mode,
MonitoredTrainingSession); truth read from the session at save time (``sess.run``), compared
bit for bit."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

import ckpt_tools
from ckpt_tools.errors import OptionError

SCRIPT = r'''
for case in ("plaindef", "swapdef"):
    with tf.Graph().as_default():
        (W, b), _, ema, step, swap = swap_ema_graph(tf)
        if case == "plaindef":  # the Scaffold's plain Saver; the user's swapping one beside
            scaffold_saver = tf1.train.Saver()
            tf1.train.Saver(swap)
        else:  # the Scaffold's swapping Saver; a plain Saver() beside
            scaffold_saver = tf1.train.Saver(swap)
            tf1.train.Saver()
        fetch = {**{f"ema:{v.op.name}": ema.average(v).read_value() for v in (W, b)},
                 **{f"raw:{v.op.name}": v.read_value() for v in (W, b)}}
        with tf1.train.MonitoredTrainingSession(
                checkpoint_dir=f"{out}/{case}",
                scaffold=tf1.train.Scaffold(saver=scaffold_saver),
                hooks=[tf1.train.StopAtStepHook(last_step=3)], save_summaries_steps=None,
                save_summaries_secs=None, log_step_count_steps=None) as s:
            while not s.should_stop():
                s.run(step)
            got = s.run_step_fn(lambda step_context: step_context.session.run(fetch))
        for k, v in got.items():  # the CheckpointSaverHook saves these at the session's end
            truth[f"{case}:{k}"] = v
'''
CASES = ("plaindef", "swapdef")
VARS = ("W", "b")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("saver_def_wrote")
    return out, run_tf1_script(SCRIPT, out)


def _export(made, tmp_path, case, *args):
    out, _ = made
    target = tmp_path / f"{len(list(tmp_path.iterdir()))}.npz"  # one per call
    code, _, err = run_cli(["export", str(out / case), *args, "--out", str(target)])
    said = " ".join(err.split())
    if code != 0:
        assert not target.exists(), said
        return code, said, None
    with np.load(target) as z:
        return code, said, {k: z[k] for k in z.files}


def _same(got, truth, case, kind):
    assert sorted(got) == list(VARS), sorted(got)
    for k, v in got.items():
        assert v.tobytes() == truth[f"{case}:{kind}:{k}"].tobytes(), (case, k, kind)
        other = "raw" if kind == "ema" else "ema"
        assert v.tobytes() != truth[f"{case}:{other}:{k}"].tobytes(), (case, k, kind)


@pytest.mark.parametrize("case", CASES)
def test_without_the_statement_every_use_is_refused_naming_it(made, tmp_path, case):
    out, _ = made
    for args in ([], ["--raw"]):
        code, said, _ = _export(made, tmp_path, case, *args)
        assert code == 6, said
        assert "pass --saver-def-wrote (Python: saver_def_wrote=True)" in said, said
        assert "MonitoredTrainingSession" in said, said
    for command in ("map", "restore-ema"):
        code, _, err = run_cli([command, str(out / case), *(
            ["--out", str(tmp_path / "baked")] if command == "restore-ema" else [])])
        assert code == 6 and "--saver-def-wrote" in " ".join(err.split()), err
        assert not (tmp_path / "baked").exists()


@pytest.mark.parametrize("case", CASES)
def test_the_statement_reads_the_saverdefs_save_op(made, tmp_path, case, tf):
    """export gives the averages, export --raw the raw weights, restore-ema a checkpoint whose
    variables hold the averages, each bit for bit; a note says the statement decided."""
    out, truth = made
    code, said, got = _export(made, tmp_path, case, "--saver-def-wrote")
    assert code == 0, said
    assert "because you stated --saver-def-wrote" in said, said
    _same(got, truth, case, "ema")
    code, said, got = _export(made, tmp_path, case, "--raw", "--saver-def-wrote")
    assert code == 0, said
    _same(got, truth, case, "raw")
    baked = tmp_path / "baked"
    code, _, err = run_cli(["restore-ema", str(out / case), "--saver-def-wrote", "--out",
                            str(baked)])
    assert code == 0, err
    reader = tf.train.load_checkpoint(str(baked))
    for var in VARS:
        assert reader.get_tensor(var).tobytes() == truth[f"{case}:ema:{var}"].tobytes(), var
    code, stdout, err = run_cli(["map", str(out / case), "--saver-def-wrote", "--json"])
    assert code == 0, err
    assert json.loads(stdout), stdout


@pytest.mark.parametrize("case", CASES)
def test_python_takes_the_statement(made, case):
    """ema_map(saver_def_wrote=True), refused without it: a map in checkpoint keys, each
    average's key to the key its variable is stored under (swapdef: key W holds W's average,
    key W/ExponentialMovingAverage the raw W), checked against the tensors as stored."""
    out, truth = made
    with pytest.raises(ckpt_tools.UnprovenPairingError, match="saver_def_wrote=True"):
        ckpt_tools.ema_map(str(out / case))
    m = ckpt_tools.ema_map(str(out / case), saver_def_wrote=True)
    shadow = {v: f"{v}/ExponentialMovingAverage" for v in VARS}
    expected = {k: v for v, k in shadow.items()} if case == "plaindef" else shadow
    assert {s: t for s, t in m.mapping.items() if t in m.averaged} == expected, m
    with ckpt_tools.open_checkpoint(str(out / case)) as ckpt:  # the tensors, as stored
        for var in VARS:
            average, raw = (shadow[var], var) if case == "plaindef" else (var, shadow[var])
            assert ckpt.tensor(average).tobytes() == truth[f"{case}:ema:{var}"].tobytes()
            assert ckpt.tensor(raw).tobytes() == truth[f"{case}:raw:{var}"].tobytes()


def test_diff_and_average_refuse_naming_it_and_take_it(made, tmp_path):
    """diff --ema and average --bake meet the same doubt: their refusal names the statement,
    and they take it (s28d; they took no such option at 9c0d338)."""
    out, _ = made
    prefix = str(out / "plaindef" / "model.ckpt-3")
    for args in (["diff", prefix, "--ema"],
                 ["average", str(out / "plaindef" / "model.ckpt-0"), prefix, "--bake",
                  "--ema", "--out", str(tmp_path / "avg")]):
        code, _, err = run_cli(args)
        said = " ".join(err.split())
        assert code == 6 and "pass --saver-def-wrote (Python: saver_def_wrote=True)" in said, \
            said
        code, _, err = run_cli([*args, "--saver-def-wrote"])
        assert code == 0, err


@pytest.mark.parametrize("args", [["--no-meta"], ["--not-swapped"]])
def test_where_it_cannot_apply_it_is_refused(made, tmp_path, args):
    code, said, _ = _export(made, tmp_path, "plaindef", "--saver-def-wrote", *args)
    assert code == 2 and "--saver-def-wrote" in said, said


def test_a_meta_of_one_saver_refuses_it():
    """fixtures/linear_v2: its .meta's graph builds one Saver, read already."""
    with pytest.raises(OptionError, match="read already: omit it"):
        ckpt_tools.open_checkpoint("fixtures/linear_v2", saver_def_wrote=True)
