"""Builds the optional C kernels (ckpt_tools.ckernels); everything else is in pyproject.toml.

``optional=True``: where no C compiler works, the install goes on without the extension and
ckpt_tools.kernels computes the same statistics with NumPy alone (about 3x the CPU time).
"""

import sys

from setuptools import Extension, setup

_ARGS = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off"]

setup(ext_modules=[Extension("ckpt_tools.ckernels", ["ckpt_tools/ckernels.c"], optional=True,
                             extra_compile_args=_ARGS)])
