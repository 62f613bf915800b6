"""TF1 ``--ema-name ema/fast`` (with and without ``--no-meta``) where ``w0/ema/fast`` sits
beside ``w0/ema`` (review-17-attack-r36 F2, CRITICAL with ``--no-meta``).

EMA ``ema`` over ``w0``, ``w1``; an EMA named ``fast`` over ``ema.average(w0)`` (it writes
``w0/ema/fast``); an EMA named ``ema/fast`` over ``w1`` only. ``ema/fast`` is a true name, yet it
averaged no ``w0``: ``--ema-name ema/fast --no-meta`` wrote ``fast``'s average of ``w0/ema`` as
``w0`` (exit 0, ``--strict``). The keys fit both readings; the ``.meta`` beside the checkpoint
tells them apart, and with it the export is refused as an EMA of an EMA (c9cc526).

Made by real TensorFlow in a subprocess; truth ``sess.run(o.average(v))`` at save time.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''
E = tf1.train.ExponentialMovingAverage
w0 = tf1.get_variable("w0", initializer=tf.ones([3, 2]))
w1 = tf1.get_variable("w1", initializer=tf.zeros([2]))
step = tf1.assign_add(w0, tf.ones([3, 2]) * 0.7), tf1.assign_add(w1, tf.ones([2]) * 1.3)
slow = E(0.9, name="ema")
with tf.control_dependencies(step):
    u1 = slow.apply([w0, w1])
fast = E(0.5, name="fast")
ef = E(0.3, name="ema/fast")
with tf.control_dependencies([u1]):
    upd = tf.group(fast.apply([slow.average(w0)]), ef.apply([w1]))
saver = tf1.train.Saver()
with trained(tf, upd) as s:
    truth["raw:w0"] = s.run(w0)
    truth["fast_of_ema:w0"] = s.run(fast.average(slow.average(w0)))
    truth["ema/fast:w1"] = s.run(ef.average(w1))
    truth["ema:w0"] = s.run(slow.average(w0))
    truth["ema:w1"] = s.run(slow.average(w1))
    assert ef.average(w0) is None
    saver.save(s, f"{out}/model.ckpt")
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_stacked_no_meta")
    return out, run_tf1_script(SCRIPT, out)


@pytest.mark.parametrize("extra", [[], ["--allow-missing"]])
def test_stated_slashed_name_under_no_meta_is_refused(made, tmp_path, extra):
    out, truth = made
    assert not np.array_equal(truth["fast_of_ema:w0"], truth["raw:w0"])
    dest = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(out), "--strict", "--ema-name", "ema/fast",
                            "--no-meta", *extra, "--out", str(dest)])
    assert code == 6, err
    assert "w0/ema/fast" in err and "drop --no-meta" in err, err
    assert not dest.exists()
    code, _, err = run_cli(["restore-ema", str(out), "--ema-name", "ema/fast", "--no-meta",
                            *extra, "--out", str(tmp_path / "re")])
    assert code == 6, err
    assert not (tmp_path / "re").exists()


def test_ema_under_no_meta_refuses_the_key_under_its_shadow(made, tmp_path):
    """review-22-attack-r63 F1, F2: without the ``.meta`` the keys cannot tell ``fast``'s
    average ``w0/ema/fast`` of ``w0/ema`` (nor ``ema/fast``'s ``w1/ema/fast``) from a weight
    named under ``ema``'s shadow: refused, naming the keys and the options that decide (never
    ``--allow-missing``). The offered
    ``--exclude`` leaves it out: ``ema``'s averages bit for bit; with the ``.meta`` too."""
    out, truth = made
    dest = tmp_path / "x.npz"
    stated = ["export", str(out), "--strict", "--ema-name", "ema"]
    for extra in ([], ["--allow-missing"]):
        code, _, err = run_cli([*stated, "--no-meta", *extra, "--out", str(dest)])
        assert code == 6 and not dest.exists(), err
        assert "w0/ema/fast" in err and "--exclude 'w0/ema/fast'" in err, err
        assert "drop --no-meta" in err and "--allow-missing" not in err, err
    for extra in (["--no-meta", "--exclude", "w*/ema/fast"], []):
        code, _, err = run_cli([*stated, *extra, "--out", str(dest), "--force"])
        assert code == 0, (extra, err)
        with np.load(dest) as got:
            assert sorted(got.files) == ["w0", "w1"], extra
            for n in ("w0", "w1"):
                assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), (extra, n)


