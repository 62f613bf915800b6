"""TF2: a structure that mirrors the model's own paths is no longer read as one holder
(review-29-attack-r109 F2).

Two default-named EMA objects (0.5 over the generator's weights, 0.9 over the
discriminator's) kept per network in a structure whose keys repeat the model's attribute
names were exported as one object's averages, exit 0: the holder rule collapsed every
structure mirroring the weights' paths into one holder, only because ``ckpt train`` saved its
one object's averages so. Now the holder is always the object directly holding the average:
these layouts are refused (exit 6) naming ``--ema-name ExponentialMovingAverage``, your
statement, which then exports each weight's own object's average. ``ckpt train --api tf2``
saves its averages in one dict keyed by the weights' paths (``ema/conv1.Sweights``): one
holder, exported by default; its older mirror layout is refused, and the offer, typed as
printed, reads it. Real TensorFlow and tf_keras; truth is ``ema.average(v)`` at save time."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from _holder_offers import listed_holders, printed_offers
from helpers import assert_npz_holds, run_cli, run_script

SCRIPT = r"""
import os, sys
import numpy as np
import tensorflow as tf
import tf_keras
from ckpt_tools.train.tf2 import averages_dict
out = sys.argv[1]
truth = {}
def save(name, got, **kw):
    tf.train.Checkpoint(**kw).write(os.path.join(out, name, "ckpt"))
    truth.update({f"{name}:{k}": v.numpy() for k, v in got.items()})
def module(**attrs):
    m = tf.Module()
    for k, v in attrs.items():
        setattr(m, k, v)
    return m
def mirror_module(named, name):  # ckpt_tools.train.tf2.mirror_module as ckpt train used it
    tree = {}
    for path, var in named.items():
        *parents, leaf = path.split("/")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = var
    m = tf.Module(name=name)
    for key, value in tree.items():
        setattr(m, key, value)
    return m
w, b = tf.Variable([1., 2., 3.], name="w"), tf.Variable([0.5], name="b")
c = tf.Variable([7., 8.], name="c")
e1, e2 = tf.train.ExponentialMovingAverage(0.5), tf.train.ExponentialMovingAverage(0.9)
@tf.function
def step():
    for v in (w, b, c):
        v.assign_add(tf.ones_like(v) * 1.25)
    e1.apply([w, b])
    e2.apply([c])
for _ in range(3):
    step()
A = {"w": e1.average(w), "b": e1.average(b), "c": e2.average(c)}
save("T1", {"gan/gen/w": A["w"], "gan/gen/b": A["b"], "gan/disc/c": A["c"]},
     gan=module(gen=module(w=w, b=b), disc=module(c=c)),
     ema={"gen": {"w": A["w"], "b": A["b"]}, "disc": {"c": A["c"]}})
save("T2", {"model/vars/0/0": A["w"], "model/vars/0/1": A["b"], "model/vars/1/0": A["c"]},
     model=module(vars=[[w, b], [c]]), ema=[[A["w"], A["b"]], [A["c"]]])
save("T3", {"model/g_vars/0": A["w"], "model/g_vars/1": A["b"], "model/d_vars/0": A["c"]},
     model=module(g_vars=[w, b], d_vars=[c]),
     ema={"g_vars": [A["w"], A["b"]], "d_vars": [A["c"]]})

class GAN(tf_keras.Model):
    def __init__(self):
        super().__init__()
        self.gen = tf_keras.layers.Dense(4, name="gen")
        self.disc = tf_keras.layers.Dense(2, name="disc")
    def call(self, x):
        return self.disc(self.gen(x))
tf.random.set_seed(1)
net = GAN()
net(tf.zeros((1, 3)))
opt = tf_keras.optimizers.SGD(0.1)
gv, dv = net.gen.trainable_variables, net.disc.trainable_variables
k1, k2 = tf.train.ExponentialMovingAverage(0.5), tf.train.ExponentialMovingAverage(0.9)
x = tf.constant(np.arange(12, dtype="float32").reshape(4, 3) / 10)
@tf.function
def kstep():
    with tf.GradientTape() as t:
        loss = tf.reduce_mean((net(x) - 1.0) ** 2)
    g = t.gradient(loss, net.trainable_variables)
    opt.apply_gradients(zip(g, net.trainable_variables))
    k1.apply(gv)
    k2.apply(dv)
