"""``ckpt list``: JSON contract, roles, filters, and no TensorFlow on the inspection path."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import DECIDE, FIXTURES, TF_CASES, expected
from typer.testing import CliRunner

from ckpt_tools.cli import app

runner = CliRunner()


def list_json(*args: str) -> dict:
    result = runner.invoke(app, ["list", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("case", TF_CASES)
def test_json_contract(case):
    doc = list_json(str(FIXTURES / case))
    assert doc["format"] == expected(case)["format"]
    assert doc["checkpoint"].endswith(expected(case)["prefix"])
    names = [v["name"] for v in doc["variables"]]
    if "list_variables" in expected(case):
        assert sorted(names) == sorted(n for n, _ in expected(case)["list_variables"])
    else:
        assert len(names) == expected(case)["num_keys"]
    for v in doc["variables"]:
        assert {"name", "dtype", "shape", "role", "collections", "ema_of", "ema"} <= set(v)
        assert v["role"] in {"weight", "ema", "ema_debias", "optimizer_slot", "bn_stat", "step",
                             "loss_average", "tensor_average", "other"}


@pytest.mark.parametrize("case", [c for c in TF_CASES if expected(c).get("ema_of")])
def test_ema_links_match_tensorflow(case):
    exp = expected(case)
    doc = {v["name"]: v for v in list_json(str(FIXTURES / case))["variables"]}
    ema_name = exp["ema_name"]
    saved = {s: t for s, t in exp["ema_of"].items() if s in doc}
    if case == "linear_trainable_only":
        assert not saved and not any(v["role"] == "ema" for v in doc.values())
        return
    assert saved
    for shadow, source in saved.items():
        assert doc[shadow]["role"] == "ema", shadow
        if doc[shadow]["ema_of"] is None:  # never a guess: no link, and the truth a candidate
            assert case in DECIDE and source in doc[shadow]["ema_candidates"], shadow
        else:
            assert doc[shadow]["ema_of"] == source, shadow
    # every averaged variable names a shadow; the default-named one when there are several
    for source in set(saved.values()):
        if doc[source]["ema"] is None:
            assert case in DECIDE, source
            continue
        assert doc[source]["ema"] in exp["ema_of"], source
        if case != "tf2_object" and f"{source}/{ema_name}" in doc:
            assert doc[source]["ema"].startswith(source + "/")


def test_roles_of_the_two_tower_model():
    exp = expected("towers_bn")
    doc = {v["name"]: v for v in list_json(str(FIXTURES / "towers_bn"))["variables"]}
    assert doc["conv1/weights"]["role"] == "weight"
    assert doc["conv1/BatchNorm/moving_mean"]["role"] == "bn_stat"
    assert doc["conv1/weights/Momentum"]["role"] == "optimizer_slot"
    assert doc["global_step"]["role"] == "step"
    for key in exp["loss_averages"]:
        assert doc[key]["role"] == "loss_average"
    for keys in exp["zero_debias_keys"].values():
        for key in keys:
            assert doc[key]["role"] == "ema_debias"
    trainable = set(exp["collections"]["trainable_variables"])
    for name, v in doc.items():
        assert ("trainable_variables" in v["collections"]) == (name in trainable), name
        assert ("variables" in v["collections"]) == (name in exp["collections"]["variables"])


def test_partitioned_collections_are_on_the_checkpoint_key():
    doc = {v["name"]: v for v in list_json(str(FIXTURES / "partitioned"))["variables"]}
    assert "trainable_variables" in doc["emb"]["collections"]
    assert doc["emb"]["partitions"] == 3


def test_tf2_object_names_are_readable():
    exp = expected("tf2_object")
    doc = {v["name"]: v for v in list_json(str(FIXTURES / "tf2_object"))["variables"]}
    for key, path in exp["object_graph_paths"].items():
        if ".OPTIMIZER_SLOT" not in key:
            assert doc[key]["path"] == path, key


def test_filters():
    path = str(FIXTURES / "towers_bn")
    only_ema = list_json(path, "--role", "ema")["variables"]
    assert only_ema and all(v["role"] == "ema" for v in only_ema)
    trainable = list_json(path, "--collection", "trainable")["variables"]
    assert {v["name"] for v in trainable} == set(
        expected("towers_bn")["collections"]["trainable_variables"])
    grep = list_json(path, "--grep", "conv1/*")["variables"]
    assert grep and all(v["name"].startswith("conv1/") for v in grep)
    regex = list_json(path, "--regex", "Momentum$")["variables"]
    assert regex and all(v["name"].endswith("Momentum") for v in regex)
    # a glob is always a glob and a regex always a regex: no guessing from the characters
    assert list_json(path, "--regex", ".*Momentum")["variables"] == regex
    nothing = runner.invoke(app, ["list", path, "--grep", "Momentum$", "--json"])
    assert nothing.exit_code == 3 and "select no variable" in nothing.output


def test_human_table_shows_totals_and_ema_summary():
    result = runner.invoke(app, ["list", str(FIXTURES / "towers_bn")])
    assert result.exit_code == 0
    # piped (as here): the table alone on stdout, so `| cut`/`| awk` see rows only; the
    # summary on stderr
    assert "parameters" not in result.stdout and "EMA:" not in result.stdout
    assert "parameters" in result.stderr and "EMA:" in result.stderr
    rows = result.stdout.splitlines()
    assert all(len(r.split("\t")) == 7 for r in rows[1:]), rows


def test_terminal_table_keeps_its_summary_under_the_table():
    result = runner.invoke(app, ["list", str(FIXTURES / "towers_bn")],
                           env={"COLUMNS": "120", "TTY_COMPATIBLE": "1"})
    assert result.exit_code == 0
    assert "parameters" in result.stdout and "EMA:" in result.stdout


def test_bad_role_is_a_usage_error():
    result = runner.invoke(app, ["list", str(FIXTURES / "towers_bn"), "--role", "nope"])
    assert result.exit_code == 2


def test_list_never_imports_tensorflow():
    code = ("import sys; from ckpt_tools.cli import main\n"
            "try:\n    main(['list', sys.argv[1], '--json'])\nexcept SystemExit:\n    pass\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')]\n"
            "print('IMPORTED', bad, file=sys.stderr); sys.exit(1 if bad else 0)")
    for case in ("towers_bn", "tf2_object", "linear_v1", "partitioned"):
        proc = subprocess.run([sys.executable, "-c", code, str(FIXTURES / case)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["variables"]


def test_errors_are_one_line_without_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ckpt_tools", "list", str(tmp_path / "nope")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "nope" in proc.stderr


def test_tables_never_parse_names_as_markup(capsys, monkeypatch):
    from ckpt_tools.cli._output import Column, Output

    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    Output().table("t", [Column("name"), Column("n", "right")],
                   [[("w[0]/[bold]x[/]", "cyan"), "1"]])
    assert "w[0]/[bold]x[/]" in capsys.readouterr().out


def test_piped_tables_are_one_row_per_line(capsys, monkeypatch):
    from ckpt_tools.cli._output import Column, Output

    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    rows = [[f"v{i}/" + "x" * (i * 30), str(i)] for i in range(20)]
    Output().table("title", [Column("name", shrink="middle"), Column("n", "right")], rows)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "title" and len(lines) == len(rows) + 2 and lines[1] == "name\tn"
    assert [line.split("\t") for line in lines[2:]] == rows


_QUIET_CASES = [*TF_CASES, "keras3_object", "savedmodel_keras", "keras_ema/adam.keras",
                "keras_ema/adam.weights.h5", "keras_legacy_h5/model.h5"]


@pytest.mark.parametrize("case", _QUIET_CASES)
def test_quiet_fast_path_prints_what_the_full_listing_shows(case):
    """``list -q`` without --role/--collection skips roles (list_names); it must print exactly
    the names the full listing shows, in the same order, for every sort and filter."""
    from ckpt_tools.cli._common import NameFilter
    from ckpt_tools.listing import list_names, list_variables

    path = FIXTURES / case
    if not path.exists():
        pytest.skip(f"{case}: no such fixture")
    for sort in ("name", "size"):
        for match in (None, NameFilter(["*a*"], None)):
            full = list_variables(path, sort=sort, match=match)
            assert list_names(path, sort=sort, match=match) == [
                v.path or v.name for v in full.variables], (case, sort, match)
    result = runner.invoke(app, ["list", str(path), "-q", "--sort", "size"])
    assert result.exit_code == 0, result.output
    full = list_variables(path, sort="size")
    assert result.stdout.splitlines() == [v.path or v.name for v in full.variables]


def test_gc_is_paused_while_listing_and_restored_after():
    """The index parse and the listing pause the cyclic collector (many small objects, no
    cycles) and leave it as they found it, also when they fail."""
    import gc

    from ckpt_tools.formats._io import gc_paused
    from ckpt_tools.listing import list_names

    assert gc.isenabled()
    seen = []
    with gc_paused():
        seen.append(gc.isenabled())
        with gc_paused():
            seen.append(gc.isenabled())
        seen.append(gc.isenabled())
    assert seen == [False, False, False] and gc.isenabled()
    gc.disable()
    try:
        list_names(FIXTURES / "linear_v2")
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()
    with pytest.raises(Exception):  # noqa: B017 - any CheckpointError
        list_names(FIXTURES / "no_such_checkpoint")
    assert gc.isenabled()


# -- `ckpt list PATH --json/-q` without typer ------------------------------------------------
def test_plain_list_forms_skip_typer_and_others_do_not():
    from ckpt_tools.cli._run import plain_list

    assert plain_list(["list", "p", "--json"]) == ("p", True, False)
    assert plain_list(["list", "-q", "p"]) == ("p", False, True)
    assert plain_list(["list", "--quiet", "--json", "p"]) == ("p", True, True)
    for args in (["list", "p"], ["list", "p", "--json", "--role", "ema"], ["list", "--help"],
                 ["list", "p", "q", "--json"], ["list", "--json"], ["list", "-", "--json"],
                 ["list", "", "--json"], ["--debug", "list", "p", "--json"],
                 ["map", "p", "--json"], ["list", "p", "--json", "--wide"], []):
        assert plain_list(args) is None, args


def _both_paths(args: list[str], capsys) -> list[tuple[int, str, str]]:
    """(exit code, stdout, stderr) of ``ckpt ARGS`` through ckpt_tools.cli.main (the
    typer-free path for these forms) and through the typer app itself."""
    from ckpt_tools import cli
    from ckpt_tools.cli import commands

    out = []
    for main in (cli.main, commands.main):
        capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code
        captured = capsys.readouterr()
        out.append((code, captured.out, captured.err))
    return out


@pytest.mark.parametrize("flags", [["--json"], ["-q"], ["--json", "-q"]])
@pytest.mark.parametrize("case", ["towers_bn", "tf2_object", "partitioned",
                                  "keras_ema/adam.keras", "nope"])
def test_plain_list_prints_and_fails_as_the_typer_command(case, flags, capsys):
    fast, app_run = _both_paths(["list", str(FIXTURES / case), *flags], capsys)
    assert fast == app_run
    assert fast[0] == (3 if case == "nope" else 0)


def test_plain_list_names_the_corrupt_file_and_exits_4(tmp_path, capsys):
    (tmp_path / "m.index").write_bytes(b"\x00" * 100)
    fast, app_run = _both_paths(["list", str(tmp_path / "m"), "--json"], capsys)
    assert fast == app_run and fast[0] == 4 and fast[1] == ""
    assert fast[2].startswith("error: ") and "m.index" in fast[2] and len(
        fast[2].splitlines()) == 1


def test_list_json_imports_neither_typer_nor_tensorflow():
    """Nor dataclasses (inspect, ast, dis…) and typing: ~10 ms of every ``ckpt list`` process
    (see ckpt_tools/formats/_record.py)."""
    code = ("import sys; from ckpt_tools.cli import main\n"
            "try:\n    main(['list', sys.argv[1], '--json'])\nexcept SystemExit as exc:\n"
            "    code = exc.code\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in\n"
            "       ('typer', 'tensorflow', 'dataclasses', 'typing', 'inspect', 'numpy')]\n"
            "print('IMPORTED', bad, file=sys.stderr); sys.exit(1 if bad or code else 0)")
    proc = subprocess.run([sys.executable, "-c", code, str(FIXTURES / "towers_bn")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["variables"]


def test_list_detects_ema_names_and_collections_once(monkeypatch):
    """Classifying roles and pairing averages share one detect_ema_names and one
    collections_by_key (each ~1 ms at 3,000 variables; both ran twice)."""
    from ckpt_tools import roles
    from ckpt_tools.formats.meta import MetaGraph
    from ckpt_tools.listing import list_variables

    calls = {"ema": 0, "colls": 0}
    detect, by_key = roles.detect_ema_names, MetaGraph.collections_by_key

    def counted_detect(entries):
        calls["ema"] += 1
        return detect(entries)

    def counted_by_key(graph):
        calls["colls"] += 1
        return by_key(graph)

    monkeypatch.setattr(roles, "detect_ema_names", counted_detect)
    monkeypatch.setattr(MetaGraph, "collections_by_key", counted_by_key)
    listing = list_variables(FIXTURES / "towers_bn")
    assert any(v.ema for v in listing.variables)
    assert calls == {"ema": 1, "colls": 1}


@pytest.mark.parametrize("flags", [["--json"], ["-q"]])
def test_plain_list_process_runs_without_cyclic_gc(flags):
    """A ``ckpt list --json``/``-q`` process (main() without argv, ended by os._exit) runs
    with the cyclic collector off: its first collection after the index parse traversed
    every entry (~30 ms at 100,000 variables)."""
    code = ("import gc, sys; import ckpt_tools.cli as cli\n"
            "run = cli.run_list\n"
            "def spy(*a):\n    print('GC', gc.isenabled(), file=sys.stderr); return run(*a)\n"
            "cli.run_list = spy; sys.argv = ['ckpt', 'list', *sys.argv[1:]]; cli.main()")
    proc = subprocess.run([sys.executable, "-c", code, str(FIXTURES / "towers_bn"), *flags],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "GC False" in proc.stderr
    assert proc.stdout


@pytest.mark.parametrize("flags", [["--json"], ["-q"]])
@pytest.mark.parametrize("case", ["towers_bn", "partitioned", "nope"])
def test_plain_list_as_a_process_prints_everything_then_exits(case, flags, capsys, tmp_path):
    """``python -m ckpt_tools list …`` ends without the interpreter's teardown (os._exit):
    stdout (a file here, fully buffered) and stderr still carry all the typer command prints,
    with its exit code."""
    (want,) = [r for r in _both_paths(["list", str(FIXTURES / case), *flags], capsys)][1:]
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.run([sys.executable, "-m", "ckpt_tools", "list",
                               str(FIXTURES / case), *flags], stdout=o, stderr=e, timeout=120)
    assert (proc.returncode, out.read_text(), err.read_text()) == want


@pytest.mark.parametrize("fixture", ["towers_bn", "model_garden_slot", "linear_v2"])
def test_ema_column_keeps_the_variables_last_segment_at_80_columns(fixture):
    """README: the ema column names the variable "always with its last segment"; at 80
    columns a shadow of conv1/BatchNorm/moving_variance was shown as "of …/BatchNorm/…"."""
    env = {"COLUMNS": "80", "TTY_COMPATIBLE": "1", "NO_COLOR": "1"}
    result = runner.invoke(app, ["list", str(FIXTURES / fixture)], env=env)
    assert result.exit_code == 0, result.output
    doc = json.loads(runner.invoke(app, ["list", str(FIXTURES / fixture), "--json"]).stdout)
    by_key = {v["name"]: v for v in doc["variables"]}
    want = sorted((by_key[v["ema_of"]].get("path") or v["ema_of"]).rsplit("/", 1)[-1]
                  for v in doc["variables"] if v.get("ema_of"))
    assert want, fixture
    cells = [line.split("  of ", 1)[1] for line in result.stdout.splitlines() if "  of " in line]
    assert sorted(c.rsplit("/", 1)[-1] for c in cells) == want, result.stdout
    assert all(len(line) <= 80 for line in result.stdout.splitlines()), result.stdout


def test_stats_histogram_asked_for_is_shown_at_80_columns():
    """--histogram pays a second pass: at 80 columns its column stays, others give way."""
    env = {"COLUMNS": "80", "TTY_COMPATIBLE": "1", "NO_COLOR": "1"}
    result = runner.invoke(app, ["stats", str(FIXTURES / "towers_bn"), "--histogram"], env=env)
    assert result.exit_code == 0, result.output
    header = result.stdout.splitlines()[1]
    assert header.split()[0] == "name" and "histogram" in header.split(), result.stdout
    assert all(len(line) <= 80 for line in result.stdout.splitlines()), result.stdout


def test_a_list_of_more_than_ten_is_listed_in_counting_order(tf, tmp_path):
    """review-11-user-r12 F9: a TF2 list's entries come 0, 1, 2 … 10, 11 (the bundle's byte
    order put vs/10 before vs/2, the very confusion the pairing guards against), in the full
    listing, --json and the -q fast path alike."""
    from ckpt_tools.listing import list_names, list_variables

    prefix = tf.train.Checkpoint(vs=[tf.Variable(float(i)) for i in range(12)]).write(
        str(tmp_path / "ckpt"))
    want = [f"vs/{i}" for i in range(12)]
    result = runner.invoke(app, ["list", prefix])
    assert result.exit_code == 0, result.output
    rows = [line.split("\t")[0] for line in result.stdout.splitlines()]
    assert [r for r in rows if r.startswith("vs/")] == want, result.stdout
    shown = [v.path or v.name for v in list_variables(prefix).variables]
    assert [n for n in shown if n.startswith("vs/")] == want, shown
    assert [n for n in list_names(prefix) if n.startswith("vs/")] == want
