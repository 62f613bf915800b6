"""A user's ``tf.train.ExponentialMovingAverage`` beside a Keras 3 optimizer's ``use_ema``
copies in one ``tf.train.Checkpoint`` (review-28-attack-r104 F5). ``SwapEMAWeights`` swaps
only the model's variables with the optimizer's copies, so ``--ema-name ema`` (the user
object's averages of every weight, no copy read and no raw weight written) no longer asks for
``--not-swapped``; ``--ema-name optimizer`` and a user EMA that leaves a weight raw
(``--allow-missing``) still do. Real Keras 3 / TensorFlow; truth is ``ema.average(v)`` and
``optimizer._model_variables_moving_average`` at save time."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import assert_npz_holds, run_cli, run_script

SCRIPT = r"""
import os, sys
import numpy as np
import tensorflow as tf
import keras
out = sys.argv[1]
keras.utils.set_random_seed(1)
net = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="d1"),
                        keras.layers.Dense(2, name="d2")], name="net")
opt = keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.9, ema_overwrite_frequency=None)
vs = [v.value for v in net.trainable_variables]
e = tf.train.ExponentialMovingAverage(0.5)
s = tf.train.ExponentialMovingAverage(0.9, name="late")
x = tf.constant(np.arange(12, dtype="float32").reshape(4, 3) / 10)
@tf.function
def step():
    with tf.GradientTape() as t:
        loss = tf.reduce_mean((net(x) - 1.0) ** 2)
    g = t.gradient(loss, net.trainable_variables)
    opt.apply_gradients(zip(g, net.trainable_variables))
    e.apply(vs)
    s.apply(vs)
for _ in range(3):
    step()
a = [e.average(v) for v in vs]
tf.train.Checkpoint(model=net, optimizer=opt, ema=a).write(os.path.join(out, "all", "ckpt"))
tf.train.Checkpoint(model=net, optimizer=opt, ema=a[:2]).write(os.path.join(out, "d1", "ckpt"))
b = [s.average(v) for v in vs]  # slow's averages of d2 kept beside e's of d1, and all apart
tf.train.Checkpoint(model=net, optimizer=opt, ema=a[:2] + b[2:], slow=b).write(
    os.path.join(out, "split", "ckpt"))
t = {}
for v, av, ov in zip(vs, a, opt._model_variables_moving_average):
    name = v.path if hasattr(v, "path") else v.name.split(":")[0]
    t["user:" + name] = av.numpy(); t["opt:" + name] = ov.numpy(); t["raw:" + name] = v.numpy()
# "sw" (review-33-attack-r132 C2): ckpt-1 saved while the weights are swapped with the
# optimizer's copies (SwapEMAWeights' swap), ckpt-2 unswapped; truth: the copies before the swap
def swap():
    for v, ov in zip(opt._trainable_variables, opt._model_variables_moving_average):
        r = tf.identity(v.value); v.assign(ov); ov.assign(r)
sw = tf.train.Checkpoint(model=net, optimizer=opt)
for k, swapped in ((1, True), (2, False)):
    step()
    for v, ov in zip(vs, opt._model_variables_moving_average):
        t[f"sw{k}:" + (v.path if hasattr(v, "path") else v.name.split(":")[0])] = ov.numpy()
    if swapped: swap()
    sw.save(os.path.join(out, "sw", "ckpt"))
    if swapped: swap()
np.savez(os.path.join(out, "truth.npz"), **t)
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    pytest.importorskip("tensorflow")
    pytest.importorskip("keras")
    out = tmp_path_factory.mktemp("userema_useema")
    return out, run_script(SCRIPT, out)


def _of(truth, kind: str) -> dict[str, np.ndarray]:
    return {k.split(":", 1)[1]: v for k, v in truth.items() if k.startswith(kind + ":")}


def test_user_ema_of_every_weight_asks_no_swap_question(made, tmp_path):
    out, truth = made
    code, _o, err = run_cli(["export", str(out / "all"), "-o", str(tmp_path / "x.npz"),
                             "--ema-name", "ema"])
    assert code == 0, err
    assert "SwapEMAWeights" not in err, err
    assert_npz_holds(tmp_path / "x.npz", _of(truth, "user"))


def test_the_optimizers_copies_still_ask_it(made, tmp_path):
    out, truth = made
    code, _o, err = run_cli(["export", str(out / "all"), "-o", str(tmp_path / "o.npz"),
                             "--ema-name", "optimizer"])
    assert code == 6 and "--not-swapped" in err, err
    code, _o, err = run_cli(["export", str(out / "all"), "-o", str(tmp_path / "o.npz"),
                             "--ema-name", "optimizer", "--not-swapped"])
    assert code == 0, err
    assert_npz_holds(tmp_path / "o.npz", _of(truth, "opt"))


