"""CIFAR-10-shaped data: a learnable synthetic set by default, or the real binary batches.

Both sources give the same thing, a :class:`Cifar10` of uint8 NHWC images (like the real files)
plus int32 labels, so every trainer normalises them the same way (:func:`normalize`). Nothing is
downloaded; this module only needs numpy.

The synthetic task: each class has a fixed template (a colour plus a coarse 4x4 pattern, upsampled
to 32x32); an example is its class template plus strong per-pixel noise, a random brightness
offset and a random shift of up to 4 pixels. A small conv net climbs well above chance (10%)
within ~100 steps, yet not instantly, so raw-vs-EMA accuracy is worth comparing. Templates come
from a fixed seed, so a training run and a later evaluation see the same classes whatever
``--seed`` is.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .common import DataError

NUM_CLASSES = 10
IMAGE_SHAPE = (32, 32, 3)
RECORD_BYTES = 1 + 32 * 32 * 3  # one label byte, then 3072 bytes of CHW pixels
TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
TEST_FILE = "test_batch.bin"

# Per-channel statistics of the real CIFAR-10 training set; synthetic images are generated on
# the same scale so one normalisation serves both.
CIFAR_MEAN = np.array([125.3, 123.0, 113.9], dtype=np.float32)
CIFAR_STD = np.array([63.0, 62.1, 66.7], dtype=np.float32)

SYNTHETIC_SEED = 20240601  # fixed: the class templates must not depend on --seed
SYNTHETIC_TRAIN_SIZE = 10_000
SYNTHETIC_TEST_SIZE = 1_000
_NOISE_STD = 2.5  # per pixel, in normalised units; templates have unit-ish amplitude
_MAX_SHIFT = 4


@dataclass(frozen=True)
class Cifar10:
    """A train and a test split, uint8 images ``[N, 32, 32, 3]`` and int32 labels ``[N]``."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    source: str  # "synthetic" or the data directory


def normalize(images: np.ndarray) -> np.ndarray:
    """Map uint8 images to float32 with (roughly) zero mean and unit variance per channel."""
    return (images.astype(np.float32) - CIFAR_MEAN) / CIFAR_STD


def load(data_dir: str | None) -> Cifar10:
    """Return the real CIFAR-10 batches from ``data_dir``, or the synthetic set when None.

    Args:
        data_dir: a directory holding ``data_batch_1.bin``... (or its ``cifar-10-batches-bin``
            subdirectory), or None for synthetic data.

    Returns:
        The dataset.

    Raises:
        DataError: ``data_dir`` is missing, lacks the batches, or a file is malformed.
    """
    if data_dir is None:
        return synthetic()
    return load_cifar10(data_dir)


@functools.lru_cache(maxsize=2)
def synthetic(
    num_train: int = SYNTHETIC_TRAIN_SIZE, num_test: int = SYNTHETIC_TEST_SIZE
) -> Cifar10:
    """The synthetic CIFAR-shaped dataset (deterministic; cached per process).

    Args:
        num_train: training examples.
        num_test: test examples.

    Returns:
        The dataset, ``source="synthetic"``.
    """
    rng = np.random.default_rng(SYNTHETIC_SEED)
    templates = _templates(rng)
    train_images, train_labels = _sample(
        templates, num_train, np.random.default_rng([1, num_train])
    )
    test_images, test_labels = _sample(templates, num_test, np.random.default_rng([2, num_test]))
    return Cifar10(train_images, train_labels, test_images, test_labels, "synthetic")


def _templates(rng: np.random.Generator) -> np.ndarray:
    colours = rng.uniform(-1.0, 1.0, size=(NUM_CLASSES, 1, 1, 3))
    coarse = rng.normal(0.0, 1.0, size=(NUM_CLASSES, 4, 4, 3))
    patterns = np.kron(coarse, np.ones((1, 8, 8, 1)))
    return (0.6 * colours + 0.6 * patterns).astype(np.float32)


def _sample(
    templates: np.ndarray, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, NUM_CLASSES, size=n).astype(np.int32)
    images = np.empty((n, *IMAGE_SHAPE), dtype=np.uint8)
    # In chunks: the float intermediate of the whole set would be ~120 MB.
    for start in range(0, n, 1000):
        y = labels[start : start + 1000]
        x = templates[y]
        shifts = rng.integers(-_MAX_SHIFT, _MAX_SHIFT + 1, size=(len(y), 2))
        for i, (dy, dx) in enumerate(shifts):
            x[i] = np.roll(x[i], (dy, dx), axis=(0, 1))
        x += rng.uniform(-0.5, 0.5, size=(len(y), 1, 1, 1)).astype(np.float32)  # brightness
        x += _NOISE_STD * rng.standard_normal(size=x.shape, dtype=np.float32)
        # Half the real per-channel spread: keeps ~98% of pixels inside 0..255 (no clipping).
        pixels = CIFAR_MEAN + (0.5 * CIFAR_STD) * x
        images[start : start + len(y)] = np.clip(np.rint(pixels), 0, 255).astype(np.uint8)
    return images, labels


