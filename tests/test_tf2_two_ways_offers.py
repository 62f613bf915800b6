"""TF2: the refusal of an ``--ema-name`` that is both an attribute of the tf.train.Checkpoint
and an EMA object's name offers only options it ran (review-32-attack-r118 F2): it offered the
same option for both readings (attributes crossed: ``k32fast=[slow's]``, ``k32slow=[fast's]``),
options refused when run, and options lacking the ``--allow-missing`` they need. Each option
it names is run here and must give one object's averages (the rest raw) bit for bit, truth
from ``ema.average(v)``; where none works it says no ``--ema-name`` decides. The EMA objects
carry names of their own: TF numbers an object's name process-wide, and xdist runs other files
in this process."""

from __future__ import annotations

import re

import numpy as np
import pytest
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()

# case -> (the two objects' names (None: TF's default), the variables each averages, the
# attributes: attribute -> [(object index, variable)], the --ema-name refused)
CASES = {
    "crossed": (["k32fast", "k32slow"], ["wbc", "wbc"],
                {"k32fast": [(1, n) for n in "wbc"], "k32slow": [(0, n) for n in "wbc"]},
                "k32fast"),
    "other": ([None, "k32ema"], ["wb", "c"],
              {"k32ema": [(0, "w"), (0, "b")], "other": [(1, "c")]}, "k32ema"),
    "split": (["k32split", None], ["wbc", "w"],
              {"k32split": [(0, "w"), (0, "b")], "part": [(0, "c")]}, "k32split"),
    # one attribute holding two objects' averages (review-33-attack-r129 M2)
    "mix": (["k33mix", None], ["wbc", "w"],
            {"k33mix": [(0, "w"), (0, "b")], "part": [(0, "c"), (1, "w")]}, "k33mix"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_ways_refusal_offers_only_what_it_ran(tf, tmp_path, case):
    names, applies, hold, stated = CASES[case]

    class M(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.random.stateless_normal([2, 3], [3, 1]), name="w")
            self.b = tf.Variable(tf.zeros([3]), name="b")
            self.c = tf.Variable(tf.ones([3]), name="c")

    m = M()
    var = {"w": m.w, "b": m.b, "c": m.c}
    emas = [tf.train.ExponentialMovingAverage(d, **({"name": n} if n else {}))
            for n, d in zip(names, (0.5, 0.9), strict=True)]
    for i in range(3):
        for v in var.values():
            v.assign(v * 0.7 + 0.2 * (i + 1))
        for e, a in zip(emas, applies, strict=True):
            e.apply([var[n] for n in a])
    avg = [{n: e.average(var[n]).numpy() for n in a}
           for e, a in zip(emas, applies, strict=True)]
    raw = {n: v.numpy() for n, v in var.items()}
    ck = tmp_path / "ck"
    tf.train.Checkpoint(model=m, **{k: [emas[i].average(var[n]) for i, n in h]
                                    for k, h in hold.items()}).write(str(ck / "ckpt"))
    out = tmp_path / "x.npz"
    result = runner.invoke(app, ["export", str(ck), "--ema-name", stated, "--out", str(out)])
    said = " ".join(result.output.split())
    assert result.exit_code == 6 and not out.exists(), said
    offered = _offers(said.partition("; pass ")[2])
    if case == "crossed":  # the other attribute is the other object's name: nothing decides
        assert "no --ema-name decides" in said and "; pass" not in said, said
        assert not offered
        for extra in ([], ["--allow-missing"]):  # what the refusal used to offer is refused
            result = runner.invoke(app, ["export", str(ck), "--ema-name", "k32slow", *extra,
                                         "--out", str(out)])
            assert result.exit_code == 6 and not out.exists(), result.output
        return
    assert offered, said
    if case == "split":  # --ema-name k32split --exclude 'model/c' reads one list's (s33a)
        assert ("--ema-name k32split", ("model/c",), "") in offered, said
    _run_offers(ck, out, offered, avg, raw, hold)
    if case == "mix":
        _unprompted_mix(ck, out, avg, raw, hold)
    if case != "split":
        return
    # s32k: the refusal without --ema-name said "no --ema-name decides" while the option the
    # refusal above offers (--ema-name part --allow-missing) is accepted; both now offer it,
    # and the split words' --exclude offer, which an --exclude could not lift before
    out.unlink()
    result = runner.invoke(app, ["export", str(ck), "--out", str(out)])
    said = " ".join(result.output.split())
    assert result.exit_code == 6 and not out.exists(), said
    assert "no --ema-name decides" not in said, said
    named = said.partition("is refused (with --allow-missing too); pass ")[2].partition(
        " (Python:")[0]
    alone = said.partition(" exports one holder's averages alone")[0].rpartition("; ")[2]
    offered = _offers(named) + _offers(alone)
    assert ("--ema-name part", (), " --allow-missing") in offered, said
    assert ("--ema-name k32split", ("model/c",), "") in offered, said
    _run_offers(ck, out, offered, avg, raw, hold)


def _unprompted_mix(ck, out, avg, raw, hold) -> None:
    """The refusal without --ema-name of an attribute holding two objects' averages said "no
    --ema-name decides" while the options its follow-ups offer work (review-33-attack-r129
    M2): it offers them now, each run and right bit for bit."""
    out.unlink(missing_ok=True)
    result = runner.invoke(app, ["export", str(ck), "--out", str(out)])
    said = " ".join(result.output.split())
    assert result.exit_code == 6 and not out.exists(), said
    assert "no --ema-name decides" not in said, said
    offered = _offers(said.partition("alone is refused (with --allow-missing too); pass ")[2]
                      .partition(" (Python:")[0])
    assert ("--ema-name ExponentialMovingAverage", (), " --allow-missing") in offered, said
    assert ("--ema-name k33mix", ("model/c",), "") in offered, said
    _run_offers(ck, out, offered, avg, raw, hold)


def _offers(text: str) -> list[tuple[str, tuple[str, ...], str]]:
    """The ``--ema-name N [--exclude 'G' ...] [--allow-missing]`` options in ``text``."""
    found = re.findall(r"(--ema-name [^\s,;)]+)((?: --exclude '[^']+')*)((?: --allow-missing)?)",
                       text)
    return list(dict.fromkeys((n, tuple(re.findall(r"'([^']+)'", ex)), allow)
                              for n, ex, allow in found))


def _run_offers(ck, out, offered, avg, raw, hold) -> None:
    """Runs each offer: every weight written is one object's average or (``--allow-missing``)
    its raw value, one object only, and all of that object's averages the attribute named
    keeps (those not excluded), bit for bit."""
    for opt, excluded, allow in offered:
        name = opt.split()[1]
        args = [*opt.split(), *(a for g in excluded for a in ("--exclude", g)), *allow.split()]
        result = runner.invoke(app, ["export", str(ck), *args, "--out", str(out), "--force"])
        assert result.exit_code == 0, (args, result.output)
        with np.load(out) as z:
            got = {n: z[f"model/{n}"] for n in "wbc" if f"model/{n}" in z.files}
        assert set(got) == {n for n in "wbc" if f"model/{n}" not in excluded}, (args, got)
        # every weight is one object's average or its raw value, and one object only
        used = set()
        for n, value in got.items():
            whose = [i for i, a in enumerate(avg) if n in a
                     and value.tobytes() == a[n].tobytes()]
            if whose:
                used.add(whose[0])
            else:
                assert allow and value.tobytes() == raw[n].tobytes(), (args, n)
        assert len(used) == 1, (args, used)
        # and all of that object's averages that the attribute named keeps
        i = next(iter(used))
        kept = {n for k, h in hold.items() for j, n in h if j == i and (
            k == name or name not in hold) and f"model/{n}" not in excluded}
        assert {n for n in got if n in avg[i] and got[n].tobytes() == avg[i][n].tobytes()
                } >= kept, (args, kept)
