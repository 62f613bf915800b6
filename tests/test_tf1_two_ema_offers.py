"""A TF1 trainer with two EMA objects: the default one over ``w``, ``b`` and a hand-updated
statistic ``c`` (in ``moving_average_variables``, as a batch norm's), and ``slow`` over ``w``
and ``b`` only. Every option a refusal names is run here and must work, bit for bit against
``ema.average(v)`` read from the session at save time (review-21-user-u23 F1, F2):

* a plain ``Saver()``: ``--ema-name slow``'s refusal (``c`` has no ``slow`` average) offered
  ``--ema-name slow,ExponentialMovingAverage``, itself refused (``w`` has averages of both);
* a training ``Saver(ema.variables_to_restore())``: the ``ExponentialMovingAverage`` keys
  hold raw values; the unstated refusal offered ``--ema-name ExponentialMovingAverage`` (refused
  again) and ``--ema-name slow``'s named no way out, while ``--ema-name slow --exclude c``
  exports ``slow``'s averages.
"""

from __future__ import annotations

import re
import shlex

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
CASES = ("plain", "vtr")
for case in CASES:
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        w = tf1.get_variable("w", [3, 3])
        b = tf1.get_variable("b", [3])
        c = tf1.get_variable("c", [3], initializer=tf1.zeros_initializer(), trainable=False,
                             collections=[tf1.GraphKeys.GLOBAL_VARIABLES,
                                          tf1.GraphKeys.MOVING_AVERAGE_VARIABLES])
        x = tf.constant(np.ones((2, 3), "float32"))
        h = tf.matmul(x, w) + b
        loss = tf.reduce_sum(h ** 2)
        with tf.control_dependencies([tf1.assign(c, 0.9 * c + 0.1 * h[0])]):
            train = tf1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=gs)
        ema = tf1.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([train]):
            step = ema.apply([w, b, c])
        slow = tf1.train.ExponentialMovingAverage(0.9, name="slow")
        with tf.control_dependencies([step]):
            step = slow.apply([w, b])
        saver = tf1.train.Saver(ema.variables_to_restore()) if case == "vtr" else \
            tf1.train.Saver()
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(step)
            os.makedirs(f"{out}/{case}")
            saver.save(s, f"{out}/{case}/model.ckpt", global_step=gs)
            truth = {f"{case}:raw:{v.op.name}": s.run(v.read_value()) for v in (w, b, c)}
            truth.update({f"{case}:ema:{v.op.name}": s.run(ema.average(v).read_value())
                          for v in (w, b, c)})
            truth.update({f"{case}:slow:{v.op.name}": s.run(slow.average(v).read_value())
                          for v in (w, b)})
        np.savez(f"{out}/{case}.npz", **truth)