def test_with_the_meta_the_true_slashed_name_takes_its_objects_averages(made, tmp_path):
    """With the ``.meta`` (review-17-attack-r36 F2 (2), F0): ``ema/fast`` averaged ``w1`` only;
    ``w0/ema/fast`` is ``fast``'s average of ``w0/ema``. ``--ema-name ema/fast`` says ``w0`` has
    no average of that object, and ``--allow-missing`` keeps ``w0`` raw (``ef.average(w0)`` is
    ``None``); both were refused with no way out."""
    out, truth = made
    dest = tmp_path / "x.npz"
    code, _, err = run_cli(["export", str(out), "--strict", "--ema-name", "ema/fast",
                            "--out", str(dest)])
    assert code == 6 and not dest.exists(), err
    said = " ".join(err.split())
    assert "w0/ema/fast is no average of w0" in said and "--allow-missing" in said, said
    code, _, err = run_cli(["export", str(out), "--strict", "--ema-name", "ema/fast",
                            "--allow-missing", "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as got:
        assert sorted(got.files) == ["w0", "w1"]
        assert got["w0"].tobytes() == truth["raw:w0"].tobytes()
        assert got["w1"].tobytes() == truth["ema/fast:w1"].tobytes()


# review-21-attack-r53 F2: a trainable net/w/fast/kernel (variable_scope "net/w/fast") beside
# an EMA named "fast" over net/w and net/b (k1), or over all three (k2); review-22-attack-r63
# F1: net/b/fast/kernel too (kk); F2: an EMA "slow" over fast's average of net/w (ee);
# review-22-attack-r65 F2: k1 with the EMA named "ema/fast" (ks); F3: ee with "slow" named
# "ema/slow" (e4: net/w/fast/ema/slow); k2 with "ema/fast" (s2); review-23-attack-r67 F1, F7:
# ee with the first EMA named "ema/fast" (es), and a second "ema/fast" over both of its
# averages (ss: net/w/ema/fast/ema/fast). Truth "<case>:fast:" is the first EMA's averages.
UNDER = r'''
E = tf1.train.ExponentialMovingAverage
for case in ("k1", "k2", "kk", "ee", "ks", "e4", "s2", "es", "ss"):
    name = "ema/fast" if case in ("ks", "s2", "es", "ss") else "fast"
    with tf.Graph().as_default():
        w = tf1.get_variable("net/w", initializer=tf.ones([4, 2]))
        b = tf1.get_variable("net/b", initializer=tf.zeros([2]))
        made = [w, b]
        if case not in ("ee", "e4", "es", "ss"):
            made.append(tf1.get_variable(f"net/w/{name}/kernel",
                                         initializer=tf.fill([4, 2], 2.0)))
        if case == "kk":
            made.append(tf1.get_variable("net/b/fast/kernel", initializer=tf.fill([2], 3.0)))
        step = [tf1.assign_add(v, tf.ones(v.shape) * (0.5 + i)) for i, v in enumerate(made)]
        fast = E(0.9, name=name)
        with tf.control_dependencies(step):
            upd = fast.apply(made[:3 if case in ("k2", "s2") else 2])
        if case in ("ee", "e4", "es", "ss"):
            slow = E(0.75, name={"e4": "ema/slow", "ss": "ema/fast"}.get(case, "slow"))
            with tf.control_dependencies([upd]):
                upd = slow.apply([fast.average(v) for v in made[:1 if case != "ss" else 2]])
        with trained(tf, upd) as s:
            for v in made:
                name = v.op.name
                truth[f"{case}:raw:{name}"] = s.run(v)
                if fast.average(v) is not None:
                    truth[f"{case}:fast:{name}"] = s.run(fast.average(v))
            if case in ("ee", "e4", "es"):
                truth[f"{case}:slow:{slow.average(fast.average(w)).op.name}"] = s.run(
                    slow.average(fast.average(w)))
            tf1.train.Saver().save(s, f"{out}/{case}/model.ckpt")
# review-23-attack-r67: sf (F3) one EMA "ema/fast" over net/w, net/b; af (F10) "a/fast" and
# "b/fast" over both; av (F4) "fast"'s averages alone saved; le (F5) a trainable net/w/ema
# beside "ema/fast". Every case's .meta is removed: only the keys are read.
for case in ("sf", "af", "av", "le"):
    with tf.Graph().as_default():
        w = tf1.get_variable("net/w", initializer=tf.ones([4, 2]))
        b = tf1.get_variable("net/b", initializer=tf.zeros([2]))
        made = [w, b] + ([tf1.get_variable("net/w/ema", initializer=tf.fill([4, 2], 2.0))]
                         if case == "le" else [])
        step = [tf1.assign_add(v, tf.ones(v.shape) * (0.5 + i)) for i, v in enumerate(made)]
        names = {"sf": ["ema/fast"], "af": ["a/fast", "b/fast"], "av": ["fast"],
                 "le": ["ema/fast"]}[case]
        emas = [E(0.9 - 0.2 * i, name=n) for i, n in enumerate(names)]
        with tf.control_dependencies(step):
            upd = tf.group(*[e.apply([w, b]) for e in emas])
        with trained(tf, upd) as s:
            for v in made:
                truth[f"{case}:raw:{v.op.name}"] = s.run(v)
                for e in emas:
                    if e.average(v) is not None:
                        truth[f"{case}:{e.name}:{e.average(v).op.name}"] = s.run(e.average(v))
            saved = {e.average_name(v): e.average(v) for v in (w, b)} if case == "av" else None
            tf1.train.Saver(saved).save(s, f"{out}/{case}/model.ckpt")
        os.remove(f"{out}/{case}/model.ckpt.meta")
'''

#: the EMA name stated and the keys under its shadows the keys alone cannot read, by case
SHADOWED = {"k1": ("fast", ["net/w/fast/kernel"]),
            "kk": ("fast", ["net/b/fast/kernel", "net/w/fast/kernel"]),
            "ee": ("fast", ["net/w/fast/slow"]),
            "ks": ("ema/fast", ["net/w/ema/fast/kernel"]),
            "e4": ("fast", ["net/w/fast/ema/slow"])}


@pytest.fixture(scope="module")
def under(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_under_shadow")
    return out, run_tf1_script(UNDER, out)


@pytest.mark.parametrize("case", sorted(SHADOWED))
def test_a_key_under_a_stated_names_shadow_is_refused(under, tmp_path, case):
    """review-22-attack-r63 F1, F2 (and r53 F2): under ``--no-meta --ema-name fast`` a key
    ``net/w/fast/<s>`` without its own ``/fast`` may be a weight named under ``fast``'s shadow
    (k1, kk: trainable kernels, once dropped exit 0 "0 left out") or an average of ``fast``'s
    average (ee: ``slow``'s, once exported as a weight through ``--allow-missing``). Refused,
    naming the keys, ``--exclude`` and ``drop --no-meta``, never ``--allow-missing``; ``list``
    claims neither reading (role ``other``). The offered ``--exclude`` leaves them out (a
    kernel left out is not exported) and exports ``fast``'s averages; with the ``.meta`` the
    update ops decide. Each value as TensorFlow held it at save time."""
    out, truth = under
    name, keys = SHADOWED[case]
    dest = tmp_path / f"{case}.npz"
    stated = ["--no-meta", "--ema-name", name]
    for extra in (["--strict"], ["--allow-missing"]):
        code, _, err = run_cli(["export", str(out / case), *stated, *extra, "--out", str(dest)])
        assert code == 6 and not dest.exists(), err
        assert all(f"--exclude '{k}'" in err for k in keys), err
        assert "drop --no-meta" in err and "--allow-missing" not in err, err
    code, text, err = run_cli(["list", str(out / case), *stated, "--json"])
    roles = {v["name"]: v["role"] for v in json.loads(text)["variables"]}
    assert all(roles[k] == "other" for k in keys), roles
    excluded = [a for k in keys for a in ("--exclude", k)]
    code, _, err = run_cli(["export", str(out / case), *stated, "--strict", *excluded,
                            "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as got:
        assert sorted(got.files) == ["net/b", "net/w"]
        for n in got.files:
            assert got[n].tobytes() == truth[f"{case}:fast:{n}"].tobytes(), (case, n)
    # with the .meta: the kernels have no average of fast (--allow-missing keeps them raw);
    # slow's average of fast's is set aside
    extra = ["--strict"] if case in ("ee", "e4") else ["--allow-missing"]
    code, _, err = run_cli(["export", str(out / case), "--ema-name", name, *extra,
                            "--out", str(dest), "--force"])
    assert code == 0, err
    with np.load(dest) as got:
        assert sorted(got.files) == sorted(["net/b", "net/w",
                                            *([] if case in ("ee", "e4") else keys)])
        for n in got.files:
            want = truth.get(f"{case}:fast:{n}", truth[f"{case}:raw:{n}"])
            assert got[n].tobytes() == want.tobytes(), (case, n)


@pytest.mark.parametrize(("case", "name"), [("k2", "fast"), ("s2", "ema/fast")])
def test_a_weight_with_its_own_average_under_a_shadow_is_paired(under, tmp_path, case, name):
    """review-21-attack-r53 F2: where ``net/w/fast/kernel/fast`` is stored (k2), ``fast``
    averaged the kernel: nothing is ambiguous, ``--strict`` pairs it with its own average;
    ``--raw`` writes the three raw weights. Alike for ``ema/fast`` (s2, review-22-attack-r65
    F2: ``--strict`` was refused as 'frozen' and ``--raw`` wrote both averages as weights)."""
    out, truth = under
    dest = tmp_path / f"{case}.npz"
    for extra, kind in (["--strict"], "fast"), (["--raw"], "raw"):
        code, _, err = run_cli(["export", str(out / case), "--no-meta", "--ema-name", name,
                                *extra, "--out", str(dest), "--force"])
        assert code == 0, err
        with np.load(dest) as got:
            assert sorted(got.files) == ["net/b", "net/w", f"net/w/{name}/kernel"], extra
            for n in got.files:
                assert got[n].tobytes() == truth[f"{case}:{kind}:{n}"].tobytes(), (extra, n)


@pytest.mark.parametrize("case", ["k1", "ks", "e4"])
def test_raw_refuses_a_key_under_a_stated_names_shadow(under, tmp_path, case):
    """review-22-attack-r65 F4: ``export --raw --no-meta --ema-name <name>`` dropped a
    trainable kernel named under the shadow (k1, ks), exit 0, and wrote ``ema/fast``'s average
    ``net/w/ema/fast`` as a raw weight (ks). The keys cannot tell the kernel from an average of
    the shadow (e4: ``ema/slow``'s is one): written raw it may be an average, left out a
    weight, so ``--raw`` refuses it as the map does; with no name stated too, where the keys
    read the shadows as averages (k1, e4). The offered ``--exclude`` exports the raw weights;
    with the ``.meta`` every kernel is written raw. Values as TensorFlow held them."""
    out, truth = under
    name, keys = SHADOWED[case]
    dest = tmp_path / f"{case}.npz"
    for stated in (["--ema-name", name], *([[]] if case != "ks" else [])):
        code, _, err = run_cli(["export", str(out / case), "--raw", *stated, "--no-meta",
                                "--out", str(dest)])
        assert code == 6 and not dest.exists(), (stated, err)
        assert all(f"--exclude '{k}'" in err for k in keys) and "drop --no-meta" in err, err
    raw = ["export", str(out / case), "--raw", "--ema-name", name]
    excluded = [a for k in keys for a in ("--exclude", k)]
    for extra in (["--no-meta", *excluded], []):
        code, _, err = run_cli([*raw, *extra, "--out", str(dest), "--force"])
        assert code == 0, (extra, err)
        want = ["net/b", "net/w", *(keys if not extra and case != "e4" else [])]
        with np.load(dest) as got:
            assert sorted(got.files) == sorted(want), (extra, got.files)
            for n in got.files:
                assert got[n].tobytes() == truth[f"{case}:raw:{n}"].tobytes(), (extra, n)


@pytest.mark.parametrize(("case", "name"), [("ee", "fast"), ("es", "ema/fast"),
                                            ("ss", "ema/fast")])
def test_an_average_averaged_again_is_never_a_weight_with_the_meta(under, tmp_path, case, name):
    """review-23-attack-r67 F1, F7 (and r65 F5's root): with the ``.meta``, the update ops
    prove ``net/w/<name>`` the first EMA's average of ``net/w``, whatever averages it in turn
    (``slow``'s, or a second ``ema/fast``'s). ``--raw`` wrote it as a model weight (es: under
    the generic warning; ee: under one calling it maybe a weight of yours) and ``--strict``
    exported the second object's average of it as one more weight (ss), exit 0. Now
    ``--raw`` writes ``net/w``, ``net/b`` only and ``--strict`` the first EMA's averages, as
    TensorFlow held them at save time."""
    out, truth = under
    dest = tmp_path / f"{case}.npz"
    for extra, kind in (["--raw"], "raw"), (["--strict"], "fast"):
        for stated in (["--ema-name", name], []):
            code, _, err = run_cli(["export", str(out / case), *extra, *stated,
                                    "--out", str(dest), "--force"])
            assert code == 0, (extra, stated, err)
            assert "may be model weights" not in err, err
            with np.load(dest) as got:
                assert sorted(got.files) == ["net/b", "net/w"], (extra, stated, got.files)
                for n in got.files:
                    assert got[n].tobytes() == truth[f"{case}:{kind}:{n}"].tobytes(), (extra, n)


def _raw(out, case, extra, dest):
    return run_cli(["export", str(out / case), "--raw", *extra, "--out", str(dest), "--force"])


@pytest.mark.parametrize(("case", "stated", "named"), [
    ("sf", [], "ema/fast"), ("af", ["--ema-name", "b/fast"], "a/fast"),
    ("le", ["--ema-name", "ema/fast"], "ema")])
def test_raw_names_keys_an_ema_name_reads_as_averages(under, tmp_path, case, stated, named):
    """review-23-attack-r67 F3, F10, F5: with no ``.meta``, ``net/w/<tail>`` beside a stored
    ``net/w`` of its dtype and shape is an average of an EMA named ``<tail>`` as much as a
    weight: ``--raw`` wrote ``ema/fast``'s (sf) or ``a/fast``'s (af) averages as weights with
    no word, and dropped a trainable ``net/w/ema`` under ``--ema-name ema/fast`` (le). Written
    as stored, with the warning naming them and the ``--ema-name`` that reads them as
    averages; the stated name's keys never. Values as TensorFlow held them at save time."""
    out, truth = under
    dest = tmp_path / f"{case}.npz"
    code, _, err = _raw(out, case, stated, dest)
    assert code == 0, err
    said = " ".join(err.split())
    assert "may be model weights or averages" in said and f"--ema-name {named})" in said, said
    held = {k.split(":", 2)[2]: v for k, v in truth.items() if k.startswith(f"{case}:")}
    want = sorted(k for k in held if not stated or not k.endswith("/" + stated[1]))
    with np.load(dest) as got:
        assert sorted(got.files) == want, got.files
        for n in got.files:
            assert got[n].tobytes() == held[n].tobytes(), n
    shown = [k for k in want if k.endswith("/" + named)]
    assert shown and all(k in said for k in shown), said

def test_raw_never_writes_a_stated_names_averages_as_weights(under, tmp_path):
    """review-23-attack-r67 F4: a Saver of ``fast``'s averages alone, read without the
    ``.meta``: ``--raw --ema-name fast`` wrote both averages as model weights, exit 0; keys
    ending in the name stated are averages, as keys ending in the default name are (exit 7)."""
    out, truth = under
    dest = tmp_path / "av.npz"
    assert truth["av:fast:net/w/fast"].tobytes() != truth["av:raw:net/w"].tobytes()
    code, _, err = _raw(out, "av", ["--ema-name", "fast"], dest)
    assert code == 7 and not dest.exists(), err
    assert "net/b/fast" in err and "--ema-name fast" in err, err


def test_raw_comma_names_ask_the_refusal(under, tmp_path):
    """review-23-attack-r67 F2: ``--raw --ema-name fast,slow`` skipped the refusal of a key
    under ``fast``'s shadow: the trainable kernel was dropped, exit 0."""
    out, _ = under
    dest = tmp_path / "k1.npz"
    code, _, err = _raw(out, "k1", ["--no-meta", "--ema-name", "fast,slow"], dest)
    assert code == 6 and not dest.exists(), err
    assert "--exclude 'net/w/fast/kernel'" in err, err


@pytest.mark.parametrize("extra", [["--strict"], ["--allow-missing"]])
def test_a_second_objects_averages_are_no_weight_without_an_average(under, tmp_path, extra):
    """review-23-attack-r67 F10: ``--ema-name a/fast`` with ``b/fast``'s averages beside it:
    "probably frozen" offered ``--allow-missing``, which exported ``b/fast``'s averages as
    model weights, exit 0. Refused naming them, ``--ema-name b/fast`` and ``--exclude`` (never
    ``--allow-missing``); the offered ``--exclude`` gives ``a/fast``'s averages bit for bit."""
    out, truth = under
    dest = tmp_path / "af.npz"
    stated = ["export", str(out / "af"), "--ema-name", "a/fast", *extra]
    code, _, err = run_cli([*stated, "--out", str(dest)])
    assert code == 6 and not dest.exists(), err
    said = " ".join(err.split())
    assert "--exclude 'net/w/b/fast'" in said and "--ema-name b/fast" in said, said
    assert "frozen" not in said and "--allow-missing" not in said, said
    code, _, err = run_cli([*stated, "--exclude", "net/*/b/fast", "--out", str(dest)])
    assert code == 0, err
    with np.load(dest) as got:
        assert sorted(got.files) == ["net/b", "net/w"]
        for n in got.files:
            assert got[n].tobytes() == truth[f"af:a/fast:{n}/a/fast"].tobytes(), n
