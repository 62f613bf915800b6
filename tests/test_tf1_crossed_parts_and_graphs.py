"""Two default-named TF1 ``ExponentialMovingAverage`` objects applied in crossed order where the
``.meta``'s update ops were read per checkpoint key or not read whole (review-19-attack-r43):

- F1 (CRITICAL): a partitioned variable. TF numbers averages per *part*
  (``w/part_0/ExponentialMovingAverage_1``) and stores the parts' shadows as slices of one key
  (``w/ExponentialMovingAverage_1``), so two parts of one key may be two objects' averages. The
  crossed/split rules read the update ops by key, saw one scope per key, and ``--ema-name``
  (even the one the refusal offered) exported one object's part_0 with the other's part_1,
  exit 0 --strict. They read each part now.
- F2 (CRITICAL): a SavedModel with ``train`` and ``serve`` meta graphs: the function library
  (a v2 ``tf.cond``, a ``tf.function``) was read for one-graph SavedModels only, so the
  ``apply()`` run there was not seen and a name mixing two objects was "proven". Every meta
  graph's library is read now.
- F3 (CRITICAL): more function calls than ``graph_def`` reads (:data:`_MAX_CALLS`) dropped the
  rest silently, with the same mixed export; hitting the cap now leaves the reading not whole,
  and a name of a family stored at two levels is refused (``--no-meta`` reads the names).

Made by real TensorFlow in a subprocess; truth ``ema.average(v)`` (value and name) at save time.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import E, run_tf1_script

SCRIPT = r'''
def in_context(ctx, make):
    """make() (an op) run in the graph, in a v2 cond's branch or in a tf.function."""
    if ctx == "graph":
        return make()
    if ctx == "v2cond":
        def yes():
            with tf.control_dependencies([make()]):
                return tf.constant(1)
        return tf.cond(tf.constant(True), yes, lambda: tf.constant(0))

    @tf.function
    def fn():
        make()
        return tf.constant(1)
    return fn()


def record(case, objs, allv, s):
    for tag, e in objs.items():
        for n, var in allv.items():
            avg = e.average(var)
            if avg is not None:
                truth[f"{case}:{tag}:{n}"] = s.run(avg)
                truth[f"{case}:{tag}:{n}:name"] = np.array(avg.op.name)


tf1.enable_control_flow_v2()
# F1: w [4, 2] in two parts (p0, p1) and v [3]
PARTS = {"pvv": "a:p0 b:v b:p1,p0 a:p1,v", "pr": "b:p1 a:p0,p1,v b:p0,v",
         "ps": "a:p0 b:p1 b:p0 a:p1 a:v b:v", "pok": "a:p0,p1,v b:p0,p1,v",
         # one object over one part only, the other over all (review-20-attack-r48 F3)
         "pa1": "a:p0 b:p0,p1,v", "pa4": "b:p1 a:p0,p1,v",
         # one object applied in two calls over w's parts (review-20-attack-r52 F1)
         "q1": "a:p0 a:p1,v"}
for case, spec in PARTS.items():
    with tf.Graph().as_default():
        w = tf1.get_variable("w", [4, 2], initializer=tf1.ones_initializer(),
                             partitioner=tf1.fixed_size_partitioner(2))
        v = tf1.get_variable("v", initializer=tf.zeros([3]))
        parts = list(w)
        allv = {"p0": parts[0], "p1": parts[1], "v": v}
        update = tf.group(*[p.assign_add((i + 1) * tf.ones_like(p)) for i, p in enumerate(parts)],
                          v.assign_add(5 * tf.ones([3])))
        objs = {"a": tf1.train.ExponentialMovingAverage(0.5),
                "b": tf1.train.ExponentialMovingAverage(0.9)}
        for each in spec.split():
            tag, names = each.split(":")
            with tf.control_dependencies([update]):
                update = objs[tag].apply([allv[n] for n in names.split(",")])
        saver = tf1.train.Saver()
        with trained(tf, update) as s:
            os.makedirs(f"{out}/{case}")
            saver.save(s, f"{out}/{case}/model.ckpt")
            record(case, objs, allv, s)

# F2: a SavedModel of two meta graphs (train, serve); F3: a .meta with more conds after
GRAPHS = {"sms": "a:w0@v2cond b:w1 b:w0 a:w1", "smx": "a:w0@fn b:w0w1 a:w1",
          "smok": "a:w0w1 b:w0w1@fn", "many": "a:w0@v2cond b:w1 b:w0 a:w1",
          "manyok": "a:w0w1@v2cond b:w0w1"}
