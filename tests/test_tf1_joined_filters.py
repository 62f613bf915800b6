"""``--ema-name a,b`` (several TF1 EMA objects' averages joined) with ``--exclude``/``--grep``
(review-27-attack-r98 F1-F5). One rule, whichever named object reads a weight: a weight the
user's ``--exclude`` selects, by its name or by the key its average is read from under ANY
of the names, is left out, never written raw for a missing average under another name (F1)
nor from another named object's average (F3); a weight left out is no reason to refuse that
two of the named objects averaged it (F2); a name no key holds is refused, filter or not
(F4); one object applied twice is never said impossible (F5). Checkpoints are made here by
real TensorFlow (tf.compat.v1 graph mode, ``tf.train.ExponentialMovingAverage``, ``Saver``);
truth is ``sess.run(ema.average(v))`` at save time, compared bit for bit."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script
from test_tf1_scoped_emas import SCRIPT as GAN_SCRIPT

SCRIPT = r'''
# case: (the default object's variables, slow's); mm: a non-trainable statistic; "part":
# b trained, averaged by neither
CASES = {"disj": ("Vb", "W"), "bn": ("Vb", "Wm"), "over": ("WVb", "W"), "part": ("W", "V")}
for case, (first, second) in CASES.items():
    with tf.Graph().as_default():
        vs = {n: tf1.get_variable(n, shape) for n, shape in (("W", [3, 2]), ("V", [2]),
                                                           ("b", [2]))}
        vs["m"] = tf1.get_variable("mm", [2], trainable=False,
                                   initializer=tf1.zeros_initializer())
        step = tf.group(*[v.assign_add(tf.ones_like(v) * (i + 1.25))
                          for i, v in enumerate(vs.values())])
        with tf.control_dependencies([step]):
            e = tf1.train.ExponentialMovingAverage(0.5)
            u1 = e.apply([vs[k] for k in first])
            slow = tf1.train.ExponentialMovingAverage(0.9, name="slow")
            u2 = slow.apply([vs[k] for k in second])
        saver = tf1.train.Saver()
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run([u1, u2])
            os.makedirs(f"{out}/{case}")
            saver.save(s, f"{out}/{case}/model.ckpt")
            for tag, obj, ks in (("e", e, first), ("slow", slow, second)):
                for k in ks:
                    truth[f"{case}:{tag}:{vs[k].op.name}"] = s.run(obj.average(vs[k]))
            for v in vs.values():
                truth[f"{case}:raw:{v.op.name}"] = s.run(v)
# F5: one object applied twice over a shared variable (TF 2.x's apply() reuses its average
# and adds a second update op), beside a second default-named object averaging it too
with tf.Graph().as_default():
    vs = {}
    with tf1.variable_scope("gen"):
        vs["gw"], vs["gb"] = tf1.get_variable("w", [3]), tf1.get_variable("b", [2])
    with tf1.variable_scope("disc"):
        vs["dw"], vs["db"] = tf1.get_variable("w", [3]), tf1.get_variable("b", [2])
    vs["sh"] = tf1.get_variable("shared/emb", [4])
    step = tf.group(*[v.assign_add(tf.ones_like(v) * (i + 1.5))
                      for i, v in enumerate(vs.values())])
    with tf.control_dependencies([step]):
        with tf.name_scope("gen"):
            eg = tf1.train.ExponentialMovingAverage(0.5)
            ug1 = eg.apply([vs["gw"], vs["sh"]])
            ug2 = eg.apply([vs["gb"], vs["sh"]])
        with tf.name_scope("disc"):
            ud = tf1.train.ExponentialMovingAverage(0.9).apply([vs["dw"], vs["db"], vs["sh"]])
    saver = tf1.train.Saver()
    with tf1.Session() as s:
        s.run(tf1.global_variables_initializer())
        for _ in range(3):
            s.run([ug1, ug2, ud])
        os.makedirs(f"{out}/twice")
        saver.save(s, f"{out}/twice/model.ckpt")
        truth["twice:scopes"] = np.array([ug1.name, ug2.name, ud.name])
'''
JOINED = "slow,ExponentialMovingAverage"
SCOPES = "gen_1/ExponentialMovingAverage,disc_1/ExponentialMovingAverage"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_joined_filters")
    truth = run_tf1_script(SCRIPT, out / "multi")
    gan = run_tf1_script(GAN_SCRIPT, out / "gan")
    for tag in ("g", "d"):  # the apply() scopes the joined names state
        assert {str(gan[f"{c}:{tag}:scope"]) for c in ("overlap", "overlap_vs")} == {
            f"{'gen' if tag == 'g' else 'disc'}_1/ExponentialMovingAverage"}
    return out, truth, gan


def _export(path, args: list[str], tmp_path) -> dict[str, np.ndarray]:
    out = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(path), *args, "--out", str(out), "--force"])
    assert code == 0, (args, err)
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def _refused(path, args: list[str], tmp_path) -> str:
    out = tmp_path / "no.npz"
    code, _, err = run_cli(["export", str(path), *args, "--out", str(out)])
    assert code == 6 and not out.exists(), (args, err)
    return " ".join(err.split())


def _mapped(path, args: list[str]) -> dict[str, str]:
    code, stdout, err = run_cli(["map", str(path), *args, "--json"])
    assert code == 0, (args, err)
    return json.loads(stdout)


def _holds(got, truth, case: str, want: dict[str, str]) -> None:
    assert sorted(got) == sorted(want), sorted(got)
    for var, tag in want.items():
        assert got[var].tobytes() == truth[f"{case}:{tag}:{var}"].tobytes(), (var, tag)


@pytest.mark.parametrize("extra", [[], ["--allow-missing"]], ids=["", "allow-missing"])
def test_excluding_one_names_average_key_leaves_the_weight_out(made, tmp_path, extra):
    """F1: ``--exclude W/slow`` (W's only average, slow's) beside the default object's V, b:
    refused as "probably frozen", and with ``--allow-missing`` W written RAW, exit 0. W is
    left out, as ``--exclude W`` leaves it; map agrees. The same for the BN statistic mm
    slow averaged (``--exclude mm/slow``)."""
    out, truth, _ = made
    want = {"V": "e", "b": "e", "mm": "raw"}
    for args in (["--exclude", "W/slow"], ["--exclude", "W"]):
        got = _export(out / "multi/disj", ["--ema-name", JOINED, *args, *extra], tmp_path)
        _holds(got, truth, "disj", want)
        assert "W" not in _mapped(out / "multi/disj", ["--ema-name", JOINED, *args, *extra]
                                  ).values()
    got = _export(out / "multi/bn", ["--ema-name", JOINED, "--exclude", "mm/slow", *extra],
                  tmp_path)
    _holds(got, truth, "bn", {"W": "slow", "V": "e", "b": "e"})


def test_a_weight_two_named_objects_averaged_left_out_is_no_refusal(made, tmp_path):
    """F2: the GAN's gen object (applied in variable_scope('gen')) and disc's both averaged
    disc/w; ``--exclude disc/w`` (or a --grep leaving it out) was refused about disc/w.
    Each object's own averages of the other weights are written, bit for bit, as for the
    name_scope twin; the same for two named objects over W (``--exclude W``)."""
    out, _, gan = made
    want = {"gen/w": "g", "gen/b": "g", "disc/b": "d"}
    for case in ("overlap_vs", "overlap"):
        got = _export(out / "gan" / case, ["--ema-name", SCOPES, "--exclude", "disc/w"],
                      tmp_path)
        _holds(got, gan, case, want)
        got = _export(out / "gan" / case, ["--ema-name", SCOPES, "--grep", "gen/w", "--grep",
                                           "gen/b", "--grep", "disc/b"], tmp_path)
        _holds(got, gan, case, want)
        assert "disc/w" not in _mapped(out / "gan" / case,
                                       ["--ema-name", SCOPES, "--exclude", "disc/w"]).values()
    _refused(out / "gan/overlap_vs", ["--ema-name", SCOPES], tmp_path)  # unfiltered
    truth = made[1]
    got = _export(out / "multi/over", ["--ema-name", JOINED, "--exclude", "W"], tmp_path)
    _holds(got, truth, "over", {"V": "e", "b": "e", "mm": "raw"})


def test_excluding_one_objects_average_of_a_shared_weight_leaves_it_out(made, tmp_path):
    """F3's rule: ``--exclude`` of disc's average key of disc/w (gen averaged it too) wrote
    gen's average as disc/w, exit 0, where the named-object twin (``--exclude W/slow``, the
    default object averaging W too) was refused. Both leave the weight out now: an excluded
    average is never swapped for another named object's; export and map agree."""
    out, truth, gan = made
    args = ["--ema-name", SCOPES, "--exclude", "disc/w/ExponentialMovingAverage_1"]
    _holds(_export(out / "gan/overlap", args, tmp_path), gan, "overlap",
           {"gen/w": "g", "gen/b": "g", "disc/b": "d"})
    assert "disc/w" not in _mapped(out / "gan/overlap", args).values()
    args = ["--ema-name", JOINED, "--exclude", "W/slow"]
    _holds(_export(out / "multi/over", args, tmp_path), truth, "over",
           {"V": "e", "b": "e", "mm": "raw"})
    assert "W" not in _mapped(out / "multi/over", args).values()


