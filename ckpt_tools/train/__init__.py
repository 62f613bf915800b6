"""Reference trainer that writes the checkpoints ckpt_tools reads (issue #4).

A CIFAR-10-shaped conv net with batch norm, trained three ways, each saving EMA weights:

* :mod:`.v1` -- graph mode, one tower per GPU, ``ExponentialMovingAverage`` over
  ``trainable_variables() + moving_average_variables()``, ``tf.compat.v1.train.Saver``.
* :mod:`.tf2` -- custom loop under MirroredStrategy / MultiWorkerMirroredStrategy, EMA shadows
  tracked in a ``tf.train.Checkpoint`` as ``ema/...``.
* :mod:`.keras_fit` -- Keras 3 ``fit`` with ``use_ema=True`` (averages are optimizer variables).

Python use (each returns the latest checkpoint path)::

    from ckpt_tools.train.common import TrainConfig
    from ckpt_tools.train import v1
    path = v1.train(TrainConfig(train_dir="runs/v1", max_steps=200, batch_size=32))

:mod:`.evaluate` reports raw and EMA accuracy of any of them. Importing this package, its
:mod:`.cli` or :mod:`.common` does not import TensorFlow; the trainer modules do.
"""

from .common import TrainConfig, TrainError, TrainResult

__all__ = ["TrainConfig", "TrainError", "TrainResult"]