# several objects over chosen variables, in apply order (review-21-attack-r60 F5, F7, F9,
# F11, F12): a plain Saver(), the first object's Saver(variables_to_restore()) ("vtr"), or
# "mixvtr": w saved as that Saver saves it beside slow's average of w, b and c plainly
OBJECTS = {
    "fastnum": ("plain", [("ExponentialMovingAverage", "wbc"), ("fast", "w"), ("fast", "wb")]),
    "disjoint": ("plain", [("ExponentialMovingAverage", "bc"), ("slow", "w")]),
    "vtr3": ("vtr", [("ExponentialMovingAverage", "wbc"), ("slow", "w"), ("fast", "c")]),
    "fast2c": ("plain", [("fast", "wb"), ("fast", "c")]),
    "mixvtr": ("mixvtr", [("ExponentialMovingAverage", "wbc"), ("slow", "w")]),
    # w/fast (first), b/fast_1 (an object named fast_1), w/fast_1 (the second fast)
    "twin": ("plain", [("fast", "w"), ("fast_1", "b"), ("fast", "w")]),
    # slow over w, b and fast over b, c: b has both (review-22-attack-r62 F1)
    "overlap": ("plain", [("slow", "wb"), ("fast", "bc")]),
    # review-22-attack-r66 F4: a renamed, suffixed training Saver(variables_to_restore())
    # ({"model/" + k + "/x": v}); the raw weights under <v>/raw beside the first's averages
    "rensuf": ("rensuf", [("ExponentialMovingAverage", "wbc"), ("slow", "w")]),
    "rawplusavg": ("rawplusavg", [("ExponentialMovingAverage", "wbc"), ("slow", "w")]),
    # review-23-attack-r68 F3: five objects, the fifth (z) the only one over every variable
    "five": ("plain", [("a1", "w"), ("a2", "w"), ("a3", "w"), ("a4", "w"), ("z", "wbc")]),
    # review-23-attack-r68 F2: three objects each over two of w, b, c
    "ovl3": ("plain", [("fast", "wb"), ("slow", "bc"), ("mid", "cw")]),
    # its hostile twins: fast applied again under variable_scope('s') over c (s/c/fast, its
    # average of c: "s" and the index of the object applied again), or a second object
    # named fast applied there
    "ovl3again": ("plain", [("fast", "wb"), ("slow", "bc"), ("mid", "cw"), ("s", "c", 0)]),
    "ovl3fast2": ("plain", [("fast", "wb"), ("slow", "bc"), ("mid", "cw"), ("s", "c", "fast")]),
    # review-23-attack-r68 F5: fast over every averaged variable, c trained, averaged by none
    "fastall": ("plain", [("fast", "wb"), ("slow", "w")]),
    # review-23-attack-r68 F6: a renamed training Saver({"net/" + k: v}) of the first's
    # variables_to_restore() beside slow over b, c
    "vtrren": ("vtrren", [("ExponentialMovingAverage", "wb"), ("slow", "bc")]),
    # review-24-attack-r73 F2: two default-named objects over w, b and b, c (c's second
    # object's average named c/ExponentialMovingAverage) and slow over c, w
    "twodef": ("plain", [("ExponentialMovingAverage", "wb"), ("ExponentialMovingAverage", "bc"),
                         ("slow", "cw")]),
    # review-24-attack-r73 F1, F7: ovl3 and its twins behind a renaming Saver({"model/" +
    # v.op.name: v}) ("ren"); fast over w, b, c with its average of c left out of the Saver,
    # renamed ("rendrop") and plain ("drop")
    "renovl3": ("ren", [("fast", "wb"), ("slow", "bc"), ("mid", "cw")]),
    "renagain": ("ren", [("fast", "wb"), ("slow", "bc"), ("mid", "cw"), ("s", "c", 0)]),
    "renfast2": ("ren", [("fast", "wb"), ("slow", "bc"), ("mid", "cw"), ("s", "c", "fast")]),
    "rendrop": ("rendrop", [("fast", "wbc"), ("slow", "bc"), ("mid", "cw")]),
    "drop": ("drop", [("fast", "wbc"), ("slow", "bc"), ("mid", "cw")]),
    # review-25-attack-r80 F4: fast over w, b and an object named x/fast over b, c (its
    # shadows b/x/fast, c/x/fast, apply() scope x/fast) behind the renaming Saver
    "renxfast": ("ren", [("fast", "wb"), ("x/fast", "bc")]),
    # review-25-attack-r80 F3: renfast2 with the second fast's apply() in a tf.cond (cond v2:
    # its scope reads 'fast'), and its plain-Saver twin
    "rencond2": ("ren", [("fast", "wb"), ("slow", "bc"), ("mid", "cw"), ("s", "c", "fast", 1)]),
    "cond2": ("plain", [("fast", "wb"), ("slow", "bc"), ("mid", "cw"), ("s", "c", "fast", 1)]),
    # review-25-attack-r80 F1, F2: ONE object, fast applied again under variable_scope('s')
    # over c (s/c/fast) beside a model variable s/c, behind the renaming Saver
    "rensc": ("rensc", [("fast", "wb"), ("s", "c", 0)]),
    # review-28-attack-r106 F3: the default object and slow, both over w, b, behind the
    # renaming Saver
    "rentwo": ("ren", [("ExponentialMovingAverage", "wb"), ("slow", "wb")]),
}
for case, (kind, objects) in OBJECTS.items():
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        V = {"w": tf1.get_variable("w", [3, 3]), "b": tf1.get_variable("b", [3]),
             "c": tf1.get_variable("c", [3])}
        x = tf.constant(np.ones((2, 3), "float32"))
        h = tf.matmul(x, V["w"]) + V["b"] + 2.0 * V["c"]
        if kind == "rensc":  # a model variable s/c beside c, trained too
            with tf1.variable_scope("s"):
                V["sc"] = tf1.get_variable("c", [3])
            h = h + V["sc"]
        loss = tf.reduce_sum(h ** 2)
        step = tf1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=gs)
        emas = []
        for i, (n, vs, *again) in enumerate(objects):
            scope = tf1.variable_scope(n) if again else contextlib.nullcontext()
            e = emas[again[0]][0] if again and isinstance(again[0], int) else \
                tf1.train.ExponentialMovingAverage([0.5, 0.9, 0.99, 0.8, 0.7][i],
                                                   name=again[0] if again else n)
            with tf.control_dependencies([step]), scope:
                step = tf.cond(tf.constant(True), lambda e=e, vs=vs: e.apply(
                    [V[k] for k in vs]), tf.no_op) if again[1:] else e.apply([V[k] for k in vs])
            emas.append((e, vs))
        first = emas[0][0]
        kept = [v for v in tf1.global_variables()
                if not kind.endswith("drop") or v is not first.average(V["c"])]
        saver = tf1.train.Saver() if kind == "plain" else tf1.train.Saver(
            {"model/" + v.op.name: v for v in kept}) if kind in ("ren", "rendrop", "rensc") else \
            tf1.train.Saver(kept) if kind == "drop" else tf1.train.Saver(
            {f"net/{k}": v for k, v in first.variables_to_restore().items()}
        ) if kind == "vtrren" else tf1.train.Saver(
            first.variables_to_restore()) if kind == "vtr" else tf1.train.Saver(
            {f"model/{k}/x": v for k, v in first.variables_to_restore().items()}
        ) if kind == "rensuf" else tf1.train.Saver({
            **{f"{k}/raw": v for k, v in V.items()}, "global_step": gs,
            **{first.average_name(v): first.average(v) for v in V.values()}}
        ) if kind == "rawplusavg" else tf1.train.Saver({
                "w/ExponentialMovingAverage": V["w"], "w/slow": emas[1][0].average(V["w"]),
                "b": V["b"], "b/ExponentialMovingAverage": first.average(V["b"]),
                "c": V["c"], "c/ExponentialMovingAverage": first.average(V["c"]),
                "global_step": gs})
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(step)
            os.makedirs(f"{out}/{case}")
            saver.save(s, f"{out}/{case}/model.ckpt", global_step=gs)
            truth = {f"{case}:raw:{k}": s.run(v.read_value()) for k, v in V.items()}
            truth.update({f"{case}:o{i}:{k}": s.run(e.average(V[k]).read_value())
                          for i, (e, vs) in enumerate(emas) for k in vs})
            if kind == "rensuf":  # exported under its keys' names
                truth.update({f"{t.rpartition(':')[0]}:model/{t.rpartition(':')[2]}/"
                              f"ExponentialMovingAverage/x": a for t, a in list(truth.items())})
        np.savez(f"{out}/{case}.npz", **truth)
