"""How SavedModels are named and reported: collections from saved_model.pb whatever path form
is given, the JSON ``meta``/``saved_model`` fields, relative paths, and TF Serving choices.

Truth: the collections TensorFlow recorded at save time (``fixtures/savedmodel_tf1``).
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from _corpus import run_cli
from helpers import FIXTURES, expected

TF1_SM = FIXTURES / "savedmodel_tf1"
KERAS_SM = FIXTURES / "savedmodel_keras"


@pytest.mark.parametrize("path", ["variables/variables.index", "variables/variables",
                                  "variables", ""])
def test_tf1_collections_and_their_source_from_every_path_form(capsys, path):
    exp = expected("savedmodel_tf1")
    code, out, err = run_cli(["list", str(TF1_SM / path), "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["meta"] == str(TF1_SM / "saved_model.pb")  # where the collections came from
    assert doc["saved_model"] == str(TF1_SM / "saved_model.pb")
    colls = {v["name"]: set(v["collections"]) for v in doc["variables"]}
    for coll, members in exp["collections"].items():
        for name in members:
            assert coll in colls[name], (coll, name)
    code, out, err = run_cli(["list", str(TF1_SM / path), "--collection", "trainable",
                              "--quiet"], capsys)
    assert code == 0, err
    assert sorted(out.split()) == sorted(exp["collections"]["trainable_variables"])


def test_tf2_saved_model_reports_no_collections_but_its_saved_model(capsys):
    code, out, err = run_cli(["list", str(KERAS_SM), "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["meta"] is None and doc["saved_model"] == str(KERAS_SM / "saved_model.pb")


@pytest.mark.parametrize("command", [["list"], ["verify"]])
def test_variables_folder_prints_the_path_as_typed(capsys, command):
    rel = os.path.relpath(TF1_SM / "variables")
    code, out, err = run_cli([*command, rel], capsys)
    assert code == 0, err
    assert os.path.abspath(rel) not in out + err
    assert os.path.join(rel, "variables") in out


def test_index_inside_the_variables_folder_finds_saved_model_pb(tmp_path, capsys,
                                                               monkeypatch):
    shutil.copytree(TF1_SM, tmp_path / "sm")
    monkeypatch.chdir(tmp_path / "sm" / "variables")
    code, out, err = run_cli(["list", "variables.index", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["meta"] == os.path.join(str(tmp_path / "sm"), "saved_model.pb")



SERVING = FIXTURES / "savedmodel_serving" / "model"


def test_serving_parent_says_which_version_it_took_and_what_it_skipped(tmp_path, capsys):
    shutil.copytree(SERVING, tmp_path / "model")
    (tmp_path / "model" / "99").mkdir()  # a version still being written: no saved_model.pb
    (tmp_path / "model" / "12").mkdir()
    for command in (["list"], ["verify"], ["map"]):
        code, out, err = run_cli([*command, str(tmp_path / "model")], capsys)
        assert code in (0, 6), err
        notes = [line for line in err.splitlines() if "skipped" in line]
        assert len(notes) == 1, err
        assert "version 00000010" in notes[0] and "99, 12" in notes[0], notes
    code, out, err = run_cli(["list", str(SERVING)], capsys)  # nothing skipped: no note
    assert code == 0 and "skipped" not in err
