"""``--apply-order trainable`` on a list holding a ``tf.Module`` and a dict with the same
children (``items = [Block(), {"w": v, "b": v}]``, unnamed same-shaped variables): the file
is that of two Blocks (no types recorded), and ``trainable_variables`` flattens the dict
first, so the file-read pairing is wrong. Every command that pairs under the statement says,
besides the generic note, that it read such containers as one type, naming them (stderr and
``--json`` ``read_alike``); ``apply_ema`` with the live module pairs bit for bit. A list of
lists (no container that could be a module) carries no such note. Truth: ``ema.average(v)``
read at save time from real TensorFlow."""

from __future__ import annotations

import json

import numpy as np
from helpers import run_cli, train_ema

import ckpt_tools


def _save(tf, directory, mixed: bool):
    """Returns (the module class's factory, [ema.average(v)] in trainable_variables order)."""

    def var():
        return tf.Variable(tf.random.normal([3]))

    class Block(tf.Module):
        def __init__(self):
            super().__init__()
            self.w, self.b = var(), var()

    def make():
        m = tf.Module()
        m.items = [Block(), {"w": var(), "b": var()}] if mixed else [[var(), var()],
                                                                      [var(), var()]]
        return m

    tf.random.set_seed(0)
    m = make()
    tv = list(m.trainable_variables)
    ema = tf.train.ExponentialMovingAverage(0.5)
    train_ema(tf, tv, ema)
    tf.train.Checkpoint(model=m, ema=[ema.average(v) for v in tv]).write(str(directory / "ck"))
    return make, [ema.average(v).numpy() for v in tv]


def test_a_mixed_list_read_as_one_type_is_named(tf, tmp_path):
    make, truth = _save(tf, tmp_path / "d", mixed=True)
    for argv in (["export", str(tmp_path / "d"), "--out", str(tmp_path / "w.npz"), "--json"],
                 ["list", str(tmp_path / "d"), "--json"]):
        code, out, err = run_cli([*argv, "--apply-order", "trainable"])
        assert code == 0, err
        assert "paired only because you stated --apply-order trainable" in err
        note = [line for line in err.splitlines() if "as one type" in line]
        assert len(note) == 1 and "model/items/0" in note[0], err
        assert "[Block(), {'w': v, 'b': v}]" in note[0] and "apply_order='trainable'" in note[0]
        assert json.loads(out)["stated_apply_order"]["read_alike"] == ["model/items/0"]
    live = make()
    ckpt_tools.apply_ema(live, tmp_path / "d", apply_order="trainable")
    got = [v.numpy() for v in live.trainable_variables]
    assert len(got) == 4
    for have, want in zip(got, truth, strict=True):
        assert have.tobytes() == want.tobytes()


def test_a_list_of_lists_has_no_such_note(tf, tmp_path):
    _, truth = _save(tf, tmp_path / "d", mixed=False)
    target = tmp_path / "w.npz"
    code, out, err = run_cli(["export", str(tmp_path / "d"), "--out", str(target), "--json",
                              "--apply-order", "trainable"])
    assert code == 0, err
    assert "as one type" not in err and json.loads(out)["stated_apply_order"]["read_alike"] == []
    with np.load(target) as z:
        for i, want in enumerate(truth):
            assert z[f"model/items/{i // 2}/{i % 2}"].tobytes() == want.tobytes(), i
