"""``ckpt train --resume`` keeps the run's earlier checkpoints in its bookkeeping (u16 F13):
the state file lists every kept checkpoint, ``--max-to-keep`` prunes the oldest across runs,
and ``ckpt average --last N`` finds them.

The truth is TensorFlow's own: ``tf.train.get_checkpoint_state`` reads the state file and the
files on disk are listed; v1's fix is the call MonitoredTrainingSession's SessionManager makes,
``Saver.recover_last_checkpoints``.
"""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner


def _ckpt(*args):
    from ckpt_tools.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def _train(api, train_dir, max_steps, *extra):
    result = _ckpt("train", "--api", api, "--train-dir", train_dir, "--max-steps", max_steps,
                   "--batch-size", 8, "--save-every", 2, "--max-to-keep", 3, "-q", *extra)
    assert result.exit_code == 0, result.output
    return result


def _listed(train_dir) -> list[str]:
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(str(train_dir))
    return [os.path.basename(p) for p in state.all_model_checkpoint_paths]


@pytest.mark.parametrize("api,name", [("v1", "model.ckpt"), ("tf2", "ckpt")])
def test_resume_lists_and_prunes_the_earlier_checkpoints(api, name, tmp_path):
    train_dir = tmp_path / api
    _train(api, train_dir, 4)  # writes -2, -4
    assert _listed(train_dir) == [f"{name}-2", f"{name}-4"]
    _train(api, train_dir, 6, "--resume")  # writes -6: three kept
    assert _listed(train_dir) == [f"{name}-2", f"{name}-4", f"{name}-6"]
    _train(api, train_dir, 8, "--resume")  # writes -8: -2 pruned (--max-to-keep 3)
    assert _listed(train_dir) == [f"{name}-4", f"{name}-6", f"{name}-8"]
    on_disk = sorted(f.split(".index")[0] for f in os.listdir(train_dir) if f.endswith(".index"))
    assert on_disk == [f"{name}-4", f"{name}-6", f"{name}-8"]
    out = tmp_path / "avg"
    out.mkdir()
    result = _ckpt("average", train_dir, "--last", 3, "--out", f"{out}/")
    assert result.exit_code == 0, result.output


def test_keras_resume_prunes_the_earlier_files(tmp_path):
    train_dir = tmp_path / "keras"
    _train("keras", train_dir, 4, "--ema-decay", "0.9")
    _train("keras", train_dir, 8, "--ema-decay", "0.9", "--resume")
    kept = sorted(f for f in os.listdir(train_dir) if f.endswith(".keras"))
    assert kept == ["ckpt-4.keras", "ckpt-6.keras", "ckpt-8.keras"]
    # one bit flipped in the newest file (its zip CRC-32 kept): Keras' load_weights raises
    # BadZipFile, said as exit 4 naming the file, never an internal error (review-20-user-u22 F6)
    from helpers import flip_in_keras_member, one_line_error

    from ckpt_tools import open_checkpoint

    latest = train_dir / "ckpt-8.keras"
    with open_checkpoint(latest) as ckpt:
        key = ckpt.keys()[0]
    # the encrypted flag on its weights (bytes and CRC-32 kept): Keras' zipfile raises
    # RuntimeError; exit 4 naming file and member (review-20-attack-r50 F5)
    from helpers import damage_keras_header

    intact = latest.read_bytes()
    damage_keras_header(latest, latest, "model.weights.h5", flag=0x01)
    result = _ckpt("train", "--api", "keras", "--train-dir", train_dir, "--max-steps", 10,
                   "--batch-size", 8, "--save-every", 2, "--ema-decay", "0.9", "-q", "--resume")
    one_line_error(result, 4, f"{latest}: archive member model.weights.h5 is encrypted")
    latest.write_bytes(intact)
    flip_in_keras_member(latest, latest, key)
    result = _ckpt("train", "--api", "keras", "--train-dir", train_dir, "--max-steps", 10,
                   "--batch-size", 8, "--save-every", 2, "--ema-decay", "0.9", "-q", "--resume")
    one_line_error(result, 4, str(latest), "CRC-32")
    # its weights at byte 0, the archive after them: Keras' load_weights (by the name) reads
    # the zip, h5py the HDF5; exit 4 naming the file (review-21-attack-r54 F1)
    from helpers import hdf5_then_zip

    latest.write_bytes(intact)
    hdf5_then_zip(latest, intact, latest)
    result = _ckpt("train", "--api", "keras", "--train-dir", train_dir, "--max-steps", 10,
                   "--batch-size", 8, "--save-every", 2, "--ema-decay", "0.9", "-q", "--resume")
    one_line_error(result, 4, f"{latest}: is both an HDF5 file")
