"""``ema_saver()`` WITHOUT ``checkpoint=`` in the graph imported from a swapping Saver's ``.meta``
(``Saver({v.op.name: ema.average(v), ema.average_name(v): v})``): TF's naming restores the key
``W/ExponentialMovingAverage`` into ``W``, and that key holds ``W``'s raw value; it restored
the raw weights as the averages with no word (review-17-user-u19 F9). The graph holds the save
op that wrote the key from ``W`` itself: refused, naming ``checkpoint=``, with which every
average is restored. A plain Saver's graph (keys written from the variables TF's naming says)
and a second ``ema_saver()`` in the same graph are not refused. Truth: ``sess.run`` of each
``ema.average(v)`` and ``v`` at save time."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

import ckpt_tools
from ckpt_tools.errors import EmaError, UnprovenPairingError

SCRIPT = r'''
case = sys.argv[2]


def model():
    gs = tf1.train.get_or_create_global_step()
    with tf1.variable_scope("net"):
        w = tf1.get_variable("w", [3, 2])
        b = tf1.get_variable("b", [2], initializer=tf1.zeros_initializer())
    loss = tf.reduce_sum(tf.square(tf.matmul(tf.ones([4, 3]), w) + b - 1.0))
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
    ema = tf1.train.ExponentialMovingAverage(0.5)
    with tf.control_dependencies([train]):
        step = ema.apply(tf1.trainable_variables())
    return gs, w, step, ema


def saver_of(kind, gs, ema, **kw):
    tv = tf1.trainable_variables()
    if kind == "vtr":  # the training Saver maps each average's key to the variable itself
        return tf1.train.Saver(ema.variables_to_restore(), **kw)
    if kind == "swap":
        keys = {v.op.name: ema.average(v) for v in tv}
        keys.update({ema.average_name(v): v for v in tv})
        keys["global_step"] = gs
        return tf1.train.Saver(keys, **kw)
    if kind == "avgonly":  # the same keys as vtr's, holding the averages
        keys = {ema.average_name(v): ema.average(v) for v in tv}
        keys["global_step"] = gs
        return tf1.train.Saver(keys, **kw)
    return tf1.train.Saver(**kw)


def later_run(d, kind, steps, meta_at, **kw):
    # Another run in the same directory: a new graph and Saver, its own state file entries.
    with tf.Graph().as_default():
        gs, w, step, ema = model()
        saver = saver_of(kind, gs, ema, **kw)
        with trained(tf, step, 1) as s:
            for i in steps:
                s.run(step)
                saver.save(s, f"{d}/model.ckpt", global_step=i, write_meta_graph=i == meta_at)
                for v in tf1.trainable_variables():
                    truth[f"{os.path.basename(d)}{i}:avg:" + v.op.name] = s.run(ema.average(v))
                    truth[f"{os.path.basename(d)}{i}:raw:" + v.op.name] = s.run(v)


with tf.Graph().as_default():
    gs, w, step, ema = model()
    tv = tf1.trainable_variables()
    saver = saver_of(case, gs, ema)
    with trained(tf, step) as s:
        saver.save(s, f"{out}/model.ckpt")
        for v in tv:
            truth["avg:" + v.op.name] = s.run(ema.average(v))
            truth["raw:" + v.op.name] = s.run(v)
        # The usual loop writes the graph with the first save only: model.ckpt-3 has no .meta
        # of its own, model.ckpt-1.meta records its Saver (review-23-attack-r71 F2).
        for i in (1, 2, 3):
            s.run(step)
            saver.save(s, f"{out}/model.ckpt", global_step=i, write_meta_graph=i == 1)
        for v in tv:
            truth["avg3:" + v.op.name] = s.run(ema.average(v))
            truth["raw3:" + v.op.name] = s.run(v)
    # the prefix's newest .meta is another Saver's, of other keys: not model.ckpt-3's
    tf1.train.Saver([w]).export_meta_graph(f"{out}/model.ckpt-9.meta")
    if case == "swap":  # beside a plain Saver's graph of the same keys: nothing proves which
        os.makedirs(f"{out}/crossed")
        for f in os.listdir(out):
            if f.startswith(("model.ckpt-1.meta", "model.ckpt-3.")):
                with open(f"{out}/{f}", "rb") as src, open(f"{out}/crossed/{f}", "wb") as dst:
                    dst.write(src.read())
        tf1.train.Saver().export_meta_graph(f"{out}/crossed/model.ckpt-2.meta")
        with open(f"{out}/crossed/checkpoint", "w") as f:  # one state file lists them all
            f.write('model_checkpoint_path: "model.ckpt-3"\n' + "".join(
                f'all_model_checkpoint_paths: "model.ckpt-{i}"\n' for i in (1, 2, 3)))
if case == "vtr":
    # Two runs in one directory, the later one's Saver writing the earlier one's keys from
    # other tensors, without a .meta of its own (review-24-attack-r74 F1, F2, F7).
    for name, first, then, steps, meta_at, kw in (
            ("vtr_after_avgonly", "avgonly", "vtr", (5, 6), 0, {}),
            ("avgonly_after_vtr", "vtr", "avgonly", (5, 6), 0, {}),
            # max_to_keep deletes model.ckpt-10 with the run's own .meta
            ("plain_after_swap", "swap", "plain", range(10, 17), 10, {"max_to_keep": 5})):
        later_run(f"{out}/{name}", first, (1,), 1)
        later_run(f"{out}/{name}", then, steps, meta_at, **kw)
'''


@pytest.fixture(scope="module", params=["swap", "plain", "vtr"])
def made(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"ema_saver_{request.param}_graph")
    return request.param, str(out / "model.ckpt"), run_tf1_script(SCRIPT, out, request.param)


def _restored(tf, prefix, **kw):
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        v1.train.import_meta_graph(prefix + ".meta")
        saver = ckpt_tools.ema_saver(**kw)
        with v1.Session() as sess:
            saver.restore(sess, prefix)
            by_name = {v.op.name: v for v in v1.global_variables()}
            return {n: sess.run(by_name[n]) for n in ("net/w", "net/b")}


def test_without_checkpoint_a_contradicting_save_op_is_refused(made, tf):
    case, prefix, truth = made
    if case == "plain":
        got = _restored(tf, prefix)  # TF's naming holds: nothing to refuse
    else:
        with pytest.raises(EmaError, match=r"save/SaveV2 writes net/w/ExponentialMovingAverage "
                                           r"\(net/w's average by TF's naming\) from net/w;.*"
                                           "pass checkpoint="):
            _restored(tf, prefix)
        if case == "vtr":  # its keys named as averages hold the raw weights: no averages
            with pytest.raises(UnprovenPairingError, match="hold their variables' raw values"):
                _restored(tf, prefix, checkpoint=prefix)
            return
        got = _restored(tf, prefix, checkpoint=prefix)  # the way the refusal names
    for n, value in got.items():
        assert np.array_equal(value, truth["avg:" + n]), n
        assert not np.array_equal(value, truth["raw:" + n]), n


def test_a_second_ema_saver_in_the_graph_is_not_a_contradiction(made, tf):
    case, prefix, truth = made
    if case != "plain":
        pytest.skip(f"the {case} graph is refused without checkpoint=")
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        v1.train.import_meta_graph(prefix + ".meta")
        ckpt_tools.ema_saver()  # its save op writes net/w/ExponentialMovingAverage from net/w
        saver = ckpt_tools.ema_saver()
        with v1.Session() as sess:
            saver.restore(sess, prefix)
            by_name = {v.op.name: v for v in v1.global_variables()}
            assert np.array_equal(sess.run(by_name["net/w"]), truth["avg:net/w"])


def _rebuilt(tf, prefix: str, path=None, **kw) -> dict[str, np.ndarray]:
    """``net/w``, ``net/b`` restored by ``ema_saver(**kw)`` into the eval graph rebuilt by
    code (no ``.meta``, no ``ema.apply()``: no save op of the training graph to check);
    ``path``: what ``restore()`` is given (``prefix`` as it is by default)."""
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        v1.train.get_or_create_global_step()
        with v1.variable_scope("net"):
            w = v1.get_variable("w", [3, 2])
            b = v1.get_variable("b", [2])
        saver = ckpt_tools.ema_saver(**kw)
        with v1.Session() as sess:
            saver.restore(sess, prefix if path is None else path)
            return {"net/w": sess.run(w), "net/b": sess.run(b)}


def test_without_checkpoint_the_saved_file_is_checked_before_restoring(made, tf):
    """review-23-user-u25 F4: in a graph rebuilt by code, ema_saver()'s restore(sess, path)
    gave a Saver(ema.variables_to_restore()) checkpoint's raw weights as the averages, no
    word, where ema_saver(checkpoint=path) refuses; a swapping Saver's too, where
    checkpoint= restores the averages. restore() now checks the path it is given (and its
    .meta) as checkpoint= does: the same refusal (vtr), or refused naming checkpoint= (swap);
    a plain Saver's checkpoint restores every average bit for bit, as before."""
    case, prefix, truth = made
    if case == "vtr":
        with pytest.raises(UnprovenPairingError) as stated:
            _rebuilt(tf, prefix, checkpoint=prefix)
        with pytest.raises(UnprovenPairingError) as refused:
            _rebuilt(tf, prefix)
        assert refused.value.option == stated.value.option, str(refused.value)
        assert str(refused.value) == str(stated.value)
        with pytest.raises(UnprovenPairingError):  # TF takes bytes too (review-23-attack-r71 F1)
            _rebuilt(tf, prefix, path=os.fsencode(prefix))
        return
    if case == "swap":
        with pytest.raises(EmaError, match=r"net/w's average is stored under 'net/w', not "
                                           r"'net/w/ExponentialMovingAverage'.*checkpoint="):
            _rebuilt(tf, prefix)
    got = _rebuilt(tf, prefix, checkpoint=prefix) if case == "swap" else _rebuilt(tf, prefix)
    for n, value in got.items():
        assert value.tobytes() == truth["avg:" + n].tobytes(), n
        assert not np.array_equal(value, truth["raw:" + n]), n


