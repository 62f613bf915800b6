"""What decides a Keras 3 EMA pairing the file cannot prove (review 11-attack-2), on files made
by ``fixtures/make_keras_decide.py`` with the truth read from the optimizer at save time.

- A refusal names the option that decides, and following it gives Keras' own averages bit for
  bit (``--use-ema`` plus ``--trainable`` in ``list``, ``map``, ``export``, ``restore-ema``).
- ``apply_keras_ema`` on a ``.keras`` pairs through the file's config, never by the live
  model's trainable flags: a model frozen differently is refused, never given another layer's
  averages; ``apply_keras_ema(keras.models.load_model(p), p)`` works.
- Two Keras models of the same name in one ``tf.train.Checkpoint`` are paired through each
  optimizer's own ``_trainable_variables``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import FIXTURES, run_cli, run_generator

pytest.importorskip("keras")



@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    # a directory that does not exist yet: the README runs the script into /tmp/kd
    out = tmp_path_factory.mktemp("keras_decide") / "kd"
    return out, run_generator("make_keras_decide.py", out)


def _read(path: Path) -> dict[str, np.ndarray]:
    from ckpt_tools import open_checkpoint

    with open_checkpoint(path) as ckpt:
        return {k: np.array(ckpt.tensor(k)) for k in ckpt.keys()}


def test_frozen_copy_refusals_name_what_decides_and_it_gives_keras_truth(made, tmp_path):
    """A trainable layer and its frozen copy (same shapes), bare .weights.h5, mid-training:
    refused first for use_ema, then for the frozen set, each naming its option; --use-ema
    with --trainable (Keras' own variable paths, or layer names, or @FILE) gives the
    averages bit for bit, and the other layer keeps its raw values."""
    out, truth = made
    path = str(out / "frozen_copy.weights.h5")
    code, _, err = run_cli(["map", "--not-swapped", path])
    assert code == 6 and "--use-ema or --no-use-ema" in err, err
    code, _, err = run_cli(["map", "--not-swapped", path, "--use-ema"])
    assert code == 6 and "--trainable" in err and "\n" not in err.strip(), err
    assert "have no optimizer variables" not in err, err  # the frozen set is not known
    code, text, err = run_cli(["list", path, "--use-ema"])
    text += err  # the summary goes to stderr when piped
    assert code == 0 and "pass --trainable to decide" in text and "none of" not in text, text
    order = [str(p) for p in truth["frozen_copy:trainable"]]
    assert order == ["online/kernel", "online/bias"]
    (tmp_path / "t.txt").write_text("# model.trainable_variables\n" + "\n".join(order) + "\n")
    for stated in (",".join(order), "online", "@" + str(tmp_path / "t.txt")):
        target = tmp_path / "e.npz"
        code, text, err = run_cli(["export", "--not-swapped", path, "--out", str(target), "--force",
                                   "--use-ema", "--trainable", stated])
        assert code == 0 and "2 with EMA values" in text, err
        with np.load(target) as z:
            got = {k: z[k] for k in z.files}
        for name in ("online/kernel", "online/bias"):
            assert got[name].tobytes() == truth[f"frozen_copy:ema:{name}"].tobytes(), name
        for name in ("target/kernel", "target/bias"):
            assert got[name].tobytes() == truth[f"frozen_copy:raw:{name}"].tobytes(), name
    args = ["--use-ema", "--trainable", "online"]
    code, text, _ = run_cli(["map", "--not-swapped", path, "--json", *args])
    assert code == 0
    stored = _read(out / "frozen_copy.weights.h5")
    pairs = {t: s for s, t in json.loads(text).items() if s != t}
    assert sorted(pairs) == ["layers/dense/vars/0", "layers/dense/vars/1"] or len(pairs) == 2
    code, text, _ = run_cli(["list", path, "--json", *args])
    listing = json.loads(text)
    emas = {v["path"]: v["ema_of"] for v in listing["variables"] if v["role"] == "ema"}
    assert len(emas) == 2 and listing["ema_evidence"]["source"] == "stated"
    code, text, err = run_cli(["restore-ema", "--not-swapped",
                               path, "--out", str(tmp_path / "r.weights.h5"),
                               "--json", *args])
    assert code == 0, err
    baked = _read(Path(json.loads(text)["output"]))
    for key, src in pairs.items():
        assert baked[key].tobytes() == stored[src].tobytes(), key
    # a name that is not in the file: exit 3, naming what is
    code, _, err = run_cli(["map", "--not-swapped", path, "--use-ema", "--trainable", "nope"])
    assert code == 3 and "'nope' names no weight" in err and "online/kernel" in err, err


def test_apply_keras_ema_refuses_a_model_frozen_differently_from_the_keras_file(made):
    """Training froze l0; the live model froze l2 instead (same count, same shapes): pairing
    by its trainable_variables would give l0 the average of l1. config.json's flags (l0
    frozen at save) fit, but so do other sets of layers of these shapes (the flags may have
    changed since the optimizer was built): neither the file nor the live model proves it,
    so it is refused whatever the live flags, untouched; trainable= decides."""
    from ckpt_tools import EmaError, apply_keras_ema

    sys.path.insert(0, str(FIXTURES))
    try:
        import make_keras_decide as mk
    finally:
        sys.path.remove(str(FIXTURES))
    out, truth = made
    live = mk.three()
    live.layers[2].trainable = False
    before = [v.numpy().copy() for v in live.weights]
    with pytest.raises(EmaError, match=r"3 sets of layers fit.*at save time.*trainable"):
        apply_keras_ema(live, out / "frozen_l0.keras", not_swapped=True)
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, live.weights, strict=True))
    live = mk.three()
    live.layers[0].trainable = False  # frozen as in training: still no proof
    with pytest.raises(EmaError, match=r"at save time"):
        apply_keras_ema(live, out / "frozen_l0.keras", not_swapped=True)
    # stated: each layer gets its own average, l0 its raw weights
    got = apply_keras_ema(live, out / "frozen_l0.keras",
                          trainable=[v.path for v in live.trainable_variables], not_swapped=True)
    assert [p.split("/", 1)[1] for p in got] == ["l1/kernel", "l1/bias", "l2/kernel", "l2/bias"]
    for v in live.weights:
        name = v.path.split("/", 1)[1]
        kind = "raw" if name.startswith("l0/") else "ema"
        assert v.numpy().tobytes() == truth[f"frozen_l0:{kind}:seq/{name}"].tobytes(), name


def test_apply_keras_ema_on_a_bare_weights_file_lets_the_live_model_decide_counts_checked(
        made):
    """A bare .weights.h5 records no trainable flags: the live model's trainable_variables
    decide (documented), but only when their number fits the file's averages exactly."""
    from ckpt_tools import EmaError, apply_keras_ema

    sys.path.insert(0, str(FIXTURES))
    try:
        import make_keras_decide as mk
    finally:
        sys.path.remove(str(FIXTURES))
    out, truth = made
    live = mk.three()  # all 6 trainable; the file holds 4 averages
    with pytest.raises(EmaError, match="do not fit EMA copies of exactly the model's 6|"
                                       "holds 4 EMA copies but the model has 6"):
        apply_keras_ema(live, out / "frozen_l0.weights.h5", use_ema=True, not_swapped=True)
    live = mk.three()
    live.layers[0].trainable = False
    apply_keras_ema(live, out / "frozen_l0.weights.h5", use_ema=True, not_swapped=True)
    for v in live.trainable_variables:
        name = v.path.split("/", 1)[1]
        assert v.numpy().tobytes() == truth[f"frozen_l0:ema:seq/{name}"].tobytes(), name


