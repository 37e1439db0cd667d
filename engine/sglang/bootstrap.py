"""Entry point run by the SGLang venv's python: ``python engine/sglang/bootstrap.py serve``.

The SGLang venv does not install asyncspec (its dependencies are the project venv's); this
file maps ``asyncspec.engine.sglang`` onto the folder it sits in, so the driver always runs
from the same work tree as the caller, installs the import-only stand-ins, and runs
``server.main``.  ``--check`` imports SGLang's scheduler and exits 0 (``.ci/install-sglang``).
"""
from __future__ import annotations

import os
import sys
import types


def _map_package() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    engine = os.path.dirname(here)
    root = os.path.dirname(engine)
    for name, path in (("asyncspec", os.path.join(root, "asyncspec")), ("asyncspec.engine", engine)):
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__path__ = [path]
            sys.modules[name] = module


def main(argv: list[str]) -> int:
    _map_package()
    from asyncspec.engine.sglang import stubs

    stubs.install()
    if argv[:1] == ["--check"]:
        from asyncspec.engine.sglang import sglang_environment as environment

        environment.check_version()
        import sglang.srt.managers.scheduler  # noqa: F401
        return 0
    from asyncspec.engine.sglang import server

    return server.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