def test_saved_without_its_meta_another_graph_only_refuses(made, tf, tmp_path):
    """review-23-attack-r71 F2, review-24-attack-r78: model.ckpt-3, saved with
    write_meta_graph=False, has no .meta; model.ckpt-1.meta beside it may be its Saver's graph
    or another run's (nothing in the directory says which), so it is never read as
    model.ckpt-3's: it only refuses the names' pairing where its save op reads the keys
    otherwise (swap: refused naming it, --not-swapped and --raw --no-meta, which exports the
    averages stored under the variables' names; vtr: refused as without a .meta). A plain
    Saver's graph agrees with the names: nothing changes (the averages, no note);
    model.ckpt-9.meta (the run's graph, its SaverDef another Saver's, of other keys) doubts
    as the graph it holds does."""
    case, prefix, truth = made
    third = os.path.join(os.path.dirname(prefix), "model.ckpt-3")
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", third, "--out", str(out)])
    if case == "vtr":
        assert code == 6 and "--averages-only" in err, err
        assert "model.ckpt-1.meta" in err and "from net/b" in err, err  # the note says why
    elif case == "swap":
        assert code == 6, err
        assert "model.ckpt-1.meta" in err and "--not-swapped" in err, err
        # model.ckpt-9.meta's graph builds the swapping Saver too, though its SaverDef
        # records another: it doubts the names as well (review-25-attack-r83 F2)
        assert "model.ckpt-9.meta" in err, err
        code, _, err = run_cli(["export", third, "--out", str(out), "--raw", "--no-meta"])
    assert not out.exists() if case == "vtr" else code == 0, err
    if case != "vtr":
        assert ".meta" not in err, err
        with np.load(out) as npz:
            for n in ("net/w", "net/b"):
                assert npz[n].tobytes() == truth["avg3:" + n].tobytes(), n
                assert not np.array_equal(npz[n], truth["raw3:" + n]), n
    code, listed, err = run_cli(["list", third, "--json"])
    assert code == 0, err
    listed = json.loads(listed)
    assert listed["meta"] is None
    assert ("model.ckpt-1.meta" in listed.get("meta_note", "")) == (case != "plain"), listed
    if case != "plain":
        with pytest.raises(UnprovenPairingError):
            _rebuilt(tf, third)
        return
    got = _rebuilt(tf, third)
    for n, value in got.items():
        assert value.tobytes() == truth["avg3:" + n].tobytes(), n


