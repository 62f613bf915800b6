"""``ckpt list --json`` reports a pairing that rests on ``--averages-only`` as ``map`` does
(``"stated_averages_only": {"pairs": {average: variable}}``), only where the statement decides
one, and the README's ``list --json`` contract documents every ``stated_*`` field the commands
emit. Checkpoints made here by real TensorFlow (a Saver of the averages alone, no ``.meta``;
a plain ``Saver()``), the average names as ``ema.average(v)`` recorded them at save time."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r'''
with tf.Graph().as_default():
    made = [tf1.get_variable(n, [3], initializer=tf1.ones_initializer()) for n in ("w", "b")]
    ema = tf1.train.ExponentialMovingAverage(0.5)
    with tf.control_dependencies([v.assign_add(tf.ones([3])) for v in made]):
        update = ema.apply(made)
    alone = tf1.train.Saver({ema.average_name(v): ema.average(v) for v in made})
    with trained(tf, update, 1) as s:
        alone.save(s, f"{out}/alone/model.ckpt", write_meta_graph=False)
        tf1.train.Saver().save(s, f"{out}/plain/model.ckpt")
        for v in made:
            truth[ema.average(v).op.name] = np.array(v.op.name)
'''


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("list_stated")
    return out, run_tf1_script(SCRIPT, out)


def test_list_json_reports_a_stated_averages_only(made):
    out, truth = made
    code, text, err = run_cli(["list", "--json", "--averages-only", str(out / "alone")])
    assert code == 0, err
    doc = json.loads(text)
    assert doc["stated_averages_only"] == {"pairs": {k: str(v) for k, v in truth.items()}}
    assert doc["ema_unproven"] is None
    code, text, err = run_cli(["list", "--json", "--averages-only", str(out / "plain")])
    assert code == 0, err  # every variable stored: the statement decides nothing
    assert "stated_averages_only" not in json.loads(text)


def test_readme_list_json_contract_names_every_stated_field():
    readme = (ROOT / "README.md").read_text()
    contract = readme.split("### `ckpt list --json`", 1)[1].split("\n## ", 1)[0]
    source = "".join((ROOT / "ckpt_tools" / f).read_text()  # the notes and their fields
                     for f in ("statements.py", "cli/ema.py") if (ROOT / "ckpt_tools" / f).exists())
    # the keys stated_notes() (cli note_stated_order()) put in the --json documents:
    # found[...], update(...=True) and the {"stated_...": ...} it returns
    emitted = set(re.findall(r'(?:\{|found\[|\*\*found, )"(stated_\w+)"', source)) | set(
        re.findall(r'\b(stated_\w+)=True', source))
    assert "stated_averages_only" in emitted, emitted
    for field in sorted(emitted):
        assert f'"{field}"' in contract, field
