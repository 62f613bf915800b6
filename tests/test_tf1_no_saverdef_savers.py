"""A TF1 ``.meta`` with no ``SaverDef`` (``tf.compat.v1.train.export_meta_graph()``) whose
graph builds the Saver that wrote the checkpoint (review-26-attack-r94 F2): its Savers were
not read, so the keys' names decided. ``Saver({v.op.name: ema.average(v)})`` alone: --raw
wrote the averages as raw weights, exit 0, no word; a swapping Saver alone: the default
export wrote the raw weights as the averages, exit 0 with a generic note; Saver() beside a
swapping Saver: exported, where with a SaverDef it is refused. Every Saver of exactly the
checkpoint's keys is read now: a single one reading a key from another variable is the
writer, two that disagree are refused (exit 6). Made by real TensorFlow (graph mode), truth
read from the session at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
for case in ("rawonly", "swaponly", "plain_and_swap"):
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        W = tf1.get_variable("W", [3, 2])
        V = tf1.get_variable("V", [3, 2])
        vs = [W, V]
        loss = tf.reduce_sum(W ** 2) + tf.reduce_sum((V - 1) ** 2)
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
        ema = tf1.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([train]):
            step = ema.apply(vs)
        if case == "rawonly":
            writer = tf1.train.Saver({v.op.name: ema.average(v) for v in vs})
        else:
            if case == "plain_and_swap":
                tf1.train.Saver()
            d = {"global_step": gs}
            for v in vs:
                d[v.op.name] = ema.average(v)
                d[ema.average_name(v)] = v
            writer = tf1.train.Saver(d)
        os.makedirs(f"{out}/{case}")
        path = f"{out}/{case}/model.ckpt"
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(step)
            tf1.train.export_meta_graph(path + "-3.meta")  # no saver_def
            writer.save(s, path, global_step=gs, write_meta_graph=False)
            for v in vs:
                truth[f"{case}:ema:{v.op.name}"] = s.run(ema.average(v).read_value())
                truth[f"{case}:raw:{v.op.name}"] = s.run(v.read_value())
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("no_saverdef_savers")
    return out, run_tf1_script(SCRIPT, out)


def _export(made, tmp_path, case, *args):
    out, _ = made
    target = tmp_path / f"{len(list(tmp_path.iterdir()))}.npz"
    code, _, err = run_cli(["export", str(out / case / "model.ckpt-3"), *args,
                            "--out", str(target)])
    said = " ".join(err.split())
    if code != 0:
        assert not target.exists()
        return code, said, None
    with np.load(target) as z:
        return code, said, {k: z[k] for k in z.files}


def _same(got, truth, case, kind):
    assert sorted(got) == ["V", "W"], sorted(got)
    for k, v in got.items():
        assert v.tobytes() == truth[f"{case}:{kind}:{k}"].tobytes(), (k, kind)
        assert v.tobytes() != truth[f"{case}:{'raw' if kind == 'ema' else 'ema'}:{k}"].tobytes()


def test_averages_saver_alone_is_read_as_the_writer(made, tmp_path):
    """Before: --raw exit 0, no word, the averages as raw weights."""
    _, truth = made
    code, said, _ = _export(made, tmp_path, "rawonly")
    assert code == 6 and "raw weights are usable" not in said, said
    code, said, got = _export(made, tmp_path, "rawonly", "--raw")
    assert code == 0 and "hold their averages" in said, said
    _same(got, truth, "rawonly", "ema")


def test_swapping_saver_alone_is_read_as_the_writer(made, tmp_path):
    """Before: the default export wrote the raw weights as the averages (a generic note)."""
    _, truth = made
    code, said, got = _export(made, tmp_path, "swaponly")
    assert code == 0, said
    _same(got, truth, "swaponly", "ema")
    code, said, got = _export(made, tmp_path, "swaponly", "--raw")
    assert code == 0, said
    _same(got, truth, "swaponly", "raw")


@pytest.mark.parametrize("args", [(), ("--raw",)])
def test_plain_beside_swapping_saver_is_refused(made, tmp_path, args):
    """Before: exported with the raw weights as the averages (as if no Saver were built)."""
    code, said, _ = _export(made, tmp_path, "plain_and_swap", *args)
    assert code == 6, said
    assert "--not-swapped" in said and "--no-meta" in said, said