for case, spec in GRAPHS.items():
    with tf.Graph().as_default():
        w0 = tf1.get_variable("w0", initializer=tf.ones([3]))
        w1 = tf1.get_variable("w1", initializer=tf.zeros([2]))
        allv = {"w0": w0, "w1": w1}
        update = tf.group(w0.assign_add(tf.ones([3])), w1.assign_add(2 * tf.ones([2])))
        objs = {"a": tf1.train.ExponentialMovingAverage(0.5),
                "b": tf1.train.ExponentialMovingAverage(0.9)}
        for each in spec.split():
            each, _, ctx = each.partition("@")
            tag, names = each.split(":")
            vs = [allv[n] for n in ("w0", "w1") if n in names]
            with tf.control_dependencies([update]):
                update = in_context(ctx or "graph", lambda e=objs[tag], vs=vs: e.apply(vs))
        for i in range(4 if case.startswith("many") else 0):  # conds made after the apply()s
            x = tf.cond(tf.constant(i > 1), lambda i=i: tf.constant(float(i)),
                        lambda: tf.constant(0.0))
        saver = tf1.train.Saver()
        with trained(tf, update) as s:
            if case.startswith("many"):
                os.makedirs(f"{out}/{case}")
                saver.save(s, f"{out}/{case}/model.ckpt")
            else:
                b = tf1.saved_model.Builder(f"{out}/{case}")
                b.add_meta_graph_and_variables(s, ["train"])
                b.add_meta_graph(["serve"])
                b.save()
            record(case, objs, allv, s)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("crossed_parts_and_graphs")
    return out, run_tf1_script(SCRIPT, out)


def _refused(case_dir, extra, tmp_path) -> str:
    """The one-line refusal (exit 6, nothing written) of export and map of ``case_dir``."""
    target = tmp_path / "w.npz"
    texts = []
    for command in ("export", "map"):
        args = ["--out", str(target)] if command == "export" else []
        code, _, err = run_cli([command, str(case_dir), *extra, *args])
        assert code == 6 and not target.exists(), err
        assert len(err.strip().splitlines()) == 1, err
        text = " ".join(err.split())
        assert "is one apply()'s" not in text and " decides" not in text, err
        texts.append(text)
    return texts[0]


NAMES = [[], ["--ema-name", E], ["--ema-name", f"{E}_1"], ["--ema-name", E, "--strict"],
         ["--ema-name", f"{E}_1", "--allow-missing"]]


@pytest.mark.parametrize("case", ["pvv", "pr", "ps"])
@pytest.mark.parametrize("extra", NAMES)
def test_partitioned_parts_of_two_objects_are_refused(made, tmp_path, case, extra):
    """Each part's averages are numbered apart (TF's names at save time): a key's part_0 and
    part_1 are two objects' averages, so no name is one object's (F1)."""
    out, truth = made
    # TF's names: a's part_0 and part_1 averages carry different names (so do b's)
    assert str(truth[f"{case}:a:p0:name"]) == f"w/part_0/{E}"
    assert str(truth[f"{case}:a:p1:name"]) == f"w/part_1/{E}_1"
    text = _refused(out / case, extra, tmp_path)
    assert "EMA object's" in text and "--raw" in text, text
    assert "part_" in text, text  # the part shadows the update ops show


def test_partitioned_restore_ema_of_crossed_parts_is_refused(made, tmp_path):
    """restore-ema the same (it wrote w = [b's part_0 | a's part_1] before)."""
    out, _truth = made
    code, _, err = run_cli(["restore-ema", str(out / "pvv"), "--ema-name", f"{E}_1",
                            "--strict", "--out", str(tmp_path / "r")])
    assert code == 6 and not (tmp_path / "r").exists(), err


@pytest.mark.parametrize("name,tag", [(E, "a"), (f"{E}_1", "b")])
def test_partitioned_parts_of_one_object_each_are_picked_by_name(made, tmp_path, name, tag):
    """a.apply([p0, p1, v]); b.apply([p0, p1, v]): each name is one object's, bit for bit."""
    out, truth = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / "pok"), "--ema-name", name, "--strict",
                            "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        want = np.concatenate([truth[f"pok:{tag}:p0"], truth[f"pok:{tag}:p1"]])
        assert z["w"].tobytes() == want.tobytes()
        assert z["v"].tobytes() == truth[f"pok:{tag}:v"].tobytes()


@pytest.mark.parametrize("case", ["sms", "smx"])
@pytest.mark.parametrize("extra", NAMES[:4])
def test_two_meta_graph_savedmodel_reads_each_graphs_functions(made, tmp_path, case, extra):
    """a.apply([w0]) in a v2 cond or a tf.function, then b's and a's crossed, saved with train
    and serve meta graphs: each name takes one key of a's and one of b's (F2)."""
    out, truth = made
    assert str(truth[f"{case}:a:w0:name"]) == f"w0/{E}"
    assert str(truth[f"{case}:b:w1:name"]) == f"w1/{E}"
    text = _refused(out / case, extra, tmp_path)
    assert " in cond_true_" in text or " in __inference_fn_" in text, text


@pytest.mark.parametrize("name,tag", [(E, "a"), (f"{E}_1", "b")])
def test_two_meta_graph_savedmodel_apart_objects_are_picked_by_name(made, tmp_path, name, tag):
    """b.apply() in a tf.function, not crossed: each name its object's, bit for bit."""
    out, truth = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / "smok"), "--ema-name", name, "--strict",
                            "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        for var in ("w0", "w1"):
            assert str(truth[f"smok:{tag}:{var}:name"]) == f"{var}/{name}"
            assert z[var].tobytes() == truth[f"smok:{tag}:{var}"].tobytes(), var


