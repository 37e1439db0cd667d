"""The project venv's side: find the SGLang venv, start the driver there, run cases on it.

SGLang's pins conflict with vLLM 0.33.0's, so the driver runs in a venv of its own
(``.ci/install-sglang``) as a subprocess speaking JSON lines (``server.py``).  The python is
``$ASYNCSPEC_SGLANG_PYTHON`` if set, else ``bin/python`` of the default venv
(``$ASYNCSPEC_SGLANG_VENV`` or ``~/.cache/asyncspec/sglang-venv``).
"""
from __future__ import annotations

import json
import os
import select
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

from asyncspec.engine.sglang import case as cs

INSTALL_HINT = "run `bash .ci/install-sglang` (or set ASYNCSPEC_SGLANG_PYTHON to a python with sglang 0.5.23)"
START_SECONDS = 300.0  # importing SGLang and building a Scheduler on a loaded 2-core host
CASE_SECONDS = 120.0  # a case takes well under a second; past this the driver is hung


class SGLangUnavailable(RuntimeError):
    """The SGLang venv is missing or its driver cannot start; the message is one line."""


def default_venv() -> Path:
    """Where ``.ci/install-sglang`` creates the venv."""
    if os.environ.get("ASYNCSPEC_SGLANG_VENV"):
        return Path(os.environ["ASYNCSPEC_SGLANG_VENV"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "asyncspec" / "sglang-venv"


def sglang_python() -> Path:
    """The SGLang venv's python; ``SGLangUnavailable`` (one line) when there is none."""
    chosen = os.environ.get("ASYNCSPEC_SGLANG_PYTHON")
    python = Path(chosen) if chosen else default_venv() / "bin" / "python"
    if not python.exists():
        raise SGLangUnavailable(f"no SGLang venv at {python}: {INSTALL_HINT}")
    return python


def venv_problem() -> str | None:
    """Why there is no SGLang venv (one line), or None when ``sglang_python`` finds one."""
    try:
        sglang_python()
    except SGLangUnavailable as exc:
        return str(exc)
    return None


def bootstrap_path() -> Path:
    """``engine/sglang/bootstrap.py`` of this work tree."""
    return Path(__file__).resolve().parent / "bootstrap.py"


class SGLangClient:
    """One driver subprocess for one engine configuration; ``run(case)`` returns its trace
    (or ``{"error": ...}``)."""

    def __init__(self, config: cs.EngineConfig, mutant: str | None = None) -> None:
        python = sglang_python()
        env = dict(os.environ, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
        self.proc = subprocess.Popen(
            [str(python), str(bootstrap_path()), "serve"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL if not os.environ.get(
                "ASYNCSPEC_SGLANG_STDERR") else None, text=True, env=env)
        if self._read().get("ready") is not True:
            raise SGLangUnavailable(f"the SGLang driver did not start ({python}): {INSTALL_HINT}")
        if mutant is not None:
            reply = self._ask({"mutant": mutant})
            if "error" in reply:
                raise SGLangUnavailable(f"mutant {mutant}: {reply['error']}")
        reply = self._ask({"config": asdict(config)})
        if "error" in reply:
            raise SGLangUnavailable(f"SGLang's Scheduler could not be built: {reply['error']}")

    def _read(self, timeout: float = START_SECONDS) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:  # one reply is one line, written at once: nothing readable means a hang
            self.proc.kill()
            raise SGLangUnavailable(f"the SGLang driver gave no reply within {timeout:.0f} s (hung); killed")
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.poll()
            raise SGLangUnavailable(f"the SGLang driver exited (code {code}); rerun with "
                                    f"ASYNCSPEC_SGLANG_STDERR=1 to see why, or {INSTALL_HINT}")
        result: dict[str, Any] = json.loads(line)
        return result

    def _ask(self, request: dict[str, Any], timeout: float = START_SECONDS) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except OSError as exc:
            raise SGLangUnavailable(f"the SGLang driver is gone ({exc})") from exc
        return self._read(timeout)

    def run(self, case: cs.Case) -> dict[str, Any]:
        """Run one case; the reply (``trace`` or ``error``)."""
        return self._ask({"case": case.to_json()}, CASE_SECONDS)

    def close(self) -> None:
        """Stop the driver process."""
        if self.proc.poll() is None:
            try:
                self._ask_quit()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()

    def _ask_quit(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
        self.proc.stdin.close()


class SGLangPool:
    """One driver per engine configuration (SGLang builds its runtime once per process),
    started on first use and restarted after a crash; ``start_seconds`` is their start-up."""

    def __init__(self, mutant: str | None = None) -> None:
        self.mutant = mutant
        self.clients: dict[cs.EngineConfig, SGLangClient] = {}
        self.start_seconds = 0.0

    def run(self, case: cs.Case) -> dict[str, Any]:
        """Run ``case`` on the driver of its engine configuration."""
        import time

        client = self.clients.get(case.engine)
        if client is None or client.proc.poll() is not None:
            start = time.monotonic()
            client = self.clients[case.engine] = SGLangClient(case.engine, self.mutant)
            self.start_seconds += time.monotonic() - start
        try:
            reply = client.run(case)
        except SGLangUnavailable as exc:
            reply = {"error": str(exc)}
        if "error" in reply:  # the driver exits after a crash: the next case starts a new one
            client.close()
            del self.clients[case.engine]
        return reply

    def close(self) -> None:
        """Stop every driver."""
        for client in self.clients.values():
            client.close()
        self.clients = {}
