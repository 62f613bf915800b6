"""TF1 EMA objects that each averaged every variable, with a Saver keeping only part of their
averages (review-21-attack-r53 F3, F1, F4).

- F3 (CRITICAL): objects ``slow`` and ``fast`` both ``apply()``'d over ``w0`` and ``w1``; a
  hand-built ``Saver(trainables + [fast.average(w0), slow.average(w1)])``. By the names each
  variable has one average, and the unstated export (``--strict`` too), ``--ema-name
  fast,slow`` and ``restore_ema`` gave a model mixed from two objects, exit 0. The ``.meta``'s
  update ops show both objects averaging both variables: exit 6 naming them.
- F1 (CRITICAL): objects ``ema/fast`` and ``fast`` over both, only ``ema/fast``'s averages saved
  (beside the weights, or alone): ``--ema-name fast`` read ``fast`` as the last part of
  ``ema/fast``'s name scope and answered with its averages, exit 0, while the graph shows an
  object named ``fast`` whose averages were not saved. Objects ``a/fast`` and ``b/fast``:
  ``--ema-name fast`` took the saved one's. Refused now; ``--ema-name ema/fast`` (``a/fast``)
  takes that object's averages.
- F4 (MINOR): such a refusal said "no EMA shadow is stored at all"; it names what is stored.
- r58 F1, F3, R3 (CRITICAL): the stated name read as another object's name scope, where the
  graph shows the named object's shadows: ``fast`` applied under ``variable_scope("ema")``
  (shadows ``ema/w0/fast``) beside ``ema/fast``, only ``ema/fast``'s saved (also by a renaming
  Saver): ``--ema-name fast`` took ``ema/fast``'s; ``fast`` applied in ``name_scope("ema")``
  (its scope ``ema/fast``), only its averages saved: ``--ema-name ema/fast`` took them.
- r58 F2, r65 F5, F9, F10 (MAJOR): one object ``fast`` applied under ``variable_scope("ema")``
  (shadows ``ema/w0/fast``), alone, beside ``slow`` at the root, or averaged again by ``slow``:
  refused, saying no EMA shadow is stored at all or that none of fast's is, and offering
  ``--ema-name ema/fast``, which is refused. Where two objects carry the name ``fast``
  (``a/`` and ``b/``, one's saved: r65 F1) such a key is not read as fast's average, and the
  refusal names the keys, the apply() that wrote them, an ``--ema-name`` only where it
  exports, and otherwise the ``Saver`` keyed by them.
- review-23-attack-r72 F2 (MAJOR): the whole model and ``fast`` applied inside
  ``variable_scope("model")`` (``model/model/w0/fast``), or ``fast`` under ``ema/`` alone or
  beside ``slow``: refused with the ``.meta`` whose update ops show the one ``apply()`` named
  ``fast`` writing each key from its variable. Exported now (unstated, ``--ema-name fast`` and
  the scope ``model/fast``), bit for bit; beside ``slow`` over one variable (r65 F11) too.

Made by real TensorFlow in a subprocess; truth ``sess.run(ema.average(v))`` at save time.
"""

from __future__ import annotations

import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
import contextlib

GRAPHS = {"slow_fast": ("slow", "fast"), "slashed": ("ema/fast", "fast"),
          "endings": ("a/fast", "b/fast"), "twins": ("ExponentialMovingAverage",) * 2,
          "fast_twins": ("fast", "fast"), "scoped_twins": ("ExponentialMovingAverage",) * 2,
          "vscoped": ("ema/fast", "fast"), "nscoped": ("fast", "ema/fast"),
          "nvscoped": ("fast", "ema/fast"), "solo": ("fast",), "vtowers": ("fast", "fast"),
          "vsroot": ("fast", "slow"), "vstacked": ("fast", "slow"), "rbtowers": ("fast", "fast"),
          "ntowers": ("fast", "fast"), "vmodel": ("fast",), "vspart": ("fast", "slow"),
          "vmodel2": ("fast",), "vmodel2twins": ("fast", "fast")}
