"""Several Savers of one TF1 ``.meta`` (review-27-attack-r97).

F1: ``Saver()`` beside ``Saver(sharded=True)`` (what MonitoredTrainingSession's Scaffold builds
beside the user's own Saver) over a partitioned variable whose ``part_0`` sits on
``/device:CPU:1`` and ``part_1`` on ``/device:CPU:0``: the sharded Saver saves per device,
sorted by device name, so it lists the key's parts in another order than the plain one. Both
save every key from the variable of its own name, yet the two readings were compared as lists
and called crossed: export, --raw, map and restore-ema exit 6. They now read alike, either
Saver writing; a sharded *swapping* Saver of the same parts is still refused.

F2: two Savers write the same keys but read ``w`` differently (the ``.meta`` records
``{"w": W, ...}``, ``{"w": ema.average(W), ...}`` wrote), beside a stored pair of a frozen
variable and its average (equal values). The crossed refusal stepped aside because a pair is
stored, the pair's check dropped it for its equal values, and ``export --raw`` wrote W's
average as its raw weight, exit 0 (``--allow-missing`` labelled it raw too). Refused now.

Made by real TensorFlow (graph mode, 2 virtual CPUs), truth read from the session at save time.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

from ckpt_tools import open_checkpoint

SCRIPT = r'''
config = tf1.ConfigProto(device_count={"CPU": 2})
for case in ("sharded_wrote", "plain_wrote", "sharded_swap_wrote"):
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        with tf1.device(lambda op: "/device:CPU:1" if "part_0" in op.name else "/device:CPU:0"):
            W = tf1.get_variable("w", [6, 2], partitioner=tf1.fixed_size_partitioner(2))
            V = tf1.get_variable("v", [3])
        loss = tf.reduce_sum(tf.concat(list(W), 0) ** 2) + tf.reduce_sum((V - 1) ** 2)
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
        ema = tf1.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([train]):
            step = ema.apply(list(W) + [V])
        plain = tf1.train.Saver()  # the user's own
        if case == "sharded_swap_wrote":
            sharded = tf1.train.Saver({
                "w": [ema.average(p) for p in W], "w/ExponentialMovingAverage": list(W),
                "v": ema.average(V), "v/ExponentialMovingAverage": V, "global_step": gs},
                sharded=True)
        else:
            sharded = tf1.train.Saver(sharded=True)  # the Scaffold's default
        reads = {"ema:w": tf.concat([ema.average(p).value() for p in W], 0),
                 "raw:w": tf.concat([p.value() for p in W], 0),
                 "ema:v": ema.average(V).value(), "raw:v": V.value()}
        os.makedirs(f"{out}/{case}")
        path = f"{out}/{case}/model.ckpt"
        with tf1.Session(config=config) as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(step)
            if case == "sharded_wrote":
                sharded.save(s, path, global_step=gs)
            elif case == "plain_wrote":
                plain.save(s, path, global_step=gs)
            else:
                plain.export_meta_graph(path + "-3.meta")
                sharded.save(s, path, global_step=gs, write_meta_graph=False)
            truth.update({f"{case}:{k}": v for k, v in s.run(reads).items()})
with tf.Graph().as_default():  # F2
    case = "frozen_pair"
    gs = tf1.train.get_or_create_global_step()
    W = tf1.get_variable("w", [4, 2])
    F = tf1.get_variable("f", [3])
    loss = tf.reduce_sum(W ** 2) + tf.reduce_sum(F)
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs, var_list=[W])
    ema = tf1.train.ExponentialMovingAverage(0.5)
    with tf.control_dependencies([train]):
        step = ema.apply([W, F])
    kept = {"f": F, "f/ExponentialMovingAverage": ema.average(F), "global_step": gs}
    plain = tf1.train.Saver({"w": W, **kept})
    writer = tf1.train.Saver({"w": ema.average(W), **kept})
    os.makedirs(f"{out}/{case}")
    path = f"{out}/{case}/model.ckpt"
    with tf1.Session() as s:
        s.run(tf1.global_variables_initializer())
        for _ in range(3):
            s.run(step)
        plain.export_meta_graph(path + "-3.meta")
        writer.save(s, path, global_step=gs, write_meta_graph=False)
        for v in (W, F):
            truth[f"{case}:raw:{v.op.name}"] = s.run(v.value())
            truth[f"{case}:ema:{v.op.name}"] = s.run(ema.average(v).value())
'''

SAME = ("sharded_wrote", "plain_wrote")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("crossed_part_order")
    return out, run_tf1_script(SCRIPT, out)


def _run(made, tmp_path, cmd, case, *args):
    out, _ = made
    target = tmp_path / f"{len(list(tmp_path.iterdir()))}.{'npz' if cmd == 'export' else 'ckpt'}"
    argv = [cmd, str(out / case / "model.ckpt-3"), *args]
    if cmd != "map":
        argv += ["--out", str(target)]
    code, said, err = run_cli(argv)
    return code, said, " ".join(err.split()), target


@pytest.mark.parametrize("case", SAME)
@pytest.mark.parametrize("kind", ["ema", "raw"])
def test_sharded_saver_beside_plain_reads_alike(made, tmp_path, case, kind):
    """F1: before, exit 6 calling the two Savers crossed (a swapping Saver, it said)."""
    _, truth = made
    assert truth[f"{case}:ema:w"].tobytes() != truth[f"{case}:raw:w"].tobytes()
    code, _, err, target = _run(made, tmp_path, "export", case,
                                *(("--raw",) if kind == "raw" else ()))
    assert code == 0, err
    with np.load(target) as z:
        assert sorted(z.files) == ["v", "w"]
        for k in z.files:
            assert z[k].tobytes() == truth[f"{case}:{kind}:{k}"].tobytes(), k


@pytest.mark.parametrize("case", SAME)
def test_map_and_restore_ema_read_alike(made, tmp_path, case):
    _, truth = made
    code, said, err, _ = _run(made, tmp_path, "map", case, "--json")
    assert code == 0, err
    assert "w/ExponentialMovingAverage" in said
    code, _, err, target = _run(made, tmp_path, "restore-ema", case)
    assert code == 0, err
    with open_checkpoint(str(target)) as ckpt:
        for k in ("w", "v"):  # the restored variables hold the averages
            assert np.asarray(ckpt.tensor(k)).tobytes() == truth[f"{case}:ema:{k}"].tobytes()


@pytest.mark.parametrize("args", [(), ("--raw",)])
def test_sharded_swapping_saver_of_the_parts_is_still_refused(made, tmp_path, args):
    """The parts' order is all that is set aside: a sharded Saver that swaps them with their
    averages still disagrees with the plain Saver the .meta records."""
    code, _, err, target = _run(made, tmp_path, "export", "sharded_swap_wrote", *args)
    assert code == 6, err
    assert "--not-swapped" in err and "--no-meta" in err, err
    assert not target.exists()


@pytest.mark.parametrize("cmd,args", [("export", ()), ("export", ("--raw",)),
                                      ("export", ("--allow-missing",)), ("map", ("--json",)),
                                      ("restore-ema", ())])
def test_crossed_key_beside_an_equal_pair_is_refused(made, tmp_path, cmd, args):
    """F2: before, --raw exit 0 writing W's average as w's raw weight, and the default export
    offered --allow-missing, which labelled it raw as well."""
    _, truth = made
    assert truth["frozen_pair:raw:f"].tobytes() == truth["frozen_pair:ema:f"].tobytes()
    code, _, err, target = _run(made, tmp_path, cmd, "frozen_pair", *args)
    assert code == 6, err
    assert "key w from w in one, from w/ExponentialMovingAverage in another" in err, err
    assert "--allow-missing" not in err, err
    assert not target.exists()


def test_crossed_key_beside_an_equal_pair_raw_no_meta(made, tmp_path):
    """The route the refusal offers: the keys as stored, whichever Saver wrote them."""
    _, truth = made
    code, _, err, target = _run(made, tmp_path, "export", "frozen_pair", "--raw", "--no-meta")
    assert code == 0, err
    with np.load(target) as z:
        assert z["w"].tobytes() == truth["frozen_pair:ema:w"].tobytes()  # what was written
        assert z["f"].tobytes() == truth["frozen_pair:raw:f"].tobytes()


def test_an_equal_pair_lets_neither_crossed_check_step_aside(made):
    """note27 "Twin conditions": crossed_unpaired (the refusal) and crossed_routes (what a
    refusal under --not-swapped names instead of the refused --raw) asked "is a pair stored"
    in two ways, and the route's took the frozen pair (f, its equal average) for a stored
    pair that decides. One helper answers both now: the Savers' disagreement on w is found
    by each, --not-swapped stated or not."""
    from ckpt_tools.crossed_routes import crossed_raw_route
    from ckpt_tools.crossed_unpaired import crossed_unpaired, crossed_without_differing_pair

    out, truth = made
    path = out / "frozen_pair" / "model.ckpt-3"
    assert truth["frozen_pair:raw:f"].tobytes() == truth["frozen_pair:ema:f"].tobytes()
    said = (["w"], ["w/ExponentialMovingAverage"])  # {"w": W} and {"w": ema.average(W)}
    with open_checkpoint(path) as ckpt:
        assert crossed_unpaired(ckpt) in [("w", *said), ("w", *said[::-1])]
    with open_checkpoint(path, not_swapped=True) as ckpt:
        assert crossed_unpaired(ckpt) is None  # stated: nothing to refuse
        assert crossed_without_differing_pair(ckpt) in [("w", *said), ("w", *said[::-1])]
        route = crossed_raw_route(ckpt)
        assert route and "key w from w in one, from w/ExponentialMovingAverage in another" \
            in route and "ckpt export --raw --no-meta" in route, route
