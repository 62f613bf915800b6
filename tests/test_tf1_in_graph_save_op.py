"""``restore_ema`` / ``ema_saver(checkpoint=)`` in the graph imported from the training ``.meta``
(the README's way) on TF1 Savers whose keys are not their variables' names
(review-13-attack-r24 F1, F0b in the Python graph path).

- renamed keys (``{"model/W": W, "model/W_ema": ema.average(W), ...}``) and prefixed swapped
  keys (``{"net/W": ema.average(W), "raw/W": W}``): the CLI pairs them through the save op,
  the graph path refused them ("not in the checkpoint ... pass var_list=", which cannot help).
  Now each graph variable takes the key holding its own average, bit for bit.
- a misfiled average (``{"V/ExponentialMovingAverage": ema.average(b)}``, V's own not saved):
  the graph path said the keys were "not translated"; now it says what the save op shows and
  that ``allow_missing=True`` restores V raw, which then gives W, b averaged and V raw.

Made here by TensorFlow (graph mode, :mod:`helpers_tf1`), truth read from the session at save
time.
"""

from __future__ import annotations

import warnings

import pytest
from helpers_tf1 import tf1_ema_run

import ckpt_tools

VARS = ("W", "V", "b")
E = "ExponentialMovingAverage"

SAVERS = {
    "renamed": lambda ema, vs, gs: {
        "model/global_step": gs, **{f"model/{n}": v for n, v in vs.items()},
        **{f"model/{n}_ema": ema.average(v) for n, v in vs.items()}},
    "prefixed_swap": lambda ema, vs, gs: {
        "global_step": gs, **{f"net/{n}": ema.average(v) for n, v in vs.items()},
        **{f"raw/{n}": v for n, v in vs.items()}},
    "misfiled": lambda ema, vs, gs: {
        "global_step": gs, **vs, f"W/{E}": ema.average(vs["W"]),
        f"V/{E}": ema.average(vs["b"])},
}


@pytest.fixture(scope="module")
def made(tmp_path_factory, tf):
    out = tmp_path_factory.mktemp("tf1_in_graph_save_op")
    return {case: tf1_ema_run(tf, out / case, keys) for case, keys in SAVERS.items()}


def _in_graph(tf, prefix: str, how: str, names=None, **kw) -> dict:
    """Imports ``prefix``'s .meta, restores with ``how`` (the graph's variables, or those
    named ``names``) and returns every global variable's value by op name."""
    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        tf1.train.import_meta_graph(prefix + ".meta")
        vs = None if names is None else [v for v in tf1.global_variables()
                                         if v.op.name in names]
        with tf1.Session() as sess, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sess.run(tf1.global_variables_initializer())
            if how == "restore_ema":
                ckpt_tools.restore_ema(sess, prefix, vs, **kw)
            else:
                ckpt_tools.ema_saver(vs, checkpoint=prefix, **kw).restore(sess, prefix)
            return {v.op.name: sess.run(v.read_value()) for v in tf1.global_variables()}


@pytest.mark.parametrize("how", ["restore_ema", "ema_saver"])
@pytest.mark.parametrize("case", ["renamed", "prefixed_swap"])
def test_renamed_keys_restore_each_variables_own_average(made, tf, case, how):
    prefix, truth = made[case]
    got = _in_graph(tf, prefix, how)
    for n in VARS:
        assert got[n].dtype == truth[f"ema:{n}"].dtype, n
        assert got[n].tobytes() == truth[f"ema:{n}"].tobytes(), n
        assert got[n].tobytes() != truth[f"raw:{n}"].tobytes(), n


@pytest.mark.parametrize("how", ["restore_ema", "ema_saver"])
def test_misfiled_average_refusal_says_what_the_save_op_shows(made, tf, how):
    prefix, truth = made["misfiled"]
    with pytest.raises(ckpt_tools.EmaError) as exc:
        _in_graph(tf, prefix, how, VARS)
    msg = str(exc.value)
    assert f"wrote key 'V/{E}' from b/{E} (b's average)" in msg, msg
    assert "no average of V" in msg and "allow_missing=True" in msg, msg
    for wrong in ("variable_scope", "another EMA object", "ema-name", "translate"):
        assert wrong not in msg, (wrong, msg)
    got = _in_graph(tf, prefix, how, VARS, allow_missing=True)
    for n, kind in (("W", "ema"), ("b", "ema"), ("V", "raw")):
        assert got[n].tobytes() == truth[f"{kind}:{n}"].tobytes(), n