for _ in range(3):
    kstep()
ema = {"gen": {"kernel": k1.average(gv[0]), "bias": k1.average(gv[1])},
       "disc": {"kernel": k2.average(dv[0]), "bias": k2.average(dv[1])}}
save("TK1", {f"model/{n}/{p}": ema[n][p] for n in ema for p in ema[n]},
     model=net, optimizer=opt, ema=ema)

# ckpt train's layout, one object over a model with sub-modules, its step and loss averages
conv = module(conv1=module(weights=tf.Variable([[1., 2.]], name="conv1/weights"),
                           biases=tf.Variable([3.], name="conv1/biases")),
              conv2=module(weights=tf.Variable([[4.], [5.]], name="conv2/weights"),
                           biases=tf.Variable([6.], name="conv2/biases")))
named = {"conv1/weights": conv.conv1.weights, "conv1/biases": conv.conv1.biases,
         "conv2/weights": conv.conv2.weights, "conv2/biases": conv.conv2.biases}
one = tf.train.ExponentialMovingAverage(0.7)
@tf.function
def cstep():
    for v in named.values():
        v.assign_add(tf.ones_like(v) * 1.25)
    one.apply(list(named.values()))
for _ in range(3):
    cstep()
avg = {f"model/{p}": one.average(v) for p, v in named.items()}
run = dict(step=tf.Variable(3, dtype=tf.int64),
           losses=module(cross_entropy={"avg": tf.Variable(0.5, name="cross_entropy/avg")}))
save("old_train", avg, model=conv, ema=mirror_module(
    {p: one.average(v) for p, v in named.items()}, "ema"), **run)
save("new_train", avg, model=conv, ema=averages_dict(
    {p: one.average(v) for p, v in named.items()}), **run)
# review-30-attack-r111 F4: averages kept in a combined list AND per object; TensorFlow keys
# each by its first path, so the key alone shows one holder in one attribute order
M = dict(w=w, b=b, c=c)
G, D = [A["w"], A["b"]], [A["c"]]
save("all_first", {"model/w": A["w"], "model/b": A["b"], "model/c": A["c"]},
     model=module(**M), trainer=module(all=G + D, g_ema=G, d_ema=D))
save("all_last", {"model/w": A["w"], "model/b": A["b"], "model/c": A["c"]},
     model=module(**M), trainer=module(g_ema=G, d_ema=D, all=G + D))
net.gen.ema = [k1.average(v) for v in gv]
net.disc.ema = [k2.average(v) for v in dv]
save("TK_both", {f"model/{n}/{p}": ema[n][p] for n in ema for p in ema[n]},
     model=net, ema=net.gen.ema + net.disc.ema)
layers = {n: [one.average(v) for p, v in named.items() if p.startswith(n)]
          for n in ("conv1", "conv2")}
save("one_combined", avg, model=conv,
     ema=module(all=layers["conv1"] + layers["conv2"], **layers))
save("one_list", avg, model=conv, ema=[one.average(v) for v in named.values()])
# task s32c: one EMA named "ema" over both networks, its averages in a mirror of the model
nv = {"w": tf.Variable([1., 2., 3.], name="w"), "b": tf.Variable([0.5], name="b"),
      "c": tf.Variable([7., 8.], name="c")}
e_named = tf.train.ExponentialMovingAverage(0.5, name="ema")
@tf.function
def nstep():
    for v in nv.values():
        v.assign_add(tf.ones_like(v) * 1.25)
    e_named.apply(list(nv.values()))
for _ in range(3):
    nstep()
N = {k: e_named.average(v) for k, v in nv.items()}
save("named_mirror", {"model/gen/w": N["w"], "model/gen/b": N["b"], "model/disc/c": N["c"]},
     model=module(gen=module(w=nv["w"], b=nv["b"]), disc=module(c=nv["c"])),
     ema=module(gen=module(w=N["w"], b=N["b"]), disc=module(c=N["c"])))
