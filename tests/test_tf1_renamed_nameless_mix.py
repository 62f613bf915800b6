"""TF1: objects ``slow`` (0.5 over ``w``, ``b``) and ``fast`` (0.9 over ``c``) saved by a
renaming ``Saver`` under one prefix, ``avg/w``, ``avg/b``, ``avg/c`` (review-28-attack-r103
F2). The keys carry no EMA name, so the map reads them as one set; ema_decays grouped them by
the apply() scope's name (``slow``, ``fast``), found one decay in each and exported the mix,
exit 0, while the same layout with both objects named ``fast`` was refused. Now refused alike
(exit 6), offering ``--ema-name slow --exclude c`` and ``--ema-name fast --exclude b
--exclude w`` (each object's averages, bit for bit); ``--ema-name slow,fast`` states the mix.
Truth is ``sess.run(ema.average(v))`` at save time (real TensorFlow)."""

from __future__ import annotations

import re
import shlex

import numpy as np
import pytest
from helpers import assert_npz_holds, run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r"""
for case in ("slowfast", "fastfast"):
    with tf.Graph().as_default():
        (w, b, c), step, upd = nudged_wbc(tf)
        e1 = tf1.train.ExponentialMovingAverage(0.5, name=case[:4])
        e2 = tf1.train.ExponentialMovingAverage(0.9, name="fast")
        with tf.control_dependencies(upd):
            train = tf.group(e1.apply([w, b]), e2.apply([c]), tf1.assign_add(step, 1))
        keys = {"w": w, "b": b, "c": c, "global_step": step, "avg/w": e1.average(w),
                "avg/b": e1.average(b), "avg/c": e2.average(c)}
        with saved_trained(tf, train, os.path.join(out, case, "model.ckpt"), keys) as (s, _):
            if case == "slowfast":
                truth = {"o0:w": s.run(e1.average(w)), "o0:b": s.run(e1.average(b)),
                         "o1:c": s.run(e2.average(c))}
            else:
                truth.update({"ff0:w": s.run(e1.average(w)), "ff0:b": s.run(e1.average(b)),
                              "ff1:c": s.run(e2.average(c))})
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("renamednameless")
    return out, run_tf1_script(SCRIPT, out)


@pytest.mark.parametrize("case", ["slowfast", "fastfast"])
def test_two_objects_under_one_nameless_prefix_are_refused(made, case, tmp_path):
    out, _truth = made
    for args in (["export", str(out / case), "-o", str(tmp_path / "x.npz")],
                 ["map", str(out / case), "--json"],
                 ["restore-ema", str(out / case), "-o", str(tmp_path / "re")]):
        code, _o, err = run_cli(args)
        assert code == 6, (args, err)
        line = " ".join(err.split())
        assert "keys carrying no EMA name are not one EMA object's" in line, line
        assert "(decay 0.5) writes avg/b, avg/w" in line and "(decay 0.9) writes avg/c" in line
    assert not (tmp_path / "x.npz").exists()


def test_each_objects_offer_exports_its_averages(made, tmp_path):
    out, truth = made
    code, _o, err = run_cli(["export", str(out / "slowfast"), "-o", str(tmp_path / "s.npz"),
                             "--ema-name", "slow", "--exclude", "c"])
    assert code == 0, err
    assert_npz_holds(tmp_path / "s.npz", {"w": truth["o0:w"], "b": truth["o0:b"]})
    code, _o, err = run_cli(["export", str(out / "slowfast"), "-o", str(tmp_path / "f.npz"),
                             "--ema-name", "fast", "--exclude", "b", "--exclude", "w"])
    assert code == 0, err
    assert_npz_holds(tmp_path / "f.npz", {"c": truth["o1:c"]})
    # two names stated: the caller's mix, each weight its own object's average
    code, _o, err = run_cli(["export", str(out / "slowfast"), "-o", str(tmp_path / "m.npz"),
                             "--ema-name", "slow,fast"])
    assert code == 0, err
    assert_npz_holds(tmp_path / "m.npz", {"w": truth["o0:w"], "b": truth["o0:b"],
                                          "c": truth["o1:c"]})


@pytest.mark.parametrize(("name", "left", "other", "kept"),
                         [("slow", ["c"], "fast", ["w", "b"]), ("fast", ["b", "w"], "slow", ["c"])])
def test_stated_name_says_whose_average_the_rest_is(made, tmp_path, name, left, other, kept):
    """``--ema-name slow`` leaves ``c``, whose stored average ``avg/c`` is fast's: the refusal
    said ``c`` was probably frozen, read ``avg/c`` as another EMA name and ``<weight>/b``, and
    offered ``--allow-missing`` (which writes ``c`` raw). It names the other object's apply()
    and offers the ``--exclude`` that works as printed (review-28-attack-r104 F3)."""
    out, truth = made
    code, _o, err = run_cli(["export", str(out / "slowfast"), "-o", str(tmp_path / "x.npz"),
                             "--ema-name", name])
    assert code == 6, err
    line = " ".join(err.split())
    for t in left:
        assert f"{t}'s average avg/{t} is written by apply() '{other}'" in line, line
    for wrong in ("frozen", "--allow-missing", "<weight>/", "EMA name"):
        assert wrong not in line, line
    offer = re.search(r"; (--ema-name .*?) exports ", line)
    assert offer, line
    code, _o, err = run_cli(["export", str(out / "slowfast"), "-o", str(tmp_path / "o.npz"),
                             *shlex.split(offer.group(1))])
    assert code == 0, err
    assert_npz_holds(tmp_path / "o.npz", {k: v for k, v in
                                          ((k.split(":")[1], v) for k, v in truth.items())
                                          if k in kept})


def test_the_default_refusals_offers_work_as_printed_and_are_shortest(made, tmp_path):
    """s29j F3 left: the default refusal was said to offer ``--ema-name slow --exclude 'c'
    --allow-missing`` (``--allow-missing`` surplus). ema_decays._offers probes each offer
    without ``--allow-missing`` first; each offer printed is run as printed here and exports
    its object's averages bit for bit, none with ``--allow-missing``."""
    out, truth = made
    code, _o, err = run_cli(["export", str(out / "slowfast"), "-o", str(tmp_path / "x.npz")])
    assert code == 6, err
    line = " ".join(err.split())
    said = re.search(r"; (--ema-name .*?) exports one object's averages", line)
    assert said, line
    offers = said.group(1).split(" or ")
    assert len(offers) == 2 and not any("--allow-missing" in o for o in offers), offers
    for i, offer in enumerate(offers):
        dest = tmp_path / f"o{i}.npz"
        code, _o, err = run_cli(["export", str(out / "slowfast"), "-o", str(dest),
                                 *shlex.split(offer)])
        assert code == 0, (offer, err)
        own = "o0" if "slow" in offer else "o1"
        assert_npz_holds(dest, {k.split(":")[1]: v for k, v in truth.items()
                                if k.startswith(own + ":")})