@pytest.mark.parametrize("args", [["--exclude", "W"], ["--grep", "V"], ["--grep", "b"], []])
def test_a_misspelled_name_is_refused_filter_or_not(made, tmp_path, args):
    """F4: ``--ema-name slwo,ExponentialMovingAverage`` was accepted once any filter was
    given; every name stated must take an average (or have its averages left out)."""
    out, _, _ = made
    said = _refused(out / "multi/disj", ["--ema-name", "slwo,ExponentialMovingAverage", *args],
                    tmp_path)
    assert "--ema-name slwo takes no average" in said, said
    code, _, err = run_cli(["map", str(out / "multi/disj"), "--ema-name",
                            "nosuchname,ExponentialMovingAverage", *args, "--json"])
    assert code == 6 and "nosuchname takes no average" in err, err


def test_a_name_whose_every_average_is_excluded_is_accepted(made, tmp_path):
    """adbe732's case stays accepted: slow averaged only W, and ``--exclude W`` leaves it
    nothing, as the user asked."""
    out, truth, _ = made
    got = _export(out / "multi/disj", ["--ema-name", JOINED, "--exclude", "W"], tmp_path)
    _holds(got, truth, "disj", {"V": "e", "b": "e", "mm": "raw"})


def test_joined_names_missing_refusal_names_each(made, tmp_path):
    """F1's message: a weight neither named object averaged is refused naming each name's
    key (never the joined string pasted as one name, 'b/slow,ExponentialMovingAverage')."""
    out, truth, _ = made
    said = _refused(out / "multi/part", ["--ema-name", JOINED], tmp_path)
    assert "slow,ExponentialMovingAverage'" not in said and " b" in said, said
    assert "--allow-missing" in said, said
    got = _export(out / "multi/part", ["--ema-name", JOINED, "--allow-missing"], tmp_path)
    _holds(got, truth, "part", {"W": "e", "V": "slow", "b": "raw", "mm": "raw"})