np.savez(f"{out}/truth.npz", **{k: v for c in (*CASES, *OBJECTS)
                                for k, v in np.load(f"{out}/{c}.npz").items()})
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_two_ema_offers")
    return out, run_script(SCRIPT, out)


def _refused(path, args: list[str], tmp_path) -> str:
    code, _, err = run_cli(["export", str(path), *args, "--out", str(tmp_path / "no.npz")])
    assert code == 6 and not (tmp_path / "no.npz").exists(), err
    return " ".join(err.split())


def _exported(path, args: list[str], tmp_path) -> dict[str, np.ndarray]:
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(path), *args, "--out", str(out), "--force"])
    assert code == 0, (args, err)
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("meta", [[], ["--no-meta"]], ids=["meta", "no-meta"])
def test_the_ema_name_refusal_offers_only_what_works(made, tmp_path, meta):
    """F1: every weight has averages of both objects, so ``--ema-name slow,Exponential
    MovingAverage`` is refused: the ``--ema-name slow`` refusal no longer offers it, and
    each option it names (``--ema-name ExponentialMovingAverage``, ``--ema-name slow
    --allow-missing``) exports the averages it says, bit for bit."""
    out, truth = made
    said = _refused(out / "plain", [*meta, "--ema-name", "slow"], tmp_path)
    offers = {o.rstrip(",;:)'") for o in re.findall(r"--ema-name '?(\S+)", said)} - {"slow"}
    assert offers == {"ExponentialMovingAverage"}, said  # never slow,ExponentialMovingAverage
    assert "--allow-missing" in said and "no one map takes both" in said, said
    _refused(out / "plain", [*meta, "--ema-name", "slow,ExponentialMovingAverage"], tmp_path)
    got = _exported(out / "plain", [*meta, "--ema-name", "ExponentialMovingAverage"],
                    tmp_path)
    for v in ("w", "b", "c"):
        assert got[v].tobytes() == truth[f"plain:ema:{v}"].tobytes(), v
    got = _exported(out / "plain", [*meta, "--ema-name", "slow", "--allow-missing"], tmp_path)
    for v in ("w", "b"):
        assert got[v].tobytes() == truth[f"plain:slow:{v}"].tobytes(), v
    assert got["c"].tobytes() == truth["plain:raw:c"].tobytes()


