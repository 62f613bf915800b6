"""Every README (and docs/*.md) console example whose input is in the repository prints what
it shows (review-13-user-u14 F10): each ``$ ckpt ...`` line of a ```` ```console ```` block whose
checkpoint is under ``fixtures/`` runs through the real CLI on an 80-column pseudo-terminal
(stdout and stderr together, no colour: what a user sees), and its text and exit code
(``$ echo $?``) must be the README's.

One normalisation, explicit: a README line that is ``…`` alone (indented or not) stands for
any number of lines the README leaves out (a long listing); every other line is compared
exactly. An example with no output lines under it must print nothing. Commands run in a
scratch directory holding a ``fixtures`` link to the repository's, so outputs (``--out``) are
written there and printed as the README's relative paths; the examples of one block run in
order in one directory, as a user would type them.

Examples whose inputs are generated (``/tmp/matrix``, ``/tmp/mx``... by ``fixtures/make_*.py``,
several minutes) are not run here; every one must follow the ``$ python fixtures/make_*.py DIR``
line that creates its input, in the same document (checked here, cheaply: a reader copying the
lines in order gets the input before the command), and a ``$ python -c`` line must run.

``python tests/test_readme_examples.py`` prints each example's real output (to update the
documents from, never by hand); ``--generated`` runs the generated ones instead, after
``python fixtures/make_matrix_tf.py /tmp/matrix``, ``make_matrix_keras.py --out /tmp/mx``,
``make_keras_early.py /tmp/ke``, ``make_keras_sublayers.py /tmp/ks``, ``make_keras_decide.py
/tmp/kd``, ``make_keras_pairing.py /tmp/kp``, ``make_tf2_digit_dicts.py /tmp/digits``,
``make_tf1_ema_objects.py /tmp/t1`` and ``make_tfk_same_names.py /tmp/ts`` (at those paths: a
path's length moves the 80-column wrapping; remove ``/tmp/ro``, an example's output, first)."""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _in_process import in_terminal  # noqa: E402
from _tf_runner import run_python  # noqa: E402

ELIDED = "…"


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def examples(doc: Path = ROOT / "README.md") -> list[tuple[int, list[tuple[int, str, list[str]]]]]:
    """A document's console blocks: ``(line, [(line, command, shown lines)])``."""
    lines = doc.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        start, i = i + 1, i + 1
        cmds: list[tuple[int, str, list[str]]] = []
        while i < len(lines) and lines[i].strip() != "```":
            if lines[i].startswith("$ "):
                cmds.append((i + 1, lines[i][2:], []))
            elif cmds:
                cmds[-1][2].append(lines[i])
            i += 1
        blocks.append((start, cmds))
        i += 1
    return blocks


def runnable(command: str) -> list[str] | None:
    """The argv of a ``ckpt`` example whose checkpoint is in the repository, else ``None``."""
    argv = shlex.split(command, comments=True)
    if len(argv) < 3 or argv[0] != "ckpt" or not argv[2].startswith("fixtures/"):
        return None
    if any(a.startswith("/") for a in argv) or not (ROOT / argv[2]).exists():
        return None
    return argv


def matches(shown: list[str], got: list[str]) -> bool:
    """``got`` is ``shown``, where a ``…`` line of ``shown`` stands for zero or more lines."""
    if not shown:
        return not got
    if shown[0].strip() == ELIDED:
        return any(matches(shown[1:], got[k:]) for k in range(len(got) + 1))
    return bool(got) and got[0] == shown[0] and matches(shown[1:], got[1:])


def _run(argv: list[str], cwd: str) -> tuple[int, str]:
    # In this process, on a real pseudo-terminal (a fresh python per example cost ~0.5 CPU s
    # each, ~50 of them; test_readme's list example still runs `python -m ckpt_tools` there)
    return in_terminal(argv[1:], cwd)


def results(block: list[tuple[int, str, list[str]]]):
    """Runs a block's runnable examples in order in one scratch directory: yields
    ``(line, command, shown, got lines)``; for ``echo $?`` after one, its exit code."""
    with tempfile.TemporaryDirectory() as d:
        os.symlink(ROOT / "fixtures", Path(d) / "fixtures")
        code = None
        for line, command, shown in block:
            argv = runnable(command)
            if argv is not None:
                code, text = _run(argv, d)
                yield line, command, shown, text.rstrip("\n").split("\n") if text else []
            elif command.strip() == "echo $?" and code is not None:
                yield line, command, shown, [str(code)]
            else:
                code = None


BLOCKS = [(f"{doc.name}:L{start}", block) for doc in DOCS for start, block in examples(doc)
          if any(runnable(c) for _, c, _ in block)]