np.savez(os.path.join(out, "truth.npz"), **truth)
"""

TWO = {"T1": ("ema/gen", "ema/disc"), "T2": ("ema/0", "ema/1"),
       "T3": ("ema/g_vars", "ema/d_vars"), "TK1": ("ema/gen", "ema/disc")}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    pytest.importorskip("tensorflow")
    pytest.importorskip("tf_keras")
    out = tmp_path_factory.mktemp("mirrorholders")
    return out, run_script(SCRIPT, out)


def _of(truth, layout):
    return {k.split(":", 1)[1]: v for k, v in truth.items() if k.startswith(f"{layout}:")}


def _refusal(directory, tmp_path) -> str:
    """Export, map and restore-ema refuse ``directory`` (exit 6, nothing written); returns
    export's message on one line."""
    lines = []
    for args in (["export", str(directory), "-o", str(tmp_path / "x.npz")],
                 ["map", str(directory)],
                 ["restore-ema", str(directory), "-o", str(tmp_path / "re")]):
        code, _o, err = run_cli(args)
        assert code == 6, (args, err)
        lines.append(" ".join(err.split()))
    assert not (tmp_path / "x.npz").exists() and not (tmp_path / "re").exists()
    return lines[0]


def _offers_work(directory, tmp_path, line: str, truth: dict) -> None:
    """Each ``--exclude`` offer the refusal prints, typed as printed, exports exactly the
    weights of one holder it lists, each its average bit for bit (review-29-attack-r109 F4:
    one glob per other holder of several weights, ``--exclude 'ema/gen/*'``)."""
    groups = listed_holders(line)
    offers = printed_offers(line)
    assert len(offers) == len(groups) == 2, line
    for i, args in enumerate(offers):
        code, _o, err = run_cli(["export", str(directory), "-o", str(tmp_path / f"o{i}.npz"),
                                 *args])
        assert code == 0, (args, err)
        with np.load(tmp_path / f"o{i}.npz") as z:
            names = set(z.files)
        assert names in groups.values(), (args, names, groups)
        assert_npz_holds(tmp_path / f"o{i}.npz", {k: truth[k] for k in names})


@pytest.mark.parametrize("layout", sorted(TWO))
def test_two_objects_kept_per_network_in_a_mirror_are_refused(made, tmp_path, layout):
    """Each weight would take its own object's average (0.5 beside 0.9) as one object's: the
    mirror's sub-structures are the holders, and the statement exports bit for bit."""
    out, truth = made
    line = _refusal(out / layout, tmp_path)
    for holder in TWO[layout]:
        assert f"{holder} holds the averages of" in line, line
    assert "--ema-name ExponentialMovingAverage states" in line, line
    assert "older ckpt train" not in line, line
    _offers_work(out / layout, tmp_path, line, _of(truth, layout))
    code, _o, err = run_cli(["export", str(out / layout), "-o", str(tmp_path / "s.npz"),
                             "--ema-name", "ExponentialMovingAverage"])
    assert code == 0, err
    assert_npz_holds(tmp_path / "s.npz", _of(truth, layout))


def test_ckpt_train_averages_dict_is_one_holder(made, tmp_path):
    """``ckpt train``'s layout now (one dict keyed by the weights' paths) exports by default,
    each weight its average bit for bit."""
    out, truth = made
    code, _o, err = run_cli(["export", str(out / "new_train"), "-o", str(tmp_path / "x.npz")])
    assert code == 0, err
    assert_npz_holds(tmp_path / "x.npz", _of(truth, "new_train"))