# where each object's apply() runs: name_scope ("n", scope) or variable_scope ("v", scope)
WHERE = {"scoped_twins": (("n", "a"), None), "vscoped": (None, ("v", "ema")),
         "nscoped": (("n", "ema"), None), "nvscoped": (("n", "ema"), ("v", "v")),
         "solo": (("v", "ema"),), "vtowers": (("v", "a"), ("v", "b")),
         "vsroot": (("v", "ema"), None), "vstacked": (("v", "ema"), None),
         "rbtowers": (None, ("v", "b")), "ntowers": (("v", "a"), ("v", "b")),
         "vmodel": (("v", "model"),), "vspart": (("v", "ema"), None),
         "vmodel2": (("v", "model"),), "vmodel2twins": (("v", "model"), ("v", "model"))}
# ntowers: vtowers over variables whose last part is the other scope (a/net/b/fast: s23j)
# vmodel: the whole model under variable_scope("model"), fast applied there (r72 F2)
# vmodel2: the model built in one `with variable_scope("model")`, fast applied in a second
# (name scope model_1/fast: r75 F1); vmodel2twins: two objects named fast applied there,
# each in its own second entry (model_1/fast over w0, model_2/fast over w1)
VARS = {"ntowers": ("net/w", "net/b"), "vmodel": ("model/w0", "model/w1")}
for graph, names in GRAPHS.items():
    with tf.Graph().as_default():
        n0, n1 = VARS.get(graph, ("w0", "w1"))
        with (tf1.variable_scope("model") if graph.startswith("vmodel2")
              else contextlib.nullcontext()):
            w0 = tf1.get_variable(n0, initializer=tf.ones([3, 2]))
            w1 = tf1.get_variable(n1, initializer=tf.zeros([2]))
        update = tf.group(tf1.assign_add(w0, tf.ones([3, 2])), tf1.assign_add(w1, 2 * tf.ones([2])))
        objs = [tf1.train.ExponentialMovingAverage(d, name=n) for d, n in zip((0.9, 0.5), names)]
        for i, e in enumerate(objs):
            kind, scope = WHERE.get(graph, (None, None))[i] or (None, None)
            with tf.control_dependencies([update]), (
                    tf1.variable_scope(scope) if kind == "v" else tf1.name_scope(scope)):
                # vstacked: slow averages fast's averages (an EMA of an EMA, r65 F5)
                # vspart: slow averages w1 alone (r65 F11)
                # vmodel2twins: the first fast over w0, the second over w1
                update = e.apply([objs[0].average(w0), objs[0].average(w1)]
                                 if graph == "vstacked" and i else [w1]
                                 if graph == "vspart" and i else [[w0], [w1]][i]
                                 if graph == "vmodel2twins" else [w0, w1])
        first, second = objs[0], objs[-1]  # solo: the one object
        savers = {"split": tf1.train.Saver([w0, w1, second.average(w0), first.average(w1)]),
                  "first": tf1.train.Saver([w0, w1, first.average(w0), first.average(w1)]),
                  "alone": tf1.train.Saver({first.average_name(v): first.average(v)
                                            for v in (w0, w1)}),
                  "second": tf1.train.Saver([w0, w1, second.average(w0), second.average(w1)]),
                  "alone2": tf1.train.Saver({second.average_name(v): second.average(v)
                                             for v in (w0, w1)}),
                  # a renaming Saver (keys under model/): r58 F5
                  "renamed_split": tf1.train.Saver({"model/" + v.op.name: v for v in (
                      w0, w1, second.average(w0), first.average(w1))}),
                  "renamed_second": tf1.train.Saver({"model/" + v.op.name: v for v in (
                      w0, w1, second.average(w0), second.average(w1))}),
                  "renamed_first": tf1.train.Saver({"model/" + v.op.name: v for v in (
                      w0, w1, first.average(w0), first.average(w1))}),
                  "both": tf1.train.Saver()} if graph not in (
                      "vstacked", "vspart", "vmodel2", "vmodel2twins") else {
                      "both": tf1.train.Saver()}  # slow has no average of w0 itself
        with trained(tf, update) as s:
            for v in (w0, w1):
                truth[f"{graph}:raw:{v.op.name}"] = s.run(v)
                for i, (n, e) in enumerate(zip(names, objs)):
                    if e.average(v) is None:  # vstacked's slow: no average of v itself
                        continue
                    truth[f"{graph}:{n}:{v.op.name}"] = s.run(e.average(v))
                    truth[f"{graph}:{i}:{v.op.name}"] = s.run(e.average(v))
            for kind, saver in savers.items():
                os.makedirs(f"{out}/{graph}_{kind}")
                path = saver.save(s, f"{out}/{graph}_{kind}/model.ckpt")
                if graph in ("solo", "vtowers", "vsroot", "vstacked", "rbtowers"):  # each key
                    reader = tf1.train.load_checkpoint(path)
                    for k in reader.get_variable_to_shape_map():
                        truth[f"{graph}_{kind}:key:{k}"] = reader.get_tensor(k)
