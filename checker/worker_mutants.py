"""Seeded bugs in the worker spec, each of which the joint checker must kill.

A worker mutant replaces functions of a worker module (``spec/worker_v1.py``,
``spec/worker_v2.py``, ``spec/worker_neuron.py``) for the duration of a check,
as the scheduler's mutants do (``checker/spec_mutants.py``, whose ``applied``
installs them): the worker modules call those functions through their own
globals, so the replacement takes effect everywhere.  The spec itself holds
no switch.  A mutant is *killed* when one of its configs (``MUTANT_CONFIGS``,
in order) reports a violation of the property it targets.

Example:
    >>> run_worker_mutant(MUTANTS_BY_NAME["v1_feed_by_row"]).killed
    True
    >>> from asyncspec.spec import worker_v1
    >>> worker_v1._device_token.__name__  # restored after the check
    '_device_token'
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from asyncspec.spec import worker_neuron as neuron
from asyncspec.spec import worker_v1 as v1
from asyncspec.spec import worker_v2 as v2
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.worker import W_ALREADY_ACTUALIZED, W_MATERIALIZE_MAIN, W_MISMATCH, Strategy

from asyncspec.checker.joint import JointTrace, explore_joint, small_configs
from asyncspec.checker.result import CheckResult
from asyncspec.checker.spec_mutants import Patch, applied

Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]


class WorkerMutant(NamedTuple):
    """A seeded worker bug, the property that must catch it, and the functions it replaces."""

    name: str
    strategy: Strategy
    property: str
    description: str
    patches: tuple[Patch, ...]


# ---------------------------------------------------------------- the bug catalogue


def _v1_by_row(orig: Callable[..., Any]) -> Callable[..., Any]:
    """V1's gather by the current row instead of ``prev_req_id_to_index``."""
    def mutant(ws: Any, prev: dict[int, int], order: tuple[int, ...], row: int) -> Any:
        return orig(ws, {order[row]: row}, order, row)
    return mutant


def _v2_by_row(orig: Callable[..., Any]) -> Callable[..., Any]:
    """MRV2's ``last_sampled_tokens`` read at the batch row instead of the request slot."""
    def mutant(ws: Any, row: Any, idx_mapping: tuple[int, ...], index: int, plen: int) -> Any:
        return orig(ws, row, tuple(range(len(idx_mapping))), index, plen)
    return mutant


def _reuse_without_remap(orig: Callable[..., Any]) -> Callable[..., Any]:
    """Same set, new order: the future fed as is (counted async, not device-fed)."""
    def mutant(d: Any, buf: Any, order: tuple[int, ...]) -> Any:
        if order != buf.prev_req_ids_ordered:
            return list(buf.future[: len(order)]), True, False
        return orig(d, buf, order)
    return mutant


def _remap_counted_async(orig: Callable[..., Any]) -> Callable[..., Any]:
    """A same-set remap counted in ``async_steps``."""
    def mutant(d: Any, buf: Any, order: tuple[int, ...]) -> Any:
        fed, _, device_fed = orig(d, buf, order)
        return fed, True, device_fed
    return mutant


def _no_materialize_on_mismatch(orig: Callable[..., Any]) -> Callable[..., Any]:
    """A decode step whose shape mismatches the future: CPU ids without materialising."""
    def mutant(d: Any, buf: Any, order: tuple[int, ...], changed: bool, all_decode: bool) -> Any:
        if buf is not None and all_decode and not changed:
            d.events.add(W_MISMATCH)
            return False, buf
        return orig(d, buf, order, changed, all_decode)
    return mutant


def _no_rebuild_on_mixed_step(orig: Callable[..., Any]) -> Callable[..., Any]:
    """A same-set prefill or mixed step: CPU ids as is, nothing materialised."""
    def mutant(d: Any, buf: Any, order: tuple[int, ...], changed: bool, all_decode: bool) -> Any:
        if buf is not None and not all_decode and not changed:
            return False, buf
        return orig(d, buf, order, changed, all_decode)
    return mutant


