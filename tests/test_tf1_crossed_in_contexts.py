"""Two default-named TF1 ``ExponentialMovingAverage`` objects, one ``apply()`` run inside a
control-flow-v1 ``tf.cond`` or ``tf.while_loop`` (``disable_control_flow_v2()``), a v2
``tf.cond`` or a ``tf.function`` called in the graph (review-18-attack-r41 F3, F4, F5).

The ``.meta`` tells which ``apply()`` writes which average by its update ops' name scope
(:mod:`ckpt_tools.ema_crossed`); read without the cond/while context's scope and the function it
runs in (a function's graph restarts the scopes), an ``apply()`` there had the scope of another
object's ``apply()`` in the graph, so the two objects read as one ``apply()``:

- F3 (CRITICAL): ``a.apply([w0])`` in the context, ``b.apply([w1])``, ``b.apply([w0])``,
  ``a.apply([w1])``: ``w0/ExponentialMovingAverage`` is a's, ``w1/ExponentialMovingAverage``
  b's, and the refusal offered ``--ema-name ExponentialMovingAverage`` as one ``apply()``'s,
  which exported one average of each object, exit 0. Refused under every name now.
- F4 (MAJOR): ``a.apply([w0, w1])``, ``b.apply([w0, w1])`` in the context (not crossed) were
  refused under every name; each name takes its object's averages, bit for bit.
- F5 (MINOR): ``a.apply()`` twice, then ``b.apply()``: the refusal offered b's scope
  ``ExponentialMovingAverage_2`` as a name; it offers the name b's averages carry.

Made by real TensorFlow in a subprocess; truth ``ema.average(v)`` (value and name) at save time.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import E, run_tf1_script

SCRIPT = r'''
def in_context(ctx, make):
    """make() (an op) run in the graph, or in a cond's branch, a while's body or a function."""
    if ctx == "graph":
        return make()
    if ctx in ("v1cond", "v2cond"):
        def yes():
            with tf.control_dependencies([make()]):
                return tf.constant(1)
        return tf.cond(tf.constant(True), yes, lambda: tf.constant(0))
    if ctx == "v1while":
        def body(i):
            with tf.control_dependencies([make()]):
                return [i + 1]
        return tf.while_loop(lambda i: i < 1, body, [tf.constant(0)])[0]

    if ctx == "vs_x":
        with tf1.variable_scope("x"):
            return make()

    @tf.function
    def fn():
        make()
        return tf.constant(1)
    return fn()


CONTEXTS = ("v1cond", "v1while", "v2cond", "fn")
CASES = {**{f"crossed_{c}": f"a:w0@{c} b:w1 b:w0 a:w1" for c in CONTEXTS},
         **{f"apart_{c}": f"a:w0w1 b:w0w1@{c}" for c in CONTEXTS},
         **{f"e12_{c}": f"a:w0@{c} b:w0w1" for c in CONTEXTS}, "e12b_fn": "a:w0 b:w0w1@fn",
         "twice": "a:w0w1 a:w0w1 b:w0w1", "three": "a:w0w1 b:w0 c:w0w1",
         "scoped": "a:w0w1@vs_x b:w0w1",
         # one object's name written whole by an apply() that averaged only w0, beside an
         # object named like the family's next level (review-20-attack-r48 F1)
         "f1_graph": "a:w0 n:w0w1", "f1_fn": "a:w0@fn n:w0w1", "f1_fast": "f:w0 g:w0w1",
         # a variable's only average another object's <v>/X_1, no crossing (r48 F5)
         "f5_fast": "g:w1 f:w0 a:w0", "f5_e": "n:w1 a:w0 f:w0",
         # a split family beside a crossed one of another name (r48 F4)
         "f4_e": "f:w0 g:w0w1 a:w0 b:w1 b:w0 a:w1", "f4_fast": "a:w0 b:w0w1 p:w0 q:w1 q:w0 p:w1",
         # no object of the stated name, only one named like its twin (r52 F2)
         "r52_g": "g:w0w1", "r52_ag": "a:w0 g:w1", "r52_n": "n:w0w1"}
for case, applies in CASES.items():
    if "_v1" in case:
        tf1.disable_control_flow_v2()
    else:
        tf1.enable_control_flow_v2()
    with tf.Graph().as_default():
        w0 = tf1.get_variable("w0", initializer=tf.ones([3]))
        w1 = tf1.get_variable("w1", initializer=tf.zeros([2]))
        update = tf.group(w0.assign_add(tf.ones([3])), w1.assign_add(2 * tf.ones([2])))
        objs = {"a": tf1.train.ExponentialMovingAverage(0.5),
                "b": tf1.train.ExponentialMovingAverage(0.9),
                "c": tf1.train.ExponentialMovingAverage(0.7),
                "n": tf1.train.ExponentialMovingAverage(0.3, name="ExponentialMovingAverage_1"),
                "f": tf1.train.ExponentialMovingAverage(0.55, name="fast"),
                "g": tf1.train.ExponentialMovingAverage(0.65, name="fast_1"),
                "p": tf1.train.ExponentialMovingAverage(0.15, name="fast"),
                "q": tf1.train.ExponentialMovingAverage(0.25, name="fast")}
        for each in applies.split():
            each, _, ctx = each.partition("@")
            tag, names = each.split(":")
            vs = [{"w0": w0, "w1": w1}[n] for n in ("w0", "w1") if n in names]
            with tf.control_dependencies([update]):
                update = in_context(ctx or "graph", lambda e=objs[tag], vs=vs: e.apply(vs))
        saver = tf1.train.Saver()
        with trained(tf, update) as s:
            os.makedirs(f"{out}/{case}")
            saver.save(s, f"{out}/{case}/model.ckpt")
            for tag, e in objs.items():
                for var in (w0, w1):
                    if e.average(var) is not None:
                        truth[f"{case}:{tag}:{var.op.name}"] = s.run(e.average(var))
                        truth[f"{case}:{tag}:{var.op.name}:name"] = np.array(
                            e.average(var).op.name)
'''

CONTEXTS = ("v1cond", "v1while", "v2cond", "fn")
# how the refusal names the context's apply(): v1 scopes keep the cond's/while's, a function's
# apply() is named with the function (cond_true_N, __inference_fn_N)
SHOWN = {"v1cond": f"'cond/{E}'", "v1while": f"'while/{E}'", "v2cond": f"'{E} in cond_true_",
         "fn": f"'{E} in __inference_fn_"}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("crossed_in_contexts")
    return out, run_tf1_script(SCRIPT, out)


@pytest.mark.parametrize("ctx", CONTEXTS)
@pytest.mark.parametrize("extra", [[], ["--ema-name", E], ["--ema-name", f"{E}_1"],
                                   ["--ema-name", f"{E}_2"]])
def test_objects_crossed_with_an_apply_in_a_context_are_refused(made, tmp_path, ctx, extra):
    """a.apply([w0]) in the context; b.apply([w1]); b.apply([w0]); a.apply([w1]): each name
    is one key of a's and one of b's (TF's names at save time), so no name is one object's."""
    out, truth = made
    case = f"crossed_{ctx}"
    assert str(truth[f"{case}:a:w0:name"]) == f"w0/{E}"
    assert str(truth[f"{case}:b:w1:name"]) == f"w1/{E}"
    assert str(truth[f"{case}:b:w0:name"]) == f"w0/{E}_1"
    assert str(truth[f"{case}:a:w1:name"]) == f"w1/{E}_1"
    target = tmp_path / "w.npz"
    for command in ("export", "map"):
        args = ["--out", str(target)] if command == "export" else []
        code, _, err = run_cli([command, str(out / case), *extra, *args])
        assert code == 6 and not target.exists(), err
        text = " ".join(err.split())
        assert len(err.strip().splitlines()) == 1, err
        assert "are not proven each one EMA object's" in text and "--raw" in text, err
        assert "is one apply()'s" not in text and "pass --ema-name" not in text, err
        assert SHOWN[ctx] in text, err


@pytest.mark.parametrize("ctx", CONTEXTS)
@pytest.mark.parametrize("name,tag", [(E, "a"), (f"{E}_1", "b")])
def test_objects_apart_with_an_apply_in_a_context_are_picked_by_name(made, tmp_path, ctx,
                                                                      name, tag):
    """a.apply([w0, w1]); b.apply([w0, w1]) in the context: each name one object's, bit for
    bit (refused under every name before)."""
    out, truth = made
    case = f"apart_{ctx}"
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / case), "--ema-name", name, "--strict",
                            "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        for var in ("w0", "w1"):
            assert str(truth[f"{case}:{tag}:{var}:name"]) == f"{var}/{name}"
            assert z[var].tobytes() == truth[f"{case}:{tag}:{var}"].tobytes(), var


def test_the_offer_names_the_averages_name_not_the_apply_scope(made, tmp_path):
    """a.apply() twice, then b.apply(): b's scope is ExponentialMovingAverage_2 and its
    averages are named _1; the refusal offers the name the keys carry, which takes b's."""
    out, truth = made
    code, _, err = run_cli(["map", str(out / "twice")])
    text = " ".join(err.split())
    assert code == 6, err
    assert f"--ema-name {E}_2" not in text, err
    assert f"--ema-name {E}_1 decides" in text, err
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / "twice"), "--ema-name", f"{E}_1", "--strict",
                            "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        for var in ("w0", "w1"):
            assert z[var].tobytes() == truth[f"twice:b:{var}"].tobytes(), var