# vmodelpart: the whole model in one variable_scope("model"), w0 partitioned, fast applied
# there: TF saves w0's shadows under mangled keys model/w0/art_0/fast, one per part (r75 F2)
with tf.Graph().as_default():
    with tf1.variable_scope("model"):
        w0 = tf1.get_variable("w0", [4, 2], initializer=tf1.ones_initializer(),
                              partitioner=tf1.fixed_size_partitioner(2))
        w1 = tf1.get_variable("w1", initializer=tf.zeros([2]))
        update = tf.group(*[tf1.assign_add(p, tf.ones_like(p)) for p in w0],
                          tf1.assign_add(w1, 2 * tf.ones([2])))
        fast = tf1.train.ExponentialMovingAverage(0.9, name="fast")
        with tf.control_dependencies([update]):
            update = fast.apply([*w0, w1])
    with trained(tf, update) as s:
        for name, parts in (("model/w0", list(w0)), ("model/w1", [w1])):
            truth[f"vmodelpart:raw:{name}"] = np.concatenate([s.run(p) for p in parts])
            truth[f"vmodelpart:0:{name}"] = np.concatenate(
                [s.run(fast.average(p)) for p in parts])
        os.makedirs(f"{out}/vmodelpart_both")
        tf1.train.Saver().save(s, f"{out}/vmodelpart_both/model.ckpt")
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_objects_partly_saved")
    truth = run_tf1_script(SCRIPT, out)
    assert truth["slow_fast:slow:w0"].tobytes() != truth["slow_fast:fast:w0"].tobytes()
    return out, truth


def _export(run, tmp_path, *args):
    out = tmp_path / "x.npz"
    out.unlink(missing_ok=True)
    code, _, err = run_cli(["export", str(run), "--force", "--out", str(out), *args])
    if code != 0:
        assert not out.exists(), err
        return code, " ".join(err.split()), None
    import numpy as np

    with np.load(out) as got:
        return code, err, {k: got[k] for k in got.files}


# the objects offered, and those said refused (their averages not saved: review-22-attack-r66
# F4, every object was offered)
@pytest.mark.parametrize("case,names,refused", [
    ("slow_fast_split", ("fast", "slow"), ()), ("slashed_split", ("ema/fast", "fast"), ()),
    ("slashed_first", ("ema/fast",), ("fast",)), ("slashed_alone", ("ema/fast",), ("fast",)),
    ("endings_first", ("a/fast",), ("b/fast",))])
