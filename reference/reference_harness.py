"""The reference engine inside the spec's environment: the same actions, by name.

A ``ReferenceHarness`` owns an ``EngineCore`` running the deterministic
``TokenFunctionModel`` and plays the spec's environment around it: late
arrivals (in id order), client aborts, and ``reset_prefix_cache`` calls
bounded by ``forced_preemptions``.  Its ``enabled_actions()`` and
``apply()`` use the spec's ``Action`` labels (``spec/engine.py``), so a
refinement check can drive the reference and the spec side by side.

Example (the spec's async-d2 workload, EOS never):
    >>> from asyncspec.spec.config import ConfigError, SpecConfig
    >>> cfg = SpecConfig(name="x", requests=((3, 2), (2, 2)), num_blocks=3, block_size=2,
    ...                  token_budget=4)
    >>> h = ReferenceHarness.from_spec(cfg, (0, 0))
    >>> [str(a) for a in h.enabled_actions()]
    ['schedule']
    >>> sorted(h.apply(h.enabled_actions()[0]))
    ['chunked_prefill']
"""
from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from asyncspec.spec.config import ConfigError, SpecConfig
from asyncspec.spec.engine import (
    ABORT, ADD_REQUEST, RESET_PREFIX_CACHE, SCHEDULE, UPDATE_FROM_OUTPUT, Action)
from asyncspec.spec.state import BlockHash

from asyncspec.reference.reference_config import ReferenceConfig
from asyncspec.reference.reference_engine import EngineCore, TokenFunctionModel, make_request
from asyncspec.reference.reference_request import Request


def reference_config(cfg: SpecConfig) -> ReferenceConfig:
    """The reference engine's settings for a spec config."""
    return ReferenceConfig(
        num_gpu_blocks=cfg.num_blocks,
        block_size=cfg.block_size,
        max_num_batched_tokens=cfg.token_budget,
        max_num_seqs=cfg.max_num_seqs,
        enable_chunked_prefill=cfg.enable_chunked_prefill,
        enable_prefix_caching=cfg.enable_prefix_caching,
        scheduler_reserve_full_isl=cfg.reserve_full_isl,
        batch_queue_size=cfg.batch_queue_depth,
        sync_scheduler=cfg.sync_scheduler,
        defer_block_free=cfg.defer_block_free,
        requires_kv_delivery=cfg.stale_mode == "drop",
        decode_stagger=cfg.effective_decode_stagger,
        abort_mode=cfg.abort_mode,
    )


def spec_config(**fields: Any) -> SpecConfig:
    """A ``SpecConfig``, also for workloads beyond the checker's 6-request limit.

    ``spec/config.py`` validates 1 to 6 requests (a bound for exhaustive
    checking, not for the spec's actions).  Larger workloads are validated
    with their first request only, then given all of them; each request must
    still fit the pool alone.

    >>> cfg = spec_config(name="big", requests=((4, 2),) * 64, num_blocks=8)
    >>> len(cfg.requests)
    64
    """
    requests = tuple(fields["requests"])
    if len(requests) <= 6:
        return SpecConfig(**fields)
    cfg = SpecConfig(**{**fields, "requests": requests[:1]})
    for i, (prompt, max_tokens) in enumerate(requests):
        if prompt < 1 or max_tokens < 1 or cfg.blocks_for(prompt + max_tokens) > cfg.num_blocks:
            raise ConfigError(f"{cfg.name}: request r{i} is empty or does not fit the pool alone")
        if not cfg.enable_chunked_prefill and prompt + max_tokens - 1 > cfg.token_budget:
            raise ConfigError(f"{cfg.name}: request r{i} never fits the token budget")
    object.__setattr__(cfg, "requests", requests)
    return cfg