def test_a_vtr_savers_raw_keys_are_not_offered_and_exclude_is(made, tmp_path):
    """F2: the training Saver(ema.variables_to_restore()) wrote raw values under the default
    object's names. The unstated refusal offers only ``slow`` with ``--exclude 'c'`` (c's
    only key holds its raw value), never ``--ema-name ExponentialMovingAverage``; the
    ``--ema-name slow`` refusal counts c's key alone and names ``--exclude 'c'``. Each
    named command exports slow's averages of w and b, bit for bit."""
    out, truth = made
    said = _refused(out / "vtr", [], tmp_path)
    assert "--ema-name ExponentialMovingAverage" not in said and "decides" not in said, said
    offer = re.search(r"pass (--ema-name slow --exclude \S+)", said)
    assert offer and offer.group(1) == "--ema-name slow --exclude 'c'", said
    _refused(out / "vtr", ["--ema-name", "ExponentialMovingAverage"], tmp_path)
    said = _refused(out / "vtr", ["--ema-name", "slow"], tmp_path)
    assert said.count("1 key named as averages holds") == 1 and "--exclude 'c'" in said, said
    got = _exported(out / "vtr", shlex.split(offer.group(1)), tmp_path)
    assert sorted(got) == ["b", "w"], sorted(got)
    for v in ("w", "b"):
        assert got[v].tobytes() == truth[f"vtr:slow:{v}"].tobytes(), v
        assert got[v].tobytes() != truth[f"vtr:raw:{v}"].tobytes(), v


# case, the refused command's options, {offered options: {exported name: truth key part}}
# (raw: the value at save time; oN: the Nth object's ema.average(v)), and what is never
# offered (each refused when run)
OFFERS = [
    # F5: fast_1 is refused as fast is; the default object averaged every variable
    ("fastnum", [], {"--ema-name ExponentialMovingAverage": {"w": "o0", "b": "o0", "c": "o0"}},
     ["--ema-name fast_1"]),
    # F7: slow's refusal named --ema-name ExponentialMovingAverage (w has none of it)
    ("disjoint", ["--ema-name", "slow"],
     {"--ema-name slow,ExponentialMovingAverage": {"w": "o1", "b": "o0", "c": "o0"},
      "--allow-missing": {"w": "o1", "b": "raw", "c": "raw"}},
     ["--ema-name ExponentialMovingAverage"]),
    # F9: every offer looped (slow <-> fast); the ExponentialMovingAverage keys hold raw
    # values, so each named object's own averages are offered with the other variables
    # excluded (w's slow, c's fast: review-23-attack-r68 F2 no longer reads c/fast beside
    # the raw holder c/ExponentialMovingAverage as "several averages" under --ema-name fast)
    ("vtr3", [], {"--ema-name fast --exclude 'b' --exclude 'w'": {"c": "o2"},
                  "--ema-name slow --exclude 'b' --exclude 'c'": {"w": "o1"}},
     ["--ema-name ExponentialMovingAverage"]),
    ("vtr3", ["--ema-name", "slow"], {}, ["--ema-name ExponentialMovingAverage"]),
    # F11: no key is named fast_1, so fast_1,fast takes nothing of it; --ema-name fast took
    # each variable's only average (w, b: the first object's, c: the second's), two objects'
    # of different decays: refused since review-26-attack-r92 F1, which offers each object's
    # averages alone
    ("fast2c", ["--ema-name", "fast_1"], {}, ["--ema-name fast_1,fast", "--ema-name fast"]),
    ("fast2c", [], {"--ema-name fast --exclude 'c'": {"w": "o0", "b": "o0"},
                    "--ema-name fast --exclude 'b' --exclude 'w'": {"c": "o1"}},
     ["--ema-name fast"]),
    # F12: --ema-name slow alone lacks b and c
    ("mixvtr", [], {"--ema-name slow --allow-missing": {"w": "o1", "b": "raw", "c": "raw"},
                    "--ema-name ExponentialMovingAverage --exclude 'w'": {"b": "o0", "c": "o0"}},
     ["--ema-name slow"]),
    # review-21-attack-r57 F2: --ema-name fast was offered as "one apply()'s", and refused
    ("twin", [], {"--raw": {"w": "raw", "b": "raw", "c": "raw"}},
     ["--ema-name fast", "--ema-name fast --allow-missing"]),
    # review-22-attack-r62 F2: a stated name no key holds (a typo) named only refused options
    ("disjoint", ["--ema-name", "Slow"],
     {"--ema-name ExponentialMovingAverage,slow": {"w": "o1", "b": "o0", "c": "o0"}}, []),
    # review-22-attack-r62 F1: "pass --ema-name fast or --ema-name slow", each refused alone
    ("overlap", [], {"--ema-name slow --allow-missing": {"w": "o0", "b": "o0", "c": "raw"},
                     "--ema-name fast --allow-missing": {"w": "raw", "b": "o1", "c": "o1"}},
     ["--ema-name slow", "--ema-name fast"]),
    # review-22-attack-r66 F4: the unstated refusal offered --ema-name ExponentialMovingAverage
    # (its keys hold raw values under a renamed Saver) and --ema-name slow (needs
    # --allow-missing), each refused; a Saver that kept no key of slow offered slow
    ("rensuf", [], {"--ema-name slow --allow-missing": {
        f"model/{v}/ExponentialMovingAverage/x": w for v, w in (("w", "o1"), ("b", "raw"),
                                                                ("c", "raw"))}},
     ["--ema-name ExponentialMovingAverage", "--ema-name slow"]),
    ("rawplusavg", [], {"--ema-name ExponentialMovingAverage": {"w": "o0", "b": "o0", "c": "o0"}},
     ["--ema-name slow"]),
    # r62 F4: the offers are probed with the command's own --exclude (typed beside them)
    ("disjoint", ["--ema-name", "slow", "--exclude", "w"],
     {"--ema-name ExponentialMovingAverage": {"b": "o0", "c": "o0"},
      "--ema-name slow,ExponentialMovingAverage": {"b": "o0", "c": "o0"}}, []),
    # review-23-attack-r68 F1: without the .meta the first refusal offered only the pair and
    # slow's own form; the default object's own form is offered too
    ("disjoint", ["--no-meta"],
     {"--ema-name ExponentialMovingAverage --allow-missing": {"w": "raw", "b": "o0", "c": "o0"},
      "--ema-name slow,ExponentialMovingAverage": {"w": "o1", "b": "o0", "c": "o0"},
      "--ema-name slow --allow-missing": {"w": "o1", "b": "raw", "c": "raw"}}, []),
    # review-23-attack-r68 F3: only a1..a4 were probed ("no --ema-name decides") while z works
    ("five", [], {"--ema-name z": {"w": "o4", "b": "o4", "c": "o4"}}, []),
    # review-23-attack-r68 F2: each --ema-name X --allow-missing was refused ("c has c/mid,
    # c/slow ... no --ema-name decides"); a stated object's averages, the others raw
    *(("ovl3", meta, {"--ema-name fast --allow-missing": {"w": "o0", "b": "o0", "c": "raw"},
                      "--ema-name slow --allow-missing": {"w": "raw", "b": "o1", "c": "o1"},
                      "--ema-name mid --allow-missing": {"w": "o2", "b": "raw", "c": "o2"}},
       ["--ema-name fast", "--ema-name slow", "--ema-name mid"])
      for meta in ([], ["--no-meta"])),
    # review-23-attack-r68 F3 without the .meta: only a1..a4 were probed and offered
    ("five", ["--no-meta"], {"--ema-name z": {"w": "o4", "b": "o4", "c": "o4"}}, []),
    ("fastall", [], {"--ema-name fast --allow-missing": {"w": "o0", "b": "o0", "c": "raw"},
                     "--ema-name slow --allow-missing": {"w": "o1", "b": "raw", "c": "raw"}},
     ["--ema-name fast"]),
]