@pytest.mark.parametrize("extra", [[], ["--strict"], ["--allow-missing"]])
def test_unstated_averages_of_several_objects_are_refused(made, tmp_path, case, names,
                                                          refused, extra):
    """Each variable has averages of two objects in the .meta's graph: nothing recorded says
    which one an evaluation uses, so no unstated pairing (F3: it mixed fast's w0 with slow's
    w1, exit 0 --strict); the refusal names the objects, and offers those whose option the
    export accepts."""
    out, _ = made
    code, err, got = _export(out / case, tmp_path, *extra)
    assert code == 6 and got is None, err
    assert "EMA objects averaging" in err, err
    assert all(f"--ema-name {n} " in err and f"--ema-name {n} is refused" not in err
               for n in names), err
    assert all(f"--ema-name {n} is refused" in err for n in refused), err
    code, _, err = run_cli(["map", str(out / case)])
    assert code == 6, err


def test_two_objects_named_together_that_both_averaged_a_variable_are_refused(made, tmp_path):
    """--ema-name fast,slow joined fast's map (w0) and slow's (w1): both objects averaged
    both, so the join is a mixed model; refused, and the refusal of --ema-name fast no longer
    offers it."""
    out, _ = made
    code, err, got = _export(out / "slow_fast_split", tmp_path, "--ema-name", "fast,slow")
    assert code == 6 and got is None, err
    assert "w0 has averages of two of the EMA objects named" in err, err
    code, err, _ = _export(out / "slow_fast_split", tmp_path, "--ema-name", "fast")
    assert code == 6 and "fast,slow" not in err and "slow,fast" not in err, err


@pytest.mark.parametrize("case,name,tag", [("slow_fast_split", "fast", "fast"),
                                           ("slow_fast_split", "slow", "slow"),
                                           ("slashed_split", "fast", "fast"),
                                           ("slashed_split", "ema/fast", "ema/fast")])
def test_a_stated_object_takes_its_own_saved_average_and_the_rest_raw(made, tmp_path, case,
                                                                       name, tag):
    """The stated name takes that object's one saved average; the other variable, whose
    average of it was not saved, is refused, then raw with --allow-missing."""
    out, truth = made
    code, err, _ = _export(out / case, tmp_path, "--ema-name", name)
    assert code == 6 and "--allow-missing" in err, err
    code, err, got = _export(out / case, tmp_path, "--ema-name", name, "--allow-missing")
    assert code == 0, err
    graph = case.rsplit("_", 1)[0]
    kept = "w0" if tag == ("fast" if graph == "slow_fast" else "fast") else "w1"
    raw = "w1" if kept == "w0" else "w0"
    assert got[kept].tobytes() == truth[f"{graph}:{tag}:{kept}"].tobytes()
    assert got[raw].tobytes() == truth[f"{graph}:raw:{raw}"].tobytes()


@pytest.mark.parametrize("kind", ["first", "alone"])
def test_a_stated_name_is_not_read_as_another_objects_last_part(made, tmp_path, kind):
    """F1: objects ema/fast and fast, ema/fast's averages only saved: --ema-name fast took
    them (the last part of ema/fast's scope), exit 0 --strict. The graph shows an object named
    fast: its averages were not saved, refused (F4: saying the other object's are there);
    --ema-name ema/fast takes ema/fast's, bit for bit."""
    out, truth = made
    run = out / f"slashed_{kind}"
    code, err, got = _export(run, tmp_path, "--ema-name", "fast", "--strict")
    assert code == 6 and got is None, err
    assert "not in the checkpoint" in err, err
    if kind == "first":
        assert "no EMA shadow is stored at all" not in err, err
        assert "another EMA object's averages, none of fast's" in err, err
    code, _, err = run_cli(["map", str(run), "--ema-name", "fast"])
    assert code == 6, err
    code, err, got = _export(run, tmp_path, "--ema-name", "ema/fast", "--strict")
    assert code == 0, err
    for w in ("w0", "w1"):
        assert got[w].tobytes() == truth[f"slashed:ema/fast:{w}"].tobytes(), w


