"""The compiled save-op walk (``cwire.save_sources``, ``ckpt_tools/cwire_graph.c``) against the
Python path (``formats/meta_saver.py`` over ``formats/graph_def.py``).

The compiled walk reads what the Python path reads and hands the file back (``None``) where
that path would read anything else, so every answer must equal the Python path's and every
failure be its error. Each test reads the same bytes both ways: every graph file under
fixtures/, graphs TensorFlow writes here (with what each Saver was given, the truth), and
hand-built, truncated, bit-flipped and hostile graphs (huge lengths, bad varints, long read
chains, colliding names), which must neither crash nor run unbounded.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from _corpus import FIXTURES, ROOT
from _graph_cases import BASE_NODES, CASES, SAVED_MODELS, meta_of, node_def
from helpers import run_script

from ckpt_tools.errors import CheckpointError
from ckpt_tools.formats import graph_def, meta_saver

GRAPHS = sorted([*FIXTURES.rglob("*.meta"), *FIXTURES.rglob("saved_model.pb*")])


def _outcome(read):
    try:
        return ("ok", read())
    except CheckpointError as exc:
        return ("error", type(exc).__name__, str(exc))


def _both(monkeypatch, cwire, path: Path):
    """``saved_sources_each(path)`` with and without the compiled walk (asserted equal), and
    whether the compiled walk answered (``False``: it handed the file to Python)."""
    monkeypatch.setattr(meta_saver, "_c_save_sources", None)
    graph_def._READ.clear()  # a graph kept from another file of this path
    python = _outcome(lambda: meta_saver.saved_sources_each(str(path)))
    answered = []

    def compiled(data, saved_model):
        answered.append(cwire.save_sources(data, saved_model))
        return answered[-1]

    monkeypatch.setattr(meta_saver, "_c_save_sources", compiled)
    graph_def._READ.clear()
    got = _outcome(lambda: meta_saver.saved_sources_each(str(path)))
    assert got == python
    return python, bool(answered) and answered[0] is not None


# -- every fixture -----------------------------------------------------------------------------
@pytest.mark.parametrize("path", GRAPHS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_fixture_graph_reads_alike_in_c(monkeypatch, cwire, path):
    got, answered = _both(monkeypatch, cwire, path)
    assert got[0] == "ok"
    assert answered  # binary files, as TensorFlow writes them: decided in C


def test_fixtures_record_save_ops():
    assert len(GRAPHS) >= 10
    assert sum(bool(meta_saver.saved_sources_each(str(p))) for p in GRAPHS) >= 9


# -- graphs TensorFlow writes, with what each Saver was given ----------------------------------
SCRIPT = r'''
import json
import os
import sys

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_eager_execution()
out = sys.argv[1]
truth = {}


def given(saver_vars):
    """key -> the variable op names the Saver was handed under it."""
    if isinstance(saver_vars, dict):
        items = saver_vars.items()
    else:
        items = [(v.op.name, v) for v in saver_vars]
    keys = {}
    for key, v in items:
        parts = list(v) if hasattr(v, "_get_variable_list") or isinstance(v, list) else [v]
        keys[key] = sorted(p.op.name for p in parts)
    return keys


for case in ("ref", "resource_sharded", "partitioned", "v1", "swap", "scoped", "text", "sm"):
    with tf.Graph().as_default():
        gs = tf1.train.get_or_create_global_step()
        use_resource = case != "ref"
        W = tf1.get_variable("W", [3, 2], use_resource=use_resource)
        with tf1.variable_scope("block"):
            V = tf1.get_variable("V", [2], use_resource=use_resource)
        vs = [W, V]
        if case == "partitioned":
            E = tf1.get_variable("emb", [8, 2], partitioner=tf1.fixed_size_partitioner(3))
        loss = tf.reduce_sum(W ** 2) + tf.reduce_sum(V ** 2)
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=gs)
        ema = tf1.train.ExponentialMovingAverage(0.5)
        with tf.control_dependencies([train]):
            step = ema.apply(vs)
        if case == "swap":
            var_list = {**{v.op.name: ema.average(v) for v in vs},
                        **{ema.average_name(v): v for v in vs}, "global_step": gs}
        elif case == "partitioned":
            var_list = {"emb": list(E), **{v.op.name: v for v in [gs, *vs]}}
        else:
            var_list = tf1.global_variables()
        kwargs = {}
        if case == "v1":
            kwargs["write_version"] = tf1.train.SaverDef.V1
        if case == "resource_sharded":
            kwargs["sharded"] = True
        if case == "scoped":
            kwargs["name"] = "my/saver"
        saver = tf1.train.Saver(var_list, **kwargs)
        keys = given(var_list)
        if case == "partitioned":
            keys["emb"] = sorted(p.op.name for p in E)
        truth[case] = keys
        with tf1.Session() as sess:
            # The model's variables before the shadows: a ref variable's shadow starts from its
            # initialized_value(), and one global initializer races it ("uninitialized W").
            first = [gs, *vs, *(list(E) if case == "partitioned" else [])]
            sess.run(tf1.variables_initializer(first))
            done = {v.name for v in first}
            sess.run(tf1.variables_initializer(
                [v for v in tf1.global_variables() if v.name not in done]))
            sess.run(step)
            d = os.path.join(out, case)
            if case == "sm":
                b = tf1.saved_model.Builder(d)
                b.add_meta_graph_and_variables(sess, ["serve"], saver=saver)
                other = tf1.train.Saver({ema.average_name(v): ema.average(v) for v in vs})
                b.add_meta_graph(["eval"], saver=other)
                b.save()
                truth["sm_eval"] = given({ema.average_name(v): ema.average(v) for v in vs})
                continue
            os.makedirs(d)
            p = os.path.join(d, "model.ckpt")
            saver.save(sess, p, write_meta_graph=False)
            saver.export_meta_graph(p + ".meta", as_text=case == "text")
np.savez(os.path.join(out, "truth.npz"), truth=np.array(json.dumps(truth)))
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    pytest.importorskip("tensorflow")
    out = tmp_path_factory.mktemp("cwire_graph")
    return out, json.loads(str(run_script(SCRIPT, out)["truth"]))


def _graph_file(out: Path, case: str) -> Path:
    return out / "sm" / "saved_model.pb" if case == "sm" else out / case / "model.ckpt.meta"


@pytest.mark.parametrize("case", ["ref", "resource_sharded", "partitioned", "v1", "swap",
                                  "scoped", "text", "sm"])
def test_tensorflow_graphs_read_alike_and_as_saved(monkeypatch, cwire, made, case):
    out, truth = made
    got, answered = _both(monkeypatch, cwire, _graph_file(out, case))
    assert got[0] == "ok"
    assert answered == (case != "text")  # text format: the Python path parses it
    wanted = [truth[case]] + ([truth["sm_eval"]] if case == "sm" else [])
    each = [{k: sorted(v) for k, v in sources.items()} for sources in got[1]]
    if case == "resource_sharded":  # one save op per device, each writing some keys
        each = [{k: v for s in each for k, v in s.items()}]
    assert each == wanted


# -- mutated TensorFlow graphs -----------------------------------------------------------------
def _mutate(rnd: random.Random, data: bytes, near: list[int]) -> bytes:
    buf = bytearray(data)
    for _ in range(rnd.randint(1, 3)):
        at = min(len(buf), max(0, rnd.choice(near) + rnd.randint(-40, 40)))
        op = rnd.randrange(5)
        if op == 0 and at < len(buf):
            buf[at] ^= 1 << rnd.randrange(8)
        elif op == 1 and at < len(buf):
            buf[at] = rnd.randrange(256)
        elif op == 2:
            del buf[at:]
        elif op == 3:
            buf[at:at] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 6)))
        else:
            del buf[at : at + rnd.randint(1, 12)]
    return bytes(buf)


def _landmarks(data: bytes) -> list[int]:
    """Offsets of the bytes the save-op walk reads: the save scope's nodes, reads, variables."""
    marks = [0, len(data)]
    for word in (b"save/", b"SaveV2", b"tensor_names", b"ReadVariableOp", b"Identity", b"\x0a"):
        at = data.find(word)
        while at >= 0 and len(marks) < 4000:
            marks.append(at)
            at = data.find(word, at + 1)
    return marks