def test_a_raw_weight_beside_the_user_averages_still_asks_it(made, tmp_path):
    """``d2``'s key is a model weight a swap would have replaced with the optimizer's average:
    written raw under ``--allow-missing``, the question stays."""
    out, _truth = made
    code, _o, err = run_cli(["export", str(out / "d1"), "-o", str(tmp_path / "r.npz"),
                             "--ema-name", "ema", "--allow-missing"])
    assert code == 6 and "--not-swapped" in err, err
    assert not (tmp_path / "r.npz").exists()


@pytest.mark.parametrize("command", ["map", "restore-ema", "restore-ema --dry-run"])
def test_map_and_restore_ema_say_no_swap_note_for_the_user_averages(made, command, tmp_path):
    """s29j F5 left: only export's note was filtered by what it read; ``map`` and
    ``restore-ema`` of the user object's averages (no copy read, no weight left raw) printed
    the SwapEMAWeights note too. The optimizer's copies still ask it."""
    out, _truth = made
    cmd, *more = command.split()
    dest = [] if cmd == "map" else ["-o", str(tmp_path / "r"), *more, "--json"]
    code, doc, err = run_cli([cmd, str(out / "all"), "--ema-name", "ema", *dest])
    assert code == 0, err
    assert "SwapEMAWeights" not in err and '"assumed"' not in doc, err
    code, _o, err = run_cli([cmd, str(out / "all"), "--ema-name", "optimizer",
                             *([] if cmd == "map" else ["-o", str(tmp_path / "o")])])
    assert code == 6 and "--not-swapped" in err, err


@pytest.mark.parametrize("command", ["map", "export", "restore-ema"])
def test_not_swapped_stated_names_no_copy_read_for_the_user_averages(made, command, tmp_path):
    """s30d "Left": with --not-swapped, the user object's averages read (no copy) still got
    "note: EMA copies read as the averages because you stated --not-swapped", naming an
    object the command never read. Only the optimizer's copies get it now."""
    out, truth = made
    dest = {"map": [], "export": ["-o", str(tmp_path / "x.npz")],
            "restore-ema": ["-o", str(tmp_path / "r")]}[command]
    code, _o, err = run_cli([command, str(out / "all"), "--ema-name", "ema", "--not-swapped",
                             *dest])
    assert code == 0, err
    assert "EMA copies read as the averages" not in err, err
    if command == "export":
        assert_npz_holds(tmp_path / "x.npz", _of(truth, "user"))
    dest = {"map": [], "export": ["-o", str(tmp_path / "y.npz")],
            "restore-ema": ["-o", str(tmp_path / "s")]}[command]
    code, _o, err = run_cli([command, str(out / "all"), "--ema-name", "optimizer",
                             "--not-swapped", *dest])
    assert code == 0, err
    assert "EMA copies read as the averages because you stated --not-swapped" in " ".join(
        err.split()), err


def test_stats_says_why_a_user_average_has_no_drift(made):
    """``stats`` shows the user averages' drift from the weights, which a swap replaces: the
    question is real there, and its note says so rather than calling them swapped copies."""
    out, _truth = made
    code, _o, err = run_cli(["stats", str(out / "all"), "--ema-name", "ema"])
    assert code == 0, err
    assert re.search(r"\b1 average shown has no drift|\d+ averages shown have no drift", err)
    assert "shown" in err and "measured from the weights" in err, err
    assert "EMA cop(ies)" not in err, err


def test_a_refusals_probes_leave_no_not_swapped_stated(made, tmp_path):
    """The refusal's offers are probed, the swap question set aside by a retry with
    ``not_swapped``; ema_map stated it on the open checkpoint it was given, so it stayed
    stated after the refusal: a Python caller's next call on that checkpoint read the
    optimizer's copies as the averages without ``--not-swapped`` (exit 0), and ``show`` of a
    copy printed "because you stated --not-swapped" (s30d, seen beside s29j F5)."""
    from ckpt_tools import UnprovenPairingError, export_weights, open_checkpoint

    out, _truth = made
    with open_checkpoint(str(out / "all")) as ckpt:
        with pytest.raises(UnprovenPairingError):
            export_weights(ckpt, tmp_path / "a.npz", ema=True)
        assert not ckpt.not_swapped
        with pytest.raises(UnprovenPairingError) as exc:
            export_weights(ckpt, tmp_path / "b.npz", ema=True, ema_name="optimizer")
        assert exc.value.option == "--not-swapped", str(exc.value)
    assert not (tmp_path / "b.npz").exists()
    code, _o, err = run_cli(["show", str(out / "all"), "sgd/net_d1_kernel_average"])
    assert "you stated --not-swapped" not in err, err
    assert code == 6 and "--not-swapped" in err, err


