"""Keras setups whose EMA copies are easy to pair with the wrong weight, made by
``fixtures/make_keras_pairing.py`` with the truth recorded from the library at save time: each
file is paired bit for bit with Keras' own averages, or refused (exit 6) with a true reason.
Never another variable's average, never raw weights, with exit 0."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import FIXTURES, run_cli, run_generator

pytest.importorskip("keras")
pytest.importorskip("tf_keras")



@pytest.fixture(scope="session")
def made(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    out = tmp_path_factory.mktemp("keras_pairing")
    return out, run_generator("make_keras_pairing.py", out)


def _exported(made, name: str, tmp_path: Path, *extra: str) -> tuple[int, dict, str]:
    out, _ = made
    target = tmp_path / "w.npz"
    # saved during training, never swapped: stated for Keras 3 files (a tf_keras TF-format
    # checkpoint has no SwapEMAWeights: --not-swapped is a usage error there)
    stated = [] if name.startswith("tfk_") and name.endswith("/ckpt") else ["--not-swapped"]
    stated = [] if "--raw" in extra else stated  # --raw --not-swapped: exit 2 (u16 F2)
    code, _, err = run_cli(["export", *stated, str(out / name), "--out", str(target),
                            "--force", *extra])
    if code:
        assert not target.exists()
        return code, {}, err
    with np.load(target) as z:
        return code, {k: z[k] for k in z.files}, err


def _check(truth: dict, case: str, got: dict, rename=lambda n: n) -> None:
    """Every exported weight holds exactly its own average (by Keras), bit for bit."""
    want = {k.split(":", 1)[1]: v for k, v in truth.items()
            if k.startswith(case + ":") and ":raw:" not in k}
    assert {rename(n) for n in got} == set(want)
    for name, value in got.items():
        assert value.tobytes() == want[rename(name)].tobytes(), name


@pytest.mark.parametrize("name", ["tfk_frozen_after.keras", "tfk_frozen_after_tf/ckpt"])
def test_tf_keras_layer_frozen_after_training_keeps_its_own_average(made, name, tmp_path):
    """tf_keras: the optimizer holds an average for each of the 6 variables it was built with;
    one layer was frozen before saving. The averages are not shifted onto the next layer."""
    _, truth = made
    code, got, err = _exported(made, name, tmp_path)
    assert code == 0, err
    layer = {f"layer_with_weights-{i}": n for i, n in enumerate(["dense", "dense_1", "dense_2"])}
    _check(truth, "tfk_frozen_after", got,
           lambda n: "/".join([layer.get(n.split("/")[0], n.split("/")[0])] + n.split("/")[1:]))
    if name.endswith(".keras"):
        code, text, _ = run_cli(["list", str(made[0] / name), "--json"])
        notes = json.loads(text)["ema_evidence"]["notes"]
        assert any("frozen after the optimizer was built" in n for n in notes), notes


def test_tf_keras_h5_without_optimizer_is_refused_in_keras_terms(made, tmp_path):
    code, _, err = _exported(made, "tfk_frozen_after.h5", tmp_path)
    # save_weights("x.h5") never stores optimizer state: said so, not "saved uncompiled"
    assert code == 6 and "weights-only HDF5 file" in err and "uncompiled" not in err, err


@pytest.mark.parametrize("ext", [".keras", ".weights.h5"])
def test_subclassed_attribute_order_is_never_taken_from_the_call_order(made, ext, tmp_path):
    """Attributes head, body, stem called stem -> body -> head: the averages follow the
    attributes, an order the file does not record. Values never decide it (a momentum encoder
    sits nearer the average than the layer it averages): refused naming --trainable; with
    --trainable in model.trainable_variables order the pairing is Keras' own, bit for bit."""
    _, truth = made
    stated = ["--use-ema"] if ext == ".weights.h5" else []
    code, _, err = _exported(made, f"k3_attr_order{ext}", tmp_path, *stated)
    assert code == 6 and "--trainable" in err and "values do not decide" in err, err
    assert len(err.strip().splitlines()) == 1, err
    order = [k.split(":", 1)[1] for k in truth
             if k.startswith("k3_attr_order:") and ":raw:" not in k]
    code, got, err = _exported(made, f"k3_attr_order{ext}", tmp_path, *stated,
                               "--trainable", ",".join(order))
    assert code == 0, err
    _check(truth, "k3_attr_order", got, _short)
    code, text, _ = run_cli(["list", str(made[0] / f"k3_attr_order{ext}"), "--json", *stated])
    assert json.loads(text)["ema_evidence"]["source"] != "values"


