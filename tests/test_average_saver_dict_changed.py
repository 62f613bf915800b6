"""``ckpt average`` of TF1 saves whose ``Saver`` var_list dict changed between them (the TF1
side of review-32-attack-r118 F4): ck-1 by ``Saver({"a": w, "c": b, "a/<EMA>": avg(w),
"c/<EMA>": avg(b)})``, ck-2 by the same dict with ``w`` and ``b`` swapped, each with its own
``.meta``. No key's name misleads within one save, so the own-graph check let them through and
the mean of ck-1's average of ``w`` and ck-2's of ``b`` was exported as ``a``'s EMA value, exit
0. Refused now (exit 6), naming the key and what each save op wrote under it; the same dict at
both saves is still averaged. Where only an older save wrote a ``.meta`` (review-32-attack-r121
F4: ck-3's dict swapped, ck-2 and ck-3 without their own graph), ck-1's graph shows the dict that
names the keys, and nothing shows it for the inputs: refused whatever is stated (the plain
average and ``--ema --bake --not-swapped`` wrote the mean of w's and b's averages, exit 0).
Truth: ``sess.run`` of each average at each save."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

SCRIPT = '''
def saves(case, n=2):
    for k in range(1, n + 1):
        with tf.Graph().as_default():
            w = tf1.Variable(np.zeros([3], np.float32), name="w")
            b = tf1.Variable(np.zeros([3], np.float32), name="b")
            gs = tf1.train.get_or_create_global_step()
            ema = tf1.train.ExponentialMovingAverage(0.5)
            update = ema.apply([w, b])
            noise = [v.assign_add(tf1.random.normal([3])) for v in (w, b)]
            aw, ab = ema.average(w), ema.average(b)
            x, y = (w, b) if k == 1 or case == "same" or case == "sib" and k < 3 else (b, w)
            ax, ay = (aw, ab) if x is w else (ab, aw)
            saver = tf1.train.Saver({"a": x, "c": y, "a/ExponentialMovingAverage": ax,
                                     "c/ExponentialMovingAverage": ay, "global_step": gs})
            with tf1.Session() as sess:
                sess.run(tf1.global_variables_initializer())
                for _ in range(k + 1):
                    sess.run(noise)
                    sess.run(update)
                sess.run(gs.assign(k))
                # "sib": only the first save writes a .meta (the graph-once habit)
                saver.save(sess, f"{out}/{case}/model.ckpt", global_step=k,
                           write_meta_graph=case != "sib" or k == 1)
                truth[f"{case}:{k}:w"], truth[f"{case}:{k}:b"] = sess.run([aw, ab])


saves("changed")
saves("same")
saves("sib", 3)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("average_saver_dict_changed")
    return out, run_tf1_script(SCRIPT, out)


def _average(made, case: str, out_dir, *extra: str) -> tuple[int, str]:
    out, _ = made
    code, _, err = run_cli(["average", str(out / case / "model.ckpt-1"),
                            str(out / case / "model.ckpt-2"), "--out", str(out_dir), *extra])
    return code, " ".join(err.split())


@pytest.mark.parametrize("extra", [[], ["--ema"], ["--ema", "--bake"]])
def test_keys_written_from_other_variables_are_refused(made, tmp_path, extra):
    code, err = _average(made, "changed", tmp_path / "out", *extra)
    assert code == 6, err  # was 0: 'a' exported as (ck-1's average of w + ck-2's of b) / 2
    assert "model.ckpt-1: 'a' holds the value of variable 'w' there but the value of " \
        "variable 'b' in" in err and "the Saver's var_list changed between the saves" in err, err
    assert not (tmp_path / "out").exists()


def test_the_same_saver_at_every_save_is_averaged(made, tmp_path, tf):
    code, err = _average(made, "same", tmp_path / "out", "--ema", "--bake")
    assert code == 0, err
    read = tf.train.load_checkpoint(str(tmp_path / "out" / "model.ckpt-2"))
    _, truth = made
    for key, n in (("a", "w"), ("c", "b")):
        want = (truth[f"same:1:{n}"].astype(np.float64) + truth[f"same:2:{n}"]) / 2
        np.testing.assert_allclose(read.get_tensor(key), want.astype(np.float32), rtol=0,
                                   atol=1e-6)


@pytest.mark.parametrize("extra", [[], ["--ema"], ["--ema", "--bake"],
                                   ["--ema", "--bake", "--not-swapped"]])
def test_a_dict_saver_shown_only_by_another_saves_graph_is_refused(made, tmp_path, extra):
    out, truth = made
    # the truth: ck-3's 'a' holds b's average, ck-2's w's (the dict changed)
    assert not np.array_equal(truth["sib:3:w"], truth["sib:3:b"])
    code, _, err = run_cli(["average", str(out / "sib" / "model.ckpt-2"),
                            str(out / "sib" / "model.ckpt-3"), "--out", str(tmp_path / "out"),
                            *extra])
    err = " ".join(err.split())
    assert code == 6, err  # was 0 for [] and --not-swapped: a = mean(2:w, 3:b)
    assert "model.ckpt-1.meta, the graph of another checkpoint of its prefix, records a Saver " \
        "that wrote 'a' from variable 'w'" in err and "(no option decides)" in err, err
    assert "--not-swapped" not in err, err
    assert not (tmp_path / "out").exists()
