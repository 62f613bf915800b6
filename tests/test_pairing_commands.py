"""Every command uses the one pairing decision ``ckpt map`` makes (emamap.proven_pairs): where
the file does not prove which average goes with which variable, ``diff --ema`` and ``show``
refuse (exit 6) like ``map``, ``list`` marks the average ``of ?`` with its candidates and
``stats`` shows it without a variable or drift (``?``); with the deciding option
(``--ema-name``, ``--apply-order``, ``--no-meta``) they agree with ``ckpt map`` and with what
TensorFlow recorded at save time (``ema.average(v)``).
Name filters that select nothing exit 3 in every command."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from helpers import FIXTURES, expected, expected_values, tf1_contradicting_meta
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def contradicting_meta(tmp_path_factory) -> tuple[str, dict]:
    """TF1 checkpoint averaging w and b, with a .meta from a graph that does not average b,
    and the truth TensorFlow recorded (:func:`helpers.tf1_contradicting_meta`)."""
    import tensorflow as tf

    return tf1_contradicting_meta(tf, tmp_path_factory.mktemp("contradicting_meta"))


# (case, option that decides, its value or None for a flag)
CASES = [("custom_ema_name", "--ema-name", "avg"),
         ("tf2_object", "--apply-order", "trainable"),
         ("contradicting_meta", "--no-meta", None)]


# A shadow each case leaves open without the option (key, as `ckpt show` takes it). For
# custom_ema_name (without its .meta), W/avg's name is not TF's default: beside default-named
# averages nothing proves 'avg' is an EMA's rather than an optimizer's slot, so stats and show
# need the option there too.
OPEN_SHADOW = {"custom_ema_name": "W/avg", "tf2_object": "ema/dense/bias",
               "contradicting_meta": "b/ExponentialMovingAverage"}
SHADOWS_PROVEN: set[str] = set()


@pytest.fixture(scope="module")
def custom_without_meta(tmp_path_factory):
    """custom_ema_name without its .meta, whose AssignMovingAvg ops prove W/avg an average
    (review-14-attack-r27 F2): without it nothing does."""
    out = tmp_path_factory.mktemp("custom_ema_name")
    for f in (FIXTURES / "custom_ema_name").glob("*"):
        if f.suffix != ".meta":
            shutil.copy(f, out / f.name)
    return str(out)


def _path(case: str, request) -> str:
    if case == "contradicting_meta":
        return request.getfixturevalue("contradicting_meta")[0]
    if case == "custom_ema_name":
        return request.getfixturevalue("custom_without_meta")
    return str(FIXTURES / case)


def _truth(case: str, value: str | None, request) -> tuple[dict, dict, dict]:
    """What TensorFlow recorded at save time: (average -> its variable, variable -> the average
    the deciding option selects, key -> value), in checkpoint keys."""
    if case == "contradicting_meta":
        truth = request.getfixturevalue("contradicting_meta")[1]
        ema_of = truth["ema_of"]
        return ema_of, {v: a for a, v in ema_of.items()}, truth["values"]
    exp = expected(case)
    if case == "custom_ema_name":
        chosen = next(e["average_name"] for e in exp["emas"] if e["name"] == value)
    else:
        chosen = {v: a for a, v in exp["ema_of"].items()}
    return exp["ema_of"], chosen, expected_values(case)


def _drift(values: dict, average: str, variable: str) -> float:
    raw = np.asarray(values[variable], np.float64)
    return float(np.linalg.norm(np.asarray(values[average], np.float64) - raw)
                 / np.linalg.norm(raw))


def _invoke(*argv: str):
    return runner.invoke(app, list(argv))


def _map_pairs(path: str, decide: list[str]) -> dict[str, str]:
    """``ckpt map``'s pairing: variable key -> average key (averaged variables only)."""
    result = _invoke("map", path, "--json", "--non-averaged", "drop", *decide)
    assert result.exit_code == 0, result.output
    return {t: s for s, t in json.loads(result.stdout).items() if s != t}


@pytest.mark.parametrize(("case", "option", "value"), CASES, ids=[c[0] for c in CASES])
def test_diff_ema_refuses_like_map_and_agrees_with_it_given_the_option(case, option, value,
                                                                       request):
    path = _path(case, request)
    decide = [option] + ([value] if value else [])
    refused = _invoke("diff", path, "--ema")
    assert refused.exit_code == 6, refused.output
    assert option in refused.output
    assert _invoke("map", path).exit_code == 6
    result = _invoke("diff", path, "--ema", "--json", *decide)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    got = {t["name"]: t["other"] for t in report["tensors"]}
    want = _map_pairs(path, decide)
    assert got and got == {k: v for k, v in want.items() if k in got}
    assert set(got) == {k for k in want if k in got}