@pytest.mark.parametrize("case,args,offered,refused", OFFERS,
                         ids=[f"{c}{''.join(a)}" for c, a, _, _ in OFFERS])
def test_several_objects_refusals_offer_only_options_that_work(made, tmp_path, case, args,
                                                               offered, refused):
    """review-21-attack-r60 F5, F7, F9, F11, F12: each option the refusal offers (``pass
    ...``, ``... takes ...``, ``--allow-missing restores ...``, ``--raw``) is run and exports
    what it says, bit for bit against what TF's session held at save time; no option the map
    refuses is offered (each is run and refused), and where none decides the refusal says so.
    """
    out, truth = made
    said = _refused(out / case, args, tmp_path)
    # an offer is typed beside the command's own filters (--exclude w), not its --ema-name
    kept = args[2:] if args[:1] == ["--ema-name"] else args
    for option in refused:  # named only as refused, never offered
        offer = re.escape(option) + r"(?= \(| or | takes| is one apply|$)"
        assert not re.search(offer, said), (option, said)
        _refused(out / case, [*kept, *shlex.split(option)], tmp_path)
    if any(o.startswith("--raw") for o in offered):
        assert re.search("no option decides|no --ema-name picks one object here", said), said
    for option, values in offered.items():
        assert option in said and f"{option} is refused" not in said, (option, said)
        # --allow-missing alone: with the refused command's --ema-name
        run = [*args, option] if option == "--allow-missing" else [*kept, *shlex.split(option)]
        got = _exported(out / case, run, tmp_path)
        assert sorted(got) == sorted(values), (option, sorted(got))
        for v, which in values.items():
            assert got[v].tobytes() == truth[f"{case}:{which}:{v}"].tobytes(), (option, v)