def _export(out, case, tmp_path, *extra):
    """``ckpt export`` of ``case`` (``--strict``): ``(code, err, {weight: array} or None)``."""
    target = tmp_path / "w.npz"
    target.unlink(missing_ok=True)
    code, _, err = run_cli(["export", str(out / case), *extra, "--strict", "--out", str(target)])
    if code != 0:
        assert not target.exists(), err
        return code, err, None
    with np.load(target) as z:
        return code, err, {k: z[k] for k in z.files}


def _is_object(truth, case, tag, got):
    """Whether ``got`` holds ``tag``'s ``ema.average(v)`` of w0 and w1, bit for bit."""
    return all(got[v].tobytes() == truth[f"{case}:{tag}:{v}"].tobytes() for v in ("w0", "w1"))


@pytest.mark.parametrize("case", [f"e12_{c}" for c in CONTEXTS] + ["e12b_fn"])
def test_one_apply_of_every_variable_is_picked_where_scopes_restart(made, tmp_path, case):
    """a.apply([w0]) and b.apply([w0, w1]), one of them in a cond, while or function (whose
    scopes restart, so both read as scope ExponentialMovingAverage): --ema-name _1, the name
    one apply() (b's) writes, takes b's averages as in a plain graph (r43 F7); the unstated
    refusal offers it; the names mixing a's and b's stay refused."""
    out, truth = made
    assert str(truth[f"{case}:b:w0:name"]) == f"w0/{E}_1"
    assert str(truth[f"{case}:b:w1:name"]) == f"w1/{E}"
    assert f"{case}:a:w1" not in truth and str(truth[f"{case}:a:w0:name"]) == f"w0/{E}"
    code, err, got = _export(out, case, tmp_path, "--ema-name", f"{E}_1")
    assert code == 0 and _is_object(truth, case, "b", got), err
    code, _, err = run_cli(["map", str(out / case)])
    assert code == 6 and f"--ema-name {E}_1 decides" in " ".join(err.split()), err
    for extra in ([], ["--ema-name", E], ["--ema-name", f"{E}_2"]):
        for more in ([], ["--allow-missing"]):
            code, err, _ = _export(out, case, tmp_path, *extra, *more)
            assert code == 6, (extra, more, err)


