"""TF2: averages of a name the user gave, split over holders (review-31-attack-r113 F4).

Two EMA objects both given the name ``ema`` (0.5 over the generator's ``w``, ``b``; 0.9 over
the discriminator's ``c``), each network's averages kept in its own holder
(``gen_ema``/``disc_ema`` lists, a dict of lists, a mirror dict): only the unknown-name
refusal fired, and its offer ``--ema-name ema``, typed as printed, exported both objects'
averages as one object's, exit 0. ``--ema-name ExponentialMovingAverage`` is a statement (a
default name nobody need pass); ``--ema-name ema`` is needed just to read the averages, so it
states nothing of holders: both refusals now say the averages are split and offer the
``--exclude`` that exports one holder's averages alone. One object named ``ema`` in one list
still exports with ``--ema-name ema``. Real TensorFlow; truth is ``ema.average(v)``."""

from __future__ import annotations

import re

import numpy as np
import pytest
from _holder_offers import listed_holders, printed_offers
from helpers import assert_npz_holds, run_cli, run_script

SCRIPT = r"""
import os, sys
import numpy as np
import tensorflow as tf
out = sys.argv[1]
truth = {}
def module(**attrs):
    m = tf.Module()
    for k, v in attrs.items():
        setattr(m, k, v)
    return m
def save(name, got, **kw):
    tf.train.Checkpoint(**kw).write(os.path.join(out, name, "ckpt"))
    truth.update({f"{name}:{k}": v.numpy() for k, v in got.items()})
gen = module(w=tf.Variable([1., 2., 3.], name="w"), b=tf.Variable([0.5], name="b"))
disc = module(c=tf.Variable([7., 8.], name="c"))
gan = module(gen=gen, disc=disc)
w, b, c = gen.w, gen.b, disc.c
e1 = tf.train.ExponentialMovingAverage(0.5, name="ema")
e2 = tf.train.ExponentialMovingAverage(0.9, name="ema")
e3 = tf.train.ExponentialMovingAverage(0.7)  # TF's default name
@tf.function
def step():
    for v in (w, b, c):
        v.assign_add(tf.ones_like(v) * 1.25)
    e1.apply([w, b])
    e2.apply([c])
    e3.apply([c])
for _ in range(3):
    step()
A = {"model/gen/w": e1.average(w), "model/gen/b": e1.average(b),
     "model/disc/c": e2.average(c)}
save("two_attrs", A, model=gan, gen_ema=[e1.average(w), e1.average(b)],
     disc_ema=[e2.average(c)])
save("dict_lists", A, model=gan,
     ema={"gen": [e1.average(w), e1.average(b)], "disc": [e2.average(c)]})
save("mirror", A, model=gan,
     ema={"gen": {"w": e1.average(w), "b": e1.average(b)}, "disc": {"c": e2.average(c)}})
save("one_list", {k: v for k, v in A.items() if k.startswith("model/gen/")},
     model=module(gen=gen), ema=[e1.average(w), e1.average(b)])
# review-31-attack-r115 F2: the attribute named like one object holds another's average too
save("holder_named", {}, model=gan, ema=[e1.average(w), e1.average(b), e3.average(c)])
# review-31-attack-r113 F1/F2: default-named objects, averages also kept in a combined list
# 'all' (TensorFlow sorts the attributes and keys each average by its first path: all/N)
m = module(w=tf.Variable([1., 2., 3.], name="w"), b=tf.Variable([0.5], name="b"),
           c=tf.Variable([7., 8.], name="c"))
f1, f2 = tf.train.ExponentialMovingAverage(0.5), tf.train.ExponentialMovingAverage(0.9)
for _ in range(3):  # eager: f2's average of w is named w/ExponentialMovingAverage_1
    for v in (m.w, m.b, m.c):
        v.assign_add(tf.ones_like(v) * 1.25)
    f1.apply([m.w, m.b])
    f2.apply([m.w, m.c])
F = {"e1w": f1.average(m.w), "e1b": f1.average(m.b), "e2w": f2.average(m.w),
     "e2c": f2.average(m.c)}
save("all_plus", {**F, "b": m.b, "c": m.c}, model=m, all=[F["e1w"], F["e1b"], F["e2c"]],
     g=[F["e1w"], F["e1b"]], d=[F["e2w"], F["e2c"]])
save("g_d_all", {**F, "c": m.c}, model=m, g=[F["e1w"], F["e1b"]], d=[F["e2c"]],
     all=[F["e1w"], F["e1b"], F["e2c"]])
# review-33-attack-r127 m1: two holders keep the same average (one list saved twice)
save("twice", {"model/gen/w": e1.average(w), "model/gen/b": e1.average(b)},
     model=module(gen=gen),
     a=[e1.average(w)], a2=[e1.average(w)], o=[e1.average(b)])
np.savez(os.path.join(out, "truth.npz"), **truth)
"""

