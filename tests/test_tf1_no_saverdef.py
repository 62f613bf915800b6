"""A TF1 checkpoint beside a ``.meta`` that records no save op (``export_meta_graph()`` without
a saver writes no ``SaverDef``): nothing read shows whether a swapping Saver
(``{v.op.name: ema.average(v), ema.average_name(v): v}``) wrote it, and the keys' names pair
its raw weights as the averages. It was exit 0 with no note, ``--strict`` too
(review-13-attack-r24 F0a); now a note and ``"assumed": ["saver_not_swapped"]``, refused by
``--strict``, stated by ``--not-swapped``. Where the graph builds a Saver of exactly these keys
that reads one from another variable (a swapping Saver), its save op is read as the writer
(review-26-attack-r94 F2).
Made by real TensorFlow (graph mode), truth read at save time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import run_cli, same_bits
from helpers_tf1_saver import swapping_keys, tf1_two_var_ema


@pytest.fixture(scope="module")
def runs(tf, tmp_path_factory):
    from tensorflow.core.protobuf import meta_graph_pb2

    made = {}
    for name in ("swap", "plain"):
        d = tmp_path_factory.mktemp(name)
        made[name] = tf1_two_var_ema(tf, d / "model.ckpt",
                                     swapping_keys if name == "swap" else None,
                                     saver_def=False)
        m = meta_graph_pb2.MetaGraphDef()
        m.ParseFromString(open(made[name][0] + ".meta", "rb").read())
        assert not m.HasField("saver_def")
    return made


def _npz(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def test_swapping_saver_without_saverdef_is_read_from_the_graph(runs, tmp_path):
    """The graph's only Saver of exactly these keys swaps: its save op is read although no
    SaverDef records it (review-26-attack-r94 F2), so the averages are exported, not the raw
    weights under the averages' names, and nothing is assumed."""
    prefix, raw, avg = runs["swap"]
    code, out, err = run_cli(["export", prefix, "--out", str(tmp_path / "x.npz"), "--json",
                              "--strict"])
    assert code == 0, err
    assert "assumed" not in json.loads(out), out
    got = _npz(tmp_path / "x.npz")
    assert sorted(got) == ["W", "b"]
    for k in got:
        assert same_bits(got[k], avg[k]) and not np.array_equal(got[k], raw[k])
    code, out, err = run_cli(["export", prefix, "--out", str(tmp_path / "raw.npz"), "--raw"])
    assert code == 0, err
    got = _npz(tmp_path / "raw.npz")
    for k in got:
        assert same_bits(got[k], raw[k]) and not np.array_equal(got[k], avg[k])


def test_names_without_saverdef_are_noted_and_strict_refuses(runs, tmp_path):
    """A Saver of each variable under its own name: the names decide, which is assumed."""
    prefix, raw, avg = runs["plain"]
    code, out, err = run_cli(["export", prefix, "--out", str(tmp_path / "x.npz"), "--json"])
    assert code == 0, err
    assert json.loads(out)["assumed"] == ["saver_not_swapped"], out
    assert "records no save op" in err and "--not-swapped" in err, err
    code, out, err = run_cli(["list", prefix, "--json"])
    assert code == 0 and json.loads(out)["assumed"] == ["saver_not_swapped"], out + err
    for cmd in (["export", "--out", str(tmp_path / "s.npz")], ["map"],
                ["restore-ema", "--out", str(tmp_path / "r")]):
        code, out, err = run_cli([cmd[0], prefix, *cmd[1:], "--strict"])
        assert code == 6, (cmd, out, err)
        assert "saver_not_swapped" in err and "--not-swapped" in err and "--raw" in err, err
    assert not (tmp_path / "s.npz").exists()


def test_plain_saver_without_saverdef_stated_not_swapped(runs, tmp_path):
    prefix, raw, avg = runs["plain"]
    out_path = tmp_path / "x.npz"
    code, out, err = run_cli(["export", prefix, "--out", str(out_path), "--strict",
                              "--not-swapped"])
    assert code == 0, err
    assert "you stated --not-swapped" in err, err
    got = _npz(out_path)
    for k in ("W", "b"):
        assert same_bits(got[k], avg[k]) and not np.array_equal(got[k], raw[k])
    code, out, err = run_cli(["list", prefix, "--json", "--not-swapped"])
    assert code == 0 and "assumed" not in json.loads(out), out + err


def test_python_api_warns_and_strict_raises(runs):
    from ckpt_tools import ema_map
    from ckpt_tools.errors import AssumptionWarning, UnprovenPairingError

    prefix = runs["plain"][0]
    with pytest.warns(AssumptionWarning, match="saver_not_swapped"):
        m = ema_map(prefix)
    assert m.assumed == ("saver_not_swapped",)
    with pytest.raises(UnprovenPairingError) as exc:
        ema_map(prefix, strict=True)
    assert exc.value.option == "--not-swapped"


def test_saver_def_recorded_assumes_nothing(tf, tmp_path):
    """The same run with the Saver's own .meta: its save op proves the swap (no note)."""
    from helpers_tf1 import tf1_ema_run

    prefix, _ = tf1_ema_run(tf, tmp_path, lambda ema, vs, gs: None)
    code, out, err = run_cli(["export", prefix, "--out", str(tmp_path / "x.npz"), "--json",
                              "--strict"])
    assert code == 0, err
    assert "assumed" not in json.loads(out) and "no save op" not in err, out + err