def test_older_ckpt_train_mirror_is_refused_with_an_offer_that_works(made, tmp_path):
    """The mirror an older ``ckpt train`` wrote (``ema/conv1/weights``) is refused like any
    mirror, saying where it may come from and leading with the ``--ema-name`` that reads it
    (no ``--exclude`` offer per conv layer: review-30-user-u32 F4); typed as printed, it
    exports each weight's average bit for bit, and ``list --json`` names it as the option
    that decides."""
    out, truth = made
    line = _refusal(out / "old_train", tmp_path)
    assert "older ckpt train --api tf2" in line and "(ema/conv1, ema/conv2)" in line, line
    assert "--exclude" not in line and len(line) < 800, line
    offer = re.search(r"; (--ema-name \S+) states that they are one EMA object's", line)
    assert offer and offer.group(1) == "--ema-name ExponentialMovingAverage", line
    assert line.index(offer.group(1)) < line.index("--raw"), line
    code, text, err = run_cli(["list", str(out / "old_train"), "--json"])
    assert code == 0, err
    assert json.loads(text)["ema_unproven"]["option"] == offer.group(1), text
    code, _o, err = run_cli(["export", str(out / "old_train"), "-o", str(tmp_path / "s.npz"),
                             *offer.group(1).split()])
    assert code == 0, err
    assert_npz_holds(tmp_path / "s.npz", _of(truth, "old_train"))


def _each_offer_exports_one_holder(directory, tmp_path, line: str, truth: dict) -> int:
    """Each ``--exclude`` offer printed, typed as printed, exports exactly the weights of one
    holder the refusal lists, bit for bit; returns how many were printed."""
    groups = listed_holders(line)
    offers = printed_offers(line)
    for i, args in enumerate(offers):
        code, _o, err = run_cli(["export", str(directory), "-o", str(tmp_path / f"o{i}.npz"),
                                 *args])
        assert code == 0, (args, err)
        with np.load(tmp_path / f"o{i}.npz") as z:
            names = set(z.files)
        assert names in groups.values(), (args, names, groups)
        assert_npz_holds(tmp_path / f"o{i}.npz", {k: truth[k] for k in names})
    return len(offers)


@pytest.mark.parametrize("layout,holders", [
    ("all_first", ("trainer/all", "trainer/g_ema", "trainer/d_ema")),
    ("all_last", ("trainer/all", "trainer/g_ema", "trainer/d_ema")),
    ("TK_both", ("ema", "model/gen/ema", "model/disc/ema")),
    ("one_combined", ("ema/all", "ema/conv1", "ema/conv2"))])
def test_averages_also_kept_in_a_combined_list_are_split(made, tmp_path, layout, holders):
    """review-30-attack-r111 F4: two objects' averages (0.5 over w, b; 0.9 over c) kept in a
    combined list beside per-object lists were exported as one object's, exit 0, where the
    combined list came first (TensorFlow keys each average by its first path): every object
    the graph records as holding an average counts, whatever the attribute order. One
    object's averages kept so are split too; the statement exports bit for bit. The combined
    list (the first holder here) is counted as no object of its own (note s30m: "3 different
    objects")."""
    out, truth = made
    line = _refusal(out / layout, tmp_path)
    for holder in holders:
        assert f"{holder} holds the averages of" in line, line
    assert f"tracked under 2 different objects and together under {holders[0]} (" in line, line
    assert "--ema-name ExponentialMovingAverage states" in line, line
    _each_offer_exports_one_holder(out / layout, tmp_path, line, _of(truth, layout))
    code, _o, err = run_cli(["export", str(out / layout), "-o", str(tmp_path / "s.npz"),
                             "--ema-name", "ExponentialMovingAverage"])
    assert code == 0, err
    assert_npz_holds(tmp_path / "s.npz", _of(truth, layout))


def test_one_list_of_one_objects_averages_is_one_holder(made, tmp_path):
    """One list holding one object's averages, alone, exports by default bit for bit."""
    out, truth = made
    code, _o, err = run_cli(["export", str(out / "one_list"), "-o", str(tmp_path / "x.npz")])
    assert code == 0, err
    assert_npz_holds(tmp_path / "x.npz", _of(truth, "one_list"))


