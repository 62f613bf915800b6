"""Builds the optional C extensions; everything else is in pyproject.toml.

``optional=True``: where no C compiler works, the install goes on without them and
ckpt_tools.kernels computes the same statistics with NumPy alone (about 3x the CPU time), and
the ``.index`` reader decodes every entry in Python (``ckpt_tools.cwire``: the same results).
"""

import sys

from setuptools import Extension, setup

_CWIRE = ("cwire", "cwire_index", "cwire_meta", "cwire_graph",
          "cwire_saver")  # ckpt_tools.cwire's sources
_ARGS = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off"]

setup(ext_modules=[
    Extension("ckpt_tools.ckernels", ["ckpt_tools/ckernels.c"], optional=True,
              extra_compile_args=_ARGS),
    Extension("ckpt_tools.cwire", [f"ckpt_tools/{f}.c" for f in _CWIRE], optional=True,
              depends=["ckpt_tools/cwire.h", "ckpt_tools/cwire_graph.h"],
              extra_compile_args=_ARGS),
])