def test_a_name_two_objects_scopes_end_in_is_refused(made, tmp_path):
    """F1 (m4): objects a/fast and b/fast, a/fast's averages saved: --ema-name fast took
    them, though b/fast's scope ends in fast as well; refused naming both, and --ema-name
    a/fast takes a/fast's bit for bit."""
    out, truth = made
    run = out / "endings_first"
    code, err, got = _export(run, tmp_path, "--ema-name", "fast", "--strict")
    assert code == 6 and got is None, err
    assert "--ema-name a/fast or --ema-name b/fast" in err, err
    code, err, got = _export(run, tmp_path, "--ema-name", "a/fast", "--strict")
    assert code == 0, err
    for w in ("w0", "w1"):
        assert got[w].tobytes() == truth[f"endings:a/fast:{w}"].tobytes(), w


@pytest.mark.parametrize("case,name,second", [
    ("twins_second", "ExponentialMovingAverage", "ExponentialMovingAverage_1"),
    ("twins_alone2", "ExponentialMovingAverage", "ExponentialMovingAverage_1"),
    ("fast_twins_second", "fast", "fast_1"),
    ("scoped_twins_second", "ExponentialMovingAverage", "ExponentialMovingAverage_1")])
@pytest.mark.parametrize("extra", [["--strict"], ["--allow-missing"]])
def test_a_stated_name_does_not_take_its_twins_averages(made, tmp_path, case, name, second,
                                                        extra):
    """r58 F7 (F6: the first apply() in a name_scope): two objects of one name write
    w0/<name> and w0/<name>_1; with only the second one's saved, --ema-name <name> took its
    _1 averages, exit 0. The graph shows w0/<name> another apply()'s, not stored: refused;
    --ema-name <name>_1 takes the second object's averages bit for bit."""
    out, truth = made
    run = out / case
    code, err, got = _export(run, tmp_path, "--ema-name", name, *extra)
    assert code == 6 and got is None, err
    assert f"w0/{second} is another object's average of w0" in err, err
    code, _, err = run_cli(["map", str(run), "--ema-name", name])
    assert code == 6, err
    code, err, got = _export(run, tmp_path, "--ema-name", second, "--strict")
    assert code == 0, err
    graph = case.rsplit("_", 1)[0]
    for w in ("w0", "w1"):
        assert got[w].tobytes() == truth[f"{graph}:1:{w}"].tobytes(), w


@pytest.mark.parametrize("case", ["slow_fast_renamed_split", "slow_fast_renamed_second"])
@pytest.mark.parametrize("extra", [[], ["--strict"]])
def test_a_renamed_savers_averages_of_several_objects_are_refused(made, tmp_path, case, extra):
    """r58 F5: the r53 F3 split (and one object's averages alone) under a renaming Saver
    (keys model/...) went through the save op's pairing, which never asked which objects the
    .meta shows averaging each variable: a mixed model, exit 0. Refused as the un-renamed
    twin is; --ema-name fast --allow-missing still takes fast's saved average."""
    out, truth = made
    code, err, got = _export(out / case, tmp_path, *extra)
    assert code == 6 and got is None, err
    assert "EMA objects averaging" in err, err
    assert "--ema-name fast" in err and "--ema-name slow" in err, err
    code, _, err = run_cli(["map", str(out / case)])
    assert code == 6, err
    code, err, got = _export(out / case, tmp_path, "--ema-name", "fast", "--allow-missing")
    assert code == 0, err
    assert got["model/w0"].tobytes() == truth["slow_fast:fast:w0"].tobytes()


@pytest.mark.parametrize("case,name", [("vscoped_first", "fast"), ("vscoped_alone", "fast"),
                                       ("vscoped_renamed_first", "fast"),
                                       ("nscoped_first", "ema/fast"),
                                       ("nvscoped_first", "ema/fast")])
@pytest.mark.parametrize("extra", [["--strict"], ["--allow-missing"]])
def test_a_stated_name_is_the_one_its_objects_shadows_carry(made, tmp_path, case, name,
                                                            extra):
    """r58 F1, R3, F3: the object named is the one whose shadows carry the name (fast under
    variable_scope("ema") writes ema/w0/fast; ema/fast under variable_scope("v") writes
    v/w0/ema/fast), not the one whose name scope reads so; its averages were not saved, and
    the other object's were taken, exit 0. Refused, and no Python map pairs them."""
    from ckpt_tools.emamap import proven_pairs
    from ckpt_tools.errors import EmaError

    out, _ = made
    code, err, got = _export(out / case, tmp_path, "--ema-name", name, *extra)
    assert code == 6 and got is None, err
    code, _, err = run_cli(["map", str(out / case), "--ema-name", name])
    assert code == 6, err
    try:
        pairs = proven_pairs(out / case, ema_name=name)
    except EmaError:  # refused: as right as no pair
        pairs = {}
    assert pairs == {}