def _short(name: str) -> str:
    """Exported name (``head/0``, ``stem/kernel``) -> the truth's ``<layer>/<variable>``."""
    layer, _, var = name.rpartition("/")
    return f"{layer.rsplit('/', 1)[-1]}/{ {'0': 'kernel', '1': 'bias'}.get(var, var)}"


@pytest.mark.parametrize("ext", [".keras", ".weights.h5"])
def test_subclassed_sublayers_nothing_can_tell_apart_are_refused(made, ext, tmp_path):
    """Equal shapes, equal values: neither the file nor the values prove which average is
    whose. Refused by every command, with a reason that is true."""
    path = str(made[0] / f"k3_attr_tied{ext}")
    for args in (["map", path], ["export", path, "--out", str(tmp_path / "w.npz")],
                 ["restore-ema", path, "--out", str(tmp_path / "o")]):
        code, _, err = run_cli(args + (["--use-ema"] if ext == ".weights.h5" else []))
        assert code == 6 and "use_ema=False" not in err, (args, err)
        assert "averages one of" in err and "apply_keras_ema" in err, (args, err)
    assert not (tmp_path / "w.npz").exists()
    if ext == ".weights.h5":  # without the statement, the values cannot settle use_ema either
        code, _, err = run_cli(["map", "--not-swapped", path])
        assert code == 6 and "--use-ema or --no-use-ema" in err and "cannot tell" in err, err
        # following the refusal's advice (--trainable, in model.trainable_variables order)
        _, truth = made
        order = [k.split(":", 1)[1] for k in truth
                 if k.startswith("k3_attr_tied:") and ":raw:" not in k]
        code, got, err = _exported(made, "k3_attr_tied.weights.h5", tmp_path, "--use-ema",
                                   "--trainable", ",".join(order))
        assert code == 0, err
        _check(truth, "k3_attr_tied", got, _short)


def test_apply_keras_ema_pairs_the_subclassed_model_by_its_live_order(made):
    """The live model decides what the file cannot: its trainable order is the optimizer's."""
    import keras

    sys.path.insert(0, str(FIXTURES))
    try:
        import make_keras_pairing as mk
    finally:
        sys.path.remove(str(FIXTURES))
    from ckpt_tools import apply_keras_ema

    out, truth = made
    model = mk._net(keras, tied=False)
    model(np.zeros((1, 4), "float32"))
    apply_keras_ema(model, out / "k3_attr_order.weights.h5", use_ema=True, not_swapped=True)
    for var in model.trainable_variables:
        want = truth[f"k3_attr_order:{var.path.split('/', 1)[1]}"]
        assert np.asarray(var.numpy()).tobytes() == want.tobytes(), var.path


@pytest.mark.parametrize("name", ["k3_momentum.weights.h5", "k3_momentum_sub.keras",
                                  "k3_momentum_sub.weights.h5"])