def _no_lock(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``get_output`` on the main thread without the per-output lock: it joins the output thread."""
    def mutant(d: Any, step: int, batch: tuple[int, ...]) -> bool:
        i = neuron.output_index(d, step)
        if i is None or not d.outputs[i].samples or not d.outputs[i].thread_waiting:
            return bool(orig(d, step, batch))
        rec = d.outputs[i]
        if neuron.already_actualized(rec):
            d.events.add(W_ALREADY_ACTUALIZED)
            return True
        d.outputs[i] = rec._replace(waiters=rec.waiters + 1)
        d.error("w2", f"step {step}'s execution has two waiters (output thread and main thread)")
        d.events.add(W_MATERIALIZE_MAIN)
        neuron._materialize(d, i, batch, waiter_done=True)
        return True
    return mutant


def _constant(value: Any) -> Wrap:
    """A replacement that ignores its arguments and returns ``value``."""
    return lambda orig: lambda *args: value


def _identity_fixup(orig: Callable[..., Any]) -> Callable[..., Any]:
    """No ``_apply_async_fallback_token_fixup``: the CPU ids are fed as read."""
    return lambda buf, order, fed: fed


def _trim_future(orig: Callable[..., Any]) -> Callable[..., Any]:
    """The future trimmed to the real rows (padded decode shapes never match again)."""
    return lambda wcfg, rows, order: len(order)


def _no_reinstate(orig: Callable[..., Any]) -> Callable[..., Any]:
    """After a sync fallback the buffer is not re-armed."""
    def mutant(wcfg: Any, d: Any, ws: Any, rows: Any, order: Any, counted_async: bool, device_fed: bool) -> Any:
        ws2, events = orig(wcfg, d, ws, rows, order, counted_async, device_fed)
        return (ws2 if counted_async else ws2._replace(buffer=None)), events
    return mutant


W1, W2, W3, W4 = ("W1_feed_is_last_sampled", "W2_materialized_once", "W3_materialize_before_update",
                  "W4_counters_and_efficiency")

MUTANTS: tuple[WorkerMutant, ...] = (
    WorkerMutant("v1_feed_by_row", "v1", W1,
                 "gather prev_sampled_token_ids by current row, not prev_req_id_to_index",
                 ((v1, "_device_token", _v1_by_row),)),
    WorkerMutant("v2_feed_by_row", "v2", W1,
                 "read last_sampled_tokens by batch row, not by request slot (idx_mapping)",
                 ((v2, "_fed", _v2_by_row),)),
    WorkerMutant("neuron_reuse_without_remap", "neuron", W1,
                 "same set, new order: feed the future as is instead of remapping it",
                 ((neuron, "_reuse_future", _reuse_without_remap),)),
    WorkerMutant("neuron_no_materialize_on_mismatch", "neuron", W1,
                 "shape mismatch: use the CPU ids without materialising and rebuilding",
                 ((neuron, "_materialize_after_decline", _no_materialize_on_mismatch),)),
    WorkerMutant("neuron_no_rebuild_on_mixed_step", "neuron", W1,
                 "same-set prefill/mixed step: CPU ids as is, no materialise (seed-doc reading)",
                 ((neuron, "_materialize_after_decline", _no_rebuild_on_mixed_step),)),
    WorkerMutant("neuron_skip_guard_materialize", "neuron", W3,
                 "composition change: skip the materialisation before _update_states",
                 ((neuron, "_guard_materialize", lambda orig: lambda d, buf, batch: buf),)),
    WorkerMutant("neuron_no_lock", "neuron", W2,
                 "get_output without the per-output lock: two waiters, two materialisations",
                 ((neuron, "main_materialize", _no_lock),)),
    WorkerMutant("neuron_materialize_twice", "neuron", W2,
                 "get_output does not check 'already actualised'",
                 ((neuron, "already_actualized", _constant(False)),)),
    WorkerMutant("neuron_remap_counted_async", "neuron", W4,
                 "a same-set remap is counted in async_steps",
                 ((neuron, "_reuse_future", _remap_counted_async),)),
    WorkerMutant("neuron_no_reinstate", "neuron", W4,
                 "after a sync fallback the buffer is not re-armed: async never resumes",
                 ((neuron, "_sample", _no_reinstate),)),
    WorkerMutant("neuron_trim_future", "neuron", W4,
                 "the future is trimmed to the real rows: padded decode shapes never match",
                 ((neuron, "_future_shape", _trim_future),)),
    WorkerMutant("neuron_no_fallback_fixup", "neuron", W1,
                 "no _apply_async_fallback_token_fixup: TP rank 1 reads a host slot it never wrote",
                 ((neuron, "_fixup", _identity_fixup),)),
)
MUTANTS_BY_NAME: dict[str, WorkerMutant] = {m.name: m for m in MUTANTS}
MUTANT_CONFIGS: tuple[str, ...] = ("worker-d2", "worker-d2-tp")
"""Configs a mutant is checked on, in order, until it is killed."""


# ---------------------------------------------------------------- checking them


def explore_mutant(cfg: SpecConfig, m: WorkerMutant, **options: Any) -> CheckResult:
    """``explore_joint`` with ``m`` applied; the result and its traces are named after ``m``."""
    options.setdefault("required_witnesses", ())
    with applied(m.patches):
        result = explore_joint(cfg, m.strategy, **options)
    result.name += f"/{m.name}"
    for v in result.violations:
        if isinstance(v.trace, JointTrace):
            v.trace.mutant = m.name
    return result


@dataclass(frozen=True)
class WorkerMutantResult:
    """Outcome of checking one worker mutant."""

    name: str
    property: str
    killed: bool
    violated: tuple[str, ...]
    config: str
    trace_length: int

    def to_json(self) -> dict[str, Any]:
        """The ``worker --mutants --json`` row."""
        return {"name": self.name, "property": self.property, "killed": self.killed,
                "violated": list(self.violated), "config": self.config,
                "trace_length": self.trace_length}


def run_worker_mutant(m: WorkerMutant, configs: dict[str, SpecConfig] | None = None) -> WorkerMutantResult:
    """Check ``m`` on each small config until its property is violated."""
    violated: set[str] = set()
    all_configs = small_configs()
    for name, cfg in (configs or {c: all_configs[c] for c in MUTANT_CONFIGS}).items():
        r = explore_mutant(cfg, m, stop_on_first=False)
        violated |= {v.property for v in r.violations}
        hit = next((v for v in r.violations if v.property == m.property), None)
        if hit is not None:
            assert isinstance(hit.trace, JointTrace)
            return WorkerMutantResult(m.name, m.property, True, tuple(sorted(violated)), name,
                                      len(hit.trace.joint_actions))
    return WorkerMutantResult(m.name, m.property, False, tuple(sorted(violated)), "", 0)


def check_worker_mutants(configs: dict[str, SpecConfig] | None = None) -> list[WorkerMutantResult]:
    """Every worker mutant, checked; each should come back ``killed``."""
    return [run_worker_mutant(m, configs) for m in MUTANTS]
