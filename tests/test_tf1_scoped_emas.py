"""Two default-named TF1 ``ExponentialMovingAverage`` objects created under different name
scopes (a GAN's generator and discriminator), saved with ``Saver()`` and its ``.meta``
(review-12-attack-r20 F7). Where the two averaged overlapping variables TF1's per-variable
numbering (``disc/w/ExponentialMovingAverage``, ``..._1``) leaves whose a lone average is open
and every ``--ema-name`` was refused; the graph's update ops sit under each object's own name
scope (``gen_1/ExponentialMovingAverage``), and ``--ema-name <that scope>`` takes exactly that
object's averages. Truth: ``sess.run(ema.average(v))`` at save time, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

import ckpt_tools

SCRIPT = r'''
CASES = {"overlap": ("name", ["gw", "gb", "dw"], ["dw", "db"]),
         "same": ("name", ["gw", "gb", "dw", "db"], ["gw", "gb", "dw", "db"]),
         "overlap_vs": ("variable", ["gw", "gb", "dw"], ["dw", "db"])}
for case, (kind, first, second) in CASES.items():
    with tf.Graph().as_default():
        scope = tf.name_scope if kind == "name" else tf1.variable_scope
        vs = {}
        with tf1.variable_scope("gen"):
            vs["gw"], vs["gb"] = tf1.get_variable("w", [3]), tf1.get_variable("b", [2])
        with tf1.variable_scope("disc"):
            vs["dw"], vs["db"] = tf1.get_variable("w", [3]), tf1.get_variable("b", [2])
        step = tf.group(*[v.assign_add(tf.ones_like(v) * (i + 1.5))
                          for i, v in enumerate(vs.values())])
        with tf.control_dependencies([step]):
            with scope("gen"):
                eg = tf1.train.ExponentialMovingAverage(0.5)
                ug = eg.apply([vs[k] for k in first])
            with scope("disc"):
                ed = tf1.train.ExponentialMovingAverage(0.9)
                ud = ed.apply([vs[k] for k in second])
        saver = tf1.train.Saver()
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run([ug, ud])
            os.makedirs(f"{out}/{case}")
            saver.save(s, f"{out}/{case}/model.ckpt")
            for tag, e, ks, op in (("g", eg, first, ug), ("d", ed, second, ud)):
                truth[f"{case}:{tag}:scope"] = np.array(op.name)  # the apply()'s name scope
                for k in ks:
                    truth[f"{case}:{tag}:{vs[k].op.name}"] = s.run(e.average(vs[k]))
            for v in vs.values():
                truth[f"{case}:raw:{v.op.name}"] = s.run(v)
'''
VARS = ("gen/w", "gen/b", "disc/w", "disc/b")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_scoped")
    return out, run_tf1_script(SCRIPT, out)


def _scope(truth, case, tag) -> str:
    return str(truth[f"{case}:{tag}:scope"])


@pytest.mark.parametrize("case", ["overlap", "overlap_vs"])
def test_unstated_is_refused_and_offers_each_scope(made, tmp_path, case):
    out, truth = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / case), "--out", str(target)])
    assert code == 6 and not target.exists(), err
    text = " ".join(err.split())
    for tag in ("g", "d"):
        assert f"--ema-name {_scope(truth, case, tag)}" in text, text


@pytest.mark.parametrize("case", ["overlap", "overlap_vs", "same"])
@pytest.mark.parametrize("tag", ["g", "d"])
def test_the_scope_names_one_object(made, tmp_path, case, tag):
    out, truth = made
    scope = _scope(truth, case, tag)
    averaged = [v for v in VARS if f"{case}:{tag}:{v}" in truth]
    target = tmp_path / "w.npz"
    args = ["export", str(out / case), "--ema-name", scope, "--out", str(target)]
    if len(averaged) < len(VARS):  # the object averaged only some: the rest has none of its
        code, _, err = run_cli(args)
        assert code == 6 and not target.exists(), err
        assert "another EMA object averaged" in " ".join(err.split()), err
        args.append("--allow-missing")
    code, _, err = run_cli(args)
    assert code == 0, err
    with np.load(target) as z:
        for var in VARS:
            want = truth.get(f"{case}:{tag}:{var}", truth[f"{case}:raw:{var}"])
            assert z[var].tobytes() == want.tobytes(), var
    m = ckpt_tools.ema_map(str(out / case), ema_name=scope, allow_missing=True)
    assert sorted(m.averaged) == sorted(averaged)


def test_restore_ema_by_scope_loads_in_tensorflow(made, tmp_path, tf):
    out, truth = made
    baked = tmp_path / "baked"
    code, _, err = run_cli(["restore-ema", str(out / "same"), "--ema-name",
                            _scope(truth, "same", "d"), "--out", str(baked)])
    assert code == 0, err
    reader = tf.train.load_checkpoint(str(baked))
    for var in VARS:
        assert reader.get_tensor(var).tobytes() == truth[f"same:d:{var}"].tobytes(), var


def test_both_scopes_over_one_variable_and_no_meta_are_refused(made, tmp_path):
    out, truth = made
    both = f"{_scope(truth, 'overlap', 'g')},{_scope(truth, 'overlap', 'd')}"
    for extra in (["--ema-name", both], ["--no-meta", "--ema-name", _scope(truth, "overlap", "g")]):
        target = tmp_path / "w.npz"
        code, _, err = run_cli(["export", str(out / "overlap"), *extra, "--out", str(target)])
        assert code == 6 and not target.exists(), err
