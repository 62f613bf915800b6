"""``ckpt average`` of a run resumed in a new process that numbered its names on
(review-32-attack-r120 F3 MAJOR, a regression of a7e8012): the resumed process built something
first (an evaluation copy with its own EMA, a throwaway Keras model), so TF / Keras recorded the
same holders as ``w/ExponentialMovingAverage_1``, ``sequential_1/dense_2/kernel``, ``adam_1/...``.
Requiring equal names refused every such run ("the holders changed", no option decides). Names
that differ only by ``_N`` counters kept in order (and each input's proven EMA pairing the
same) are averaged now; a list rebuilt in another order (the counters reversed) is still
refused. Each save in its own process; truth from ``ema.average(v).numpy()`` and the Keras
optimizer's ``_model_variables_moving_average`` at save time; output read by
``tf.train.load_checkpoint``."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli
from helpers_keras import run_keras

# one save per process: argv[2] = 1 (ck-1) or 2 (resume from argv[3]'s ck-1 after building an
# evaluation copy / throwaway model first, so TF and Keras number the run's own names on)
_BODY = """
k, first = int(sys.argv[2]), (sys.argv[3] if len(sys.argv) > 3 else None)
def module():
    m = tf.Module()
    m.w = tf.Variable(tf.zeros([3]), name="w"); m.b = tf.Variable(tf.zeros([3]), name="b")
    return m
def steps(vs, ema, n=2):
    for _ in range(n):
        for v in vs: v.assign_add(tf.random.normal(v.shape))
        ema.apply(vs)
# review-33-attack-r127 M1: names ending in _N that are the user's or Keras' own, no apply()
# order in them: "named", tf.Module "net"'s w_1, w_2 (TF records net/w_1, net/w_2) with their
# averages in a list; "unnamed_k3", Keras 3 add_weight() without a name (variable, variable_1)
nm = tf.Module(name="net")
with nm.name_scope:
    nm.w_1 = tf.Variable(tf.zeros([3]), name="w_1"); nm.w_2 = tf.Variable(tf.zeros([2]), name="w_2")
ne = tf.train.ExponentialMovingAverage(0.5); ne.apply([nm.w_1, nm.w_2])
steps([nm.w_1, nm.w_2], ne)
tf.train.Checkpoint(model=nm, ema=[ne.average(nm.w_1), ne.average(nm.w_2)]).write(
    f"{out}/named/ck")
class Lin(keras.layers.Layer):
    def build(self, shape):
        self.a = self.add_weight(shape=(shape[-1], 2)); self.c = self.add_weight(shape=(2,))
    def call(self, x): return x @ self.a + self.c
lm = keras.Sequential([keras.Input((3,)), Lin(), Lin()], name="lins")
for v in lm.weights: v.assign(tf.random.normal(v.shape) + k)
tf.train.Checkpoint(model=lm).write(f"{out}/unnamed_k3/ck")
truth.update({"named:names": np.array([nm.w_1.name, nm.w_2.name]),
              "unnamed_k3:names": np.array([v.path for v in lm.weights])})
if k == 2:  # an evaluation copy with its own EMA, made before the training objects
    ev = module(); l0 = tf.Variable(tf.zeros([3]), name="w")
    tf.train.ExponentialMovingAverage(0.5).apply([ev.w, ev.b, l0])
# "module": one model, ONE default-named EMA, averages in a list
m = module(); step = tf.Variable(0, dtype=tf.int64); e = tf.train.ExponentialMovingAverage(0.5)
e.apply([m.w, m.b])
ck = tf.train.Checkpoint(step=step, model=m, ema=[e.average(m.w), e.average(m.b)])
if k == 2: ck.read(f"{first}/module/ck").assert_consumed()
steps([m.w, m.b], e); step.assign_add(100); ck.write(f"{out}/module/ck")
truth.update({"module:w": e.average(m.w).numpy(), "module:b": e.average(m.b).numpy()})
# "reorder": two layers' weights both named w; the averages' list rebuilt in another order
l1, l2 = tf.Module(), tf.Module()
l1.w = tf.Variable(tf.zeros([3]), name="w"); l2.w = tf.Variable(tf.zeros([3]), name="w")
r = tf.train.ExponentialMovingAverage(0.5); r.apply([l1.w, l2.w]); steps([l1.w, l2.w], r)
held = [r.average(l1.w), r.average(l2.w)]
truth.update({"reorder:l1": l1.w.numpy(), "reorder:l2": l2.w.numpy()})
tf.train.Checkpoint(layers=[l1, l2], ema=held if k == 1 else held[::-1]).write(
    f"{out}/reorder/ck")