@pytest.mark.parametrize("case,name,obj", [
    ("vscoped_both", "fast", 1), ("vscoped_both", "ema/fast", 0),
    ("vscoped_first", "ema/fast", 0), ("vscoped_renamed_first", "ema/fast", 0),
    ("nscoped_both", "ema/fast", 1), ("nscoped_both", "fast", 0),
    ("nscoped_second", "ema/fast", 1), ("nvscoped_both", "fast", 0),
    # fast under variable_scope("ema"), slow over its averages: the update ops prove
    # ema/w0/fast fast's average of w0 (r65 F5, review-23-attack-r67 F1: was refused)
    ("vstacked_both", "fast", 0)])
def test_a_stated_name_takes_the_averages_its_objects_shadows_carry(made, tmp_path, case,
                                                                     name, obj):
    """The mirror cases of r58 F1, F3: the named object's averages saved, --ema-name takes
    them bit for bit, with the other object's saved beside them or not."""
    out, truth = made
    code, err, got = _export(out / case, tmp_path, "--ema-name", name, "--strict")
    assert code == 0, err
    graph = case.split("_")[0]
    prefix = "model/" if "renamed" in case else ""
    for w in ("w0", "w1"):
        assert got[prefix + w].tobytes() == truth[f"{graph}:{obj}:{w}"].tobytes(), w


# (case, options, graph's object whose averages are stored: its index; an --ema-name the
# refusal offers, which exports that object's averages, or None: the Saver route)
VSCOPED = [("solo_alone", ["--ema-name", "fast"], 0, "ema/fast"),
           ("vtowers_second", ["--ema-name", "fast"], 1, None),
           ("vtowers_second", ["--ema-name", "b/fast"], 1, None),
           ("vtowers_second", [], 1, None),
           # a root object named fast beside it, whose net/w/fast is not saved: r65 F1's twin
           ("rbtowers_second", ["--ema-name", "fast"], 1, None),
           ("rbtowers_second", ["--ema-name", "b/fast"], 1, None)]


@pytest.mark.parametrize("case,extra,obj,offer", VSCOPED)
def test_averages_stored_under_a_variable_scope_are_named_in_the_refusal(made, tmp_path, case,
                                                                         extra, obj, offer):
    """r58 F2, r65 F5, F9, F10: an object's averages stored as <scope>/W/<name> (apply() under
    a variable_scope) stay unread (two objects named fast under a/ and b/ make the name no
    proof: r65 F1), and the refusal said no shadow is stored, or none of fast's, offering
    names that were refused. It names the stored keys and the apply() that wrote them, and an
    --ema-name only where it exports the object's averages (bit for bit); otherwise a Saver
    keyed by those keys, each of which holds the named variable's ema.average(v)."""
    import re

    out, truth = made
    code, err, got = _export(out / case, tmp_path, *extra, "--strict")
    assert code == 6 and got is None, err
    for false in ("no EMA shadow is stored at all", "none of fast's", "probably frozen",
                  "--ema-name ema/fast or", "no EMA object averaged"):
        assert false not in err, err
    graph = case.split("_")[0]
    scope = {"vtowers": "b", "rbtowers": "b"}.get(graph, "ema")
    assert f"{scope}/w0/fast, {scope}/w1/fast written from w0, w1" in err or (
        f"{scope}/w1/fast, {scope}/w0/fast" in err), err
    if offer is not None:
        assert f"--ema-name {offer} (ema_name='{offer}' in Python) takes them" in err, err
        code, err, got = _export(out / case, tmp_path, "--ema-name", offer, "--strict")
        assert code == 0, err
        for w in ("w0", "w1"):
            assert got[w].tobytes() == truth[f"{graph}:{obj}:{w}"].tobytes(), w
        return
    assert "so no option of ckpt exports these averages" in err, err
    keyed = dict(re.findall(r"'([\w/]+)': <(\w+)>", err.partition("Saver(")[2]))
    assert sorted(keyed.values()) == ["w0", "w1"], err
    for key, w in keyed.items():  # each key TF stored holds that object's average of w
        assert truth[f"{case}:key:{key}"].tobytes() == truth[f"{graph}:{obj}:{w}"].tobytes()
        assert truth[f"{case}:key:{key}"].tobytes() != truth[f"{graph}:raw:{w}"].tobytes()