def test_saved_without_its_meta_beside_crossed_graphs_is_refused(made, tmp_path):
    """The hostile twin of the above: model.ckpt-3 of the swapping Saver beside its
    model.ckpt-1.meta and a plain Saver's model.ckpt-2.meta of the same keys: the two graphs
    disagree about what each key holds and nothing records which wrote it, so the names do
    not decide (they would give the raw weights): refused, naming the graph that contradicts
    the names and --not-swapped."""
    case, prefix, truth = made
    if case != "swap":
        pytest.skip("the swapping Saver's checkpoint only")
    third = os.path.join(os.path.dirname(prefix), "crossed", "model.ckpt-3")
    code, _, err = run_cli(["export", third, "--out", str(tmp_path / "w.npz")])
    assert code == 6, err
    assert "--not-swapped" in err and "model.ckpt-1.meta" in err, err
    # model.ckpt-2.meta's SaverDef is the plain Saver's, but its graph builds the swapping
    # one too, which it names as well (review-25-attack-r83 F2)
    assert "model.ckpt-2.meta" in err, err
    assert not (tmp_path / "w.npz").exists()


@pytest.mark.parametrize("layout, step, options", [
    ("vtr_after_avgonly", 6, []), ("avgonly_after_vtr", 6, ["--averages-only"]),
    ("plain_after_swap", 16, ["--not-swapped"])])