def test_readme_recipe_load_model_then_apply_on_a_layer_frozen_after_training(made):
    """apply_keras_ema(keras.models.load_model(p), p): l1 was frozen after training (the
    optimizer still holds its average); every layer gets its own average, bit for bit."""
    import warnings

    import keras

    from ckpt_tools import apply_keras_ema

    out, truth = made
    path = out / "frozen_after.keras"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = keras.models.load_model(path)
    got = apply_keras_ema(model, path, not_swapped=True)
    assert len(got) == 6
    for v in model.weights:
        name = "/".join(v.path.split("/")[-2:])  # l1/kernel (load_model names no model)
        assert v.numpy().tobytes() == truth[f"frozen_after:ema:seq/{name}"].tobytes(), v.path


def test_two_models_of_the_same_name_pair_through_their_own_optimizer(made):
    """Generator and critic both named 'net', each with its own Adam(use_ema=True), in one
    tf.train.Checkpoint: each average is paired with the variable its own optimizer holds
    (the object graph records optimizer._trainable_variables), bit for bit."""
    out, truth = made
    prefix = out / "same_name" / "ckpt-1"
    code, text, err = run_cli(["map", "--not-swapped", str(prefix), "--json"])
    assert code == 0, err
    pairs = {s: t for s, t in json.loads(text).items() if s != t}
    stored = _read(prefix)
    assert len(pairs) == 8
    from ckpt_tools import open_checkpoint

    with open_checkpoint(prefix) as ckpt:
        names = ckpt.reader.objects.full_names if hasattr(ckpt.reader, "objects") else None
        names = names or ckpt.objects.full_names
    for src, dst in pairs.items():
        owner = "same_name_gen" if src.startswith("gen_opt/") else "same_name_critic"
        path = names[dst]
        assert stored[src].tobytes() == truth[f"{owner}:ema:{path}"].tobytes(), src
        assert stored[dst].tobytes() == truth[f"{owner}:raw:{path}"].tobytes(), dst


