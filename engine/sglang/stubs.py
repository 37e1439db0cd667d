"""Import-only stand-ins for packages SGLang's import path names but the scheduler never runs.

* ``torchvision``: imported by multimodal config and processor modules
  (``sglang/srt/multimodal/*``, ``sglang/srt/configs/*_vl.py``); installing the real one
  pulls a CUDA torch.  No text-only scheduler path calls it.
* ``vllm``: the Llama ``RotaryEmbedding`` constructor names ``vllm._custom_ops`` as a
  fallback kernel; the fake model worker never runs a forward, so it is never called.

A stand-in module answers every attribute with a permissive placeholder (a class that can be
subclassed, called, indexed and compared), so module-level decorators and type aliases in
those files evaluate.  Calling into one at run time would mean the stub is not import-only:
``Placeholder.__call__`` returns another placeholder, and the driver's oracle would see no
tokens, so such a use fails the case instead of passing silently.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

STUBBED = ("torchvision", "vllm")


class _PlaceholderMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return placeholder(f"{cls.__name__}.{name}")

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __or__(cls, other: Any) -> Any:
        return cls

    def __ror__(cls, other: Any) -> Any:
        return cls

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if args and callable(args[0]) and not kwargs and len(args) == 1:
            return args[0]  # used as a decorator
        return super().__call__()


def placeholder(name: str) -> Any:
    """A permissive class named ``name``."""
    return _PlaceholderMeta(name.rsplit(".", 1)[-1], (), {"__module__": name.rsplit(".", 1)[0]})


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return placeholder(f"{self.__name__}.{name}")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.split(".")[0] not in STUBBED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> Any:
        module = _StubModule(spec.name)
        module.__path__ = []
        setattr(module, "__version__", "0.0.0+asyncspec-stub")
        return module

    def exec_module(self, module: Any) -> None:
        return None


def install() -> None:
    """Put the stand-ins ahead of the real finders (idempotent)."""
    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _StubFinder())