@pytest.mark.parametrize("layout", ["T1", "all_first"])
def test_list_and_a_wrong_name_offer_the_split_statement(made, tmp_path, layout):
    """review-30-attack-r111 F2: on a split layout other than an older ``ckpt train``'s,
    ``list`` said "no option decides" (``--json`` option null) and a wrong ``--ema-name``
    "none decides", while ``--ema-name ExponentialMovingAverage`` (the split refusal's
    statement) is accepted. Both now name it; typed as printed it exports bit for bit."""
    out, truth = made
    code, text, err = run_cli(["list", str(out / layout)])
    assert code == 0, err
    said = " ".join((text + err).split())
    assert "no option decides" not in said, said
    # ... beside the --exclude options of one holder's averages alone (u33 F3)
    assert "pass --ema-name ExponentialMovingAverage (they are one EMA object's averages) or " \
        "--exclude '" in said and "(one holder's averages alone) to decide" in said, said
    code, text, err = run_cli(["list", str(out / layout), "--json"])
    assert code == 0, err
    assert json.loads(text)["ema_unproven"]["option"] == "--ema-name ExponentialMovingAverage"
    code, _o, err = run_cli(["export", str(out / layout), "-o", str(tmp_path / "x.npz"),
                             "--ema-name", "gen"])
    assert code == 6, err
    line = " ".join(err.split())
    assert "none decides" not in line, line
    offer = re.search(r"pass (--ema-name \S+), your statement", line)
    assert offer, line
    code, _o, err = run_cli(["export", str(out / layout), "-o", str(tmp_path / "s.npz"),
                             *offer.group(1).split()])
    assert code == 0, err
    assert_npz_holds(tmp_path / "s.npz", _of(truth, layout))


@pytest.mark.parametrize("layout,name,net", [("named_mirror", "ema", "model"),
                                             ("T1", "ExponentialMovingAverage", "gan")])
@pytest.mark.parametrize("left", ["disc/c", "disc/*"])
def test_an_excluded_weights_average_is_never_exported_as_a_weight(made, tmp_path, layout,
                                                                   name, net, left):
    """Task s32c: ``--ema-name ema --exclude 'model/disc/c'`` (the refusal's own offer under
    ``-g``) wrote disc's average as a weight ``ema/disc/c``, exit 0: an average the pairing
    proves the excluded weight's (stated name ``ema``) was "written as stored" as a tensor
    only its name reads as an average. Now it leaves with its weight, for a name of the
    user's as for TF's default one; ``map`` and ``restore-ema`` agree. Truth is
    ``ema.average(v)`` at save time."""
    out, truth = made
    given = ["--ema-name", name, "--exclude", f"{net}/{left}"]
    code, _o, err = run_cli(["export", str(out / layout), "-o", str(tmp_path / "x.npz"),
                             *given])
    assert code == 0, err
    assert "written as stored" not in err, err
    kept = {k: v for k, v in _of(truth, layout).items() if "/gen/" in k}
    assert_npz_holds(tmp_path / "x.npz", kept)
    code, text, err = run_cli(["map", str(out / layout), "--json", *given])
    assert code == 0, err
    assert sorted(k.split("/.ATTRIBUTES/")[0] for k in json.loads(text).values()) == \
        sorted(kept), text


@pytest.mark.parametrize("layout,named,net", [("named_mirror", ["--ema-name", "ema"], "model"),
                                              ("T1", [], "gan")])
def test_grep_of_one_holders_weights_is_heeded_by_the_split_refusal(made, tmp_path, layout,
                                                                    named, net):
    """Task s32c: ``-g 'model/gen/*'`` was refused as split over ``ema/gen`` and ``ema/disc``,
    offering ``--exclude 'model/disc/c'``: the split refusal heeded ``--exclude`` but not
    ``--grep``. One holder's weights selected export their averages bit for bit; a
    selection reaching both holders is still refused."""
    out, truth = made
    code, _o, err = run_cli(["export", str(out / layout), "-o", str(tmp_path / "g.npz"),
                             *named, "-g", f"{net}/gen/*"])
    assert code == 0, err
    assert_npz_holds(tmp_path / "g.npz",
                     {k: v for k, v in _of(truth, layout).items() if "/gen/" in k})
    code, _o, err = run_cli(["export", str(out / layout), "-o", str(tmp_path / "x.npz"),
                             *named, "-g", f"{net}/gen/w", "-g", f"{net}/disc/c"])
    assert code == 6, err
    assert "ema/disc holds the averages of" in " ".join(err.split()), err
