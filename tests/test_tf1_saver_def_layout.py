"""``--saver-def-wrote`` where the checkpoint's own files show that the Saver whose
``SaverDef`` its ``.meta`` records did not write it (review-28-attack-r101 F1, F2): the graph
builds a swapping Saver (``{v.op.name: ema.average(v), ema.average_name(v): v}``) and a plain
``Saver()`` of the same keys; one recorded its ``SaverDef`` (``save()`` or
``export_meta_graph``), the other then wrote the prefix (``write_meta_graph=False``).

- F1: the ``SaverDef``'s Saver is ``sharded=True`` over two devices (one save op per
  device: 2 shards) while the ``.index`` records 1 shard (``*def_*wrote``), the reverse
  with a plain ``SaverDef`` not sharded (``flatdef_shardwrote``);
- F2: the ``SaverDef`` records ``write_version=V1`` while the checkpoint read is a V2
  bundle, or V2 while it is a V1 table file.

The statement was taken (raw weights exported and restored as the averages, exit 0); it is
refused now (exit 6, naming what the file shows) and never offered. Where it is true (the
``SaverDef``'s Saver wrote the file: sharded over two devices, or V1) it reads the averages
as before. Made by real TensorFlow (graph mode, two CPU devices); truth read from the
session at save time, compared bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import run_cli
from helpers_tf1 import run_tf1_script

import ckpt_tools
from ckpt_tools.errors import UnprovenPairingError

SCRIPT = r'''
V1, V2 = tf1.train.SaverDef.V1, tf1.train.SaverDef.V2
# case: (SaverDef Saver: swapping?, sharded?, version; the other Saver: the same three; the
# SaverDef recorded by save() or export_meta_graph; whether the other Saver wrote the
# checkpoint, else the SaverDef's Saver did: the statement is true)
CASES = {
    "swapdef_plainwrote": ((True, True, V2), (False, False, V2), "save", True),
    "plaindef_swapwrote": ((False, True, V2), (True, False, V2), "save", True),
    "flatdef_shardwrote": ((False, False, V2), (True, True, V2), "save", True),
    "swapdef_true": ((True, True, V2), (False, False, V2), "save", False),
    "v1swapdef_v2plainwrote": ((True, False, V1), (False, False, V2), "export", True),
    "v1swapdef_saved_v2plainwrote": ((True, False, V1), (False, False, V2), "save", True),
    "v2plaindef_v1swapwrote": ((False, False, V2), (True, False, V1), "export", True),
    "v1swapdef_true": ((True, False, V1), (False, False, V2), "save", False),
}
config = tf1.ConfigProto(device_count={"CPU": 2})
for case, (mine, other, how, other_wrote) in CASES.items():
    with tf.Graph().as_default():
        (W, b), _, ema, step, swap = swap_ema_graph(tf, ("/cpu:0", "/cpu:1"))

        def saver(swapping, sharded, version):
            return tf1.train.Saver(swap if swapping else None, sharded=sharded,
                                   write_version=version)

        recorded = saver(*mine)  # built first: its SaverDef is the one the .meta records
        writer = saver(*other) if other_wrote else recorded
        if not other_wrote:
            saver(*other)  # built beside it, never saving: the crossed Savers' doubt
        prefix = f"{out}/{case}/model.ckpt"
        os.makedirs(f"{out}/{case}")
        with tf1.Session(config=config) as s:
            s.run(tf1.global_variables_initializer())
            for _ in range(3):
                s.run(step)
            if how == "export":
                recorded.export_meta_graph(prefix + ".meta")
            else:
                recorded.save(s, prefix)
            if other_wrote:
                for _ in range(2):
                    s.run(step)
                writer.save(s, prefix, write_meta_graph=False)
            for v in (W, b):
                truth[f"{case}:ema:{v.op.name}"] = s.run(ema.average(v))
                truth[f"{case}:raw:{v.op.name}"] = s.run(v)
'''
FALSE = ("swapdef_plainwrote", "plaindef_swapwrote", "flatdef_shardwrote",
         "v1swapdef_v2plainwrote", "v1swapdef_saved_v2plainwrote", "v2plaindef_v1swapwrote")
SHOWS = {"swapdef_plainwrote": "writing 2 shards, while this checkpoint's .index records 1",
         "plaindef_swapwrote": "writing 2 shards, while this checkpoint's .index records 1",
         "flatdef_shardwrote": "writing one shard, while this checkpoint's .index records 2",
         "v1swapdef_v2plainwrote": "format version V1",
         "v1swapdef_saved_v2plainwrote": "format version V1",
         "v2plaindef_v1swapwrote": "format version V2"}
VARS = ("W", "b")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("saver_def_layout")
    return out, run_tf1_script(SCRIPT, out)


def _run(made, tmp_path, command: str, case: str, *args: str):
    out, _ = made
    target = tmp_path / f"{len(list(tmp_path.iterdir()))}"
    code, stdout, err = run_cli([command, str(out / case / "model.ckpt"), *args, *(
        ["--out", str(target) + (".npz" if command == "export" else "")]
        if command != "map" else [])])
    return code, " ".join(err.split()), target


@pytest.mark.parametrize("case", FALSE)
def test_the_statement_the_file_contradicts_is_refused(made, tmp_path, case):
    """F1, F2: export (and --raw), map and restore-ema with the statement were exit 0 with
    the raw weights as the averages; refused now (exit 6, one line naming what the file
    shows against the SaverDef), nothing written."""
    for command, args in (("export", []), ("export", ["--raw"]), ("map", ["--json"]),
                          ("restore-ema", [])):
        code, said, target = _run(made, tmp_path, command, case, *args, "--saver-def-wrote")
        assert code == 6, (command, args, said)
        assert SHOWS[case] in said and "that Saver did not write it" in said, said
        assert said.count("error:") == 1, said
        assert not target.exists() and not target.with_suffix(".npz").exists()
    out, _ = made
    with pytest.raises(UnprovenPairingError, match="did not write it"):
        ckpt_tools.open_checkpoint(str(out / case / "model.ckpt"), saver_def_wrote=True)


@pytest.mark.parametrize("case", FALSE)
def test_the_statement_is_not_offered_where_the_file_contradicts_it(made, tmp_path, case):
    """F1, F2: without the statement the crossed-Savers refusal (exit 6) offered
    --saver-def-wrote for these files; it offers it no more (the other ways out stay)."""
    code, said, _ = _run(made, tmp_path, "export", case)
    assert code == 6 and "--saver-def-wrote" not in said, said
    assert "--not-swapped" in said, said


@pytest.mark.parametrize("case", ["swapdef_true", "v1swapdef_true"])
def test_the_true_statement_reads_the_averages(made, tmp_path, case):
    """Baselines: the SaverDef's Saver (sharded over two devices: 2 shards, each key in its
    device's; V1: one table file) wrote the file: the statement is offered and reads the
    averages, bit for bit; --raw the raw weights."""
    out, truth = made
    code, said, _ = _run(made, tmp_path, "export", case)
    assert code == 6 and "--saver-def-wrote" in said, said
    for args, tag in (([], "ema"), (["--raw"], "raw")):
        code, said, target = _run(made, tmp_path, "export", case, *args, "--saver-def-wrote")
        assert code == 0, said
        with np.load(str(target) + ".npz") as z:
            assert sorted(z.files) == list(VARS), z.files
            for var in VARS:
                assert z[var].tobytes() == truth[f"{case}:{tag}:{var}"].tobytes(), (var, tag)


@pytest.mark.parametrize("case", ["swapdef_true", "v1swapdef_true"])
def test_restore_emas_output_of_the_true_statement_reads_with_or_without_it(made, tmp_path,
                                                                            case):
    """restore-ema's output (one V2 shard, beside the copied .meta whose SaverDef is sharded
    or V1) is vouched for by its record: exported with or without the statement, never
    refused for its own writer's layout; it holds the averages, bit for bit."""
    out, truth = made
    baked = tmp_path / "baked"
    code, _, err = run_cli(["restore-ema", str(out / case / "model.ckpt"), "--saver-def-wrote",
                            "--out", str(baked)])
    assert code == 0, err
    for args in ([], ["--saver-def-wrote"]):
        target = tmp_path / f"b{len(args)}.npz"
        code, _, err = run_cli(["export", str(baked / "model.ckpt"), *args, "--out",
                                str(target)])
        assert code == 0, (args, err)
        with np.load(target) as z:
            for var in VARS:
                assert z[var].tobytes() == truth[f"{case}:ema:{var}"].tobytes(), (var, args)