def test_a_name_one_apply_writes_whole_beside_crossed_objects_is_taken(made, tmp_path):
    """a.apply([w0, w1]); b.apply([w0]); c.apply([w0, w1]): c writes w0/..._2 and w1/..._1
    (crossed), yet ExponentialMovingAverage is a's apply() whole: taken, bit for bit, and
    offered (r43 F6); the crossed name stays refused."""
    out, truth = made
    assert [str(truth[f"three:a:{v}:name"]) for v in ("w0", "w1")] == [f"w0/{E}", f"w1/{E}"]
    code, err, got = _export(out, "three", tmp_path, "--ema-name", E)
    assert code == 0 and _is_object(truth, "three", "a", got), err
    code, err, got = _export(out, "three", tmp_path, "--ema-name", f"{E}_2")
    assert code == 0 and _is_object(truth, "three", "c", got), err
    code, err, _ = _export(out, "three", tmp_path, "--ema-name", f"{E}_1")
    assert code == 6 and f"{E}_1" in err, err
    code, _, err = run_cli(["map", str(out / "three")])
    text = " ".join(err.split())
    # _2 (c's, taken above) is offered too: one apply() writes it whole (r48 F2)
    assert code == 6 and f"--ema-name {E} or {E}_2 is one apply()'s whole" in text, err
    assert f"<var>/{E}_1_1" not in text, err