# "reorder0" (review-32-attack-r123 M1): the resume's throwaway EMA takes v/...Average, so its
# list rebuilt reversed records v/..._1 under ema/1 in both saves (l1's in ck-1, l2's in ck-2)
if k == 2: tf.train.ExponentialMovingAverage(0.5).apply([tf.Variable(tf.zeros([3]), name="v")])
q1, q2 = tf.Module(), tf.Module()
q1.v = tf.Variable(tf.zeros([3]), name="v"); q2.v = tf.Variable(tf.zeros([3]), name="v")
q = tf.train.ExponentialMovingAverage(0.5); q.apply([q1.v, q2.v]); steps([q1.v, q2.v], q)
qs = [q.average(q1.v), q.average(q2.v)]
tf.train.Checkpoint(ema=qs if k == 1 else qs[::-1]).write(f"{out}/reorder0/ck")
# "keras": an unnamed Sequential of two Dense, Adam(use_ema), one epoch per process
def make():
    net = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4), keras.layers.Dense(4)])
    net.compile(keras.optimizers.Adam(0.01, use_ema=True, ema_momentum=0.8), "mse")
    return net
if k == 2: make()  # the throwaway model: Keras names the run's sequential_1, dense_2, adam_1
net = make(); opt = net.optimizer; kck = tf.train.Checkpoint(model=net, optimizer=opt)
if k == 2:
    opt.build(net.trainable_variables)
    kck.read(f"{first}/keras/ck").assert_existing_objects_matched()
rng = np.random.default_rng(k)
net.fit(rng.normal(size=(8, 5)).astype("float32"), rng.normal(size=(8, 4)).astype("float32"),
        epochs=1, batch_size=4, verbose=0)
kck.write(f"{out}/keras/ck")
for i, a in enumerate(opt._model_variables_moving_average):
    truth[f"keras:{i}"] = a.numpy()
# "unnamed" (review-32-attack-r121 F3): unnamed w, b (TF names both Variable); process 1
# applies [w, b], the resume m.trainable_variables = [b, w]: ema/0 holds
# Variable/ExponentialMovingAverage in both saves, w's average in ck-1 and b's in ck-2
u = tf.Module(); u.w = tf.Variable(tf.zeros([3])); u.b = tf.Variable(tf.zeros([3]))
if k == 2: tf.train.Checkpoint(model=u).read(f"{first}/unnamed/ck").expect_partial()
uo = [u.w, u.b] if k == 1 else list(u.trainable_variables)
ue = tf.train.ExponentialMovingAverage(0.5); ue.apply(uo); steps(uo, ue)
tf.train.Checkpoint(model=u, ema=[ue.average(v) for v in uo]).write(f"{out}/unnamed/ck")
# review-32-attack-r125 F1: the averages alone (no weight of that name saved beside them)
tf.train.Checkpoint(ema=[ue.average(v) for v in uo]).write(f"{out}/unnamed_avgonly/ck")
# session 33: the weights in a list too (model/0, model/1): ema/0's place matches model/0's,
# yet a list's place proves nothing (it follows the order the code iterated in)
tf.train.Checkpoint(model=[u.w, u.b], ema=[ue.average(v) for v in uo]).write(
    f"{out}/unnamed_listed/ck")