def test_the_readme_has_runnable_examples():
    assert len([c for _, b in BLOCKS for _, c, _ in b if runnable(c)]) >= 10


@pytest.mark.parametrize("block", [b for _, b in BLOCKS], ids=[s for s, _ in BLOCKS])
def test_readme_console_example_prints_what_the_readme_shows(block):
    for line, command, shown, got in results(block):
        assert matches(shown, got), (
            f"line {line}: $ {command}\n--- the document shows:\n" + "\n".join(shown)
            + "\n--- the command prints:\n" + "\n".join(got))


def test_elision_matches_any_number_of_lines_and_nothing_else():
    assert matches(["a", ELIDED, "d"], ["a", "b", "c", "d"])
    assert matches(["a", "  " + ELIDED], ["a"])
    assert not matches(["a", ELIDED, "d"], ["a", "b", "c", "e"])
    assert not matches([], ["x"]) and not matches(["x"], [])


GENERATED = ("/tmp/matrix/", "/tmp/mx/", "/tmp/ke/", "/tmp/ks/", "/tmp/kd/", "/tmp/kp/",
             "/tmp/digits/", "/tmp/t1/", "/tmp/ts/")


def generated(command: str) -> list[str] | None:
    """The argv of an example whose input a ``fixtures/make_*.py`` generator writes."""
    argv = shlex.split(command, comments=True)
    ok = len(argv) >= 3 and argv[0] == "ckpt" and argv[2].startswith(GENERATED)
    return argv if ok else None


def _generator_output(argv: list[str]) -> str | None:
    """The directory a ``python fixtures/make_*.py [--out] DIR`` line writes, else ``None``."""
    if len(argv) < 3 or argv[0] != "python" or not argv[1].startswith("fixtures/make_"):
        return None
    assert (ROOT / argv[1]).is_file(), f"{argv[1]}: no such generator"
    return argv[argv.index("--out") + 1] if "--out" in argv else argv[2]


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_example_input_exists_or_is_created_before_it(doc):
    """u15 F5: a reader typing a document's examples in order has each input: in fixtures/,
    or written by a generator line above it (a /tmp path used before the line that creates it,
    a bare name the generator writes elsewhere, or a path no generator writes fail here)."""
    made: list[str] = []
    for _, block in examples(doc):
        for line, command, _ in block:
            argv = shlex.split(command, comments=True)
            out = _generator_output(argv)
            if out is not None:
                made.append(out.rstrip("/") + "/")
            elif argv[:1] == ["ckpt"] and len(argv) >= 3 and argv[1] != "train":
                path = argv[2]
                ok = (path.startswith("fixtures/") and (ROOT / path).exists()) or any(
                    path.startswith(m) for m in made)
                assert ok, f"{doc.name}:{line}: $ {command}: no fixture or generator above"
            elif argv[:1] == ["python"]:
                assert "#" in command and "your" in command.split("#", 1)[1], (
                    f"{doc.name}:{line}: $ {command}: neither a fixtures/ generator nor "
                    "marked '# your ...'")


def test_python_c_examples_run():
    """A ``$ python -c`` example runs as written (u15 F5: one used an undefined ``model``)."""
    import subprocess

    lines = [(d, ln, c) for d in DOCS for _, b in examples(d) for ln, c, _ in b
             if c.startswith("python -c ")]
    for doc, line, command in lines:
        argv = [sys.executable, *shlex.split(command, comments=True)[1:]]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert done.returncode == 0, f"{doc.name}:{line}: $ {command}\n{done.stderr}"


# Appended to README's Keras Python example: each weight of the model it leaves must be what
# Keras held at save time (fixtures/make_keras_fixtures.py): the trainable ones its averages
# (``optimizer._model_variables_moving_average``), the others (BN statistics) the raw values.
_KERAS_EXAMPLE_CHECK = """
import numpy as np
truth = np.load("fixtures/keras_ema/expected.npz")
for w in model.weights:
    want = truth[("model:ema/" if w.trainable else "model:weight/") + w.path]
    got = np.asarray(w.numpy())
    assert got.view(want.dtype).tobytes() == want.tobytes(), w.path
print("OK", len(model.weights))
"""