def test_an_earlier_runs_meta_is_not_borrowed(made, tmp_path, tf, layout, step, options):
    """review-24-attack-r74 F1, F2, F7: a later run in the same directory saved without a
    .meta, its Saver writing the earlier run's keys from other tensors. The earlier run's
    model.ckpt-1.meta (not listed in the state file with the later checkpoint) was read as
    its graph: a Saver(ema.variables_to_restore())'s raw weights went out as the averages
    beside an averages-only run's graph (F1), and a plain Saver's beside a swapping run's
    (F2, its own .meta deleted by max_to_keep), exit 0; an averages-only Saver's averages were
    refused under --averages-only with a false claim (F7). Now nothing is borrowed: F1 is
    refused as without a .meta, F7 follows --averages-only, bit for bit; F2 is refused (the
    swapping graph contradicts the names, review-24-attack-r78), --not-swapped gives the
    averages bit for bit."""
    case, prefix, truth = made
    if case != "vtr":
        pytest.skip("generated with the vtr case")
    ckpt = os.path.join(os.path.dirname(prefix), layout, f"model.ckpt-{step}")
    out = tmp_path / "w.npz"
    if layout == "plain_after_swap":
        code, _, err = run_cli(["export", ckpt, "--out", str(out)])
        assert code == 6 and "model.ckpt-1.meta" in err and "--not-swapped" in err, err
        with pytest.raises(UnprovenPairingError, match="model.ckpt-1.meta"):
            _rebuilt(tf, ckpt)
    code, _, err = run_cli(["export", ckpt, "--out", str(out), *options])
    assert "graph from" not in err, err
    if layout == "vtr_after_avgonly":  # the keys hold the raw weights: no averages
        assert code == 6 and "no .meta" in err, err
        assert not out.exists()
        with pytest.raises(UnprovenPairingError):
            _rebuilt(tf, ckpt)
        return
    assert code == 0, err
    with np.load(out) as npz:
        for n in ("net/w", "net/b"):
            assert npz[n].tobytes() == truth[f"{layout}{step}:avg:{n}"].tobytes(), n
            assert not np.array_equal(npz[n], truth[f"{layout}{step}:raw:{n}"]), n
    if layout == "plain_after_swap":
        got = _rebuilt(tf, ckpt, checkpoint=ckpt_tools.open_checkpoint(ckpt, not_swapped=True))
        for n, value in got.items():
            assert value.tobytes() == truth[f"{layout}{step}:avg:{n}"].tobytes(), n