def test_apply_ema_of_the_user_averages_asks_no_swap_question(made):
    """``apply_ema(..., ema_name="ema")`` asked for ``not_swapped=True`` where the CLI's
    ``--ema-name ema`` does not: a swap would have exchanged only the model's weights and the
    optimizer's copies, neither of which is read, so the user object's averages are assigned
    as they are, bare model or wrapped (review-32-attack-r123 M2). The optimizer's copies
    still ask it."""
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    from ckpt_tools import UnprovenPairingError, apply_ema

    out, truth = made
    user, opt = list(_of(truth, "user").values()), list(_of(truth, "opt").values())
    for wrap in (False, True):
        net = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="d1"),
                                keras.layers.Dense(2, name="d2")], name="net")
        live = tf.train.Checkpoint(model=net) if wrap else net
        apply_ema(live, str(out / "all"), ema_name="ema")
        for v, want in zip(net.trainable_variables, user, strict=True):
            np.testing.assert_array_equal(v.numpy(), want)
        with pytest.raises(UnprovenPairingError) as exc:
            apply_ema(live, str(out / "all"), ema_name="optimizer")
        assert exc.value.option == "--not-swapped", str(exc.value)
        apply_ema(live, str(out / "all"), ema_name="optimizer", not_swapped=True)
        for v, want in zip(net.trainable_variables, opt, strict=True):
            np.testing.assert_array_equal(v.numpy(), want)


def test_only_what_is_read_asks_it_where_the_user_ema_averaged_d1_alone(made, tmp_path):
    """``d1`` holds the user object's averages of d1 only (d2 left out of ``ema=``): d1's
    variables given to ``apply_ema``, or ``--include 'net/d1/*'``, read only those averages,
    which a swap never touches, yet the whole checkpoint's map asked the question of d2, which
    nothing read (review-33-attack-r127 M2). d2 read raw, or the optimizer's copies, still
    ask it."""
    pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    from ckpt_tools import UnprovenPairingError, apply_ema

    out, truth = made
    user = _of(truth, "user")
    net = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="d1"),
                            keras.layers.Dense(2, name="d2")], name="net")
    d1, d2 = net.trainable_variables[:2], net.trainable_variables[2:]
    apply_ema(d1, str(out / "d1"), ema_name="ema")
    for v, name in zip(d1, ("net/d1/kernel", "net/d1/bias"), strict=True):
        np.testing.assert_array_equal(v.numpy(), user[name])
    for variables, options in ((d2, {"ema_name": "ema", "allow_missing": True}),
                               (d1, {"ema_name": "optimizer"})):
        with pytest.raises(UnprovenPairingError) as exc:
            apply_ema(variables, str(out / "d1"), **options)
        assert exc.value.option == "--not-swapped", str(exc.value)
    for chosen in (["--include", "net/d1/*"], ["--exclude", "net/d2/*"]):
        code, _o, err = run_cli(["export", str(out / "d1"), "-o", str(tmp_path / "x.npz"),
                                 "--ema-name", "ema", "--force", *chosen])
        assert code == 0, err
        assert_npz_holds(tmp_path / "x.npz", {k: v for k, v in user.items() if "/d1/" in k})
    code, _o, err = run_cli(["export", str(out / "d1"), "-o", str(tmp_path / "y.npz"),
                             "--ema-name", "ema", "--allow-missing", "--include", "net/d2/*"])
    assert code == 6 and "--not-swapped" in err, err
    assert not (tmp_path / "y.npz").exists()


def test_not_swapped_over_weights_left_raw_says_so_not_copies_read(made, tmp_path):
    """The user object's averages of d1 and d2 written raw under ``--allow-missing
    --not-swapped``: the note said "EMA copies read as the averages", where no copy was
    read; what the statement decided is that d2's stored weights are raw
    (review-33-attack-r127 m1)."""
    out, truth = made
    code, _o, err = run_cli(["export", str(out / "d1"), "-o", str(tmp_path / "r.npz"),
                             "--ema-name", "ema", "--allow-missing", "--not-swapped"])
    assert code == 0, err
    line = " ".join(err.split())
    assert "EMA copies read" not in line, line
    assert "net/d2/kernel, net/d2/bias are read as stored, raw, because you stated " \
           "--not-swapped" in line, line
    user, raw = _of(truth, "user"), _of(truth, "raw")
    assert_npz_holds(tmp_path / "r.npz", {k: user[k] if "/d1/" in k else raw[k] for k in raw})