def test_readme_keras_python_example_runs_and_gives_the_averages():
    """u16 F1: README's ``apply_keras_ema`` example named a file saved during fit() without
    ``not_swapped=True``, so as written it raised UnprovenPairingError on every such file. It
    now runs on such a fixture (``keras_ema/model.keras``, ModelCheckpoint alone, and its
    ``.weights.h5``) and leaves the averages Keras held in the model."""
    import re

    blocks = [b for b in re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(),
                                    re.S) if "apply_keras_ema(" in b]
    assert len(blocks) == 1, blocks
    assert "fixtures/keras_ema/model.keras" in blocks[0]
    # a process of its own, forked from one that imported TensorFlow (Keras is imported here)
    done = run_python(["-c", blocks[0] + _KERAS_EXAMPLE_CHECK], cwd=ROOT, timeout=180,
                      env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "OK 8" in done.stdout, done.stdout



# review-22-user-u24 F11: README's TF2 custom-loop recipe, run as written on a tf.Module and on a
# Keras 3 model (whose variables TF's EMA cannot take: ``ema.apply(keras_vars)`` raised), each
# trained two steps; ``apply_ema`` into a fresh copy must give ``ema.average(v)`` as TF held it.
_TF2_LOOP_RECIPE = """
import re, sys, tempfile
import numpy as np
import tensorflow as tf
import keras
import ckpt_tools

text = open("README.md").read()
bullet = text.split("**TF2 custom loop with `tf.train.ExponentialMovingAverage`**", 1)[1]
bullet = bullet.split("\\n- **", 1)[0]
code = re.findall(r"`([^`]*)`", " ".join(bullet.split()))
tvars_line = next(c for c in code if c.startswith("tvars = "))
apply_line = next(c for c in code if c.startswith("ema.apply("))
save_call = next(c for c in code if c.startswith("tf.train.Checkpoint(model=m, ema="))


class Net(tf.Module):
    def __init__(self):
        self.w = tf.Variable(tf.random.normal([3, 2]), name="w")
        self.b = tf.Variable(tf.zeros([2]), name="b")

    def __call__(self, x):
        return x @ self.w + self.b


def keras_net():
    inp = keras.Input((3,))
    return keras.Model(inp, keras.layers.Dense(2, name="out")(keras.layers.Dense(
        4, name="hidden")(inp)))


for make in (Net, keras_net):
    tf.random.set_seed(1)
    m, opt = make(), tf.keras.optimizers.SGD(0.1)
    ema = tf.train.ExponentialMovingAverage(0.5)
    exec(tvars_line)
    x = tf.random.normal([8, 3])
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(m(x) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, m.trainable_variables), m.trainable_variables))
        exec(apply_line)
    truth = [ema.average(v).numpy() for v in tvars]
    d = tempfile.mkdtemp()
    eval(save_call).write(d + "/ckpt")
    fresh = make()
    ckpt_tools.apply_ema(fresh, d + "/ckpt")
    got = [np.asarray(v.numpy()) for v in fresh.trainable_variables]
    assert len(got) == len(truth) and all(g.tobytes() == t.tobytes() for g, t in zip(got, truth))
    print("OK", make.__name__, len(truth))
"""


def test_readme_tf2_custom_loop_recipe_runs_for_a_module_and_a_keras3_model():
    """The recipe's code as the README writes it runs for both, and ckpt restores its averages."""

    done = run_python(["-c", _TF2_LOOP_RECIPE], cwd=ROOT, timeout=180,
                      env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "OK Net 2" in done.stdout and "OK keras_net 4" in done.stdout, done.stdout


if __name__ == "__main__":
    if "--generated" in sys.argv:
        runnable = generated  # noqa: F811 (results() reads the module's runnable)
        BLOCKS = [(f"{doc.name}:L{start}", block) for doc in DOCS
                  for start, block in examples(doc) if any(generated(c) for _, c, _ in block)]
    for where, block in BLOCKS:
        for line, command, shown, got in results(block):
            print(f"=== {where.split(':')[0]}:{line} {'ok' if matches(shown, got) else 'DIFFERS'}")
            print(f"$ {command}")
            print("\n".join(got))


def test_readme_writes_each_out_once():
    """A user following the README runs its examples in one directory: the second of two
    examples writing one ``--out`` is exit 7 (``already exists``; review-32-user-u34: the
    same ``restore-ema ... --out towers_ema/`` twice). An example shown refused (``error:``)
    writes nothing, so the example after it may write that ``--out``."""
    written: dict[str, int] = {}
    for _start, commands in examples():
        for line, command, shown in commands:
            argv = shlex.split(command, comments=True)
            if argv[:1] != ["ckpt"] or "--out" not in argv or "--force" in argv or any(
                    s.startswith("error:") for s in shown):
                continue
            out = argv[argv.index("--out") + 1].rstrip("/")
            assert out not in written, f"README.md:{line} writes {out} again (line {written[out]})"
            written[out] = line