def test_momentum_encoder_is_never_paired_by_values(made, name, tmp_path):
    """BYOL/MoCo: the frozen target, updated as an EMA of the online layer, sits nearer the
    optimizer's averages of ``online`` than ``online`` does. Values must not pick the pairing
    (they would pick the target): exit 6 naming --trainable, for every command; then
    ``--trainable online`` gives Keras' own averages on ``online``, ``target`` raw."""
    out, truth = made
    case = name.split(".")[0]
    path = str(out / name)
    stated = ["--use-ema"] if name.endswith(".weights.h5") else []
    code, text, err = run_cli(["list", path, *stated])
    assert code == 0 and "of ? (2 candidates" in text and "pass --trainable" in err, text + err
    assert "✓" not in text, text
    for args in (["map", path], ["export", path, "--out", str(tmp_path / "w.npz")],
                 ["restore-ema", path, "--out", str(tmp_path / "o")]):
        code, _, err = run_cli(args + stated)
        assert code == 6 and "--trainable" in err and "values do not decide" in err, (args, err)
    assert not (tmp_path / "w.npz").exists() and not (tmp_path / "o").exists()
    if name.endswith(".keras"):
        assert "bare .weights.h5" not in err, err
    code, got, err = _exported(made, name, tmp_path, *stated, "--trainable", "online")
    assert code == 0, err
    for var in ("kernel", "bias"):
        assert got[f"online/{var}"].tobytes() == truth[f"{case}:online/{var}"].tobytes()
        assert got[f"target/{var}"].tobytes() == truth[f"{case}:raw:target/{var}"].tobytes()


def test_apply_keras_ema_pairs_a_momentum_encoder_by_the_live_model(made):
    """Subclassed .keras: config.json records no frozen flags, so the live model decides: its
    trainable_variables (online) get Keras' averages; the frozen target keeps its raw values."""
    import keras

    sys.path.insert(0, str(FIXTURES))
    try:
        import make_keras_pairing as mk
    finally:
        sys.path.remove(str(FIXTURES))
    from ckpt_tools import apply_keras_ema

    out, truth = made
    for name, extra in (("k3_momentum_sub.keras", {}),
                        ("k3_momentum_sub.weights.h5", {"use_ema": True})):
        model = mk._momentum_sub(keras)
        model(np.zeros((1, 4), "float32"))
        model.target.trainable = False
        done = apply_keras_ema(model, out / name, **extra, not_swapped=True)
        assert done == [v.path for v in model.online.weights], done
        for var in model.online.weights:
            want = truth[f"k3_momentum_sub:{var.path.removeprefix('net/')}"]
            assert np.asarray(var.numpy()).tobytes() == want.tobytes(), (name, var.path)
        for var in model.target.weights:
            want = truth[f"k3_momentum_sub:raw:{var.path.removeprefix('net/')}"]
            assert np.asarray(var.numpy()).tobytes() == want.tobytes(), (name, var.path)


@pytest.mark.parametrize("case", ["k3_muon_frozen", "k3_muon_plain"])
def test_muon_count_of_averages_is_never_guessed(made, case, tmp_path):
    """Muon keeps one or two slots per weight (by rank): the count of its variables cannot prove
    how many are averages. A bare .weights.h5 (and a .keras with a frozen layer) is refused
    naming --trainable, never a momentum buffer written as an average; --trainable gives Keras'
    own averages, the frozen layer raw (a bare file: with --optimizer muon)."""
    out, truth = made
    if f"{case}:raw:seq/a/kernel" not in truth:
        pytest.skip("this Keras has no keras.optimizers.Muon")
    frozen = case == "k3_muon_frozen"
    refused = [".weights.h5"] + ([".keras"] if frozen else [])
    for ext in refused:
        code, _, err = _exported(made, f"{case}{ext}", tmp_path, "--use-ema")
        assert code == 6 and "--trainable" in err and "muon" in err.lower(), (ext, err)
        assert "do not fit the 6" not in err, err
    stated = "seq/a,seq/c" if frozen else "seq/a,seq/b,seq/c"
    # a bare .weights.h5 is read as Muon only where --optimizer muon states it: a custom class
    # named "muon" may keep a slot of its own first (review-15-attack-r30 F1)
    code, _, err = _exported(made, f"{case}.weights.h5", tmp_path, "--use-ema",
                             "--trainable", stated)
    assert code == 6 and "--optimizer muon" in err, err
    for ext in (".weights.h5", ".keras"):
        code, got, err = _exported(made, f"{case}{ext}", tmp_path, "--use-ema",
                                   "--trainable", stated,
                                   *(["--optimizer", "muon"] if ext == ".weights.h5" else []))
        assert code == 0, (ext, err)
        assert len(got) == 6, got
        for name, value in got.items():
            full = name if name.startswith("seq/") else f"seq/{name}"
            want = truth.get(f"{case}:{full}")
            if want is None:
                want = truth[f"{case}:raw:{full}"]
                assert frozen and "/b/" in full, full
            assert value.tobytes() == want.tobytes(), (ext, name)


