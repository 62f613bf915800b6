"""The names ``ckpt list`` gives a Keras 3 file's optimizer variables (review-13-user-u15 F6).

A ``.keras`` stores them by position (``optimizer/vars/4``). Keras names them in memory after
their weight (``adam/d2_kernel_average``); ``ckpt`` gave that name to every copy, also to the
copies of weights of one shape and dtype, which only the assumed ``fit()`` build order pairs:
the table then looked proven where it was not. Those copies (and their slots) kept the name
the file stores (``optimizer/vars/4``) beside Keras' names, two schemes in one table
(review-30-user-u32 F6): they now take Keras' name marked ``?``, and a line under the table
says why; a copy whose shape alone pairs it keeps Keras' own name, which must be
the name Keras gave that very variable (truth recorded from the optimizer at save time).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli


@pytest.fixture(scope="module")
def saved(keras, tmp_path_factory):
    d = tmp_path_factory.mktemp("copy_names")
    keras.utils.set_random_seed(2)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, name="d1"),
                              keras.layers.Dense(8, name="d2"), keras.layers.Dense(3, name="o")],
                             name="net")
    # named: Keras numbers unnamed optimizers per process (adam_14 after other tests' Adams)
    model.compile(keras.optimizers.Adam(0.01, use_ema=True, ema_momentum=0.8, name="adam"),
                  "mse")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 5)).astype("float32")
    y = rng.normal(size=(16, 3)).astype("float32")
    truth: dict = {}

    class Snap(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch:
                return
            o = self.model.optimizer
            truth.update({v.path: a.path for v, a in zip(
                o._trainable_variables, o._model_variables_moving_average, strict=True)})
            self.model.save(str(d / "m.keras"))

    model.fit(x, y, epochs=2, batch_size=4, verbose=0, callbacks=[Snap()])
    return d / "m.keras", truth


def test_copies_only_the_fit_order_pairs_are_named_marked(saved):
    path, truth = saved
    code, out, err = run_cli(["list", str(path), "--json"])
    assert code == 0, err
    doc = json.loads(out)
    assert "fit_order" in doc["assumed"]  # d1/d2 biases (and d2's kernel and... ) share shapes
    rows = {v["key"]: v for v in doc["variables"]}
    weight_path = {v["key"]: v["path"] for v in doc["variables"] if v["role"] == "weight"}
    copies = [v for v in doc["variables"] if v["role"] == "ema"]
    assert len(copies) == len(truth) == 6
    shapes = [tuple(v["shape"]) for v in copies]
    for v in copies:
        of = weight_path[v["ema_of"]]
        keras_path = f"net/{of}" if f"net/{of}" in truth else of
        # the name Keras gave it; --json's path carries no display mark, path_by_order says
        # where only the assumed order (fit() built in that order) names it (u33 F2)
        assert v["path"] == truth[keras_path], (v, truth)
        assert v["path_by_order"] is (shapes.count(tuple(v["shape"])) > 1), v
    # the slots of the open group's weights are named so too, one scheme (u32 F6)
    derived = sorted((r["path"], r["path_by_order"]) for r in rows.values()
                     if r["role"] == "optimizer_slot" and "d1_bias" in (r["path"] or ""))
    assert derived == [("adam/net_d1_bias_momentum", True),
                       ("adam/net_d1_bias_velocity", True)], derived
    # stated, the order names them again (the statement is noted)
    code, out, err = run_cli(["list", str(path), "--json", "--trainable", "d1,d2,o"])
    assert code == 0, err
    named = [v["path"] for v in json.loads(out)["variables"] if v["role"] == "ema"]
    assert sorted(named) == sorted(truth.values())
    assert not any(v["path_by_order"] for v in json.loads(out)["variables"])
    name = truth["net/d1/bias"]  # show --json as list --json (u33 F2)
    code, out, err = run_cli(["show", str(path), name + "?", "--json", "--not-swapped"])
    assert code == 0, err
    (doc,) = json.loads(out)["tensors"]
    assert (doc["path"], doc["path_by_order"]) == (name, True), doc
    code, out, err = run_cli(["diff", str(path), str(path), "--grep", name + "?", "--json"])
    assert code == 0, err
    (doc,) = json.loads(out)["tensors"]  # diff --json too
    assert (doc["path"], doc["path_by_order"]) == (name, True), doc


def test_list_table_names_an_assumed_copy_as_the_others(saved):
    path, _ = saved
    code, out, err = run_cli(["list", str(path), "--role", "ema"])
    assert code == 0, err
    names = [line.split("\t")[0] for line in out.splitlines()[2:] if line]
    assert not any(n.startswith("optimizer/vars/") for n in names), names  # one scheme (u32 F6)
    assert "adam/net_d1_bias_average?" in names and "adam/net_d1_bias_average" not in names
    said = " ".join(err.split())
    assert "a name ending in '?' (adam/net_d1_bias_average?)" in said, said


def test_a_marked_name_is_selected_without_its_mark(saved):
    """review-33-user-u33 F6: a name shown with '?' had to be typed with it (a glob's
    wildcard) to be selected: ``show``, ``stats``/``list --grep`` and ``export --exclude`` of
    the name Keras gave the variable (the truth, recorded from the optimizer) found nothing or
    refused; now they select what the marked name selects."""
    path, truth = saved
    name = truth["net/d1/bias"]  # adam/net_d1_bias_average: shown marked '?'
    code, out, err = run_cli(["show", str(path), name, "--json", "--not-swapped"])
    assert code == 0, err
    (doc,) = json.loads(out)["tensors"]
    assert (doc["path"], doc["path_by_order"]) == (name, True), doc
    for cmd in (["list", str(path), "--grep", name, "-q"],
                ["list", str(path), "--grep", name, "--json"],
                ["stats", str(path), "--grep", name, "--json"]):
        bare, marked = run_cli(cmd), run_cli([*cmd[:3], name + "?", *cmd[4:]])
        assert bare[0] == marked[0] == 0, (cmd, bare, marked)
        assert bare[1] == marked[1] and name in bare[1], (cmd, bare, marked)
    out_dir = path.parent
    for n, glob in enumerate((name, name + "?")):
        code, out, err = run_cli(["export", str(path), "--exclude", glob, "--not-swapped",
                                  "--fit-order", "--json", "--out", str(out_dir / f"x{n}.npz")])
        assert code == 0, err
        assert "d1/bias" not in json.loads(out)["tensors"], out
