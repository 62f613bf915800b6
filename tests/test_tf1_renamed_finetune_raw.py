"""A fine-tune that loaded a training run's averages into its variables, trained, and saved
with a Saver renaming the vtr keys (``{"model/" + k: v for k, v in vtr.items()}``): the keys
are named as averages (``model/fc/w/ExponentialMovingAverage``) but the ``.meta``'s save op
wrote each from the model variable itself, so they hold the fine-tuned RAW weights
(review-26-attack-r91). How the averages got in:

* ``init_from``: ``tf1.train.init_from_checkpoint`` (no restoring Saver);
* ``vtr_w``: a partial restoring ``Saver(ema.variables_to_restore([fc/w]))``;
* ``crossed``: a restoring Saver crossing fc/w's and fc2/w's averages;
* ``apply_fresh``: a full vtr restorer, and the fine-tune's own ``ema.apply()``; the renaming
  Saver is built from a fresh object's vtr (``model/fc/w/ExponentialMovingAverage_1 <- fc/w``).

Made here by TensorFlow (a subprocess), the truth read from the session at save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import raw_bytes, run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = r'''


def model():
    x = tf1.placeholder_with_default(tf.ones([2, 3]), [None, 3], name="x")
    w = tf1.get_variable("fc/w", [3, 3], initializer=tf1.random_normal_initializer(seed=1))
    w2 = tf1.get_variable("fc2/w", [3, 3], initializer=tf1.random_normal_initializer(seed=2))
    b = tf1.get_variable("fc/b", [3], initializer=tf1.random_normal_initializer(seed=3))
    return [w, w2, b], tf.reduce_sum(tf.square(tf.matmul(tf.matmul(x, w) + b, w2)))


with tf.Graph().as_default():  # the training run, with ema.apply()
    gs = tf1.train.get_or_create_global_step()
    vs, loss = model()
    step = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=gs)
    ema = tf1.train.ExponentialMovingAverage(0.5, num_updates=gs)
    with tf.control_dependencies([step]):
        op = ema.apply(vs)
    with tf1.Session() as s:
        s.run(tf1.global_variables_initializer())
        for _ in range(3):
            s.run(op)
        tf1.train.Saver().save(s, f"{out}/train/model.ckpt", global_step=gs)
        for v in vs:
            truth[f"ema:{v.op.name}"] = s.run(ema.average(v).read_value())
src = tf.train.latest_checkpoint(f"{out}/train")
for kind in ("init_from", "vtr_w", "crossed", "apply_fresh"):
    with tf.Graph().as_default():  # the fine-tune
        gs = tf1.train.get_or_create_global_step()
        vs, loss = model()
        w, w2, b = vs
        e0 = tf1.train.ExponentialMovingAverage(0.5)
        rs = None
        if kind == "apply_fresh":
            rs = tf1.train.Saver(e0.variables_to_restore())
        elif kind == "vtr_w":
            rs = tf1.train.Saver(e0.variables_to_restore([w]))
        elif kind == "crossed":
            rs = tf1.train.Saver({e0.average_name(w): w2, e0.average_name(w2): w,
                                  e0.average_name(b): b, "global_step": gs})
        else:
            tf1.train.init_from_checkpoint(
                src, {f"{v.op.name}/ExponentialMovingAverage": v for v in vs})
        step = tf1.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=gs)
        if kind == "apply_fresh":
            own = tf1.train.ExponentialMovingAverage(0.5, num_updates=gs)
            with tf.control_dependencies([step]):
                step = own.apply(vs)
        vtr = tf1.train.ExponentialMovingAverage(0.5).variables_to_restore()
        saver = tf1.train.Saver({"model/" + k: v for k, v in vtr.items()})
        with tf1.Session() as s:
            s.run(tf1.global_variables_initializer())
            if rs is not None:
                rs.restore(s, src)
            for _ in range(3):
                s.run(step)
            saver.save(s, f"{out}/{kind}/model.ckpt", global_step=gs)
            for v in vs:
                truth[f"{kind}:{v.op.name}"] = s.run(v.read_value())
'''

CASES = ("init_from", "vtr_w", "crossed", "apply_fresh")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("tf1_renamed_finetune")
    return out, run_tf1_script(SCRIPT, out)


@pytest.mark.parametrize("case", CASES)
def test_raw_tensor_averages_never_writes_raw_as_averages(made, case, tmp_path):
    """``export --raw --tensor-averages`` wrote the fine-tuned raw weights as "averaged",
    exit 0, no warning (review-26-attack-r91 F1): the save op wrote each key from a trainable
    model variable, never a tensor's average. Refused (exit 6) saying so."""
    out, truth = made
    dst = tmp_path / "e.npz"
    code, text, err = run_cli(["export", str(out / case), "--raw", "--tensor-averages",
                               "--json", "--out", str(dst)])
    err = " ".join(err.split())
    if code == 0:  # only ever as raw weights, never as averages
        doc = json.loads(text)
        assert doc["averaged"] == [], doc
        with np.load(dst) as z:
            for n in z.files:
                assert any(raw_bytes(z[n]) == raw_bytes(truth[f"{case}:{v}"])
                           for v in ("fc/w", "fc2/w", "fc/b")), n
        return
    assert code == 6 and not dst.exists(), err
    assert "--keys-are-raw" in err and "no model weights" not in err, err
    assert "raw values" in err or "raw weights" in err, err


@pytest.mark.parametrize("case", CASES)
def test_raw_export_rests_on_keys_are_raw_by_the_save_op(made, case, tmp_path):
    """Where no restoring Saver names every key (init_from_checkpoint, a partial or crossed
    restorer) ``--raw`` said the file holds no model weights (exit 7) or that some keys are
    not their own variable's, and ``--raw --keys-are-raw`` that it has no such key (exit 2):
    false (review-26-attack-r91 F2); so for a fine-tune with its own ema.apply() whose
    renaming Saver came from a fresh object (``..._1`` keys; F3). The save op proves each
    key's variable: ``--raw`` refuses naming ``--keys-are-raw``, which writes the fine-tuned
    raw weights bit for bit, none as an average."""
    out, truth = made
    dst = tmp_path / "e.npz"
    code, _, err = run_cli(["export", str(out / case), "--raw", "--out", str(dst)])
    err = " ".join(err.split())
    assert code == 6 and not dst.exists(), err
    assert "--keys-are-raw" in err and "no model weights" not in err, err
    assert "some are not" not in err, err
    code, text, err = run_cli(["export", str(out / case), "--raw", "--keys-are-raw", "--json",
                               "--out", str(dst)])
    assert code == 0, err
    doc = json.loads(text)
    assert doc["averaged"] == [] and len(doc["raw"]) == 3, doc
    with np.load(dst) as z:
        assert len(z.files) == 3, z.files
        for n in z.files:
            var = n.removeprefix("model/")
            assert raw_bytes(z[n]) == raw_bytes(truth[f"{case}:{var}"]), n
            assert raw_bytes(z[n]) != raw_bytes(truth[f"ema:{var}"]), n  # fine-tuned, not averages