@pytest.mark.parametrize("damage", ["collections", "zeros"])
def test_a_damaged_meta_of_the_run_is_as_if_absent(made, tmp_path, damage):
    """review-24-attack-r74 F4, F8: the run's model.ckpt-1.meta, damaged, is read only
    because model.ckpt-3 has no .meta of its own: a malformed collection_def entry made the
    export exit 4, and a file of zeros was text-parsed whole (GBs of memory for a large one).
    It is read as a checkpoint's own .meta is (binary, text only where its head says so) and,
    unreadable, ignored: the plain Saver's keys pair by names, the averages bit for bit."""
    case, prefix, truth = made
    if case != "plain":
        pytest.skip("the plain Saver's checkpoint only")
    src = os.path.dirname(prefix)
    for f in os.listdir(src):
        if f.startswith(("model.ckpt-3.", "model.ckpt-1.", "checkpoint")):
            with open(os.path.join(src, f), "rb") as a, open(tmp_path / f, "wb") as b:
                b.write(a.read())
    with open(tmp_path / "model.ckpt-1.meta", "ab" if damage == "collections" else "wb") as f:
        if damage == "collections":
            f.write(b"\x22\x09\x0a\x01x\x12\x04\x0a\xff\xff\xff")
        else:
            f.truncate(16 << 20)
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(tmp_path / "model.ckpt-3"), "--out", str(out)])
    assert code == 0, err
    with np.load(out) as npz:
        for n in ("net/w", "net/b"):
            assert npz[n].tobytes() == truth["avg3:" + n].tobytes(), n


@pytest.mark.parametrize("form", ["text", "spaces", "comment_header"])
def test_the_runs_meta_as_text_is_read_or_refused(made, tmp_path, tf, form):
    """review-24-attack-r78 F5: the swapping run's model.ckpt-1.meta as text (protobuf's
    text_format.MessageToString of TensorFlow's MetaGraphDef, as export_meta_graph(as_text=True)
    writes it) is read as the binary one: its save op refuses model.ckpt-3's pairing by names
    (exit 6, naming it), and --raw --no-meta exports the averages bit for bit. With a line of
    2 MiB of spaces, which protobuf's text parser takes ~300 MB to read, it is refused (exit 4,
    naming it, --no-meta and writing it binary), not passed over: model.ckpt-3's keys paired
    by names are the raw weights. Led by a 5 KB '#' comment line (TensorFlow's parser skips
    it), it was passed over (not MetaGraphDef in its first 4096 bytes): raw weights as the
    averages, exit 0 (review-25-attack-r81 F2); it is read as the text one."""
    from google.protobuf import text_format
    from tensorflow.core.protobuf import meta_graph_pb2

    case, prefix, truth = made
    if case != "swap":
        pytest.skip("the swapping Saver's checkpoint only")
    src = os.path.dirname(prefix)
    for f in os.listdir(src):
        if f.startswith("model.ckpt-3."):
            with open(os.path.join(src, f), "rb") as a, open(tmp_path / f, "wb") as b:
                b.write(a.read())
    with open(os.path.join(src, "model.ckpt-1.meta"), "rb") as f:
        said = text_format.MessageToString(meta_graph_pb2.MetaGraphDef.FromString(f.read()))
    pad = 2 << 20 if form == "spaces" else 0
    said = said.replace("{\n", "{" + " " * pad + "\n", 1)
    (tmp_path / "model.ckpt-1.meta").write_text(
        ("# " + "x" * 5000 + "\n" if form == "comment_header" else "") + said)
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-3"\n' + "".join(
        f'all_model_checkpoint_paths: "model.ckpt-{i}"\n' for i in (1, 3)))
    out = tmp_path / "w.npz"
    code, _, err = run_cli(["export", str(tmp_path / "model.ckpt-3"), "--out", str(out)])
    if pad:
        assert code == 4 and not out.exists(), err
        assert f"{tmp_path / 'model.ckpt-1.meta'} at byte 0: a text-format" in err, err
        assert "--no-meta" in err and "write it binary" in err, err
        return
    assert code == 6 and "model.ckpt-1.meta" in err and "--not-swapped" in err, err
    code, _, err = run_cli(["export", str(tmp_path / "model.ckpt-3"), "--out", str(out), "--raw",
                            "--no-meta"])
    assert code == 0, err
    with np.load(out) as npz:
        for n in ("net/w", "net/b"):
            assert npz[n].tobytes() == truth["avg3:" + n].tobytes(), n
            assert npz[n].tobytes() != truth["raw3:" + n].tobytes(), n
