"""A TF1 ``.meta`` whose graph builds two Savers writing exactly the checkpoint's keys with
different readings, where no variable is stored beside its average (review-26-attack-r94 F1):
``Saver([W, V])`` (the ``.meta``'s ``SaverDef``) beside ``Saver({v.op.name: ema.average(v)})``
that wrote the checkpoint, or two Savers of two EMA objects' averages under the variables'
names (the slow one wrote). Nothing paired a key, so ``export --raw`` wrote the averages as
the raw weights, exit 0, and the default export's refusal said the raw weights are usable as
they are. Every use is refused now (exit 6) naming --not-swapped and --raw --no-meta.
Made by real TensorFlow (graph mode), truth read from the session at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
for case in ("trainable_avg_wrote", "two_emas_slow_wrote"):
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        W = tf1.get_variable("W", [3, 2])
        V = tf1.get_variable("V", [3, 2])
        vs = [W, V]
        loss = tf.reduce_sum(W ** 2) + tf.reduce_sum((V - 1) ** 2)
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
        ema = tf1.train.ExponentialMovingAverage(0.5)
        slow = tf1.train.ExponentialMovingAverage(0.9, name="slow")
        with tf.control_dependencies([train]):
            step = tf.group(ema.apply(vs), slow.apply(vs))
        if case == "trainable_avg_wrote":
            meta_saver = tf1.train.Saver([W, V])  # save/: the .meta's SaverDef
            writer = tf1.train.Saver({v.op.name: ema.average(v) for v in vs})
        else:
            meta_saver = tf1.train.Saver()  # every variable: other keys
            tf1.train.Saver({v.op.name: ema.average(v) for v in vs})
            writer = tf1.train.Saver({v.op.name: slow.average(v) for v in vs})
        os.makedirs(f"{out}/{case}")
        path = f"{out}/{case}/model.ckpt"
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(step)
            meta_saver.export_meta_graph(path + "-3.meta")
            writer.save(s, path, global_step=gs, write_meta_graph=False)
            for v in vs:
                truth[f"{case}:ema:{v.op.name}"] = s.run(ema.average(v).read_value())
                truth[f"{case}:slow:{v.op.name}"] = s.run(slow.average(v).read_value())
                truth[f"{case}:raw:{v.op.name}"] = s.run(v.read_value())
'''

CASES = {"trainable_avg_wrote": "ema", "two_emas_slow_wrote": "slow"}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("crossed_unpaired")
    return out, run_tf1_script(SCRIPT, out)


def _run(made, tmp_path, cmd, case, *args):
    out, _ = made
    target = tmp_path / f"{len(list(tmp_path.iterdir()))}.{'npz' if cmd == 'export' else 'ckpt'}"
    argv = [cmd, str(out / case / "model.ckpt-3"), *args]
    if cmd != "map":
        argv += ["--out", str(target)]
    code, _, err = run_cli(argv)
    return code, " ".join(err.split()), target


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("args", [(), ("--raw",)])
def test_crossed_savers_without_a_stored_pair_are_refused(made, tmp_path, case, args):
    """Before: --raw exit 0 with the averages as raw weights; default refused saying the raw
    weights are usable as they are (ckpt export --raw)."""
    code, said, target = _run(made, tmp_path, "export", case, *args)
    assert code == 6, said
    assert "model.ckpt-3.meta" in said and "--not-swapped" in said, said
    assert "--raw --no-meta" in said, said
    assert "raw weights are usable" not in said, said
    assert not target.exists()


@pytest.mark.parametrize("cmd", ["map", "restore-ema"])
def test_map_and_restore_ema_refuse_too(made, tmp_path, cmd):
    code, said, _ = _run(made, tmp_path, cmd, "trainable_avg_wrote")
    assert code == 6, said
    assert "--raw --no-meta" in said, said


@pytest.mark.parametrize("case", sorted(CASES))
def test_raw_no_meta_exports_the_keys_as_stored(made, tmp_path, case):
    _, truth = made
    code, said, target = _run(made, tmp_path, "export", case, "--raw", "--no-meta")
    assert code == 0, said
    with np.load(target) as z:
        assert sorted(z.files) == ["V", "W"]
        for k in z.files:  # what the writing Saver stored: its EMA object's averages
            assert z[k].tobytes() == truth[f"{case}:{CASES[case]}:{k}"].tobytes(), k
            assert z[k].tobytes() != truth[f"{case}:raw:{k}"].tobytes(), k