# ... and r125 F1 under a custom EMA name: Variable/fast, Variable/fast_1 in apply() order
fe = tf.train.ExponentialMovingAverage(0.5, name="fast"); fe.apply(uo)
tf.train.Checkpoint(ema=[fe.average(v) for v in uo]).write(f"{out}/fast_avgonly/ck")
truth.update({"fast:names": np.array([fe.average(v).name for v in uo]),
              "fast:w": fe.average(u.w).numpy(), "fast:ema0": fe.average(uo[0]).numpy()})
truth.update({"unnamed:w": ue.average(u.w).numpy(), "unnamed:b": ue.average(u.b).numpy(),
              "unnamed:ema0": ue.average(uo[0]).numpy(), "unnamed:rw": u.w.numpy(),
              "unnamed:rb": u.b.numpy()})
# the same run's averages kept by the user's own key (session 33): "dict", a dict keyed by the
# weights' paths; "attr", an attribute beside its weight (m.enc.w_avg). Their names swap with
# the apply order as ema/0's do; their places do not
d = tf.Module(); d.w = tf.Variable(tf.zeros([3])); d.b = tf.Variable(tf.zeros([3]))
a = tf.Module(); a.enc = tf.Module(); a.dec = tf.Module()
a.enc.w = tf.Variable(tf.zeros([3])); a.dec.b = tf.Variable(tf.zeros([3]))
if k == 2:
    tf.train.Checkpoint(model=d).read(f"{first}/dict/ck").expect_partial()
    tf.train.Checkpoint(model=a).read(f"{first}/attr/ck").expect_partial()
emas = {}
for case, w, b, order in (("dict", d.w, d.b, list(d.trainable_variables)),
                          ("attr", a.enc.w, a.dec.b, [a.dec.b, a.enc.w])):  # [b, w] resumed
    ko = [w, b] if k == 1 else order
    emas[case] = ke = tf.train.ExponentialMovingAverage(0.5); ke.apply(ko)
    if case == "attr":  # attached after the read above: restored from ck-1's, then trained on
        a.enc.w_avg = ke.average(a.enc.w); a.dec.b_avg = ke.average(a.dec.b)
    steps(ko, ke)
tf.train.Checkpoint(model=d, ema={"w": emas["dict"].average(d.w),
                                  "b": emas["dict"].average(d.b)}).write(f"{out}/dict/ck")
tf.train.Checkpoint(model=a).write(f"{out}/attr/ck")
for case, w, b in (("dict", d.w, d.b), ("attr", a.enc.w, a.dec.b)):  # at save time
    ke = emas[case]
    truth.update({f"{case}:w": ke.average(w).numpy(), f"{case}:b": ke.average(b).numpy(),
                  f"{case}:names": np.array([ke.average(w).name, ke.average(b).name])})