@pytest.mark.parametrize(("case", "option", "value"), CASES, ids=[c[0] for c in CASES])
def test_list_marks_unproven_averages_and_agrees_with_map_given_the_option(case, option, value,
                                                                           request):
    path = _path(case, request)
    decide = [option] + ([value] if value else [])
    result = _invoke("list", path, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    want = _map_pairs(path, decide)
    marked = [v for v in doc["variables"] if v["ema_candidates"]]
    assert marked, doc
    for v in doc["variables"]:  # no claim a pairing that map does not prove
        if v["role"] != "ema" and v["ema"] is not None:
            assert want.get(v["key"]) == v["ema"], v
    table = _invoke("list", path)
    assert table.exit_code == 0 and option in table.output, table.output
    decided = json.loads(_invoke("list", path, "--json", *decide).stdout)
    got = {v["key"]: v["ema"] for v in decided["variables"] if v["role"] != "ema" and v["ema"]}
    assert got == want
    assert not [v for v in decided["variables"] if v["ema_candidates"] and v["role"] != "ema"]


@pytest.mark.parametrize(("case", "option", "value"), CASES, ids=[c[0] for c in CASES])
def test_list_given_the_option_pairs_as_tensorflow_recorded(case, option, value, request):
    path = _path(case, request)
    ema_of, chosen, _ = _truth(case, value, request)
    decide = [option] + ([value] if value else [])
    doc = json.loads(_invoke("list", path, "--json", *decide).stdout)
    got = {v["key"]: v["ema"] for v in doc["variables"] if v["role"] != "ema" and v["ema"]}
    assert got == chosen
    shadows = {v["key"]: v["ema_of"] for v in doc["variables"] if v["role"] == "ema"}
    assert shadows == ema_of
    assert doc["ema_unproven"] is None
    refused = json.loads(_invoke("list", path, "--json").stdout)["ema_unproven"]
    assert refused["option"] == option and option in refused["reason"]


@pytest.mark.parametrize(("case", "option", "value"), CASES, ids=[c[0] for c in CASES])
def test_stats_leaves_an_open_shadow_undrifted_and_the_option_drifts_it_from_its_variable(
        case, option, value, request):
    """Statistics are the file's own values: an open shadow is shown without a variable or
    drift ('?', as list marks it) and a note names the option, not refused whole
    (review-13-attack-r23 F6); --strict refuses as map does."""
    path = _path(case, request)
    ema_of, _, values = _truth(case, value, request)
    decide = [option] + ([value] if value else [])
    shadow = OPEN_SHADOW[case]
    for argv in (["stats", path], ["stats", path, "--grep", shadow]):
        shown = _invoke(*argv)
        assert shown.exit_code == 0, (argv, shown.output)
        assert option in shown.stderr, shown.stderr
        row = next(r for r in shown.stdout.splitlines() if r.split("\t")[0] == shadow)
        assert row.split("\t")[-2] == "?", row  # the drift column
    doc = json.loads(_invoke("stats", path, "--json").stdout)
    record = next(t for t in doc["tensors"] if shadow in (t["key"], t["path"]))
    assert record["ema_of"] is None and record["drift"] is None, record
    assert doc["ema_unproven"]["option"] == option
    assert record["key"] in doc["ema_unproven"]["averages"]
    refused = _invoke("stats", path, "--strict")
    assert refused.exit_code == 6 and option in refused.output, refused.output
    for argv in (["stats", path, "--json", *decide],) + (
            (["stats", path, "--json"],) if case in SHADOWS_PROVEN else ()):
        result = _invoke(*argv)
        assert result.exit_code == 0, result.output
        records = {t["key"]: t for t in json.loads(result.stdout)["tensors"]}
        shadows = {k: t["ema_of"] for k, t in records.items() if t["role"] == "ema"}
        assert shadows == ema_of
        for average, variable in ema_of.items():
            assert records[average]["drift"] == pytest.approx(
                _drift(values, average, variable), rel=1e-6, abs=1e-9), average
    # what the file proves without the option is still reported: the variables' own statistics
    variables = sorted(set(ema_of.values()))
    plain = _invoke("stats", path, "--json", *[a for v in variables for a in ("--grep", v)])
    assert plain.exit_code == 0, plain.output
    assert {t["key"] for t in json.loads(plain.stdout)["tensors"]} == set(variables)


@pytest.mark.parametrize(("case", "option", "value"), CASES, ids=[c[0] for c in CASES])
def test_show_refuses_like_map_and_given_the_option_drifts_from_the_recorded_variable(
        case, option, value, request):
    path = _path(case, request)
    ema_of, _, values = _truth(case, value, request)
    decide = [option] + ([value] if value else [])
    shadow = OPEN_SHADOW[case]
    refused = _invoke("show", path, shadow)
    if case in SHADOWS_PROVEN:
        assert refused.exit_code == 0 and "EMA drift from W:" in refused.output, refused.output
        decide = []
    else:
        assert refused.exit_code == 6, refused.output
        assert option in refused.output and "drift" not in refused.output
    result = _invoke("show", path, shadow, "--json", *decide)
    assert result.exit_code == 0, result.output
    (record,) = json.loads(result.stdout)["tensors"]
    assert record["ema_of"] == ema_of[record["key"]]
    assert record["drift"] == pytest.approx(
        _drift(values, record["key"], ema_of[record["key"]]), rel=1e-6, abs=1e-9)
    text = _invoke("show", path, shadow, *decide)
    assert text.exit_code == 0 and "EMA drift from" in text.output, text.output


def test_stats_of_a_proven_checkpoint_is_unchanged_by_the_pairing_decision():
    """towers_bn: every shadow is paired by TF1 names and the .meta; stats needs no option and
    each drift is from the variable TensorFlow recorded."""
    path = str(FIXTURES / "towers_bn")
    result = _invoke("stats", path, "--json")
    assert result.exit_code == 0, result.output
    shadows = {t["key"]: t["ema_of"] for t in json.loads(result.stdout)["tensors"]
               if t["role"] == "ema"}
    assert shadows and shadows == expected("towers_bn")["ema_of"]


def test_list_json_is_unchanged_where_the_pairing_is_proven():
    doc = json.loads(_invoke("list", str(FIXTURES / "towers_bn"), "--json").stdout)
    want = _map_pairs(str(FIXTURES / "towers_bn"), ["--slots", "keep"])
    got = {v["key"]: v["ema"] for v in doc["variables"] if v["role"] != "ema" and v["ema"]}
    assert got == want


@pytest.mark.parametrize("argv", [
    ["list", "{p}"], ["list", "{p}", "--json"], ["list", "{p}", "-q"], ["stats", "{p}"],
    ["diff", "{p}", "--ema"], ["diff", "{p}", "{p}"], ["map", "{p}"], ["show", "{p}"],
], ids=lambda a: " ".join(a[:1] + a[2:]))
def test_name_filters_that_select_nothing_exit_3_in_every_command(argv):
    path = str(FIXTURES / "towers_bn")
    result = _invoke(*[a.replace("{p}", path) for a in argv], "--grep", ".*Momentum")
    if argv[0] == "show":  # show takes --regex only
        result = _invoke("show", path, "--regex", "^nothing-here$")
    assert result.exit_code == 3, result.output
    assert "select no variable" in result.output or "no variable" in result.output


def test_python_api_pairs_as_map_does_by_default():
    """diff_ema and checkpoint_stats without a pairing given use map's: tf2_object's two biases
    are refused (diff_ema) or left without a variable and drift (checkpoint_stats); stating
    the order TensorFlow used gives the averages it recorded."""
    from ckpt_tools import open_checkpoint
    from ckpt_tools.diff import diff_ema
    from ckpt_tools.ema_decide import decide_pairing
    from ckpt_tools.emamap import UnprovenPairingError, proven_pairs
    from ckpt_tools.stats import checkpoint_stats

    path = str(FIXTURES / "tf2_object")
    truth = expected("tf2_object")["ema_of"]
    with pytest.raises(UnprovenPairingError) as refused:
        diff_ema(path)
    assert refused.value.option == "--apply-order"
    with open_checkpoint(path) as ckpt:
        records = {r.name: r for r in checkpoint_stats(ckpt) if r.role == "ema"}
        open_ = {k for k, r in records.items() if r.ema_of is None}
        assert open_ == set(refused.value.undecided)
        assert all(records[k].drift is None for k in open_)
        assert all(r.ema_of == truth[k] for k, r in records.items() if k not in open_)
        variables, refusal = decide_pairing(ckpt, apply_order="trainable")
        assert refusal is None
        decided = {r.name: r.ema_of for r in checkpoint_stats(ckpt, variables=variables)
                   if r.role == "ema"}
        assert decided == truth
        report = diff_ema(ckpt, pairs=proven_pairs(ckpt, apply_order="trainable"))
    assert {t.name: t.other for t in report.tensors} == {v: a for a, v in truth.items()}