class ReferenceHarness:
    """An ``EngineCore`` plus the environment: arrivals, aborts, forced preemptions."""

    def __init__(
        self,
        config: ReferenceConfig,
        requests: Sequence[tuple[int, int]],
        eos_positions: Sequence[int],
        *,
        loop: str = "exact",
        aborts: bool = False,
        late_arrivals: bool = False,
        forced_preemptions: int = 0,
    ) -> None:
        if len(requests) != len(eos_positions):
            raise ValueError("one EOS position per request")
        self.config = config
        self.loop = loop
        self.aborts = aborts
        self.late_arrivals = late_arrivals
        self.forced_preemptions_left = forced_preemptions
        self.eos_positions = tuple(eos_positions)
        self.requests: list[Request] = [
            make_request(i, p, m, config.block_size) for i, (p, m) in enumerate(requests)]
        model = TokenFunctionModel({r.request_id: e for r, e in zip(self.requests, eos_positions)})
        self.core = EngineCore(config, model)
        self.num_arrived = 0
        self.hash_owners: dict[int, BlockHash] = {}  # for the abstraction: hash -> (request, index)
        self.hash_owners_seen = [0] * len(self.requests)
        for _ in range(1 if late_arrivals else len(requests)):
            self._arrive()

    @classmethod
    def from_spec(cls, cfg: SpecConfig, eos_positions: Sequence[int]) -> ReferenceHarness:
        """The harness for a spec config and one choice of EOS positions."""
        return cls(reference_config(cfg), cfg.requests, eos_positions, loop=cfg.loop,
                   aborts=cfg.aborts, late_arrivals=cfg.late_arrivals,
                   forced_preemptions=cfg.forced_preemptions)

    def copy(self) -> ReferenceHarness:
        """An independent deep copy (for exploration)."""
        return copy.deepcopy(self)

    def _arrive(self) -> None:
        self.core.add_request(self.requests[self.num_arrived])
        self.num_arrived += 1

    # ------------------------------------------------------------ actions

    def enabled_actions(self) -> list[Action]:
        """The actions enabled now, in the spec's order."""
        core = self.core
        actions: list[Action] = []
        if core.can_schedule():
            actions.append(Action(SCHEDULE))
        if core.must_process() if self.loop == "exact" else bool(core.batch_queue):
            actions.append(Action(UPDATE_FROM_OUTPUT))
        if self.aborts:
            actions += [Action(ABORT, i) for i, r in enumerate(self.requests[: self.num_arrived])
                        if not r.is_finished() and not r.abort_deferred]
        # New requests and utility calls are read between engine-loop calls only.
        boundary = self.loop == "free" or not core.call_in_progress
        if self.late_arrivals and self.num_arrived < len(self.requests) and boundary:
            actions.append(Action(ADD_REQUEST, self.num_arrived))
        if self.forced_preemptions_left > 0 and boundary:  # vLLM accepts it at any time
            actions.append(Action(RESET_PREFIX_CACHE))
        return actions

    def apply(self, action: Action) -> frozenset[str]:
        """Run ``action`` on the reference; the events it exercised."""
        core = self.core
        if action.name == SCHEDULE:
            core.schedule_step()
        elif action.name == UPDATE_FROM_OUTPUT:
            core.process_oldest()
        elif action.name == ABORT and action.req is not None:
            core.abort(self.requests[action.req].request_id)
        elif action.name == ADD_REQUEST and action.req == self.num_arrived:
            self._arrive()
        elif action.name == RESET_PREFIX_CACHE:
            self.forced_preemptions_left -= 1
            core.scheduler.reset_prefix_cache(reset_running_requests=True)
        else:
            raise ValueError(f"cannot apply {action}")
        return frozenset(core.scheduler.last_events)

    def engine_action(self) -> Action | None:
        """The half ``step_with_batch_queue`` would run next (exact loop), if any."""
        if self.core.can_schedule():
            return Action(SCHEDULE)
        if self.core.must_process():
            return Action(UPDATE_FROM_OUTPUT)
        return None