assert ue.average(uo[0]).name == "Variable/ExponentialMovingAverage:0"
print(k, e.average(m.w).name, r.average(l1.w).name, opt._trainable_variables[0].path)
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(ck-1's folder, ck-2's folder, each save's truth): ck-2 resumed in a new process."""
    d = tmp_path_factory.mktemp("average_renumbered")
    first, second = d / "p1", d / "p2"
    first.mkdir()
    second.mkdir()
    truth1 = run_keras(_BODY, first, "1")
    truth2 = run_keras(_BODY, second, "2", str(first))
    return first, second, truth1, truth2


def _average(runs, case: str, out_dir, *extra: str) -> tuple[int, str]:
    first, second, _, _ = runs
    code, _, err = run_cli(["average", str(first / case / "ck"), str(second / case / "ck"),
                            "--newest", str(second / case / "ck"), "--out", str(out_dir),
                            *extra])
    return code, " ".join(err.split())


def _mean(runs, name: str) -> np.ndarray:
    _, _, truth1, truth2 = runs
    return (truth1[name] + truth2[name]) / 2


_KEY = "/.ATTRIBUTES/VARIABLE_VALUE"


@pytest.mark.parametrize("extra", [[], ["--ema"], ["--ema", "--bake"]])
def test_a_resumed_run_numbered_on_is_averaged(runs, tmp_path, tf, extra):
    code, err = _average(runs, "module", tmp_path / "out", *extra)
    assert code == 0, err  # was 6: "'ema/0' holds ... 'w/ExponentialMovingAverage_1' ..."
    read = tf.train.load_checkpoint(str(tmp_path / "out" / "ck"))
    for i, n in enumerate("wb"):
        np.testing.assert_allclose(read.get_tensor(f"ema/{i}{_KEY}"), _mean(runs, f"module:{n}"),
                                   rtol=0, atol=1e-6)
        if "--bake" in extra:
            np.testing.assert_allclose(read.get_tensor(f"model/{n}{_KEY}"),
                                       _mean(runs, f"module:{n}"), rtol=0, atol=1e-6)


def test_a_resumed_keras_run_numbered_on_is_averaged(runs, tmp_path, tf):
    code, err = _average(runs, "keras", tmp_path / "out", "--ema", "--bake", "--not-swapped")
    assert code == 0, err  # was 6: "... 'adam/learning_rate' there but 'adam_1/learning_rate'"
    read = tf.train.load_checkpoint(str(tmp_path / "out" / "ck"))
    for i in range(4):  # the optimizer's averages (_variables/2..5) and the weights baked
        for key in (f"optimizer/_variables/{i + 2}", f"optimizer/_trainable_variables/{i}"):
            np.testing.assert_allclose(read.get_tensor(key + _KEY), _mean(runs, f"keras:{i}"),
                                       rtol=0, atol=1e-6)


@pytest.mark.parametrize("extra", [[], ["--ema"]])
def test_a_list_rebuilt_in_another_order_numbered_on_is_refused(runs, tmp_path, extra):
    code, err = _average(runs, "reorder", tmp_path / "out", *extra)
    # ema/0 holds l1's average in ck-1 (w/ExponentialMovingAverage_1) and l2's in ck-2
    # (w/ExponentialMovingAverage_4, l1's _3 under ema/1): averaging by key would mix them
    assert code == 6, err
    assert "'ema/1'" in err and "numbering" in err and "no option decides" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("extra", [[], ["--ema"], ["--ema", "--bake"]])
def test_averages_of_a_shared_name_applied_in_another_order_are_refused(runs, tmp_path, extra):
    """review-32-attack-r121 F3: both saves record 'Variable/ExponentialMovingAverage' under
    ema/0, ema.average(w) in ck-1 and ema.average(b) in ck-2 (the resume applied [b, w]): the
    plain average wrote their mean, exit 0."""
    _, _, truth1, truth2 = runs
    np.testing.assert_array_equal(truth1["unnamed:ema0"], truth1["unnamed:w"])
    np.testing.assert_array_equal(truth2["unnamed:ema0"], truth2["unnamed:b"])
    code, err = _average(runs, "unnamed", tmp_path / "out", *extra)
    assert code == 6, err
    if "--bake" in extra:  # the pairing's own refusal: which average is whose
        assert "ema/0 may average model/b or model/w" in err, err
    else:
        assert "'ema/0'" in err and "named after 'Variable', a name 2 variables share" in err
    assert not (tmp_path / "out").exists()


def test_a_reordered_list_names_what_differs_where_one_key_keeps_its_name(runs, tmp_path):
    """review-32-attack-r123 M1: ema/1 records 'v/ExponentialMovingAverage_1' in both saves
    (l1's average in ck-1, l2's in ck-2); the refusal named that one name twice as "the
    difference". It now names ema/0's two names, which show the counters' other order."""
    code, err = _average(runs, "reorder0", tmp_path / "out")
    assert code == 6, err
    assert ("'ema/0' holds variable 'v/ExponentialMovingAverage' there and variable "
            "'v/ExponentialMovingAverage_2' in ") in err, err
    assert "'ema/1' holds variable 'v/ExponentialMovingAverage_1' in both" in err, err
    assert "there but variable 'v/ExponentialMovingAverage_1' in" not in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", ["unnamed_avgonly", "unnamed_listed"])
@pytest.mark.parametrize("extra", [[], ["--ema"]])
def test_averages_numbered_apart_by_the_counter_alone_are_refused(runs, tmp_path, extra, case):
    """review-32-attack-r125 F1: the unnamed run's averages saved alone record
    'Variable/ExponentialMovingAverage' and '..._1' with no weight named Variable beside them:
    the shared name was not seen and ema/0 averaged w's average with b's, exit 0. Names that
    differ only by TF's _N follow each process's apply() order: refused."""
    code, err = _average(runs, case, tmp_path / "out", *extra)
    assert code == 6 and "named after 'Variable'" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("case", "extra"), [("named", []), ("named", ["--ema", "--bake"]),
                                           ("unnamed_k3", [])])