def load_cifar10(data_dir: str) -> Cifar10:
    """Read the CIFAR-10 binary version (``cifar-10-binary.tar.gz``, extracted).

    Args:
        data_dir: directory with ``data_batch_{1..5}.bin`` and ``test_batch.bin``, or the
            directory containing ``cifar-10-batches-bin/``. Missing training batches beyond the
            first are tolerated (handy for subsets); a missing test batch leaves the test split
            empty.

    Returns:
        The dataset, ``source=data_dir``.

    Raises:
        DataError: the directory does not exist, has no ``data_batch_1.bin``, or a file's size
            is not a multiple of the 3073-byte record.
    """
    data_dir = resolve_data_dir(data_dir)
    present = [f for f in TRAIN_FILES if os.path.exists(os.path.join(data_dir, f))]
    train = [read_batch_file(os.path.join(data_dir, f)) for f in present]
    train_images = np.concatenate([images for images, _ in train])
    train_labels = np.concatenate([labels for _, labels in train])
    test_path = os.path.join(data_dir, TEST_FILE)
    if os.path.exists(test_path):
        test_images, test_labels = read_batch_file(test_path)
    else:
        test_images = np.zeros((0, *IMAGE_SHAPE), np.uint8)
        test_labels = np.zeros((0,), np.int32)
    return Cifar10(train_images, train_labels, test_images, test_labels, data_dir)


def resolve_data_dir(data_dir: str) -> str:
    """Check that ``data_dir`` holds CIFAR-10 binary batches without reading them.

    Args:
        data_dir: ``--data``: the batches' directory, or the one containing
            ``cifar-10-batches-bin/``.

    Returns:
        The directory that holds ``data_batch_1.bin``.

    Raises:
        DataError: not a directory, or no ``data_batch_1.bin`` in it.
    """
    if not os.path.isdir(data_dir):
        raise DataError(f"--data {data_dir}: not a directory")
    nested = os.path.join(data_dir, "cifar-10-batches-bin")
    if not os.path.exists(os.path.join(data_dir, TRAIN_FILES[0])) and os.path.isdir(nested):
        data_dir = nested
    if not os.path.exists(os.path.join(data_dir, TRAIN_FILES[0])):
        raise DataError(
            f"--data {data_dir}: expected CIFAR-10 binary batches (data_batch_1.bin ... "
            "data_batch_5.bin, test_batch.bin), found none"
        )
    return data_dir


def read_batch_file(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Decode one CIFAR-10 binary batch file.

    Args:
        path: a file of 3073-byte records (label byte, then R, G and B planes of 32x32).

    Returns:
        ``(images uint8 [N, 32, 32, 3], labels int32 [N])``.

    Raises:
        DataError: the size is not a whole number of records, or a label is not in 0..9.
    """
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size == 0 or raw.size % RECORD_BYTES:
        raise DataError(
            f"{path}: expected a multiple of {RECORD_BYTES}-byte records, got {raw.size} bytes"
        )
    records = raw.reshape(-1, RECORD_BYTES)
    labels = records[:, 0].astype(np.int32)
    if labels.max() >= NUM_CLASSES:
        raise DataError(f"{path}: expected labels 0..9, found {labels.max()}")
    images = records[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # CHW -> HWC
    return np.ascontiguousarray(images), labels


def batches(
    data: Cifar10, batch_size: int, seed: int, start_step: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless shuffled training batches, normalised, for the feed_dict (v1) trainer.

    Args:
        data: the dataset.
        batch_size: examples per batch (all towers together).
        seed: ``--seed``.
        start_step: the global step the run starts from, so a resumed run does not replay the
            batches it already saw.

    Returns:
        An iterator of ``(float32 images [B, 32, 32, 3], int32 labels [B])``.
    """
    rng = np.random.default_rng([seed, start_step])
    n = len(data.train_labels)
    while True:
        order = rng.permutation(n)
        for start in range(0, n - batch_size + 1, batch_size):
            idx = np.sort(order[start : start + batch_size])
            yield normalize(data.train_images[idx]), data.train_labels[idx]
        if n < batch_size:  # tiny sets (tests): sample with replacement
            idx = rng.integers(0, n, size=batch_size)
            yield normalize(data.train_images[idx]), data.train_labels[idx]