def test_one_object_applied_twice_is_refused_without_a_false_premise(made, tmp_path):
    """F5: TF 2.x lets one object apply() a variable it averages already (it reuses that
    average); every --ema-name here is refused (the update ops do not tell whose), and the
    refusal no longer says one object averages a variable once."""
    out, truth, _ = made
    g1, g2, _ = (str(s) for s in truth["twice:scopes"])
    for args in ([], ["--ema-name", g1], ["--ema-name", g2], ["--ema-name", f"{g1},{g2}"]):
        said = _refused(out / "multi/twice", args, tmp_path)
        assert "averages a variable once" not in said, said


@pytest.mark.parametrize(("glob", "want"), [
    ("*slow*", {"V": "e", "b": "e", "mm": "raw"}),
    ("*/ExponentialMovingAverage", {"W": "slow", "mm": "raw"})])
def test_a_glob_matching_an_unstored_average_key_leaves_no_weight_out(made, tmp_path, glob,
                                                                      want):
    """review-28-attack-r101 F3: ``--exclude '*slow*'`` also matches ``V/slow``, the key V's
    average WOULD have under slow (not stored: the default object averaged V); the joined
    pairing left V and b out under every name ("1 weights, 0 with EMA values", exit 0) and
    restore-ema refused "select no variable" where the default pairing of the same objects
    takes them. A glob selects a pair by its target or the key its value IS read from: the
    joined names give what the default pairing gives, in export, map and restore-ema."""
    out, truth, _ = made
    path = out / "multi/disj"
    joined = ["--ema-name", JOINED, "--exclude", glob]
    _holds(_export(path, ["--exclude", glob], tmp_path), truth, "disj", want)
    _holds(_export(path, joined, tmp_path), truth, "disj", want)
    mapped = _mapped(path, joined)
    assert sorted(v for v in mapped.values() if v in ("W", "V", "b")) == \
        sorted(v for v in want if v != "mm"), mapped
    baked = tmp_path / "baked"
    code, _, err = run_cli(["restore-ema", str(path), *joined, "--out", str(baked)])
    assert code == 0, err
    import ckpt_tools

    with ckpt_tools.open_checkpoint(str(baked / "model.ckpt")) as ckpt:
        for var in ("W", "V", "b"):
            tag = want.get(var, "raw")
            assert ckpt.tensor(var).tobytes() == truth[f"disj:{tag}:{var}"].tobytes(), var


def test_one_name_a_glob_matching_only_missing_keys_keeps_the_weight(made, tmp_path):
    """s28h "Left": ``--ema-name slow --exclude '*slow*'`` matches W/slow (stored: W out) and
    V/slow, b/slow, the keys V's and b's slow averages WOULD have (not stored). Those keys
    select nothing: with ``--allow-missing`` V and b are written RAW, as it says (they were
    left out, exit 0); without it they are refused as missing, as ``--ema-name slow`` alone
    refuses them (they were left out silently, exit 0)."""
    out, truth, _ = made
    path = out / "multi/disj"
    args = ["--ema-name", "slow", "--exclude", "*slow*"]
    got = _export(path, [*args, "--allow-missing"], tmp_path)
    _holds(got, truth, "disj", {"V": "raw", "b": "raw", "mm": "raw"})
    said = _refused(path, args, tmp_path)
    assert "'V/slow' is not in the checkpoint" in said, said
