"""Two default-named TF1 ``ExponentialMovingAverage`` objects over different variables
(``e1.apply([w])``, ``e2.apply([w, v])``): TF1 names averages per variable, so ``w`` has
``w/ExponentialMovingAverage`` (e1's) and ``w/ExponentialMovingAverage_1`` (e2's) while ``v``
has only ``v/ExponentialMovingAverage``, which is e2's. ``--ema-name ExponentialMovingAverage``
(the refusal's own advice) returned e1's ``w`` with e2's ``v``, exit 0 (review-11-attack-r16
F1). A lone unnumbered average beside numbered ones elsewhere is now refused, with or without
the ``.meta``; where both objects averaged the same variables each name picks its object's, bit
for bit (``ema.average(v)`` recorded at save time by TensorFlow in a subprocess)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
for case, second in (("partial", "wv"), ("full", "wv")):
    with tf.Graph().as_default():
        w = tf1.get_variable("w", [3])
        v = tf1.get_variable("v", [2])
        step = tf.group(w.assign_add(tf.ones([3])), v.assign_add(2 * tf.ones([2])))
        e1 = tf1.train.ExponentialMovingAverage(0.5)
        e2 = tf1.train.ExponentialMovingAverage(0.9)
        with tf.control_dependencies([step]):
            first = [w] if case == "partial" else [w, v]
            update = tf.group(e1.apply(first), e2.apply([w, v]))
        saver = tf1.train.Saver()
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(update)
            os.makedirs(f"{out}/{case}")
            saver.save(s, f"{out}/{case}/model.ckpt")
            for tag, e, vs in (("e1", e1, first), ("e2", e2, [w, v])):
                for var in vs:
                    truth[f"{case}:{tag}:{var.op.name}"] = s.run(e.average(var).read_value())
with tf.Graph().as_default():  # crossed: a.apply([w]); b.apply([v, w]); a.apply([v])
    w = tf1.get_variable("w", [3])
    v = tf1.get_variable("v", [2])
    step = tf.group(w.assign_add(tf.ones([3])), v.assign_add(2 * tf.ones([2])))
    a = tf1.train.ExponentialMovingAverage(0.5)
    b = tf1.train.ExponentialMovingAverage(0.9)
    with tf.control_dependencies([step]):
        u1 = a.apply([w])
    with tf.control_dependencies([u1]):
        u2 = b.apply([v, w])
    with tf.control_dependencies([u2]):
        update = tf.group(a.apply([v]))
    saver = tf1.train.Saver()
    with tf1.Session() as s:
        s.run(tf1.global_variables_initializer())
        for _ in range(3):
            s.run(update)
        os.makedirs(f"{out}/crossed")
        saver.save(s, f"{out}/crossed/model.ckpt")
        for tag, e in (("e1", a), ("e2", b)):
            for var in (w, v):
                truth[f"crossed:{tag}:{var.op.name}"] = s.run(e.average(var).read_value())
                truth[f"crossed:{tag}:{var.op.name}:name"] = np.array(e.average(var).op.name)
# each apply() one variable (r39 F2 after b2fcd92): cross4 a([w]); b([v]); b([w]); a([v]);
# twice: a([w]); a([v]) (one object applied twice); twice_b: twice, then b([w, v])
for case, applies in (("cross4", "a:w b:v b:w a:v"), ("twice", "a:w a:v"),
                      ("twice_b", "a:w a:v b:wv")):
    with tf.Graph().as_default():
        w = tf1.get_variable("w", [3])
        v = tf1.get_variable("v", [2])
        update = tf.group(w.assign_add(tf.ones([3])), v.assign_add(2 * tf.ones([2])))
        objs = {"a": tf1.train.ExponentialMovingAverage(0.5),
                "b": tf1.train.ExponentialMovingAverage(0.9)}
        for each in applies.split():
            tag, names = each.split(":")
            with tf.control_dependencies([update]):
                update = objs[tag].apply([{"w": w, "v": v}[n] for n in names])
        saver = tf1.train.Saver()
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(update)
            os.makedirs(f"{out}/{case}")
            saver.save(s, f"{out}/{case}/model.ckpt")
            for tag, e in objs.items():
                for var in (w, v):
                    if e.average(var) is not None:
                        truth[f"{case}:{tag}:{var.op.name}"] = s.run(e.average(var).read_value())
                        truth[f"{case}:{tag}:{var.op.name}:name"] = np.array(
                            e.average(var).op.name)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_uneven")
    return out, run_tf1_script(SCRIPT, out)


@pytest.mark.parametrize("extra", [[], ["--ema-name", "ExponentialMovingAverage"],
                                   ["--no-meta", "--ema-name", "ExponentialMovingAverage"]])
def test_a_lone_average_beside_numbered_ones_is_refused(made, tmp_path, extra):
    out, truth = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / "partial"), *extra, "--out", str(target)])
    assert code == 6 and not target.exists(), err
    text = " ".join(err.split())
    assert len(err.strip().splitlines()) == 1, err
    assert "v/ExponentialMovingAverage cannot be said to be one EMA object's" in text, err
    # one true thing: it said "no option decides" and then, from the .meta's update ops, that
    # --ema-name ExponentialMovingAverage_1 decides (review-32-attack-r118 F5)
    offered = "--ema-name ExponentialMovingAverage_1 decides" in text
    assert offered == ("--no-meta" not in extra), text
    assert ("no option decides" in text) == (not offered), text
    if offered:  # and it does: e2's averages of both, bit for bit
        code, _, err = run_cli(["export", str(out / "partial"), "--ema-name",
                                "ExponentialMovingAverage_1", "--out", str(target)])
        assert code == 0, err
        with np.load(target) as z:
            for var in ("w", "v"):
                assert z[var].tobytes() == truth[f"partial:e2:{var}"].tobytes(), var


@pytest.mark.parametrize("name,tag", [("ExponentialMovingAverage", "e1"),
                                      ("ExponentialMovingAverage_1", "e2")])
def test_objects_over_the_same_variables_are_picked_by_name(made, tmp_path, name, tag):
    out, truth = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / "full"), "--ema-name", name, "--out",
                            str(target)])
    assert code == 0, err
    with np.load(target) as z:
        for var in ("w", "v"):
            assert z[var].tobytes() == truth[f"full:{tag}:{var}"].tobytes(), var


@pytest.mark.parametrize("command", ["export", "map"])
@pytest.mark.parametrize("extra", [[], ["--ema-name", "ExponentialMovingAverage"],
                                   ["--ema-name", "ExponentialMovingAverage_1"]])
def test_objects_applied_in_crossed_order_are_refused(made, tmp_path, command, extra):
    """a.apply([w]); b.apply([v, w]); a.apply([v]): w/ExponentialMovingAverage is a's and
    v/ExponentialMovingAverage b's; --ema-name ExponentialMovingAverage took one of each, exit 0
    (review-18-attack-r39 F2). The .meta shows b's apply() writing both levels."""
    out, truth = made
    assert str(truth["crossed:e1:w:name"]) == "w/ExponentialMovingAverage"
    assert str(truth["crossed:e2:v:name"]) == "v/ExponentialMovingAverage"
    target = tmp_path / "w.npz"
    args = ["--out", str(target)] if command == "export" else []
    code, _, err = run_cli([command, str(out / "crossed"), *extra, *args])
    assert code == 6 and not target.exists(), err
    text = " ".join(err.split())
    assert "are not each one EMA object's" in text, err
    assert "'ExponentialMovingAverage_1' writes v/ExponentialMovingAverage, " \
        "w/ExponentialMovingAverage_1" in text, err
    assert "pass --ema-name" not in text and "--raw" in text, err