def test_two_objects_named_fast_the_exclude_leaves_one(made, tmp_path):
    """s30d "Left": with both objects named ``fast``, ``--ema-name fast --exclude c`` was
    refused saying each weight would take its own object's average beside the other's,
    naming ``c``'s apply() though ``c`` was excluded: the renamed Saver's path checked the
    decays of every pair, not those the filters keep (as the unrenamed path does). What is
    left is one apply()'s (decay 0.5) averages of ``w`` and ``b``, exported bit for bit."""
    out, truth = made
    code, _o, err = run_cli(["export", str(out / "fastfast"), "-o", str(tmp_path / "f.npz"),
                             "--ema-name", "fast", "--exclude", "c"])
    assert code == 0, err
    assert_npz_holds(tmp_path / "f.npz", {"w": truth["ff0:w"], "b": truth["ff0:b"]})


@pytest.mark.parametrize("case", ["slowfast", "fastfast"])
def test_offers_under_the_callers_exclude_of_an_average_key_work_as_printed(made, tmp_path,
                                                                             case):
    """note s30j: ema_decays' offers are probed beside the caller's own ``--exclude``. With
    ``--exclude avg/w`` (w's average key; w itself kept), fast_1's offer was dropped
    (fastfast) or given with ``--allow-missing``, writing w raw (slowfast). Each object's
    offer is now printed without ``--allow-missing``, and typed as printed beside the
    caller's ``--exclude`` exports exactly that object's averages bit for bit."""
    out, truth = made
    mine = ["--exclude", "avg/w"]
    code, _o, err = run_cli(["export", str(out / case), "-o", str(tmp_path / "x.npz"), *mine])
    assert code == 6, err
    line = " ".join(err.split())
    said = re.search(r"; (--ema-name .*?) exports one object's averages", line)
    assert said, line
    offers = said.group(1).split(" or ")
    assert len(offers) == 2 and not any("--allow-missing" in o for o in offers), line
    own = {"slowfast": ({"b": "o0:b"}, {"c": "o1:c"}), "fastfast": ({"b": "ff0:b"},
                                                                    {"c": "ff1:c"})}[case]
    got = []
    for i, offer in enumerate(offers):
        dest = tmp_path / f"o{i}.npz"
        code, _o, err = run_cli(["export", str(out / case), "-o", str(dest), *mine,
                                 *shlex.split(offer)])
        assert code == 0, (offer, err)
        with np.load(dest) as z:
            names = set(z.files)
        kept = next(k for k in own if set(k) == names)
        assert_npz_holds(dest, {n: truth[t] for n, t in kept.items()})
        got.append(kept)
    assert len({tuple(k) for k in got}) == 2, offers


@pytest.mark.parametrize("case,own", [("fastfast", "ff"), ("slowfast", "o")])
def test_grep_is_heeded_by_the_two_objects_refusal_as_exclude_is(made, tmp_path, case, own):
    """Task s32c (s31e): ``-g w -g b`` was refused naming ``c``'s apply() (decay 0.9), while
    ``--exclude c`` exported w and b: the map behind export's refusals got the user's
    ``--exclude`` but not their ``--grep``. A selection of one object's weights now exports
    them, bit for bit, with or without the name; one reaching both objects is still
    refused."""
    out, truth = made
    for i, (given, kept) in enumerate([(["-g", "w", "-g", "b"], {"w": "0", "b": "0"}),
                                       (["-g", "c"], {"c": "1"})]):
        for named in ([], ["--ema-name", "fast"])[:2 if case == "fastfast" else 1]:
            dest = tmp_path / f"o{i}{len(named)}.npz"
            code, _o, err = run_cli(["export", str(out / case), "-o", str(dest), *given,
                                     *named])
            assert code == 0, (given, named, err)
            assert_npz_holds(dest, {k: truth[f"{own}{o}:{k}"] for k, o in kept.items()})
    code, _o, err = run_cli(["export", str(out / case), "-o", str(tmp_path / "x.npz"),
                             "-g", "w", "-g", "c"])
    assert code == 6, err
    assert "(decay 0.5) writes avg/w" in " ".join(err.split()), err
    assert not (tmp_path / "x.npz").exists()
