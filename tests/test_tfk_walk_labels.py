"""A tf_keras subclassed model's ``.keras`` / ``.weights.h5`` names the layers it holds in a
list (``model.layers``, ``self.blocks``) by its saving walk: ``layers/dense``,
``layers/dense_1``, numbered by class in the order the walk reaches them, not by the layers'
names. A model that made ``b = Dense()`` before ``a = Dense()`` and tracks ``a`` first saves
``a`` as ``dense`` while Keras named it ``dense_1``: ``--trainable zz,dense_1,dense`` (the
order ``model.trainable_variables`` printed) was accepted and put each of ``a``'s averages on
``b`` and back, exit 0 (review-11-attack-r14 F3). Such made-up names are refused where another
layer of the same shapes could be meant; the file's keys give the averages tf_keras' optimizer
kept (recorded at save time in a subprocess by the real tf_keras), bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli, run_script

pytest.importorskip("tf_keras")

SCRIPT = r'''
import sys
import numpy as np
import tf_keras

out, shape = sys.argv[1], sys.argv[2]
L = tf_keras.layers


class M(tf_keras.Model):
    def __init__(self):
        super().__init__()
        b = L.Dense(4)  # named dense: made first
        a = L.Dense(4)  # named dense_1
        self.zz = L.Dense(4, name="zz")
        if shape == "attrs":
            self.aa, self.bb = a, b
        else:
            self.blocks = [a, b]
        self.a, self.b = a, b

    def call(self, x):
        return self.b(self.a(self.zz(x)))


tf_keras.utils.set_random_seed(0)
m = M()
m(np.zeros((1, 4), "float32"))
opt = tf_keras.optimizers.SGD(0.05, momentum=0.9, use_ema=True, ema_momentum=0.9)
m.compile(opt, "mse")
x = np.random.RandomState(0).randn(16, 4).astype("float32")
m.fit(x, x, epochs=1, batch_size=8, verbose=0)
m.train_on_batch(x, x)
ema = {id(v): opt._model_variables_moving_average[opt._index_dict[opt._var_key(v)]]
       for v in m.trainable_variables}
arrays = {f"{n}.{w}": ema[id(getattr(getattr(m, n), w))].numpy()
          for n in ("zz", "a", "b") for w in ("kernel", "bias")}
arrays.update({f"raw.{n}.{w}": getattr(getattr(m, n), w).numpy()
               for n in ("zz", "a", "b") for w in ("kernel", "bias")})
open(out + "/printed.txt", "w").write(",".join(
    v.name.split("/")[1] for v in m.trainable_variables[::2]))
m.save(out + "/m.keras")
m.save_weights(out + "/m.weights.h5")
np.savez(out + "/truth.npz", **arrays)
'''


@pytest.fixture(scope="module", params=["attrs", "list"])
def made(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"tfk_walk_{request.param}")
    truth = run_script(SCRIPT, out, request.param)
    return out, truth, (out / "printed.txt").read_text()


def _export(path, tmp_path, stated: str):
    out = tmp_path / "w.npz"
    extra = ["--use-ema", "--optimizer", "sgd:momentum"] if path.name.endswith(
        ".weights.h5") else []
    code, _, err = run_cli(["export", str(path), *extra, "--trainable", stated,
                            "--out", str(out)])
    got = None
    if out.exists():
        with np.load(out) as z:
            got = {k: z[k] for k in z.files}
        out.unlink()
    return code, err, got


@pytest.mark.parametrize("name", ["m.keras", "m.weights.h5"])
def test_printed_layer_names_are_refused(made, name, tmp_path):
    out, _, printed = made
    assert printed == "zz,dense_1,dense"  # a (dense_1) before b (dense), as trained
    per_weight = ",".join(f"{n}/{w}" for n in printed.split(",")
                          for w in ("kernel", "bias"))
    for stated in (printed, per_weight):
        code, err, got = _export(out / name, tmp_path, stated)
        assert code == 6 and got is None, err
        text = " ".join(err.split())
        assert len(err.strip().splitlines()) == 1 and "m." in text, err
        assert "does not record" in text and "layers/dense/vars/0" in text, err


def _which(truth, value) -> str:
    """The layer weight (``a.kernel``) whose raw value at save time is ``value``."""
    (hit,) = [k[4:] for k in truth if k.startswith("raw.") and truth[k].tobytes()
              == value.tobytes()]
    return hit


@pytest.mark.parametrize("name", ["m.keras", "m.weights.h5"])
def test_the_files_keys_give_the_truth(made, name, tmp_path):
    out, truth, _ = made
    code, _, err = run_cli(["export", str(out / name), "--raw", "--out", str(tmp_path / "r.npz")])
    assert code == 0, err
    with np.load(tmp_path / "r.npz") as z:
        raw = {k: z[k] for k in z.files}
    owner = {k: _which(truth, v) for k, v in raw.items()}  # display name -> layer weight
    # The statement in the file's keys, in the order the optimizer was built: zz, a, b.
    group = {"zz": "zz"}
    for shown, held in owner.items():
        if held in ("a.kernel", "b.kernel"):
            group[held[0]] = "layers/" + shown.split("/")[0]
    keys = [f"{group[n]}/vars/{i}" for n in ("zz", "a", "b") for i in (0, 1)]
    code, err, got = _export(out / name, tmp_path, ",".join(keys))
    assert code == 0, err
    assert sorted(got) == sorted(owner)
    for shown, value in got.items():
        assert value.tobytes() == truth[owner[shown]].tobytes(), shown


def test_the_refusal_asks_for_the_files_keys(made, tmp_path):
    """Without a statement the refusal names the keys, not the made-up layer names."""
    out, _, _ = made
    code, _, err = run_cli(["export", str(out / "m.keras"), "--out", str(tmp_path / "w.npz")])
    assert code == 6 and not (tmp_path / "w.npz").exists(), err
    assert "layers/<layer>/vars/<i>" in " ".join(err.split()), err