def test_stats_show_diff_accept_the_trainable_they_ask_for(made):
    """show and diff --ema refuse the momentum encoder naming --trainable (stats shows the
    open copies without drift and names it: review-13-attack-r23 F6), and accept it: then the
    drift is that of Keras' own average from its own weight."""
    out, truth = made
    path = str(out / "k3_momentum.weights.h5")
    for args in (["stats", path], ["show", path, "optimizer/vars/2"], ["diff", path, "--ema"]):
        code, _, err = run_cli(args + ["--use-ema"])
        assert code == (0 if args[0] == "stats" else 6) and "--trainable" in err, (args, err)
        code, text, err = run_cli(args + ["--use-ema", "--trainable", "online", "--json",
                                          "--not-swapped"])  # saved mid-fit(), unswapped
        assert code == 0, (args, err)
        doc = json.loads(text)
        rows = {t["name"]: t for t in doc["tensors"]}
        if args[0] == "diff":
            row = rows["layers/dense/vars/0"]
            assert row["other"] == "optimizer/vars/2" and row["path"] == "online/kernel"
            drift = row["rel_l2"]
        else:
            row = rows["optimizer/vars/2"]
            assert row["ema_of"] == "layers/dense/vars/0", row
            drift = row["drift"]
        avg = truth["k3_momentum:online/kernel"].astype(np.float64)
        raw = truth["k3_momentum:raw:online/kernel"].astype(np.float64)
        assert drift == pytest.approx(np.linalg.norm(avg - raw) / np.linalg.norm(raw), rel=1e-6)


def _want(truth: dict, case: str, name: str) -> np.ndarray:
    """Keras' average of weight ``name`` recorded at save time, else its raw value."""
    want = truth.get(f"{case}:{name}")
    return truth[f"{case}:raw:{name}"] if want is None else want


@pytest.mark.parametrize("name", ["k3_unfreeze.keras", "tfk_unfreeze.keras"])
def test_flags_changed_since_the_optimizer_was_built_are_no_proof(made, name, tmp_path):
    """Gradual unfreezing: the optimizer averaged a and c (b frozen); before saving b was
    unfrozen and c frozen, same shapes. config.json's flags (those at save) fit the averages,
    and so do other sets of layers: exit 6 naming --trainable and saying why, nothing written;
    list shows '?'. --trainable with the layers as when the optimizer was built gives Keras'
    own averages, b raw, bit for bit."""
    out, truth = made
    case = name.split(".")[0]
    path = str(out / name)
    for args in (["map", path], ["export", path, "--out", str(tmp_path / "w.npz")],
                 ["restore-ema", path, "--out", str(tmp_path / "o")]):
        code, _, err = run_cli(args)
        assert code == 6 and "--trainable" in err and "at save time" in err, (args, err)
        assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "w.npz").exists() and not (tmp_path / "o").exists()
    code, text, err = run_cli(["list", path])
    assert code == 0 and "of ?" in text and "✓" not in text, text + err
    # the candidate weights are open too: '?', never 'missing'
    assert "missing" not in text and "? (2 averages" in text, text
    # tf_keras names the layers' directories dense, dense_1, dense_2; paths use the layers'
    # names from config.json (a, b, c), as Keras 3's do
    for stated in ("a,c", "s/a,s/c"):
        code, got, err = _exported(made, name, tmp_path, "--trainable", stated)
        assert code == 0, (stated, err)
        assert len(got) == 6, got
        for key, value in got.items():
            weight = "/".join(key.split("/")[-2:])
            assert value.tobytes() == _want(truth, case, weight).tobytes(), (stated, key)
        assert got[[k for k in got if k.endswith("kernel")][1]].tobytes() == truth[
            f"{case}:raw:b/kernel"].tobytes()
        code, text, err = run_cli(["list", path, "--trainable", stated])
        assert code == 0 and "EMA: 4 of 4 weights have a shadow" in err, text + err
        assert "missing" not in text and "?" not in text, text