def test_a_pair_of_disjoint_objects_says_what_it_takes(made, tmp_path):
    """review-23-attack-r68 F1: the pair of the default object over b, c and slow over w is
    offered with what it takes (both objects' averages, whose of which), each object's own
    form with the weights it leaves raw; the offers are run in
    test_several_objects_refusals_offer_only_options_that_work."""
    out, _ = made
    said = _refused(out / "disjoint", ["--no-meta"], tmp_path)
    assert ("--ema-name slow,ExponentialMovingAverage only if 'slow' is the name you gave your "
            "ExponentialMovingAverage (it takes both objects' averages: slow's averages of w, "
            "ExponentialMovingAverage's of b, c)") in said, said
    assert ("--ema-name ExponentialMovingAverage --allow-missing to use "
            "ExponentialMovingAverage's averages alone (it takes ExponentialMovingAverage's "
            "averages of b, c; w raw)") in said, said


def test_a_fifth_name_that_decides_is_offered(made, tmp_path):
    """review-23-attack-r68 F3: only the first four names (a1..a4) were probed, and the
    refusal offered only their --allow-missing forms (z named only in the .meta's hint);
    z, the one object over every variable, is probed and offered first (run in
    test_several_objects_refusals_offer_only_options_that_work)."""
    out, _ = made
    said = _refused(out / "five", [], tmp_path)
    assert "; pass --ema-name z or " in said, said


@pytest.mark.parametrize("case", ["ovl3again", "ovl3fast2"])
@pytest.mark.parametrize("meta", [[], ["--no-meta"]], ids=["meta", "no-meta"])
def test_a_stated_objects_scoped_average_is_never_left_raw(made, tmp_path, case, meta):
    """review-23-attack-r68 F2's hostile twins: beside ovl3's three objects, s/c/fast is fast's
    own average of c (applied again under variable_scope('s')) or a second fast's; c/mid,
    c/slow are no fast's, yet ``--ema-name fast --allow-missing`` must not write c raw while
    such a key is stored: it is refused (exit 6), with or without the .meta. With the
    .meta, fast's own s/c/fast (the graph shows apply() scope s/fast averaging c into it) is
    c's average, bit for bit, the decays telling it one object's (note s28b)."""
    out, truth = made
    if case == "ovl3again" and not meta:
        got = _exported(out / case, ["--ema-name", "fast", "--allow-missing"], tmp_path)
        assert sorted(got) == ["b", "c", "w"], sorted(got)
        for k, obj in (("w", 0), ("b", 0), ("c", 3)):  # o3: fast applied again
            assert got[k].tobytes() == truth[f"{case}:o{obj}:{k}"].tobytes(), k
        return
    _refused(out / case, [*meta, "--ema-name", "fast", "--allow-missing"], tmp_path)


def test_the_meta_hint_names_only_an_accepted_object_and_raw_weights_are_named(made,
                                                                            tmp_path):
    """review-23-attack-r68 F5: the refusal's "(with this .meta --ema-name fast decides ...)"
    was not probed: fast averaged every averaged variable, yet c (trained, averaged by none)
    makes --ema-name fast refused; only accepted options are named. F4: an --allow-missing
    export names the weights it wrote raw, not only their count."""
    out, _ = made
    said = _refused(out / "fastall", [], tmp_path)
    assert "--ema-name fast decides" not in said, said
    code, stdout, err = run_cli(["export", str(out / "ovl3"), "--ema-name", "fast",
                                 "--allow-missing", "--out", str(tmp_path / "x.npz")])
    assert code == 0 and "2 with EMA values; raw (--allow-missing): c" in stdout, (stdout, err)


def test_a_renamed_vtr_savers_offer_says_what_it_leaves_raw(made, tmp_path):
    """review-23-attack-r68 F6: the renamed training vtr Saver's first refusal offered
    ``--ema-name slow``, which wrote w raw (its only key holds raw w) with no
    ``--allow-missing``. That key holds w's raw value only if a training graph saved it (an
    evaluation graph's re-save holds the averages), which the same Saver without the prefix
    refuses ("vtr": ``--ema-name slow --exclude 'c'``): ``--ema-name slow`` is refused naming
    ``--exclude 'net/w'``, with ``--allow-missing`` too, and the first refusal offers that
    route, which exports slow's averages of net/b, net/c bit for bit (s28a)."""
    out, truth = made
    said = _refused(out / "vtrren", [], tmp_path)
    assert "pass --ema-name slow --exclude 'net/w' (" in said, said
    assert "--ema-name slow (it takes" not in said, said
    for more in ([], ["--allow-missing"]):
        said = _refused(out / "vtrren", ["--ema-name", "slow", *more], tmp_path)
        assert "if a training graph saved them" in said and "--exclude 'net/w'" in said, said
    got = _exported(out / "vtrren", ["--ema-name", "slow", "--exclude", "net/w"], tmp_path)
    assert sorted(got) == ["net/b", "net/c"], sorted(got)
    for v in ("b", "c"):
        assert got[f"net/{v}"].tobytes() == truth[f"vtrren:o1:{v}"].tobytes(), v