def test_names_numbered_by_the_user_or_keras_are_averaged(runs, tmp_path, tf, case, extra):
    """review-33-attack-r127 M1 (a regression of be09e87): TF records tf.Module "net"'s
    ``w_1``, ``w_2`` as ``net/w_1``, ``net/w_2``, Keras 3 ``add_weight()`` without a name as
    ``.../variable``, ``.../variable_1``: their _N was taken for apply()'s counter, "net" for a
    name two variables share, and every plain average refused. They are named attributes
    (``model/w_1``, ``.../_operations/1/a``): each key is the mean of its values in the two
    saves as tf.train.load_checkpoint reads them, bit for bit."""
    first, second, truth1, truth2 = runs
    for truth in (truth1, truth2):  # the library numbered the names, as the finding says
        names = [str(n).split(":")[0] for n in truth[f"{case}:names"]]
        assert any(n.endswith("_1") for n in names), names
    code, err = _average(runs, case, tmp_path / "out", *extra)
    assert code == 0, err  # was 6: "'model/w_1' holds 'net/w_1' ..., named after 'net'"
    ins = [tf.train.load_checkpoint(str(r / case / "ck")) for r in (first, second)]
    read = tf.train.load_checkpoint(str(tmp_path / "out" / "ck"))
    keys = [k for k in ins[1].get_variable_to_shape_map() if k.endswith(_KEY)]
    assert len(keys) == 4, keys
    # --bake: model/w_1 takes the mean of its average, ema/0 (the list's order here)
    baked = {f"model/w_{i + 1}{_KEY}": f"ema/{i}{_KEY}" for i in range(2)} if extra else {}
    for key in keys:
        src = baked.get(key, key)
        want = np.mean([r.get_tensor(src) for r in ins], axis=0, dtype=np.float64)
        np.testing.assert_array_equal(read.get_tensor(key), want.astype(np.float32), key)


@pytest.mark.parametrize("extra", [[], ["--ema"]])
def test_averages_of_a_custom_ema_name_in_apply_order_are_refused(runs, tmp_path, extra):
    """review-32-attack-r125 F1 with ExponentialMovingAverage(name="fast"): the averages alone
    in a list record Variable/fast and Variable/fast_1 in both saves, w's first in ck-1 and
    b's first in ck-2 (the resume applied [b, w]); nothing but the list's place tells them
    averages (no weight named Variable beside them): still refused."""
    _, _, truth1, truth2 = runs
    for truth in (truth1, truth2):
        assert list(truth["fast:names"]) == ["Variable/fast:0", "Variable/fast_1:0"]
    np.testing.assert_array_equal(truth1["fast:ema0"], truth1["fast:w"])
    assert not np.array_equal(truth2["fast:ema0"], truth2["fast:w"])
    code, err = _average(runs, "fast_avgonly", tmp_path / "out", *extra)
    assert code == 6 and "named after 'Variable'" in err, err
    assert not (tmp_path / "out").exists()


_HELD = {"dict": ("ema/w", "ema/b"), "attr": ("model/enc/w_avg", "model/dec/b_avg")}


