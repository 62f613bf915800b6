"""A stated TF1 ``--ema-name`` that leaves a weight without an average while the ``.meta``'s
update ops show that weight averaged into a stored key by an object of the name read
(:mod:`ckpt_tools.stated_left_raw`). Each was exit 0 with ``--allow-missing``, the weight
written raw beside its stored average, and refused without it for a false cause ("probably
frozen"):

* ``xfast`` (review-25-attack-r86 F2): an object named ``x/fast`` over ``w``, ``b``, applied
  again under ``variable_scope('s')`` over ``c`` (``s/c/x/fast``), a plain ``Saver()``:
  ``--ema-name x/fast --allow-missing`` wrote ``c`` raw;
* ``renagain`` (r86 F10): one object ``fast`` over ``w``, ``b``, applied again under
  ``variable_scope('s')`` over ``c``, behind ``Saver({"model/" + v.op.name: v})``:
  ``--ema-name s/fast`` (no object's name: ``s/c/fast`` is fast's, apply() scope ``s/fast``)
  read ``c``'s and wrote ``w``, ``b`` raw;
* ``partfast2`` (r84 F3): a partitioned ``w``, an object ``fast`` over ``w``, ``b``, ``c``
  and a second object named ``fast`` over ``w`` (``w/part_N/fast_1``), behind the renaming
  Saver (each partitioned variable one key): ``--ema-name fast_1`` wrote ``b``, ``c`` raw.

``leftout``, an object named ``x/fast`` that never averaged ``c``, still exports ``c`` raw
with ``--allow-missing``.

``twodecay``, ``secondscoped``, ``rentwodecay`` (review-26-attack-r92 F1): two objects named
``fast``, decays 0.5 (over ``w``, ``b``) and 0.9 (over ``c``: ``c/fast``, or ``s/c/fast``
under ``variable_scope('s')``) were exported as one, exit 0, ``c`` the other object's
average; the apply() scopes' decays prove two objects, so it is refused. One object applied
twice (``xfast``, ``renagain``, ``partagain``) has one decay and exports as before. Truth:
the session's values at save time (TensorFlow, a subprocess)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import run_cli, run_script

SCRIPT = r'''
import contextlib
import os
import sys

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()
out = sys.argv[1]
# case: (saver, partitioned w, [(object name or index of the object applied again, its
# variables, variable_scope)])
CASES = {
    "xfast": ("plain", False, [("x/fast", "wb", None), (0, "c", "s")]),
    "leftout": ("plain", False, [("x/fast", "wb", None)]),
    "renagain": ("ren", False, [("fast", "wb", None), (0, "c", "s")]),
    "partfast2": ("ren", True, [("fast", "wbc", None), ("fast", "w", None)]),
    # review-26-attack-r92 F1: a second object named fast (decay 0.9) over c, in the graph's
    # scope, under variable_scope('s'), behind the renaming Saver; one object applied twice
    # with a partitioned w
    "twodecay": ("plain", False, [("fast", "wb", None), ("fast", "c", None)]),
    "secondscoped": ("plain", False, [("fast", "wb", None), ("fast", "c", "s")]),
    "rentwodecay": ("ren", False, [("fast", "wb", None), ("fast", "c", None)]),
    "partagain": ("plain", True, [("fast", "wb", None), (0, "c", "s")]),
}
truth = {}
for case, (kind, part, objects) in CASES.items():
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        V = {"w": tf1.get_variable("w", [4, 3], partitioner=tf1.fixed_size_partitioner(2)
                                   if part else None),
             "b": tf1.get_variable("b", [3]), "c": tf1.get_variable("c", [3])}
        x = tf.constant(np.ones((2, 4), "float32"))
        h = tf.matmul(x, tf.convert_to_tensor(V["w"])) + V["b"] + 2.0 * V["c"]
        step = tf1.train.GradientDescentOptimizer(0.01).minimize(tf.reduce_sum(h ** 2),
                                                                 global_step=gs)
        emas = []
        for i, (name, vs, scope) in enumerate(objects):
            e = emas[name] if isinstance(name, int) else \
                tf1.train.ExponentialMovingAverage([0.5, 0.9][i], name=name)
            with tf.control_dependencies([step]), (
                    tf1.variable_scope(scope) if scope else contextlib.nullcontext()):
                step = e.apply([p for k in vs for p in (
                    list(V[k]) if part and k == "w" else [V[k]])])
            emas.append(e)
        saved = {}  # "model/" + each variable's name, a partitioned one's parts as one key
        for v in tf1.global_variables():
            info = v._save_slice_info
            if info is None:
                saved["model/" + v.op.name] = v
            else:
                saved.setdefault("model/" + info.full_name, []).append(v)
        saver = tf1.train.Saver() if kind == "plain" else tf1.train.Saver(saved)
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(step)
            os.makedirs(f"{out}/{case}")
            saver.save(s, f"{out}/{case}/model.ckpt", global_step=gs)
            for k, v in V.items():
                truth[f"{case}:raw:{k}"] = s.run(tf.convert_to_tensor(v))
                for i, e in enumerate(emas):
                    parts = list(v) if part and k == "w" else [v]
                    if all(e.average(p) is not None for p in parts):
                        truth[f"{case}:o{i}:{k}"] = s.run(
                            tf.concat([e.average(p) for p in parts], 0))
np.savez(f"{out}/truth.npz", **truth)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_stated_left_raw")
    return out, run_script(SCRIPT, out)


def _refused(path, args: list[str], tmp_path) -> str:
    out = tmp_path / "no.npz"
    code, _, err = run_cli(["export", str(path), *args, "--out", str(out)])
    assert code == 6 and not out.exists(), (args, err)
    err = " ".join(err.split())
    assert "frozen when" not in err and "probably frozen" not in err, err
    return err


def _exported(path, args: list[str], tmp_path) -> dict[str, np.ndarray]:
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(path), *args, "--out", str(out), "--force"])
    assert code == 0, (args, err)
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def test_a_slashed_name_applied_again_in_a_scope_is_refused(made, tmp_path):
    """r86 F2: c's average s/c/x/fast is stored (x/fast applied again under 's'): neither
    --ema-name x/fast nor --ema-name x/fast --allow-missing exports c raw."""
    out, _ = made
    for extra in ([], ["--allow-missing"]):
        err = _refused(out / "xfast", ["--ema-name", "x/fast", *extra], tmp_path)
        assert "s/c/x/fast" in err, err
    err = _refused(out / "xfast", ["--ema-name", "x/fast", "--allow-missing"], tmp_path)
    assert "c is left without an average" in err and "apply() 's/x/fast'" in err, err
    assert "--allow-missing would export raw" in err, err


def test_a_slashed_objects_left_out_weight_stays_raw(made, tmp_path):
    """The control: x/fast never averaged c, so --allow-missing exports it raw, the others
    x/fast's averages, bit for bit."""
    out, truth = made
    got = _exported(out / "leftout", ["--ema-name", "x/fast", "--allow-missing"], tmp_path)
    assert sorted(got) == ["b", "c", "w"], sorted(got)
    for v, which in (("w", "o0"), ("b", "o0"), ("c", "raw")):
        assert got[v].tobytes() == truth[f"leftout:{which}:{v}"].tobytes(), v