@pytest.mark.parametrize("meta", [[], ["--no-meta"]], ids=["meta", "no-meta"])
def test_a_lone_default_named_average_beside_a_third_objects_is_refused(made, tmp_path, meta):
    """review-24-attack-r73 F2: c/ExponentialMovingAverage is the second default-named
    object's (the first averaged w, b only: b has both names), and c/slow beside it made
    refuse_uneven skip c: --ema-name ExponentialMovingAverage exported the second object's
    average of c with the first's of w, b, exit 0. Refused, as without slow."""
    out, _ = made
    for extra in ([], ["--allow-missing"]):
        _refused(out / "twodef", [*meta, "--ema-name", "ExponentialMovingAverage", *extra],
                 tmp_path)


@pytest.mark.parametrize("case", ["renagain", "renfast2", "rendrop", "drop", "rencond2",
                                  "cond2"])
@pytest.mark.parametrize("meta", [[], ["--no-meta"]], ids=["meta", "no-meta"])
def test_a_renamed_savers_stated_object_average_is_never_left_raw(made, tmp_path, case, meta):
    """review-24-attack-r73 F1, F7: behind a renaming Saver({"model/" + v.op.name: v}),
    ``--ema-name fast --allow-missing`` wrote model/c raw, exit 0, while fast's average of c
    (applied again under variable_scope('s'), or a second fast's) is stored as
    model/s/c/fast, read as "an average of a tensor"; and while fast's average of c was
    left out of the Saver, which the plain Saver's twin ("drop") refuses. The .meta's update
    ops name the variables the save op wrote into the keys: refused (exit 6), as without the
    .meta (without it nothing records fast's average of c in rendrop, drop: c raw as
    stated, w, b fast's, bit for bit). The second fast's apply() in a tf.cond ("rencond2":
    cond v2 names its scope 'fast') paired c with model/s/c/fast, exit 0, where the plain
    twin ("cond2") is refused (review-25-attack-r80 F3)."""
    out, truth = made
    args = [*meta, "--ema-name", "fast", "--allow-missing"]
    if case.endswith("drop") and meta:
        got = _exported(out / case, args, tmp_path)
        pre = "model/" if case == "rendrop" else ""
        for v, which in (("w", "o0"), ("b", "o0"), ("c", "raw")):
            assert got[pre + v].tobytes() == truth[f"{case}:{which}:{v}"].tobytes(), v
        return
    said = _refused(out / case, args, tmp_path)
    if case.endswith("cond2"):  # review-25-attack-r80 F3: c paired with model/s/c/fast
        _refused(out / case, args[:-1], tmp_path)  # without --allow-missing too
        assert meta or "not proven one EMA object's" in said, said
    elif case.startswith("ren") and not meta:
        assert "model/c holds c, and the .meta's update ops show apply() " in said, said


@pytest.mark.parametrize("meta", [[], ["--no-meta"]], ids=["meta", "no-meta"])
def test_a_renamed_savers_stated_objects_are_exported(made, tmp_path, meta):
    """review-24-attack-r73 F1's answered twin: ovl3 behind the renaming Saver, each stated
    object's averages with the weights it did not average raw, bit for bit."""
    out, truth = made
    for name, takes in (("fast", {"w": "o0", "b": "o0", "c": "raw"}),
                        ("slow", {"w": "raw", "b": "o1", "c": "o1"}),
                        ("mid", {"w": "o2", "b": "raw", "c": "o2"})):
        got = _exported(out / "renovl3", [*meta, "--ema-name", name, "--allow-missing"],
                        tmp_path)
        assert sorted(got) == ["model/b", "model/c", "model/w"], sorted(got)
        for v, which in takes.items():
            assert got[f"model/{v}"].tobytes() == truth[f"renovl3:{which}:{v}"].tobytes(), \
                (name, v)


def test_a_renamed_savers_slashed_object_names_are_told_apart(made, tmp_path):
    """review-25-attack-r80 F4: objects named fast and x/fast behind the renaming Saver:
    ``--ema-name fast --allow-missing`` was refused reading c/x/fast (x/fast's average, not
    named <c>/fast) as fast's, and ``--ema-name x/fast`` reading w/fast (apply() 'fast') as
    x/fast's; each exports its own averages, the weight it did not average raw, bit for bit."""
    out, truth = made
    for name, takes in (("fast", {"w": "o0", "b": "o0", "c": "raw"}),
                        ("x/fast", {"w": "raw", "b": "o1", "c": "o1"})):
        got = _exported(out / "renxfast", ["--ema-name", name, "--allow-missing"], tmp_path)
        assert sorted(got) == ["model/b", "model/c", "model/w"], sorted(got)
        for v, which in takes.items():
            assert got[f"model/{v}"].tobytes() == truth[f"renxfast:{which}:{v}"].tobytes(), \
                (name, v)


