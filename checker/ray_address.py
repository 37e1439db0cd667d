"""A Ray address checked before ``ray.init``, which retries an unreachable one for minutes.

``check --ray`` and ``fuzz --ray`` both ask ``unreachable(address)`` first, so a wrong
address is one line and exit 2 within seconds instead of a run that never starts.  ``RayActors``
joins (or starts) the cluster and holds the actors of both ``--ray`` paths (``fast_parallel.py``,
``compiled_ray.py``).
"""
from __future__ import annotations

import socket
from typing import Any

CONNECT_SECONDS = 3.0
"""How long a TCP connection to the head node may take before the address counts as unreachable."""


def unreachable(address: str, timeout: float = CONNECT_SECONDS) -> str | None:
    """Why ``address`` (``host:port`` of a Ray head, ``ray://host:port``, ``auto`` or ``local``)
    cannot be reached, or None.

    >>> unreachable("local") is None
    True
    >>> unreachable("nowhere")
    "--ray wants host:port of a Ray head node or 'local', got 'nowhere'"
    """
    if address in ("local", "auto"):
        return None
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return f"--ray wants host:port of a Ray head node or 'local', got {address!r}"
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        return f"cannot reach the Ray cluster at {address!r}: {exc.strerror or exc}; start it or pass --ray local"
    return None


def join_ray(address: str, jobs: int) -> tuple[Any, bool]:
    """``ray`` joined to the cluster at ``address`` (``local``: one of ``jobs`` CPUs started here), and
    whether this call started it (its caller then shuts it down).  ``RuntimeError``, one line, without
    Ray or when ``ray.init`` fails."""
    try:
        import ray
    except ImportError:
        raise RuntimeError("--ray needs Ray: pip install 'asyncspec[ray]'") from None
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(address=None if address == "local" else address, num_cpus=jobs if address == "local" else None,
                     include_dashboard=False, log_to_driver=False, configure_logging=False)
        except Exception as exc:  # Ray raises ConnectionError, ValueError or RuntimeError here
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RuntimeError(f"cannot reach the Ray cluster at {address!r}: {first}") from None
    return ray, started


class RayActors:
    """``jobs`` actors of ``actor_class``, each built with ``args``, on the Ray cluster at ``address``
    (``local``: one of ``jobs`` CPUs started here); ``RuntimeError`` without Ray.  ``close`` kills
    them, and shuts the cluster down if this started it."""

    def __init__(self, address: str, jobs: int, actor_class: type, *args: Any) -> None:
        ray, self._started = join_ray(address, jobs)
        self.ray: Any = ray
        actor: Any = ray.remote(num_cpus=1)(actor_class)
        self.actors: list[Any] = [actor.remote(*args) for _ in range(jobs)]

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)
        if self._started:
            self.ray.shutdown()
