"""A TF1 checkpoint's own ``.meta`` recording one Saver (``save/``, its ``SaverDef``: written by
``Saver().export_meta_graph()`` or its ``save()``) while a second Saver of the same graph
(``save_1/``) wrote the data with ``write_meta_graph=False`` (review-25-attack-r85 F2). Only
the ``SaverDef``'s save op was read, so its keys (not the checkpoint's) proved nothing and the
keys' names decided: ``Saver({v.op.name: ema.average(v)})``'s averages went out of
``export --raw`` as raw weights with no word, and a swapping Saver's raw weights out of the
default export as the averages, exit 0. Every Saver of the graph writing exactly the
checkpoint's keys is read now: the only one whose reading differs from the names is the
writer; two that disagree are refused (exit 6) naming --not-swapped and --raw --no-meta.
Made by real TensorFlow (graph mode), truth read from the session at save time."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
for case in ("rawnames", "vtr", "swapall", "swapsome", "plain2", "plainwrote", "swapbeside"):
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        W = tf1.get_variable("W", [3, 2])
        V = tf1.get_variable("V", [3, 2])
        loss = tf.reduce_sum(W ** 2) + tf.reduce_sum((V - 1) ** 2)
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
        ema = tf1.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([train]):
            step = ema.apply([W, V])
        plain = tf1.train.Saver()  # save/: the SaverDef the .meta records
        if case in ("rawnames", "plainwrote"):
            d = {v.op.name: ema.average(v) for v in (W, V)}
        elif case == "vtr":
            d = ema.variables_to_restore()
        elif case in ("swapall", "swapbeside"):  # every key Saver() writes, swapped
            d = {"global_step": gs}
            for v in (W, V):
                d[v.op.name] = ema.average(v)
                d[ema.average_name(v)] = v
        elif case == "swapsome":
            d = {v.op.name: ema.average(v) for v in (W, V)} | {"global_step": gs}
        else:
            d = [W, V]
        second = tf1.train.Saver(d)  # save_1/
        os.makedirs(f"{out}/{case}")
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(step)
            path = f"{out}/{case}/model.ckpt"
            if case in ("plainwrote", "swapbeside"):  # the SaverDef's Saver wrote it all
                plain.save(s, path, global_step=gs)
            else:
                plain.export_meta_graph(path + "-3.meta")
                second.save(s, path, global_step=gs, write_meta_graph=False)
            for v in (W, V):
                truth[f"{case}:ema:{v.op.name}"] = s.run(ema.average(v).read_value())
                truth[f"{case}:raw:{v.op.name}"] = s.run(v.read_value())
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("second_saver")
    return out, run_tf1_script(SCRIPT, out)


def _export(made, tmp_path, case, *args):
    out, _ = made
    target = tmp_path / f"{len(list(tmp_path.iterdir()))}.npz"  # one per call
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


@pytest.mark.parametrize("case", ["rawnames", "swapsome"])
def test_averages_under_the_variables_names_are_read_through_the_second_saver(made, tmp_path,
                                                                              case):
    """Before: --raw wrote the averages as raw weights, exit 0, no word; the default export's
    refusal said the raw weights are usable as they are."""
    _, truth = made
    code, said, _ = _export(made, tmp_path, case)
    assert code == 6, said
    assert "key V holds V/ExponentialMovingAverage" in said and "--raw" in said, said
    assert "raw weights are usable" not in said, said
    code, said, got = _export(made, tmp_path, case, "--raw")
    assert code == 0, said
    assert "hold their averages" in said, said  # the keys as stored: the averages, said so
    _same(got, truth, case, "ema")


def test_vtr_second_saver_is_read_as_its_layout(made, tmp_path):
    """Saver(ema.variables_to_restore()) wrote the keys: --raw refuses naming --keys-are-raw
    and --averages-only (which decide), --raw --keys-are-raw gives the raw weights."""
    _, truth = made
    code, said, _ = _export(made, tmp_path, "vtr", "--raw")
    assert code == 6, said
    assert "--keys-are-raw" in said and "--averages-only" in said, said
    assert "did not write this checkpoint" not in said, said
    code, said, _ = _export(made, tmp_path, "vtr")
    assert code == 6 and "--averages-only" in said, said
    code, said, got = _export(made, tmp_path, "vtr", "--raw", "--keys-are-raw")
    assert code == 0, said
    _same(got, truth, "vtr", "raw")


@pytest.mark.parametrize("case", ["swapall", "swapbeside"])
def test_two_savers_of_exactly_these_keys_that_disagree_are_refused(made, tmp_path, case):
    """swapall: the swapping Saver wrote it; the default export gave its raw weights as the
    averages and --raw the averages as raw, exit 0. swapbeside: the plain Saver wrote it; the
    file cannot tell these apart, so both refuse, and the statement decides."""
    _, truth = made
    for args in ([], ["--raw"]):
        code, said, _ = _export(made, tmp_path, case, *args)
        assert code == 6, said
        assert "builds Savers whose save ops write exactly these keys" in said, said
        assert "Builder.add_meta_graph" not in said and "in one graph" not in said, said
        assert "--not-swapped" in said and "--no-meta" in said, said
    if case == "swapbeside":  # --not-swapped states the plain Saver wrote it
        code, said, got = _export(made, tmp_path, case, "--not-swapped")
        assert code == 0, said
        _same(got, truth, case, "ema")
    else:  # the keys as stored: the swapping Saver's keys named as variables hold averages
        code, said, got = _export(made, tmp_path, case, "--raw", "--no-meta")
        assert code == 0, said
        _same(got, truth, case, "ema")


def test_a_second_saver_reading_the_names_changes_nothing(made, tmp_path):
    """Saver([W, V]) wrote the keys: --raw gives the raw weights as before."""
    _, truth = made
    code, said, got = _export(made, tmp_path, "plain2", "--raw")
    assert code == 0, said
    _same(got, truth, "plain2", "raw")


def test_the_saverdefs_saver_that_wrote_the_keys_still_decides(made, tmp_path):
    """A second Saver of other keys (Saver({v.op.name: ema.average(v)}), built for
    evaluation) beside the Saver() that wrote the checkpoint and its .meta: exported as
    before, bit for bit."""
    _, truth = made
    code, said, got = _export(made, tmp_path, "plainwrote")
    assert code == 0, said
    _same(got, truth, "plainwrote", "ema")
    code, said, got = _export(made, tmp_path, "plainwrote", "--raw")
    assert code == 0, said
    _same(got, truth, "plainwrote", "raw")