def test_a_renamed_savers_average_under_a_scope_named_as_anothers_is_refused(made, tmp_path):
    """review-25-attack-r80 F1, F2: one object fast, applied again under variable_scope('s')
    over c, beside a model variable s/c, behind the renaming Saver: fast's average of c is
    stored as model/s/c/fast. ``--allow-missing`` exported model/c RAW, exit 0; the default
    refusal said no apply() writes model/s/c/fast and offered --no-meta, whose reading
    exports c's average as s/c. Refused naming the update op, never offering --no-meta."""
    out, _ = made
    for args in ([], ["--allow-missing"], ["--ema-name", "fast"],
                 ["--ema-name", "fast", "--allow-missing"]):
        said = _refused(out / "rensc", args, tmp_path)
        assert "apply() 's_1/fast' averaging c into" in said and "pass --no-meta" not in said, \
            (args, said)


def test_a_renamed_savers_several_objects_refusal_offers_each_ema_name(made, tmp_path):
    """review-28-attack-r106 F3: behind a renaming Saver({"model/" + v.op.name: v}), the
    default object and slow both averaging w and b were refused with "ckpt does not
    translate such keys" and no --ema-name offered, while each --ema-name exports that
    object's averages through the save op. The refusal now offers both, and each offer, run
    as printed, writes its object's averages bit for bit."""
    out, truth = made
    err = _refused(out / "rentwo", [], tmp_path)
    assert "does not translate" not in err, err
    found = re.search(r"pass (--ema-name .*?) \(the object", err)
    assert found, err
    offers = [shlex.split(o) for o in found.group(1).split(" or ")]
    # c is averaged by neither object: each offer states it raw (--allow-missing)
    assert offers == [["--ema-name", n, "--allow-missing"]
                      for n in ("ExponentialMovingAverage", "slow")], err
    assert "--allow-missing writes raw the variables it does not average" in err, err
    for i, option in enumerate(offers):
        got = _exported(out / "rentwo", option, tmp_path)
        assert sorted(got) == ["model/b", "model/c", "model/w"], got
        for v in "wb":
            assert got[f"model/{v}"].tobytes() == truth[f"rentwo:o{i}:{v}"].tobytes(), option
        assert got["model/c"].tobytes() == truth["rentwo:raw:c"].tobytes(), option


def test_a_renamed_savers_averages_are_listed_of_the_key_holding_their_variable(made):
    """review-29-attack-r108 F3: behind a renaming Saver({"model/" + v.op.name: v}) with two
    objects, list showed model/b/ExponentialMovingAverage and model/b/slow "of b (not
    stored)", while b is stored as model/b (its raw value, bit for bit) and the save op says
    so. Each is now listed of model/b, the key holding its variable, in the table and in
    --json's ema_of."""
    import json

    from ckpt_tools import open_checkpoint

    out, truth = made
    with open_checkpoint(str(out / "rentwo")) as ckpt:
        for v in "wbc":  # what model/<v> holds: <v>'s raw value
            assert ckpt.tensor(f"model/{v}").tobytes() == truth[f"rentwo:raw:{v}"].tobytes()
            for i, n in enumerate(("ExponentialMovingAverage", "slow")[:2 if v != "c" else 0]):
                got = ckpt.tensor(f"model/{v}/{n}").tobytes()
                assert got == truth[f"rentwo:o{i}:{v}"].tobytes(), (v, n)
    code, text, err = run_cli(["list", str(out / "rentwo")])
    assert code == 0, err
    assert "not stored" not in text, text
    rows = {line.split("\t")[0]: line.split("\t") for line in text.splitlines()}
    for v in "wb":
        for n in ("ExponentialMovingAverage", "slow"):
            assert rows[f"model/{v}/{n}"][-1] == f"of model/{v}", rows
    code, text, err = run_cli(["list", str(out / "rentwo"), "--json"])
    assert code == 0, err
    of = {r["name"]: r["ema_of"] for r in json.loads(text)["variables"]}
    assert {k: of[k] for k in of if "/" in k.removeprefix("model/")
            and k != "model/global_step"} == {
        f"model/{v}/{n}": f"model/{v}" for v in "wb"
        for n in ("ExponentialMovingAverage", "slow")}, of