SPLIT = {"two_attrs": ("gen_ema", "disc_ema"), "dict_lists": ("ema/gen", "ema/disc"),
         "mirror": ("ema/gen", "ema/disc")}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("namedsplit")
    return out, run_script(SCRIPT, out)


def _of(truth, layout):
    return {k.split(":", 1)[1]: v for k, v in truth.items() if k.startswith(f"{layout}:")}


def _offers_export_one_holder(directory, tmp_path, line: str, truth: dict,
                              tag: str = "o") -> None:
    """Every ``--ema-name ema --exclude`` offer printed, typed as printed, exports exactly
    the weights of one holder the refusal lists, each its own object's average bit for bit;
    at least one is printed."""
    groups = listed_holders(line)
    offers = printed_offers(line)
    assert offers and len(groups) == 2, line
    for i, args in enumerate(offers):
        assert args[:2] == ["--ema-name", "ema"], args
        code, _o, err = run_cli(["export", str(directory), "-o", str(tmp_path / f"{tag}{i}.npz"),
                                 *args])
        assert code == 0, (args, err)
        with np.load(tmp_path / f"{tag}{i}.npz") as z:
            names = set(z.files)
        assert names in groups.values(), (args, names, groups)
        assert_npz_holds(tmp_path / f"{tag}{i}.npz", {k: truth[k] for k in names})


@pytest.mark.parametrize("layout", sorted(SPLIT))
def test_a_given_name_split_over_holders_is_refused_even_stated(made, tmp_path, layout):
    """Unstated: the unknown-name refusal says the averages are split and why ``--ema-name
    ema`` states nothing of it; stated: the split refusal (was exit 0, 0.5's and 0.9's
    averages as one object's), for export and restore-ema alike. Each printed offer
    exports one holder's averages bit for bit."""
    out, truth = made
    directory = out / layout
    code, _o, err = run_cli(["export", str(directory), "-o", str(tmp_path / "x.npz")])
    assert code == 6, err
    line = " ".join(err.split())
    assert "nothing recorded says 'ema' is an ExponentialMovingAverage's name" in line, line
    assert "--ema-name ema is refused because the averages named ema are split over 2 " \
           "holders" in line, line
    for holder in SPLIT[layout]:
        assert f"{holder} holds the averages of" in line, line
    _offers_export_one_holder(directory, tmp_path, line, _of(truth, layout))
    for args in (["export", str(directory), "-o", str(tmp_path / "x.npz")],
                 ["restore-ema", str(directory / "ckpt"), "-o", str(tmp_path / "re")]):
        code, _o, err = run_cli([*args, "--ema-name", "ema"])
        assert code == 6, (args, err)  # was exit 0, two objects' averages as one's
        line = " ".join(err.split())
        assert "tracked under 2 different objects" in line, line
        assert "--ema-name ema, which averages of a name TensorFlow does not give need to " \
               "be read at all, does not state that they are one EMA object's" in line, line
        assert "ema states that they are one" not in line, line
    assert not (tmp_path / "x.npz").exists() and not (tmp_path / "re").exists()
    _offers_export_one_holder(directory, tmp_path, line, _of(truth, layout), "s")


def test_a_given_name_in_one_list_still_reads_stated(made, tmp_path):
    """One object named ``ema`` whose averages one list holds: ``--ema-name ema`` exports
    them bit for bit, as before."""
    out, truth = made
    code, _o, err = run_cli(["export", str(out / "one_list"), "-o", str(tmp_path / "x.npz"),
                             "--ema-name", "ema"])
    assert code == 0, err
    assert_npz_holds(tmp_path / "x.npz", _of(truth, "one_list"))