@pytest.mark.parametrize("path", GRAPHS[::2], ids=lambda p: str(p.relative_to(FIXTURES)))
def test_mutated_graphs_read_alike(monkeypatch, cwire, tmp_path, path):
    original = path.read_bytes()
    near = _landmarks(original)
    rnd = random.Random(path.name)
    victim = tmp_path / path.name
    for _ in range(40):
        victim.write_bytes(_mutate(rnd, original, near))
        _both(monkeypatch, cwire, victim)


# -- hand-built graphs (tests/_graph_cases.py) ------------------------------------------------
def _write(tmp_path: Path, data: bytes, saved_model: bool = False) -> Path:
    path = tmp_path / ("saved_model.pb" if saved_model else "model.ckpt.meta")
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("case", list(CASES))
def test_hand_built_graphs_read_alike(monkeypatch, cwire, tmp_path, case):
    _both(monkeypatch, cwire, _write(tmp_path, CASES[case]))


@pytest.mark.parametrize("case", list(SAVED_MODELS))
def test_hand_built_saved_models_read_alike(monkeypatch, cwire, tmp_path, case):
    _both(monkeypatch, cwire, _write(tmp_path, SAVED_MODELS[case], saved_model=True))


def test_the_layout_tensorflow_writes_is_decided_in_c(monkeypatch, cwire, tmp_path):
    got, answered = _both(monkeypatch, cwire, _write(tmp_path, CASES["as TensorFlow writes it"]))
    assert answered and got == ("ok", [{"w": ["w"], "b": ["b"], "u": ["u"]}])
    got, answered = _both(monkeypatch, cwire, _write(tmp_path, SAVED_MODELS["two meta graphs"],
                                                      saved_model=True))
    assert answered and len(got[1]) == 2