def test_the_root_object_beside_one_in_a_variable_scope_is_picked(made, tmp_path):
    """a.apply([w0, w1]) under variable_scope("x") (x/w0/ExponentialMovingAverage), then
    b.apply([w0, w1]) at the root: --ema-name ExponentialMovingAverage, the root scope whose
    averages are <W>/ExponentialMovingAverage, takes b's (r43 F4); x/... takes a's."""
    out, truth = made
    assert str(truth["scoped:a:w0:name"]) == f"x/w0/{E}"
    assert str(truth["scoped:b:w0:name"]) == f"w0/{E}"
    code, err, got = _export(out, "scoped", tmp_path, "--ema-name", E)
    assert code == 0 and _is_object(truth, "scoped", "b", got), err
    code, err, got = _export(out, "scoped", tmp_path, "--ema-name", f"x/{E}")
    assert code == 0 and _is_object(truth, "scoped", "a", got), err
    code, err, _ = _export(out, "scoped", tmp_path)
    assert code == 6, err


@pytest.mark.parametrize("case,name,mine,other", [
    ("f1_graph", E, "a", "n"), ("f1_fn", E, "a", "n"), ("f1_fast", "fast", "f", "g")])
def test_a_name_one_apply_writes_whole_without_every_variable_is_refused(made, tmp_path, case,
                                                                        name, mine, other):
    """a.apply([w0]), then EMA(name="ExponentialMovingAverage_1").apply([w0, w1]) (or objects
    named fast and fast_1): every <W>/ExponentialMovingAverage is a's, yet a never averaged
    w1, whose only average is the other object's w1/..._1: --ema-name ExponentialMovingAverage
    took it, exit 0 --strict, and the unstated refusal offered that name (review-20-attack-r48
    F1). Refused now; under --allow-missing w1 is never the other object's average."""
    out, truth = made
    assert str(truth[f"{case}:{mine}:w0:name"]) == f"w0/{name}"
    assert f"{case}:{mine}:w1" not in truth
    assert str(truth[f"{case}:{other}:w1:name"]) == f"w1/{name}_1"
    code, err, _ = _export(out, case, tmp_path, "--ema-name", name)
    assert code == 6, err
    code, err, got = _export(out, case, tmp_path, "--ema-name", name, "--allow-missing")
    assert code == 6 or (got["w0"].tobytes() == truth[f"{case}:{mine}:w0"].tobytes()
                         and got["w1"].tobytes() != truth[f"{case}:{other}:w1"].tobytes()), err
    code, _, err = run_cli(["map", str(out / case)])
    assert code == 6 and f"--ema-name {name} is one" not in " ".join(err.split()), err


def _not_mixed(truth, case, got, tags):
    """Whether ``got`` (an export, or ``None`` where refused) is no mix: each of w0 and w1
    one object's ema.average(v) or neither's, and the averages taken all one object's."""
    if got is None:
        return True
    owners = {v: {t for t in tags if f"{case}:{t}:{v}" in truth
                  and got[v].tobytes() == truth[f"{case}:{t}:{v}"].tobytes()}
              for v in ("w0", "w1")}
    taken = [o for o in owners.values() if o]
    return not taken or bool(set.intersection(*taken))


@pytest.mark.parametrize("case,name,mine,other", [("f5_fast", "fast", "f", "g"),
                                                  ("f5_e", E, "a", "n")])
def test_another_objects_numbered_twin_is_never_a_stated_names_average(made, tmp_path, case,
                                                                      name, mine, other):
    """EMA(name="fast_1").apply([w1]), EMA(name="fast").apply([w0]), then a default object
    over w0: w1's only average, w1/fast_1, is the fast_1 object's, yet --ema-name fast took
    it, exit 0 --strict (review-20-attack-r48 F5). Refused (or w1 left raw) now."""
    out, truth = made
    assert str(truth[f"{case}:{mine}:w0:name"]) == f"w0/{name}"
    assert f"{case}:{mine}:w1" not in truth
    assert str(truth[f"{case}:{other}:w1:name"]) == f"w1/{name}_1"
    code, err, _ = _export(out, case, tmp_path, "--ema-name", name)
    assert code == 6, err
    code, err, got = _export(out, case, tmp_path, "--ema-name", name, "--allow-missing")
    assert _not_mixed(truth, case, got, "abcfgnpq"), err


