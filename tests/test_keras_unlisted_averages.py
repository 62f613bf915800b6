"""A tf_keras (Keras 2) run resumed from a ``tf.train.Checkpoint`` before its optimizer was
built (a deferred restore) saves the optimizer's ``use_ema`` averages among its variables,
named ``Adam/average/...``, but TensorFlow's object graph then records no
``_model_variables_moving_average`` list pairing them with the weights: nothing proves which
average is whose. The refusal said "no averages are stored ... likely cause: the optimizer had
use_ema=False", which is false here (note/s32m); it now names the tensors named as averages
and says that the file cannot tell them from an optimizer's own variables of that name
(test_keras_named_average_slot). Truth from
tf_keras' optimizer and ``tf.train.load_checkpoint`` in the generator."""

from __future__ import annotations

from helpers import run_cli
from helpers_keras import TF_KERAS, run_keras

SCRIPT = """
def make():
    m = K.Sequential([K.Input((5,)), K.layers.Dense(4), K.layers.Dense(3)])
    m.compile(K.optimizers.Adam(0.01, use_ema=True, ema_momentum=0.8), "mse")
    return m

rng = np.random.default_rng(0)
x = rng.normal(size=(16, 5)).astype("float32")
y = rng.normal(size=(16, 3)).astype("float32")
first = make()
first.fit(x, y, epochs=1, batch_size=4, verbose=0)
tf.train.Checkpoint(model=first, optimizer=first.optimizer).write(f"{out}/ck-1")
resumed = make()
ck = tf.train.Checkpoint(model=resumed, optimizer=resumed.optimizer)
ck.read(f"{out}/ck-1").assert_existing_objects_matched()  # before the optimizer is built
resumed.fit(x, y, epochs=1, batch_size=4, verbose=0)
ck.write(f"{out}/ck-2")
reader = tf.train.load_checkpoint(f"{out}/ck-2")
stored = [reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
          if k.startswith("optimizer/_variables/")]
for a in resumed.optimizer._model_variables_moving_average:
    # each live average is in the file, bit for bit
    truth[a.name[:-2]] = np.array(any(s.shape == a.shape and np.array_equal(s, a.numpy())
                                      for s in stored))
"""


def test_unlisted_averages_are_not_blamed_on_use_ema_false(tmp_path):
    truth = run_keras(SCRIPT, tmp_path, prelude=TF_KERAS)
    assert truth and all(bool(v) for v in truth.values()), truth  # stored, every one
    code, _, err = run_cli(["map", str(tmp_path / "ck-2")])
    said = " ".join(err.split())
    assert code == 6, err
    assert "likely cause: the optimizer had use_ema=False" not in said, err
    assert "no averages are stored" not in said, err
    assert "no average is proven for any of its 4 weights" in said, err
    assert "records no list pairing any with a weight" in said, err
    assert "either use_ema=True averages whose list was not tracked" in said, err
    shown = sorted(truth)[:3]  # the names it lists are the optimizer's own averages'
    assert f"named as its use_ema averages ({', '.join(shown)} and 1 more)" in said, (shown, err)