@pytest.mark.parametrize("extra", [[], ["--ema"]])
@pytest.mark.parametrize("case", ["dict", "attr"])
def test_averages_held_by_the_users_own_key_are_averaged_across_another_apply_order(
        runs, tmp_path, tf, case, extra):
    """Session 33 (note32 Open item 2): the run of review-32-attack-r121 F3 (unnamed w, b; the
    resume applied [b, w]) keeping its averages in a dict keyed by the weights' paths, or as
    attributes beside their weights: their names swap (Variable/ExponentialMovingAverage is
    w's in ck-1, b's in ck-2) but their places do not. Refused before (the holders changed /
    named after a shared name); averaged now, each key the mean of its own weight's averages
    bit for bit."""
    _, _, truth1, truth2 = runs
    # the order changed: w's average in ck-1 has the name b's has in ck-2, and back
    assert list(truth1[f"{case}:names"]) == list(truth2[f"{case}:names"])[::-1]
    code, err = _average(runs, case, tmp_path / "out", *extra)
    assert code == 0, err
    read = tf.train.load_checkpoint(str(tmp_path / "out" / "ck"))
    for n, key in zip("wb", _HELD[case], strict=True):
        want = ((truth1[f"{case}:{n}"].astype(np.float64) + truth2[f"{case}:{n}"]) / 2)
        np.testing.assert_array_equal(read.get_tensor(key + _KEY), want.astype(np.float32))


def test_a_list_in_apply_order_is_averaged_without_its_averages_when_asked(runs, tmp_path, tf):
    """Session 33: the refused list (ema/0, ema/1 in each process's apply() order) offers
    --drop-unproven-averages; run, it averages the weights and leaves both averages out
    (never written raw or mixed), saying so in text and --json."""
    _, _, truth1, truth2 = runs
    code, err = _average(runs, "unnamed", tmp_path / "refused")
    assert code == 6 and "--drop-unproven-averages" in err, err
    code, out, err = run_cli(["average", *[str(r / "unnamed" / "ck") for r in runs[:2]],
                              "--newest", str(runs[1] / "unnamed" / "ck"), "--out",
                              str(tmp_path / "out"), "--drop-unproven-averages", "--json"])
    assert code == 0, err
    dropped = [f"ema/{i}{_KEY}" for i in range(2)]
    assert json.loads(out)["dropped"] == dropped
    assert "left out 2 EMA averages" in " ".join(err.split()) and "ema/0, ema/1" in err, err
    read = tf.train.load_checkpoint(str(tmp_path / "out" / "ck"))
    assert not set(dropped) & set(read.get_variable_to_shape_map())
    for n in "wb":
        want = (truth1[f"unnamed:r{n}"].astype(np.float64) + truth2[f"unnamed:r{n}"]) / 2
        np.testing.assert_array_equal(read.get_tensor(f"model/{n}{_KEY}"),
                                      want.astype(np.float32))
    code, err = _average(runs, "unnamed", tmp_path / "ema", "--ema", "--drop-unproven-averages")
    assert code == 2 and "leave out --ema" in err, err


def test_a_list_rebuilt_in_another_order_offers_the_weights_alone(runs, tmp_path, tf):
    """Session 33: the "holders changed" refusal of a list of averages rebuilt reversed offers
    --drop-unproven-averages where it lifts that refusal (probed: run); the layers' weights,
    in their places in both saves, are then the mean of l1.w's and of l2.w's values."""
    _, _, truth1, truth2 = runs
    code, err = _average(runs, "reorder", tmp_path / "refused")
    assert code == 6 and "numbering" in err and "--drop-unproven-averages" in err, err
    code, err = _average(runs, "reorder", tmp_path / "out", "--drop-unproven-averages")
    assert code == 0, err
    read = tf.train.load_checkpoint(str(tmp_path / "out" / "ck"))
    assert not any(k.startswith("ema/") for k in read.get_variable_to_shape_map())
    for i, n in enumerate(("l1", "l2")):
        want = (truth1[f"reorder:{n}"].astype(np.float64) + truth2[f"reorder:{n}"]) / 2
        np.testing.assert_array_equal(read.get_tensor(f"layers/{i}/w{_KEY}"),
                                      want.astype(np.float32))