def test_a_scope_named_as_an_object_is_told_no_object(made, tmp_path):
    """r86 F10: --ema-name s/fast names no object (s/c/fast is fast's): the refusal says so
    and names fast, and --allow-missing does not write w, b raw beside w/fast, b/fast."""
    out, _ = made
    for extra in ([], ["--allow-missing"]):
        err = _refused(out / "renagain", ["--ema-name", "s/fast", *extra], tmp_path)
        assert "no EMA object is named s/fast" in err, err
        assert "the averages carry the names fast;" in err, err
        assert "model/b/fast" in err and "model/s/c/fast" in err, err


def test_a_second_object_of_the_name_is_said(made, tmp_path):
    """r84 F3: --ema-name fast_1 reads the second fast's w/part_N/fast_1 only; b and c hold
    the first fast's averages, so it is refused, naming both apply() calls, with or without
    --allow-missing; the offered --ema-name fast exports the first object's, bit for bit."""
    out, truth = made
    for extra in ([], ["--allow-missing"]):
        err = _refused(out / "partfast2", ["--ema-name", "fast_1", *extra], tmp_path)
        assert "several objects named fast" in err, err
        assert "apply() 'fast_1' writes model/w/fast_1" in err, err
        assert "--ema-name fast is accepted" in err, err
    got = _exported(out / "partfast2", ["--ema-name", "fast"], tmp_path)
    assert sorted(got) == ["model/b", "model/c", "model/w"], sorted(got)
    for v in "wbc":
        assert got[f"model/{v}"].tobytes() == truth[f"partfast2:o0:{v}"].tobytes(), v