def test_an_attribute_takes_every_average_it_holds(made, tmp_path):
    """review-31-attack-r113 F1: ``--ema-name d`` (the duplicate refusal's offer) took d's
    averages by their keys' first path only, so e2's average of c, kept in d but keyed under
    the combined list ``all``, was left out and c exported raw. Typed as printed, the offer
    now exports w and c from e2 bit for bit (b, which d does not hold, raw as reported);
    the combined ``all`` (g and d split it) is never offered nor accepted as one object's."""
    out, truth = made
    t = _of(truth, "all_plus")
    directory = out / "all_plus"
    code, _o, err = run_cli(["export", str(directory), "-o", str(tmp_path / "x.npz")])
    assert code == 6, err
    line = " ".join(err.split())
    assert "pass --ema-name d --allow-missing" in line and "--ema-name all" not in line, line
    code, _o, err = run_cli(["export", str(directory), "-o", str(tmp_path / "d.npz"),
                             "--ema-name", "d", "--allow-missing"])
    assert code == 0, err
    assert_npz_holds(tmp_path / "d.npz", {"model/w": t["e2w"], "model/c": t["e2c"],
                                          "model/b": t["b"]})
    code, _o, err = run_cli(["export", str(directory), "-o", str(tmp_path / "a.npz"),
                             "--ema-name", "all"])
    assert code == 6 and not (tmp_path / "a.npz").exists(), err


def test_an_attribute_keyed_under_a_combined_list_reads_and_a_wrong_one_says_what_was_tried(
        made, tmp_path):
    """review-31-attack-r113 F2: ``--ema-name g`` said "none of its averages is kept under the
    EMA name 'g' ... so none decides" where g holds e1's averages (keyed under ``all``). g's
    now read: with ``--allow-missing`` w, b from e1 bit for bit, c raw as reported. A name
    no average has says which options it tried (no "none decides": the split refusal's
    ``--exclude`` offers may), names every attribute holding averages, and its offer works."""
    out, truth = made
    t = _of(truth, "g_d_all")
    directory = out / "g_d_all"
    code, _o, err = run_cli(["export", str(directory), "-o", str(tmp_path / "g.npz"),
                             "--ema-name", "g", "--allow-missing"])
    assert code == 0, err
    assert_npz_holds(tmp_path / "g.npz", {"model/w": t["e1w"], "model/b": t["e1b"],
                                          "model/c": t["c"]})
    code, _o, err = run_cli(["export", str(directory), "-o", str(tmp_path / "x.npz"),
                             "--ema-name", "g"])
    line = " ".join(err.split())
    assert code == 6 and "none of its averages is kept" not in line, line
    code, _o, err = run_cli(["export", str(directory), "-o", str(tmp_path / "x.npz"),
                             "--ema-name", "gg"])
    line = " ".join(err.split())
    assert code == 6 and "none decides" not in line and "kept as all, d, g" in line, line
    offer = re.search(r"pass (--ema-name \S+), your statement", line)
    assert offer, line
    code, _o, err = run_cli(["export", str(directory), "-o", str(tmp_path / "s.npz"),
                             *offer.group(1).split()])
    assert code == 0, err
    assert_npz_holds(tmp_path / "s.npz", {"model/w": t["e1w"], "model/b": t["e1b"],
                                          "model/c": t["e2c"]})


def test_an_attribute_named_like_one_object_holding_anothers_average_is_refused(made, tmp_path):
    """``ema=[e1(w), e1(b), e3(c)]``, e1 named ``ema``, e3 TF's default name: ``--ema-name
    ema`` names the attribute (all three) and the object (w, b): c's average is e3's, and was
    exported as ``ema``'s, exit 0 (review-31-attack-r115 F2)."""
    out, _ = made
    for extra in ([], ["--ema-name", "ema"]):
        code, _, err = run_cli(["export", str(out / "holder_named"), *extra,
                                "--out", str(tmp_path / "x.npz")])
        assert code == 6, (extra, err)
        assert not (tmp_path / "x.npz").exists()


def test_holders_keeping_the_same_averages_get_one_offer(made, tmp_path):
    """Two attributes holding the same average (``a``, ``a2``) beside a third holder: the
    split refusal listed ``--exclude 'model/gen/b'`` twice, once per holder
    (review-33-attack-r127 m1); each offer is printed once and exports its holder's
    averages bit for bit."""
    out, truth = made
    code, _o, err = run_cli(["export", str(out / "twice"), "-o", str(tmp_path / "x.npz"),
                             "--ema-name", "ema"])
    assert code == 6, err
    line = " ".join(err.split())
    offers = printed_offers(line)
    assert len(offers) == 2 and offers[0] != offers[1], line
    for i, args in enumerate(offers):
        code, _o, err = run_cli(["export", str(out / "twice"), "-o", str(tmp_path / f"{i}.npz"),
                                 *args])
        assert code == 0, (args, err)
        with np.load(tmp_path / f"{i}.npz") as z:
            names = set(z.files)
        assert names in ({"model/gen/w"}, {"model/gen/b"}), (args, names)
        assert_npz_holds(tmp_path / f"{i}.npz", {k: _of(truth, "twice")[k] for k in names})