def test_without_the_meta_the_offer_says_it_assumes_one_order(made, tmp_path):
    out, _ = made
    code, _, err = run_cli(["export", str(out / "crossed"), "--no-meta", "--out",
                            str(tmp_path / "w.npz")])
    assert code == 6, err
    assert "only where the objects averaged every variable in the same order" in \
        " ".join(err.split()), err


@pytest.mark.parametrize("case,extra", [
    ("cross4", []), ("cross4", ["--ema-name", "ExponentialMovingAverage"]),
    ("cross4", ["--ema-name", "ExponentialMovingAverage_1"]),
    ("twice_b", ["--ema-name", "ExponentialMovingAverage"])])
def test_levels_several_applies_write_are_refused(made, tmp_path, case, extra):
    """a.apply([w]); b.apply([v]); b.apply([w]); a.apply([v]): each apply() writes one key,
    w/ExponentialMovingAverage a's and v/ExponentialMovingAverage b's; --ema-name
    ExponentialMovingAverage (or _1) took one of each, exit 0 (review-18-attack-r39 F2 after
    b2fcd92). Two scopes writing one level may be two objects: refused, as where one object is
    applied twice beside another (twice_b: the same keys and scopes as a third object)."""
    out, truth = made
    if case == "cross4":  # TF's names: each name one key of a's and one of b's
        assert str(truth["cross4:a:w:name"]) == "w/ExponentialMovingAverage"
        assert str(truth["cross4:b:v:name"]) == "v/ExponentialMovingAverage"
    target = tmp_path / "w.npz"
    for command in ("export", "map"):
        args = ["--out", str(target)] if command == "export" else []
        code, _, err = run_cli([command, str(out / case), *extra, *args])
        assert code == 6 and not target.exists(), err
        text = " ".join(err.split())
        assert "are not proven each one EMA object's" in text and "--raw" in text, err
        assert "pass --ema-name" not in text, err
        if case == "twice_b":  # b's one apply() writes every _1 key
            assert "--ema-name ExponentialMovingAverage_1 is one apply()'s" in text, err


@pytest.mark.parametrize("case,name,tag", [("twice", None, "a"),
                                           ("twice", "ExponentialMovingAverage", "a"),
                                           ("twice_b", "ExponentialMovingAverage_1", "b")])
def test_a_level_one_object_writes_is_picked(made, tmp_path, case, name, tag):
    """One object applied twice (two scopes, one level), or a level one apply() writes whole:
    one object's averages, bit for bit."""
    out, truth = made
    target = tmp_path / "w.npz"
    stated = ["--ema-name", name] if name else []
    code, _, err = run_cli(["export", str(out / case), *stated, "--strict", "--out",
                            str(target)])
    assert code == 0, err
    with np.load(target) as z:
        for var in ("w", "v"):
            assert z[var].tobytes() == truth[f"{case}:{tag}:{var}"].tobytes(), var