def test_excluding_the_weight_left_without_an_average_exports_the_others(made, tmp_path):
    """review-26-attack-r92 F2: --exclude c, the weight the refusal is about, lifts it in
    export as in map (the map was not given export's filters): w, b are x/fast's averages,
    bit for bit, c is not written, with or without --allow-missing."""
    out, truth = made
    for extra in ([], ["--allow-missing"]):
        got = _exported(out / "xfast", ["--ema-name", "x/fast", "--exclude", "c", *extra],
                        tmp_path)
        assert sorted(got) == ["b", "w"], (extra, sorted(got))
        for v in "wb":
            assert got[v].tobytes() == truth[f"xfast:o0:{v}"].tobytes(), (extra, v)
    code, _, err = run_cli(["map", str(out / "xfast"), "--ema-name", "x/fast", "--exclude",
                            "c", "--allow-missing"])
    assert code == 0, err


TWO = {"twodecay": ("w/fast", "b/fast", "c/fast"), "secondscoped": ("w/fast", "b/fast", "s/c/fast"),
       "rentwodecay": ("model/w/fast", "model/b/fast", "model/c/fast")}


@pytest.mark.parametrize("case", sorted(TWO))
def test_two_objects_of_one_name_with_different_decays_are_refused(made, case, tmp_path):
    """r92 F1: the default export (and map, restore-ema) is refused, naming each object's
    apply(), decay and keys and --raw; each --ema-name/--exclude offer exports one object's
    averages alone, bit for bit."""
    import shlex

    out, truth = made
    err = _refused(out / case, [], tmp_path)
    w, b, c = TWO[case]
    assert f"(decay 0.5) writes {b}, {w}" in err and f"(decay 0.9) writes {c}" in err, err
    assert "two objects of that name" in err and "ckpt export --raw" in err, err
    for command in (["map"], ["restore-ema", "--out", str(tmp_path / "baked")]):
        code, _, said = run_cli([*command, str(out / case)])
        assert code == 6 and "(decay 0.9)" in said, said
    assert not (tmp_path / "baked").exists()
    if case != "secondscoped":  # there refused by the mixed-writers rule first
        err = _refused(out / case, ["--ema-name", "fast"], tmp_path)
        assert "--ema-name fast: the averages named fast are not one" in err, err
    offers = re.findall(r"--ema-name \S+(?: --exclude '[^']+')+(?: --allow-missing)?", err)
    assert offers, err
    for offer in offers:
        got = _exported(out / case, shlex.split(offer), tmp_path)
        which = {k: [o for o in ("o0", "o1") if got[k].tobytes() == truth.get(
            f"{case}:{o}:{k.rpartition('/')[2]}", np.zeros(0)).tobytes()] for k in got}
        assert got and len({tuple(v) for v in which.values()}) == 1, (offer, which)
        assert all(len(v) == 1 for v in which.values()), (offer, which)


@pytest.mark.parametrize("case", ["xfast", "renagain", "partagain"])
def test_one_object_applied_twice_exports_as_before(made, case, tmp_path):
    """r92 F1's control: one object applied twice (under variable_scope('s') the second
    time) uses one decay: the default export writes its averages, bit for bit."""
    out, truth = made
    got = _exported(out / case, [], tmp_path)
    assert len(got) == 3, sorted(got)
    for k, value in got.items():
        assert value.tobytes() == truth[f"{case}:o0:{k.rpartition('/')[2]}"].tobytes(), k


def test_two_objects_without_a_graph_read_keep_the_names_reading(made, tmp_path):
    """r92 F1 without the .meta: the names are all there is; the refusal says nothing shows
    one object or two, and --ema-name fast states it (the documented limit)."""
    out, truth = made
    err = _refused(out / "twodecay", ["--no-meta"], tmp_path)
    assert "nothing shows whether one ExponentialMovingAverage of that name or two" in err, err
    got = _exported(out / "twodecay", ["--no-meta", "--ema-name", "fast"], tmp_path)
    for k in "wbc":
        assert got[k].tobytes() == truth[f"twodecay:o{int(k == 'c')}:{k}"].tobytes(), k