@pytest.mark.parametrize("name", ["k3_unfreeze_tf/ckpt", "tfk_unfreeze_tf/ckpt"])
def test_flags_changed_since_build_tf_checkpoint_is_proven_by_names(made, name, tmp_path):
    """The same run's tf.train.Checkpoint / TF-format save_weights: the optimizer variables'
    names carry the weight paths (sgd/s_c_kernel_average, SGD/average/c/kernel), which proves
    each pairing whatever the flags: bit for bit, no option needed."""
    out, truth = made
    case = name.split("_tf")[0]
    code, got, err = _exported(made, name, tmp_path)
    assert code == 0, err
    assert len(got) == 6, got
    layer = {"layer_with_weights-0": "a", "layer_with_weights-1": "b",
             "layer_with_weights-2": "c"}
    for key, value in got.items():
        parts = key.split("/")[-2:]
        weight = f"{layer.get(parts[0], parts[0])}/{parts[1]}"
        assert value.tobytes() == _want(truth, case, weight).tobytes(), key


def test_show_of_a_layer_name_suggests_the_weight_its_average_names(made):
    """review-22-user-u24 F2: a tf_keras TF-format file stores layer ``c``'s kernel as
    ``layer_with_weights-2/kernel``; only its average ``SGD/average/c/kernel`` names ``c``.
    ``show FILE c/kernel`` suggested nothing of the weight; it names the weight and that
    average (layers created a, b, c: ``layer_with_weights-2`` is ``c``, as the export test
    above reads it bit for bit)."""
    code, out, err = run_cli(["show", str(made[0] / "tfk_unfreeze_tf/ckpt"), "c/kernel"])
    assert code == 3 and out == "", err
    assert "did you mean layer_with_weights-2/kernel (averaged as SGD/average/c/kernel)?" \
        in err, err


def test_apply_keras_ema_flags_changed_since_build_needs_trainable(made):
    """apply_keras_ema(load_model(p), p) on the gradual-unfreezing .keras: load_model sets
    config.json's flags (those at save), which prove nothing here: refused, the model left
    untouched. trainable= (paths as Keras prints them, or layer names) gives Keras' averages."""
    import warnings

    import keras

    from ckpt_tools import EmaError, apply_keras_ema

    out, truth = made
    path = out / "k3_unfreeze.keras"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = keras.models.load_model(path)
    before = [np.asarray(v.numpy()).copy() for v in model.weights]
    with pytest.raises(EmaError, match="at save time.*trainable"):
        apply_keras_ema(model, path, not_swapped=True)
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, model.weights, strict=True))
    model.layers[1].trainable, model.layers[2].trainable = False, True  # as when built
    for stated in ([v.path for v in model.trainable_variables], ["a", "c"]):
        got = apply_keras_ema(model, path, trainable=stated, not_swapped=True)
        assert [p.split("/")[-2] for p in got] == ["a", "a", "c", "c"]
        for v in model.weights:
            weight = "/".join(v.path.split("/")[-2:])
            assert np.asarray(v.numpy()).tobytes() == _want(truth, "k3_unfreeze",
                                                            weight).tobytes(), v.path