@pytest.fixture()
def few_calls(monkeypatch):
    """graph_def reads at most 4 function calls (2 of the 4 later conds: the apply()'s cond is
    left unread, as 4096 calls leave the rest of a larger graph's)."""
    from ckpt_tools.formats import graph_def

    monkeypatch.setattr(graph_def, "_MAX_CALLS", 4)


@pytest.mark.parametrize("case", ["many", "manyok"])
@pytest.mark.parametrize("extra", NAMES[:4])
def test_functions_left_unread_prove_no_name(made, tmp_path, few_calls, case, extra):
    """Past the cap the reading is not whole: no name of a family stored at two levels is
    proven (F3), crossed or not; the refusal names --no-meta."""
    out, truth = made
    assert str(truth["many:a:w0:name"]) == f"w0/{E}"
    assert str(truth["many:b:w1:name"]) == f"w1/{E}"
    text = _refused(out / case, extra, tmp_path)
    assert "than are read" in text and "--no-meta" in text, text


def test_functions_left_unread_then_no_meta_reads_the_names(made, tmp_path, few_calls):
    """--no-meta with a stated name reads the checkpoint's names (the caller's statement)."""
    out, truth = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(out / "manyok"), "--no-meta", "--ema-name", E,
                            "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        for var in ("w0", "w1"):
            assert z[var].tobytes() == truth[f"manyok:a:{var}"].tobytes(), var


@pytest.mark.parametrize("case", ["pa1", "pa4"])
def test_a_key_of_two_objects_parts_is_refused_unstated(made, tmp_path, case):
    """a.apply([w/part_0]), then b.apply([w/part_0, w/part_1, v]) (or b over part_1, then a
    over all): w/ExponentialMovingAverage holds a's part_0 and b's part_1 (TF's names at
    save time), and export with no --ema-name exported it as w's average, exit 0 --strict
    (review-20-attack-r48 F3). Refused now."""
    out, truth = made
    one, two = "a", "b"  # pa4: b.apply([w/part_1]), then a.apply([w/part_0, w/part_1, v])
    assert str(truth[f"{case}:{one}:p0:name"]) == f"w/part_0/{E}"
    assert str(truth[f"{case}:{two}:p1:name"]) == f"w/part_1/{E}"
    assert f"{case}:{one}:p1" not in truth or f"{case}:{two}:p0" not in truth
    target = tmp_path / "w.npz"
    for extra in (["--strict"], ["--allow-missing"]):
        code, _, err = run_cli(["export", str(out / case), *extra, "--out", str(target)])
        if code == 0:  # then w is one object's average of both parts, or raw
            with np.load(target) as z:
                got = z["w"]
            target.unlink()
            assert not (got[:2].tobytes() == truth[f"{case}:{one}:p0"].tobytes()
                        and got[2:].tobytes() == truth[f"{case}:{two}:p1"].tobytes()), extra
        else:
            assert code == 6 and not target.exists(), err
    code, _, err = run_cli(["export", str(out / case), "--strict", "--out", str(target)])
    assert code == 6 and "w/ExponentialMovingAverage" in err, err


def test_one_object_over_parts_in_two_calls_names_no_meta(made, tmp_path):
    """a.apply([w/part_0]); a.apply([w/part_1, v]): one object, two apply() calls, which the
    graph records exactly as two objects' one call each, so w's key stays refused; the
    refusal named no option, though --no-meta (the user's word that one object made both)
    reads it right (review-20-attack-r52 F1). Named now, and only where no part shows two
    objects (pa1, pa4: a part averaged by both)."""
    out, truth = made
    assert [str(truth[f"q1:a:{n}:name"]) for n in ("p0", "p1", "v")] == [
        f"w/part_0/{E}", f"w/part_1/{E}", f"v/{E}"]
    target = tmp_path / "w.npz"
    for extra in ([], ["--ema-name", E], ["--allow-missing"]):
        code, _, err = run_cli(["export", str(out / "q1"), *extra, "--strict",
                                "--out", str(target)])
        text = " ".join(err.split())
        assert code == 6 and not target.exists(), err
        assert "--no-meta reads it by its name, right only where one EMA object" in text, err
    code, _, err = run_cli(["export", str(out / "q1"), "--no-meta", "--strict",
                            "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        want = np.concatenate([truth["q1:a:p0"], truth["q1:a:p1"]])
        assert z["w"].tobytes() == want.tobytes() and z["v"].tobytes() == truth[
            "q1:a:v"].tobytes()
    target.unlink()
    for case in ("pa1", "pa4"):
        code, _, err = run_cli(["export", str(out / case), "--strict", "--out", str(target)])
        assert code == 6 and "--no-meta" not in err and not target.exists(), err