def test_two_models_of_the_same_name_list_and_export_apart(made, tmp_path):
    """The generator's and critic's variables share their own names (net/h/kernel): list
    shows each under the root that tracks it (gen_opt/net/h/kernel, critic_opt/...), never two
    identical rows, and export writes them under those names (it used to stop, exit 7,
    advising a --rename that could not separate them), each with its own average."""
    out, truth = made
    prefix = out / "same_name" / "ckpt-1"
    code, text, err = run_cli(["list", str(prefix), "--role", "weight"])
    assert code == 0, err
    rows = [line.split("\t")[0] for line in text.splitlines() if "\tweight\t" in line]
    assert len(rows) == 8 and len(set(rows)) == 8, rows
    assert "gen_opt/net/h/kernel" in rows and "critic_opt/net/h/kernel" in rows, rows
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped", str(prefix), "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        got = {k: z[k] for k in z.files}
    assert len(got) == 8
    for name, value in got.items():
        root, path = name.split("/", 1)
        owner = {"gen_opt": "same_name_gen", "critic_opt": "same_name_critic"}[root]
        assert value.tobytes() == truth[f"{owner}:ema:{path}"].tobytes(), name


@pytest.mark.parametrize("name,stated,conflict", [
    ("frozen_l0.keras", "seq/l2,seq/l1", "model's at name 1"),  # alphabetical-style order
    ("frozen_after.keras", "seq/l1,seq/l0,seq/l2", "model's at name 1"),
    ("frozen_after.keras", "seq/l1,seq/l2", "trainable at save"),
])
def test_trainable_contradicting_config_json_is_refused(made, tmp_path, name, stated, conflict):
    """A .keras of a Sequential model records the weights' order, and where one set of layers
    alone fits the averages (frozen_after: all of them) which ones the optimizer held: a
    --trainable that contradicts them is exit 6 naming the conflict, nothing written."""
    out, _ = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped", str(out / name), "--trainable", stated,
                            "--out", str(target)])
    assert code == 6 and "contradicts config.json" in err and conflict in err, err
    assert name in err and len(err.strip().splitlines()) == 1, err
    assert not target.exists()


@pytest.mark.parametrize("name,stated", [("frozen_l0.keras", "seq/l1,seq/l2"),
                                         ("frozen_after.keras", "seq/l0,seq/l1,seq/l2")])
def test_trainable_agreeing_with_config_json_gives_keras_truth(made, tmp_path, name, stated):
    out, truth = made
    case = name.split(".")[0]
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped", str(out / name), "--trainable", stated,
                            "--out", str(target)])
    assert code == 0, err
    with np.load(target) as z:
        for key in z.files:
            full = key if key.startswith("seq/") else f"seq/{key}"
            want = truth.get(f"{case}:ema:{full}")
            want = truth[f"{case}:raw:{full}"] if want is None else want
            assert z[key].tobytes() == want.tobytes(), key


def test_frozen_layers_that_could_have_swapped_are_refused_until_stated(made, tmp_path):
    """frozen_l0: l0 frozen at save, three equal Dense layers. config.json's flags are those at
    save; {l0, l1} or {l0, l2} fit the averages as well as {l1, l2} (a layer unfrozen and
    another frozen since the optimizer was built): exit 6 naming --trainable, nothing
    written. What the caller states decides (here l1, l2: Keras' truth, tested above)."""
    out, _ = made
    target = tmp_path / "w.npz"
    code, _, err = run_cli(["export", "--not-swapped",
                            str(out / "frozen_l0.keras"), "--out", str(target)])
    assert code == 6 and "--trainable" in err and "at save time" in err, err
    assert not target.exists()


@pytest.mark.parametrize("name,option", [("frozen_l0.keras", "--trainable"),
                                         ("frozen_l0.weights.h5", "--use-ema/--no-use-ema")])
def test_every_keras_function_raises_the_unproven_refusal_export_weights_raises(
        made, tmp_path, name, option):
    """review-23-user-u25 F1: keras_ema_values, apply_keras_ema, apply_ema and bake_ema raised
    a plain EmaError (no option) where export_weights raises UnprovenPairingError for the
    same file; the README promises UnprovenPairingError with the option that decides, so a
    script can retry with it. Each refuses with that class and option, the model untouched."""
    import ckpt_tools

    sys.path.insert(0, str(FIXTURES))
    try:
        import make_keras_decide as mk
    finally:
        sys.path.remove(str(FIXTURES))
    out, _ = made
    path = out / name

    def model():
        live = mk.three()
        live.layers[0].trainable = False  # frozen as in training
        return live

    calls = {
        "export_weights": lambda: ckpt_tools.export_weights(path, tmp_path / "w.npz",
                                                            not_swapped=True),
        "keras_ema_values": lambda: ckpt_tools.keras_ema_values(path, not_swapped=True),
        "apply_keras_ema": lambda: ckpt_tools.apply_keras_ema(live, path, not_swapped=True),
        "apply_ema": lambda: ckpt_tools.apply_ema(live, path, not_swapped=True),
        "bake_ema": lambda: ckpt_tools.bake_ema(path, tmp_path / "baked", not_swapped=True),
    }
    for what, call in calls.items():
        live = model()
        before = [v.numpy().tobytes() for v in live.weights]
        with pytest.raises(ckpt_tools.UnprovenPairingError) as raised:
            call()
        assert raised.value.option == option, (what, raised.value.option, str(raised.value))
        assert [v.numpy().tobytes() for v in live.weights] == before, what
    assert not (tmp_path / "w.npz").exists() and not (tmp_path / "baked").exists()