@pytest.mark.parametrize("case,names", [("f4_e", [E, f"{E}_1"]), ("f4_fast", ["fast", "fast_1"])])
def test_a_split_name_beside_another_crossed_family_is_refused(made, tmp_path, case, names):
    """a.apply([w0]); b.apply([w1]); b.apply([w0]); a.apply([w1]) (each name a key of a and
    one of b) beside objects named fast and fast_1 crossing (or two objects named fast so
    applied beside e1/e2): the split rule was skipped because another family was crossed, and
    --ema-name exported one average of each object, exit 0 --strict (review-20-attack-r48 F4)."""
    out, truth = made
    one, two = ("a", "b") if case == "f4_e" else ("p", "q")
    assert str(truth[f"{case}:{one}:w0:name"]) == f"w0/{names[0]}"
    assert str(truth[f"{case}:{two}:w1:name"]) == f"w1/{names[0]}"
    for name in names:
        for more in ([], ["--allow-missing"]):
            code, err, got = _export(out, case, tmp_path, "--ema-name", name, *more)
            assert code == 6 and _not_mixed(truth, case, got, "abcfgnpq"), (name, more, err)


@pytest.mark.parametrize("case,name,tag", [("f1_graph", f"{E}_1", "n"), ("f1_fn", f"{E}_1", "n"),
                                           ("f1_fast", "fast_1", "g")])
def test_the_numbered_objects_own_name_is_taken(made, tmp_path, case, name, tag):
    """Beside a.apply([w0]), EMA(name="fast_1").apply([w0, w1]) writes every */fast_1 key
    and averaged both variables: --ema-name fast_1 is that one object's, yet it was refused
    as "would take two objects' averages" (review-20-attack-r48 F2). Taken bit for bit and
    offered now."""
    out, truth = made
    assert [str(truth[f"{case}:{tag}:{v}:name"]) for v in ("w0", "w1")] == [
        f"w0/{name}", f"w1/{name}"]
    code, err, got = _export(out, case, tmp_path, "--ema-name", name)
    assert code == 0 and _is_object(truth, case, tag, got), err
    code, _, err = run_cli(["map", str(out / case)])
    text = " ".join(err.split())
    assert code == 6 and f"--ema-name {name} is one apply()'s whole" in text, err
    assert "would take two objects' averages" not in text, err


@pytest.mark.parametrize("case,name,tag", [("r52_g", "fast", "g"), ("r52_ag", "fast", "g"),
                                           ("r52_n", E, "n")])
def test_a_stated_name_never_takes_an_object_named_like_its_twin(made, tmp_path, case, name,
                                                                 tag):
    """Only EMA(name="fast_1") (alone, or beside a default object over w0; or one named
    ExponentialMovingAverage_1): no object named fast exists, yet --ema-name fast --strict
    exported fast_1's averages, exit 0 (review-20-attack-r52 F2). Refused now, naming the
    names the file keeps; the object's own name takes its averages bit for bit."""
    out, truth = made
    assert str(truth[f"{case}:{tag}:w1:name"]) == f"w1/{name}_1"
    for more in ([], ["--allow-missing"]):
        code, err, got = _export(out, case, tmp_path, "--ema-name", name, *more)
        text = " ".join(err.split())
        assert code == 6 and got is None, (more, err)
        assert f"no average is named <variable>/{name} " in text, err
        assert f"kept here are {'ExponentialMovingAverage, ' if case == 'r52_ag' else ''}" \
               f"{name}_1:" in text, err
    code, _, err = run_cli(["map", str(out / case), "--ema-name", name])
    assert code == 6, err
    code, err, got = _export(out, case, tmp_path, "--ema-name", f"{name}_1", "--allow-missing")
    assert code == 0, err
    assert got["w1"].tobytes() == truth[f"{case}:{tag}:w1"].tobytes()
    assert got["w0"].tobytes() == truth[f"{case}:{tag}:w0"].tobytes() if case != "r52_ag" \
        else got["w0"].tobytes() != truth[f"{case}:a:w0"].tobytes()