def test_split_holders_are_named_by_the_models_paths(made, tmp_path):
    """Two holders of averages named late: the refusal named the weights by the optimizer's
    references (optimizer/_trainable_variables/2), not the paths every other line shows
    (review-33-attack-r127 m1)."""
    out, _truth = made
    code, _o, err = run_cli(["export", str(out / "split"), "-o", str(tmp_path / "x.npz"),
                             "--ema-name", "late"])
    assert code == 6, err
    line = " ".join(err.split())
    assert "ema holds the averages of net/d2/kernel, net/d2/bias;" in line, line
    assert "optimizer/_trainable_variables" not in line, line


@pytest.mark.parametrize("chosen", [["--exclude", "net/d2/*"], ["--allow-missing"]])
def test_restore_ema_asks_it_of_the_weights_it_copies_and_marks_them_raw(made, tmp_path, chosen):
    """restore-ema writes d2 (which the user object did not average) as stored, whether
    ``--exclude`` left it out or ``--allow-missing`` left it raw: what d2's key holds (raw, or
    the optimizer's average after a swap) is the question, yet ``--exclude`` skipped it and the
    output's mark said every plain name held averages, so ``export --raw`` recorded d2's raw
    weights as averages (review-33-attack-r132 C1). Refused until ``--not-swapped``; then the
    mark lists d2 raw and keeps the statement."""
    import json
    import zipfile

    out, truth = made
    cmd = ["restore-ema", str(out / "d1"), "--ema-name", "ema", *chosen]
    code, _o, err = run_cli([*cmd, "-o", str(tmp_path / "no")])
    assert code == 6 and "--not-swapped" in err, err
    assert not (tmp_path / "no").exists()
    code, _o, err = run_cli([*cmd, "--not-swapped", "-o", str(tmp_path / "r")])
    assert code == 0, err
    code, _o, err = run_cli(["export", str(tmp_path / "r" / "ckpt"), "--raw",
                             "-o", str(tmp_path / "r.npz")])
    assert code == 0, err
    user, raw = _of(truth, "user"), _of(truth, "raw")
    assert_npz_holds(tmp_path / "r.npz", {k: user[k] if "/d1/" in k else raw[k] for k in raw})
    record = json.loads(zipfile.ZipFile(tmp_path / "r.npz").comment)["ckpt_tools"]
    assert record.get("values") == "mixed" and not record.get("weights_are_averages"), record
    assert sorted(record.get("raw", [])) == ["net/d2/bias", "net/d2/kernel"], record
    assert record.get("stated") == ["not_swapped"], record


def test_bake_asks_every_input_not_the_newest_alone(made, tmp_path):
    """``average --ema --bake`` asked ``--not-swapped`` of the newest input only: beside a
    ``restore-ema --not-swapped`` output of ckpt-2 (whose mark answers it for ckpt-2), ckpt-1,
    saved swapped, had its copies (its raw weights) averaged in as averages, exit 0
    (review-33-attack-r132 C2). Each input is asked now; the refusal names ckpt-1."""
    out, truth = made
    sw = out / "sw"
    code, _o, err = run_cli(["restore-ema", str(sw / "ckpt-2"), "--not-swapped",
                             "-o", str(tmp_path / "r")])
    assert code == 0, err
    code, _o, err = run_cli(["average", "--ema", "--bake", str(sw / "ckpt-1"),
                             str(tmp_path / "r" / "ckpt-2"), "-o", str(tmp_path / "b")])
    assert code == 6 and "--not-swapped" in err, err
    assert f"{sw / 'ckpt-1'}: " in err, err
    assert not (tmp_path / "b").exists()
    # the truth it would have mixed: ckpt-1's stored weights are its copies, not its raw ones
    import tensorflow as tf

    stored = tf.train.load_checkpoint(str(sw / "ckpt-1"))
    key = "optimizer/_trainable_variables/0/.ATTRIBUTES/VARIABLE_VALUE"  # net/d1/kernel
    np.testing.assert_array_equal(stored.get_tensor(key), truth["sw1:net/d1/kernel"])
