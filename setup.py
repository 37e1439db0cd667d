"""The optional C extension of the compiled explorer (csrc/, docs/explorer.md).

Everything else is in pyproject.toml.  ``optional=True``: without a C compiler or the Python
headers the install still succeeds, and ``asyncspec check`` falls back to the fast explorer.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "asyncspec.checker._compiled",
    sources=["csrc/explore.c", "csrc/step.c", "csrc/blocks.c", "csrc/encode.c", "csrc/props.c",
             "csrc/connector.c", "csrc/waiting.c", "csrc/swa.c",
             "csrc/offload.c", "csrc/streaming.c", "csrc/mamba.c", "csrc/encoder.c",
             "csrc/worker.c", "csrc/worker_v1.c", "csrc/worker_v2.c", "csrc/worker_neuron.c"],
    depends=["csrc/compiled.h", "csrc/explore_py.h", "csrc/parallel.h", "csrc/threads.h", "csrc/remote.h", "csrc/snapshot.h", "csrc/scc.h",
             "csrc/worker.h", "csrc/joint_py.h"],
    extra_compile_args=["-O2", "-std=gnu99", "-pthread"],
    extra_link_args=["-pthread"],
    optional=True,
)])