@pytest.mark.parametrize("ext", [".keras", ".weights.h5"])
def test_batch_norm_in_a_subclassed_model_takes_keras_own_trainable_paths(made, ext, tmp_path):
    """A subclassed model with BatchNormalization: the file names its variables bn/0..bn/3.
    --trainable as Keras prints model.trainable_variables (net/bn/gamma, net/bn/beta) names
    the first two (BN's trainable weights), never the moving statistics: Keras' averages,
    the statistics raw, bit for bit."""
    out, truth = made
    stated = json.loads((out / "truth.json").read_text())["k3_bn_sub:trainable"]
    assert "net/bn/gamma" in stated and "net/bn/moving_mean" not in stated
    extra = ["--use-ema"] if ext == ".weights.h5" else []
    code, _, err = _exported(made, f"k3_bn_sub{ext}", tmp_path, *extra)
    assert code == 6 and "--trainable" in err, err
    code, got, err = _exported(made, f"k3_bn_sub{ext}", tmp_path, *extra,
                               "--trainable", ",".join(stated))
    assert code == 0, err
    bn = ["gamma", "beta", "moving_mean", "moving_variance"]
    dense = ["kernel", "bias"]
    averaged = 0
    for key, value in got.items():
        layer, var = key.split("/")[-2:]
        if var.isdigit():
            var = (bn if layer == "bn" else dense)[int(var)]
        averaged += f"k3_bn_sub:{layer}/{var}" in truth
        assert value.tobytes() == _want(truth, "k3_bn_sub", f"{layer}/{var}").tobytes(), key
    assert len(got) == 8 and averaged == 6, got


def test_keras_tf_checkpoint_with_colliding_average_names_pairs_by_recorded_order(made,
                                                                                   tmp_path):
    """tf.train.Checkpoint of a Keras 3 model whose layer x_dense and block x/dense give both
    averages the name adam/net_x_dense_kernel_average: the object graph records the
    optimizer's _trainable_variables and _variables in order, and Keras builds the averages in
    that order: each weight gets Keras' own average, bit for bit (no false 'no averages
    stored' refusal)."""
    out, truth = made
    code, text, err = run_cli(["list", str(out / "k3_collide_tf/ckpt")])
    assert code == 0 and "EMA: 4 of 4 weights have a shadow" in err, text + err
    code, got, err = _exported(made, "k3_collide_tf/ckpt", tmp_path)
    assert code == 0, err
    code, raw, err = _exported(made, "k3_collide_tf/ckpt", tmp_path, "--raw")
    assert code == 0, err
    assert set(got) == set(raw) and len(got) == 4, got
    raws = {k.split(":raw:")[1]: v for k, v in truth.items() if k.startswith("k3_collide:raw:")}
    for key, value in got.items():
        # which weight each exported key is: its raw value says (random, all distinct)
        (path,) = [p for p, v in raws.items() if v.tobytes() == raw[key].tobytes()]
        assert value.tobytes() == truth[f"k3_collide:{path}"].tobytes(), (key, path)


def test_untrained_keras_with_use_ema_is_not_called_use_ema_false(made, tmp_path):
    """Saved before training with SGD(use_ema=True): refused (no averages exist yet), saying
    what config.json records (use_ema=True) and that the optimizer was never built."""
    code, _, err = _exported(made, "k3_untrained.keras", tmp_path)
    assert code == 6 and "use_ema=True" in err and "never built" in err, err
    assert "use_ema=False" not in err, err


@pytest.mark.parametrize("extra", [(), ("--use-ema",)])
def test_untrained_bare_weights_h5_says_never_built_not_use_ema_false(made, tmp_path, extra):
    """Its bare .weights.h5 holds only iteration/learning_rate: no averages exist whatever
    use_ema was (even stated with --use-ema), so the refusal says the optimizer was never
    built, never that it "had use_ema=False"."""
    code, _, err = _exported(made, "k3_untrained.weights.h5", tmp_path, *extra)
    assert code == 6 and "never built" in err and "iteration/learning_rate" in err, err
    assert "had use_ema=False" not in err, err