@pytest.mark.parametrize("case", ["vtowers_both", "vtowers_second"])
def test_the_unstated_refusal_beside_scoped_averages_offers_only_what_exports(made, tmp_path,
                                                                             case):
    """r65 F10, F1: the unstated refusal of several objects offered --ema-name ema/fast (and
    a/fast, b/fast), the scopes of objects whose averages sit under a variable_scope, each
    refused; it offers only a name that exports and names the keys (two objects named fast:
    none)."""
    import re

    out, truth = made
    code, err, got = _export(out / case, tmp_path, "--strict")
    assert code == 6 and got is None, err
    offered = re.findall(r"\b(?:pass|or) --ema-name (\S+)", err) + re.findall(
        r"--ema-name (\S+) \(ema_name=", err)
    assert offered == [], err
    assert "written from w0" in err or "written from w1" in err, err


# (case, options, the graph's object whose averages each weight must hold)
SCOPE_READ = [("solo_both", [], 0), ("solo_both", ["--ema-name", "fast"], 0),
              ("solo_both", ["--ema-name", "ema/fast"], 0),
              ("vsroot_both", ["--ema-name", "fast"], 0),
              ("vsroot_both", ["--ema-name", "ema/fast"], 0),
              ("vsroot_both", ["--ema-name", "slow"], 1),
              ("vmodel_both", [], 0), ("vmodel_both", ["--ema-name", "fast"], 0),
              ("vmodel_both", ["--ema-name", "model/fast"], 0),
              ("vmodel_both", ["--averages-only"], 0),
              ("vspart_both", ["--ema-name", "fast"], 0),
              ("vspart_both", ["--ema-name", "ema/fast"], 0),
              ("vmodel2_both", [], 0), ("vmodel2_both", ["--ema-name", "fast"], 0),
              ("vmodelpart_both", [], 0), ("vmodelpart_both", ["--ema-name", "fast"], 0)]


@pytest.mark.parametrize("case,extra,obj", SCOPE_READ)
def test_one_objects_averages_under_a_variable_scope_are_exported(made, tmp_path, case,
                                                                   extra, obj):
    """review-23-attack-r72 F2: fast applied inside variable_scope("model") (the whole model
    there: model/model/w0/fast) or "ema", alone or beside slow (over both variables, or over
    w1 alone: r65 F11 exported fast's w0 and raw w1), Saver(): every option was refused,
    though the .meta's update ops show the one apply() named fast writing each key from its
    variable and the save op wrote each from that shadow. Exported now, each weight that
    object's ema.average(v) bit for bit (slow's where stated). So where the model was built
    in one ``with variable_scope("model")`` and fast applied in a second (vmodel2: name scope
    model_1/fast; review-24-attack-r75 F1, refused for every option), and where a variable
    there is partitioned (vmodelpart: TF saves its shadows under mangled keys
    model/w0/art_0/fast, so no key was read and w1 went out raw: r75 F2)."""
    out, truth = made
    code, err, got = _export(out / case, tmp_path, *extra, "--strict")
    assert code == 0, err
    graph = case.split("_")[0]
    for w in ("model/w0", "model/w1") if graph.startswith("vmodel") else ("w0", "w1"):
        if f"{graph}:{obj}:{w}" not in truth:  # vspart's slow: no average of w0
            assert got[w].tobytes() == truth[f"{graph}:raw:{w}"].tobytes(), w
            continue
        assert got[w].tobytes() == truth[f"{graph}:{obj}:{w}"].tobytes(), (w, err)
        assert got[w].tobytes() != truth[f"{graph}:raw:{w}"].tobytes(), w