@pytest.mark.parametrize("case", ["as TensorFlow writes it", "legacy Save (tensors from input 2)",
                                  "a chain of 22 reads (16 followed)"])
def test_every_truncation_reads_alike(monkeypatch, cwire, tmp_path, case):
    data = CASES[case]
    for end in range(len(data) + 1):
        _both(monkeypatch, cwire, _write(tmp_path, data[:end]))


def test_every_bit_flip_reads_alike(monkeypatch, cwire, tmp_path):
    data = CASES["as TensorFlow writes it"]
    outcomes = set()
    for at in range(len(data)):
        for bit in range(8):
            flipped = bytearray(data)
            flipped[at] ^= 1 << bit
            got, _ = _both(monkeypatch, cwire, _write(tmp_path, bytes(flipped)))
            outcomes.add(got[0] if got[0] == "error" else bool(got[1]))
    assert outcomes == {"error", True, False}


def test_many_nodes_bounded(monkeypatch, cwire, tmp_path):
    """300,000 nodes (hashing, growth), most of them in the save scope; and a graph of 10 MB of
    4-byte nodes, each its own name: both decided alike without a crash."""
    nodes = [b"\x0a\x0csave/n%06d\x12\x04NoOp" % i for i in range(300_000)] + BASE_NODES
    got, answered = _both(monkeypatch, cwire, _write(tmp_path, meta_of(nodes)))
    assert answered and got[1] == [{"w": ["w"], "b": ["b"], "u": ["u"]}]
    tiny = [b"\x0a\x02" + bytes([65 + i % 26, 65 + i // 26 % 26]) for i in range(676)]
    _both(monkeypatch, cwire, _write(tmp_path, meta_of(tiny * 3)))  # names repeat: Python decides


def test_save_ops_sharing_one_names_const_cost_their_sum(monkeypatch, cwire, tmp_path):
    """60,000 save ops under the save scope sharing one Const of 60,000 key strings (none fits:
    each saves one tensor). Each op decoded that Const and counted all its strings, 3.6e9 steps:
    a crafted 4.6 MB .meta held `ckpt list` for minutes (review-13-attack-r24 F3). The Const is
    decoded once and counting stops past an op's inputs: both readers agree, in well under the
    time the quadratic walk took at a third of this size (3.6 s)."""
    import time

    n = 60_000
    nodes = [node_def("save/names", "Const", strings=[f"k{i}" for i in range(n)]),
             node_def("W", "VariableV2"), node_def("save/Const", "PlaceholderWithDefault")]
    nodes += [node_def(f"save/SaveV2_{j}", "SaveV2", "save/Const", "save/names", "save/shapes",
                       "W") for j in range(n)]
    data = meta_of(nodes)
    start = time.process_time()
    assert cwire.save_sources(data, False) == []
    assert time.process_time() - start < 2.0
    got, answered = _both(monkeypatch, cwire, _write(tmp_path, data))
    assert answered and got[1] == []


def test_compiled_walk_checks_its_arguments(cwire):
    for args in [("x", False), (b"", False, 1), (3, True)]:
        with pytest.raises(TypeError):
            cwire.save_sources(*args)
    assert cwire.save_sources(memoryview(CASES["as TensorFlow writes it"]), False) == [
        {"w": ["w"], "b": ["b"], "u": ["u"]}]
    assert cwire.save_sources(bytearray(b"\x07"), True) is None


def test_install_built_the_compiled_walk():
    """Where this checkout was built, ckpt_tools.cwire has the walk and meta_saver uses it."""
    here = ROOT / "ckpt_tools"
    if not [*here.glob("cwire*.so"), *here.glob("cwire*.pyd")]:
        pytest.skip("this checkout was not built (pip install -e builds the extension)")
    assert meta_saver._c_save_sources is not None, (
        "ckpt_tools/cwire*.so predates cwire.save_sources: rebuild it "
        "(python setup.py build_ext --inplace)")


def test_a_url_whose_bytes_were_not_kept_is_read_by_python(monkeypatch, cwire):
    """A remote .meta not fetched with its collections is fetched once, by read_graphs."""
    monkeypatch.setattr(meta_saver, "_c_save_sources", cwire.save_sources)
    for kept in (None, b""):  # read_graphs: `fetched(path) or map_file(path)`
        monkeypatch.setattr(meta_saver, "fetched", lambda url, kept=kept: kept)
        assert meta_saver._compiled("s3://bucket/model.ckpt.meta") is None
    data = CASES["as TensorFlow writes it"]
    monkeypatch.setattr(meta_saver, "fetched", lambda url: data)
    assert meta_saver._compiled("s3://bucket/model.ckpt.meta") == [
        {"w": ["w"], "b": ["b"], "u": ["u"]}]


def test_setup_builds_every_source():
    """setup.py names each ``cwire*.c`` (the tests compile them all, by glob)."""
    text = (ROOT / "setup.py").read_text()
    for source in (ROOT / "ckpt_tools").glob("cwire*.c"):
        assert f'"{source.stem}"' in text, source.name
