"""The small CIFAR-10 conv net with batch norm, in graph-mode (v1) and tf.Module (tf2) form.

Architecture (both forms, same variable names):

    conv1  3x3x3x16, no bias -> BatchNorm -> relu -> max-pool 3x3/2   (16x16x16)
    conv2  3x3x16x32, no bias -> BatchNorm -> relu -> max-pool 3x3/2  (8x8x32)
    conv3  3x3x32x64, no bias -> BatchNorm -> relu -> max-pool 3x3/2  (4x4x64)
    global average pool -> logits dense 64 -> 10 (weights + biases)

(A flatten into a 2048-wide softmax layer was tried first: with momentum SGD its loss spiked to
10-40 in the first steps; the pooled 64-wide head trains smoothly even at learning rate 0.1.)

Batch norm follows tf-slim: ``<layer>/BatchNorm/{beta,gamma,moving_mean,moving_variance}``,
the moving statistics are non-trainable and, in v1, live in GLOBAL_VARIABLES *and*
MOVING_AVERAGE_VARIABLES with their update ops in UPDATE_OPS, exactly what the Inception and
cifar10 trainers relied on when they averaged ``trainable_variables() +
moving_average_variables()``.

The tf2 model is a ``tf.Module`` with plain ``tf.Variable`` s (not Keras layers): Keras 3
variables are rejected by ``tf.train.ExponentialMovingAverage.apply``. Its attribute paths
repeat the v1 names (``conv1/BatchNorm/moving_mean``), so the object-based checkpoint keys read
``model/conv1/BatchNorm/moving_mean/.ATTRIBUTES/VARIABLE_VALUE``.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from .data import IMAGE_SHAPE, NUM_CLASSES

CONV_LAYERS = (
    ("conv1", 3, 16),
    ("conv2", 3, 32),
    ("conv3", 3, 64),
)  # (name, kernel size, output channels)
# 0.9 rather than slim's 0.999: the runs this script makes are short (tens to thousands of
# steps), and with 0.999 the moving statistics would still mostly be their initial 0/1 values.
BN_DECAY = 0.9
BN_EPSILON = 1e-3
_FEATURES = CONV_LAYERS[-1][2]  # global-average-pooled channels into the logits layer
# Small logits init (cifar10 used 1/192), so training starts at the chance loss ln(10).
_LOGITS_STDDEV = 0.01


def _he_stddev(fan_in: int) -> float:
    return (2.0 / fan_in) ** 0.5


# --------------------------------------------------------------------------------------------
# v1: graph mode, tf.compat.v1.get_variable + variable_scope reuse (the tower pattern)
# --------------------------------------------------------------------------------------------


def _variable_on_cpu(
    name: str,
    shape: list[int],
    initializer: Any,
    trainable: bool = True,
    collections: list[str] | None = None,
) -> tf.Variable:
    # Shared variables live on the CPU so every tower (GPU) reads the same copy and the
    # averaged gradients are applied once, as in cifar10_multi_gpu_train.
    with tf.device("/cpu:0"):
        return tf.compat.v1.get_variable(
            name,
            shape,
            dtype=tf.float32,
            initializer=initializer,
            trainable=trainable,
            collections=collections,
        )


def _v1_weights(name: str, shape: list[int], stddev: float, weight_decay: float) -> tf.Variable:
    var = _variable_on_cpu(name, shape, tf.compat.v1.truncated_normal_initializer(stddev=stddev))
    if weight_decay:
        # Created once per tower (inside the tower's name scope), so each tower's loss has its
        # own copy and get_collection("losses", scope) picks the right one.
        weight_loss = tf.multiply(tf.nn.l2_loss(var), weight_decay, name="weight_loss")
        tf.compat.v1.add_to_collection("losses", weight_loss)
    return var


def v1_batch_norm(x: tf.Tensor, is_training: bool) -> tf.Tensor:
    """tf-slim style batch norm over NHWC ``x`` in the current variable scope.

    Args:
        x: activations.
        is_training: use batch statistics and add the moving-average updates to UPDATE_OPS
            (True), or normalise with the moving statistics (False, evaluation).

    Returns:
        The normalised tensor.
    """
    channels = int(x.shape[-1])
    with tf.compat.v1.variable_scope("BatchNorm"):
        beta = _variable_on_cpu("beta", [channels], tf.compat.v1.zeros_initializer())
        gamma = _variable_on_cpu("gamma", [channels], tf.compat.v1.ones_initializer())
        # What slim did: the statistics are not trainable, and are put in
        # MOVING_AVERAGE_VARIABLES so that EMA code averages them too ("double average").
        stat_collections = [
            tf.compat.v1.GraphKeys.GLOBAL_VARIABLES,
            tf.compat.v1.GraphKeys.MOVING_AVERAGE_VARIABLES,
        ]
        moving_mean = _variable_on_cpu(
            "moving_mean",
            [channels],
            tf.compat.v1.zeros_initializer(),
            trainable=False,
            collections=stat_collections,
        )
        moving_variance = _variable_on_cpu(
            "moving_variance",
            [channels],
            tf.compat.v1.ones_initializer(),
            trainable=False,
            collections=stat_collections,
        )
        if is_training:
            mean, variance = tf.nn.moments(x, [0, 1, 2])
            for stat, value in ((moving_mean, mean), (moving_variance, variance)):
                update = tf.compat.v1.assign_sub(stat, (stat - value) * (1.0 - BN_DECAY))
                tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.UPDATE_OPS, update)
        else:
            mean, variance = moving_mean, moving_variance
        return tf.nn.batch_normalization(x, mean, variance, beta, gamma, BN_EPSILON)


def v1_inference(images: tf.Tensor, is_training: bool, weight_decay: float = 0.0) -> tf.Tensor:
    """Build the network in the current graph and variable scope.

    Args:
        images: float32 ``[B, 32, 32, 3]``, normalised.
        is_training: see :func:`v1_batch_norm`.
        weight_decay: L2 factor; adds ``weight_loss`` tensors to the "losses" collection.

    Returns:
        Logits ``[B, 10]``.
    """
    x = images
    for name, size, out in CONV_LAYERS:
        with tf.compat.v1.variable_scope(name):
            cin = int(x.shape[-1])
            kernel = _v1_weights(
                "weights", [size, size, cin, out], _he_stddev(size * size * cin), weight_decay
            )
            x = tf.nn.conv2d(x, kernel, strides=1, padding="SAME")
            x = tf.nn.relu(v1_batch_norm(x, is_training))
        x = tf.nn.max_pool2d(x, 3, 2, "SAME", name=f"pool_{name}")
    x = tf.reduce_mean(x, axis=[1, 2])
    with tf.compat.v1.variable_scope("logits"):
        weights = _v1_weights("weights", [_FEATURES, NUM_CLASSES], _LOGITS_STDDEV, weight_decay)
        biases = _variable_on_cpu("biases", [NUM_CLASSES], tf.compat.v1.zeros_initializer())
        return tf.add(tf.matmul(x, weights), biases, name="logits")


# --------------------------------------------------------------------------------------------
# tf2: tf.Module + tf.Variable (works with tf.train.ExponentialMovingAverage and tf.distribute)
# --------------------------------------------------------------------------------------------


class BatchNorm(tf.Module):
    """Batch norm whose moving statistics are updated in the replica context.

    The statistics use ``aggregation=MEAN``: under MirroredStrategy each replica's ``assign``
    is averaged across replicas, so the statistics stay mirrored (a cheap "sync BN" of the
    statistics only).
    """

    def __init__(self, channels: int) -> None:
        super().__init__(name="BatchNorm")
        with self.name_scope:
            self.beta = tf.Variable(tf.zeros([channels]), name="beta")
            self.gamma = tf.Variable(tf.ones([channels]), name="gamma")
            stat = dict(trainable=False, aggregation=tf.VariableAggregation.MEAN)
            self.moving_mean = tf.Variable(tf.zeros([channels]), name="moving_mean", **stat)
            self.moving_variance = tf.Variable(tf.ones([channels]), name="moving_variance", **stat)

    def __call__(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        if training:
            mean, variance = tf.nn.moments(x, [0, 1, 2])
            self.moving_mean.assign_sub((self.moving_mean - mean) * (1.0 - BN_DECAY))
            self.moving_variance.assign_sub((self.moving_variance - variance) * (1.0 - BN_DECAY))
        else:
            mean, variance = self.moving_mean, self.moving_variance
        return tf.nn.batch_normalization(x, mean, variance, self.beta, self.gamma, BN_EPSILON)


class ConvBN(tf.Module):
    """conv (no bias) -> batch norm -> relu -> max-pool."""

    def __init__(self, name: str, size: int, cin: int, cout: int, seed: list[int]) -> None:
        super().__init__(name=name)
        with self.name_scope:
            init = tf.random.stateless_truncated_normal(
                [size, size, cin, cout], seed=seed, stddev=_he_stddev(size * size * cin)
            )
            self.weights = tf.Variable(init, name="weights")
            self.BatchNorm = BatchNorm(cout)  # noqa: N815 (slim's scope name, kept verbatim)

    def __call__(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        x = tf.nn.conv2d(x, self.weights, strides=1, padding="SAME")
        x = tf.nn.relu(self.BatchNorm(x, training))
        return tf.nn.max_pool2d(x, 3, 2, "SAME")


class Dense(tf.Module):
    """weights + biases."""

    def __init__(self, name: str, cin: int, cout: int, seed: list[int]) -> None:
        super().__init__(name=name)
        with self.name_scope:
            init = tf.random.stateless_truncated_normal(
                [cin, cout], seed=seed, stddev=_LOGITS_STDDEV
            )
            self.weights = tf.Variable(init, name="weights")
            self.biases = tf.Variable(tf.zeros([cout]), name="biases")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return tf.matmul(x, self.weights) + self.biases


class Tf2Model(tf.Module):
    """The network as a tf.Module; attribute paths equal the v1 variable names."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__(name="model")
        cin = IMAGE_SHAPE[-1]
        # One stateless seed per layer: [--seed, layer index].
        for index, (name, size, out) in enumerate(CONV_LAYERS):
            setattr(self, name, ConvBN(name, size, cin, out, [seed, index]))
            cin = out
        self.logits = Dense("logits", _FEATURES, NUM_CLASSES, [seed, len(CONV_LAYERS)])

    def __call__(self, images: tf.Tensor, training: bool) -> tf.Tensor:
        x = images
        for name, _, _ in CONV_LAYERS:
            x = getattr(self, name)(x, training)
        return self.logits(tf.reduce_mean(x, axis=[1, 2]))

    def named_variables(self) -> dict[str, tf.Variable]:
        """Every variable by its v1-style path, e.g. ``conv1/BatchNorm/moving_mean``."""
        named: dict[str, tf.Variable] = {}
        for name, _, _ in CONV_LAYERS:
            layer = getattr(self, name)
            named[f"{name}/weights"] = layer.weights
            for stat in ("beta", "gamma", "moving_mean", "moving_variance"):
                named[f"{name}/BatchNorm/{stat}"] = getattr(layer.BatchNorm, stat)
        named["logits/weights"] = self.logits.weights
        named["logits/biases"] = self.logits.biases
        return named

    def decayed_weights(self) -> list[tf.Variable]:
        """The kernels that get L2 weight decay (not biases, not batch-norm parameters)."""
        return [v for k, v in self.named_variables().items() if k.endswith("/weights")]

    def averaged_variables(self) -> list[tf.Variable]:
        """What the EMA tracks: trainable variables + batch-norm statistics (as in v1)."""
        return list(self.named_variables().values())