@pytest.mark.parametrize("case,extra", [
    ("vmodel2twins_both", []), ("vmodel2twins_both", ["--ema-name", "fast"]),
    ("vmodel2twins_both", ["--ema-name", "model/fast"]), ("vmodel2_both", ["--no-meta"])])
def test_a_reentered_model_scopes_averages_of_two_objects_are_refused(made, tmp_path, case,
                                                                       extra):
    """review-24-attack-r75 F1's hostile twins: two objects named fast, each applied in another
    entry of ``variable_scope("model")`` (model/model/w0/fast is one's, model/model/w1/fast
    the other's: no one object's pair), and vmodel2 without its .meta: refused, never two
    objects' averages as one's."""
    out, _ = made
    code, err, got = _export(out / case, tmp_path, *extra, "--strict")
    assert code == 6 and got is None, err


@pytest.mark.parametrize("case", ["vsroot_both", "vspart_both"])
def test_the_unstated_refusal_offers_both_objects_beside_scoped_averages(made, tmp_path,
                                                                         case):
    """r65 F10: beside slow at the root, fast's averages under variable_scope("ema") are read
    (r72 F2): w1 has two objects' averages, so the unstated export is refused, offering
    --ema-name fast and slow (each exports: see above); and without the .meta the keys prove
    nothing: refused, never fast's averages by a guess."""
    out, _ = made
    code, err, got = _export(out / case, tmp_path, "--strict")
    assert code == 6 and got is None, err
    assert "--ema-name fast" in err and "--ema-name slow" in err, err
    code, err, got = _export(out / "vmodel_both", tmp_path, "--no-meta", "--strict")
    assert code == 6 and got is None, err


@pytest.mark.parametrize("case,name", [
    ("ntowers_first", "b/fast"), ("ntowers_alone", "b/fast"), ("vtowers_first", "1/fast"),
    ("vtowers_alone", "1/fast"), ("vtowers_alone", "0/fast"),
    ("ntowers_alone", "fast"), ("ntowers_alone", "net/b/fast")])  # two objects; 3 parts
@pytest.mark.parametrize("meta", [[], ["--no-meta"]])
def test_a_stated_name_never_straddles_a_variables_own_name(made, tmp_path, case, name, meta):
    """s23e AB_0only: fast under variable_scope("a") and ("b") over net/w, net/b, only a's
    averages saved. A shadow a/<v>/fast was read as the stated name's key by cutting
    len(<v>) characters off it (a/net/b/fast as "<a/net>/b/fast", a/w1/fast as
    "<a/w>1/fast"), so --ema-name b/fast --allow-missing, whose object wrote no saved key,
    took a/fast's average for net/b, exit 0. Refused now, or raw weights: never a's
    average; --ema-name a/fast still answers with a's averages where it answers."""
    out, truth = made
    graph = case.split("_")[0]
    weights = ("net/w", "net/b") if graph == "ntowers" else ("w0", "w1")
    for extra in (["--allow-missing"], []):
        code, err, got = _export(out / case, tmp_path, "--ema-name", name, *extra, *meta)
        assert code in (0, 6), err
        for w in weights if got is not None else ():
            assert got[w].tobytes() == truth[f"{graph}:raw:{w}"].tobytes(), (w, err)
    code, err, got = _export(out / case, tmp_path, "--ema-name", "a/fast", *meta)
    assert code in (0, 6), err
    for w in weights if got is not None else ():  # the object that wrote the keys
        assert got[w].tobytes() == truth[f"{graph}:0:{w}"].tobytes(), (w, err)
