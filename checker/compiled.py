"""The compiled explorer: the same breadth-first search, over a second encoding of the spec in C.

``csrc/`` holds a C mirror of the spec's next-state relation (``spec/engine.py`` and what it
calls), its *always* properties as booleans and the canonical form of ``checker/symmetry.py``,
built by setuptools as the optional extension ``asyncspec.checker._compiled``.  The spec stays
the one source of truth: the C encoding decides *which* states exist and *whether* a property
fails; every message and trace comes from the spec itself, on the state replayed through
``spec.engine.apply`` along the shortest path (``state``).  ``tests/test_compiled_explorer.py``
holds the two to each other: the same states, in the same order, the same edges, verdicts and
traces as ``--explorer plain`` on every pinned config it covers and on random ones.

It covers every scheduler config the checker explores, up to 8 requests and 16 blocks
(``not_covered`` says why a config is refused; those run on the fast explorer).  A seeded spec mutant (``checker/spec_mutants.py``) replaces a spec
function the C encoding cannot see, so a run with one installed is refused too
(``spec_replaced``): mutants always run on the interpreted spec.

Example (the plain explorer's result, timing aside):
    >>> from asyncspec.checker.bfs import explore
    >>> from asyncspec.spec.config import SpecConfig
    >>> cfg = SpecConfig(name="tiny", requests=((2, 1),), num_blocks=1, block_size=4)
    >>> untimed = {"seconds": 0}
    >>> not built() or explore_compiled(cfg).to_json() | untimed == explore(cfg).to_json() | untimed
    True
"""
from __future__ import annotations

import importlib
import inspect
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from asyncspec.spec import connector, encoder, engine, streaming
from asyncspec.spec.config import PAUSE_MODES, SpecConfig
from asyncspec.spec.engine import Action
from asyncspec.spec.policy import priority_key
from asyncspec.spec.events import ALL_EVENTS
from asyncspec.spec.properties import ALL_ALWAYS, eventually_for
from asyncspec.spec.state import EngineState, eos_choices, initial_states

from asyncspec.checker import compiled_checkpoint as ckpt, interrupt
from asyncspec.checker.checkpoint import WHAT_TO_DO, CheckpointError
from asyncspec.checker.graph import failures, unfinished_work
from asyncspec.checker.measure import rss_bytes
from asyncspec.checker.phases import run_phases
from asyncspec.checker.result import CheckResult, Violation
from asyncspec.checker.spec_model import SpecModel
from asyncspec.checker.symmetry import canonical

Progress = Callable[[int, int, int, float], None]  # states, frontier, depth, elapsed seconds

CHUNK = 4096  # parents the C search expands between two looks at interrupts, progress and memory
THREADED_CHUNK = 16 * CHUNK  # with --jobs: 8 batches of csrc/threads.h, so its pipeline rarely drains
FIRST_CHUNK = 256  # the first look comes early (an interrupt test pauses there: ``interrupt.pause_point``)

SPEC_MODULES = ("algebra", "blocks", "config", "connector", "draft", "encoder", "engine", "mamba", "offload",
                "output", "policy", "properties", "request", "scheduler", "state", "streaming", "swa")
WORKER_MODULES = ("worker", "worker_v1", "worker_v2", "worker_neuron")
"""The worker half's modules, which the joint encoding (``checker/compiled_joint.py``) mirrors too."""


def _load() -> ModuleType | None:
    try:
        return importlib.import_module("asyncspec.checker._compiled")
    except ImportError:
        return None


_C = _load()
_MAX_CHOICES = 256 - (_C.ACT_UPDATE if _C is not None else 30)  # update_from_output's action ids (csrc/compiled.h)
NOT_BUILT = "the C extension asyncspec.checker._compiled is not built (pip install -e . with a C compiler builds it)"


def _build() -> str:
    """The built extension's fingerprint, which a checkpoint names (``checker/compiled_checkpoint.py``)."""
    extension: str | None = getattr(_C, "__file__", None)
    fingerprint: str = ckpt.build_fingerprint(extension)
    return fingerprint


def built() -> bool:
    """Whether the C extension is importable."""
    return _C is not None


def _spec_functions(modules: tuple[str, ...] = SPEC_MODULES + WORKER_MODULES) -> dict[tuple[str, str], object]:
    """Every function attribute of the spec's ``modules``, by (module, name)."""
    return {(name, attr): value for name in modules
            for attr, value in vars(importlib.import_module(f"asyncspec.spec.{name}")).items()
            if inspect.isfunction(value)}


_ORIGINAL = _spec_functions()


def spec_replaced(modules: tuple[str, ...] = SPEC_MODULES) -> str | None:
    """The first function of ``modules`` that is not the one this module saw at import, or not the
    spec's own (defined outside ``spec/``: a seeded mutant of ``checker/spec_mutants.py`` or
    ``checker/worker_mutants.py``); None if none."""
    for (name, attr), value in _spec_functions(modules).items():
        module = getattr(value, "__module__", "") or ""
        foreign = module.startswith("asyncspec.") and not module.startswith("asyncspec.spec.")
        if foreign or _ORIGINAL.get((name, attr), value) is not value:
            return f"spec.{name}.{attr}"
    return None


def not_covered(cfg: SpecConfig, symmetry: bool = True) -> str | None:
    """Why the compiled explorer cannot check ``cfg`` (one line), or None when it can."""
    limits = (_C.MAXR, _C.MAXB) if _C is not None else (8, 16)
    refusals = (
        (_C is None, NOT_BUILT),
        (not symmetry, "--no-symmetry is not encoded"),
        ((cfg.num_speculative_tokens + 1) ** len(cfg.requests) > _MAX_CHOICES,
         f"more than {_MAX_CHOICES} acceptance choices per step ((num_speculative_tokens + 1) ** requests)"),
        (cfg.kv_offloading and _C is not None and not _store_jobs_fit(cfg, _C.MAXJOBS, _C.MAXJB),
         "the offloading connector's store jobs could pass the C encoding's bounds (kv_offloading)"),
        (_C is not None and any(p in ALL_ALWAYS and p not in _C.PROPERTIES for p in cfg.properties or ()),
         "a property the C encoding does not check is named"),
        (bool(cfg.skip_reading_prefix_cache), "skip_reading_prefix_cache is not encoded"),
        (len(cfg.requests) > limits[0] or cfg.num_blocks > limits[1],
         f"more than {limits[0]} requests or {limits[1]} blocks"),
    )
    for refused, why in refusals:
        if refused:
            return why
    replaced = spec_replaced()
    return None if replaced is None else f"{replaced} is replaced (a seeded mutant): mutants run on the interpreted spec"


def _store_jobs_fit(cfg: SpecConfig, jobs: int, blocks: int) -> bool:
    """Whether every store job fits ``blocks`` block ids and the jobs in flight fit ``jobs``: a
    request's jobs store distinct blocks of its sequence (``offload_stored`` only grows), one at least."""
    per_request = [cfg.blocks_for(p + m) for p, m in cfg.requests]
    fits: bool = max(per_request) <= blocks and sum(per_request) <= jobs
    return fits


def action_of(cfg: SpecConfig, a: int, s: EngineState) -> Action:
    """The spec's action for the C encoding's action id (``csrc/compiled.h``) taken in state ``s``."""
    assert _C is not None
    if a == 0:
        return Action(engine.SCHEDULE)
    if a >= _C.ACT_UPDATE:  # engine.enabled_actions' order: acceptance vectors, each with every report
        reports = connector.report_choices(cfg, s)
        accepted, kv = divmod(a - _C.ACT_UPDATE, len(reports))
        return Action(engine.UPDATE_FROM_OUTPUT, None, engine.acceptance_choices(s)[accepted], reports[kv])
    if _C.ACT_STREAM <= a < _C.ACT_UPDATE:  # streaming.next_input names which input comes
        kind = streaming.next_input(cfg, s, a - _C.ACT_STREAM)
        assert kind is not None
        return Action(kind, a - _C.ACT_STREAM)
    if a == _C.ACT_RESUME:
        return Action(engine.RESUME)
    if a >= _C.ACT_PAUSE:
        return Action(engine.PAUSE_ACTIONS[PAUSE_MODES[a - _C.ACT_PAUSE]])
    if a == _C.ACT_RESET:
        return Action(engine.RESET_PREFIX_CACHE)
    if a >= _C.ACT_ADD:
        return Action(engine.ADD_REQUEST, a - _C.ACT_ADD)
    return Action(engine.ABORT, a - _C.ACT_ABORT)


def _settings(cfg: SpecConfig) -> list[int]:
    """The config as ``csrc/explore_py.h`` reads it (``Cfg`` in ``csrc/compiled.h``)."""
    return [len(cfg.requests), cfg.batch_queue_depth, cfg.loop == "free", cfg.token_budget, cfg.max_num_seqs,
            cfg.block_size, cfg.num_blocks, cfg.enable_chunked_prefill, cfg.enable_prefix_caching,
            cfg.reserve_full_isl, cfg.defer_block_free, cfg.stale_mode == "drop", cfg.effective_decode_stagger,
            cfg.aborts, cfg.abort_mode == "deferred", cfg.late_arrivals, cfg.forced_preemptions,
            max(e for i in range(len(cfg.requests)) for e in eos_choices(cfg, i)),
            cfg.num_speculative_tokens, cfg.lookahead_tokens, sum(1 << i for i in set(cfg.structured_output)),
            cfg.policy == "priority", cfg.long_prefill_token_threshold, cfg.long_prefill_adaptive,
            -1 if cfg.max_model_len is None else cfg.max_model_len, *_ranks(cfg), cfg.pauses, *_pause_modes(cfg),
            cfg.kv_connector, cfg.kv_load_failure_policy == "fail", _mask(cfg.remote_loads), _mask(cfg.remote_sends),
            cfg.kv_load_whole_prompt, cfg.kv_invalid_blocks,
            cfg.sliding_window, cfg.swa_admission_cap if cfg.sliding_window else 0,
            cfg.kv_offloading, cfg.kv_offload_prompt_only, *_padded(list(cfg.resumable), 8),
            len(cfg.stream_updates), *_padded([x for update in cfg.stream_updates for x in update], 8, 0),
            MAMBA_MODES.index(cfg.mamba_cache_mode), *_images(cfg), int(cfg.async_scheduling)]


MAMBA_MODES = ("", "none", "align")
"""``SpecConfig.mamba_cache_mode`` values by their ``MAMBA_*`` code (``csrc/compiled.h``)."""


def _images(cfg: SpecConfig) -> list[int]:
    """The encoder inputs as ``csrc/explore_py.h`` reads them: their number, the cache size and the
    compute budget, then (request, offset, length, item) per image grouped by request in
    ``encoder.images_of`` order (an input id is its place there), items renumbered in sorted order,
    padded to 8 images."""
    items = sorted({item for _, _, _, item in cfg.images})
    flat = [x for r in range(len(cfg.requests)) for image in encoder.images_of(cfg, r)
            for x in (r, image.offset, image.length, items.index(image.item))]
    return [len(cfg.images), cfg.encoder_cache_size, cfg.encoder_compute_budget, *_padded(flat, 32, 0)]


def _padded(values: list[int], size: int, pad: int = -1) -> list[int]:
    """``values`` padded with ``pad`` to ``size`` entries."""
    return values + [pad] * (size - len(values))


def _mask(requests: tuple[int, ...]) -> int:
    """A set of request indices as a bit mask (bit r: request r)."""
    return sum(1 << r for r in set(requests))


def _pause_modes(cfg: SpecConfig) -> list[int]:
    """``cfg.pause_modes`` as ``PAUSE_MODES`` indices (``PM_*`` in ``csrc/compiled.h``), padded with -1."""
    modes = [PAUSE_MODES.index(m) for m in cfg.pause_modes]
    return modes + [-1] * (len(PAUSE_MODES) - len(modes))


def _ranks(cfg: SpecConfig) -> list[int]:
    """Each request's place in (priority, arrival) order (``policy.priority_key``), padded to 8."""
    n = len(cfg.requests)
    order = sorted(range(n), key=lambda r: priority_key(cfg, r))
    return [order.index(r) for r in range(n)] + [0] * (8 - n)


def c_search(cfg: SpecConfig, max_states: int | None = None, model: SpecModel | None = None,
             roots: list[EngineState] | None = None) -> Any:
    """The C search of ``cfg`` at its initial states (``csrc/explore_py.h``'s ``Explorer``);
    ``model`` and ``roots``: ``cfg``'s spec model and initial states, where the caller has them."""
    assert _C is not None
    model = model or SpecModel(cfg)
    names = list(_C.PROPERTIES)
    props = [names.index(p.name) for p in model.properties]
    stops = [model.stops_on(p.name) for p in model.properties]
    eos = [tuple(p.eos_position for p in s.params) for s in (roots if roots is not None else initial_states(cfg))]
    return _C.Explorer(_settings(cfg), [p for p, _ in cfg.requests], [m for _, m in cfg.requests],
                       props, stops, eos, max_states or 0)


class RemoteExpansion(Protocol):
    """Parents expanded elsewhere (``checker/compiled_ray.py``): ``run`` as the C search's ``run``."""

    def run(self, c: Any, budget: int) -> int: ...

    def close(self) -> None: ...


class CompiledExplorer:
    """One exploration run of ``cfg`` on the C encoding; ``run()`` returns the result."""

    def __init__(self, cfg: SpecConfig, max_states: int | None = None, progress: Progress | None = None,
                 max_memory: int | None = None, jobs: int = 1, checkpoint: Path | None = None,
                 checkpoint_seconds: float = 60.0, resume: bool = False,
                 remote: RemoteExpansion | None = None) -> None:
        why = not_covered(cfg)
        if why is not None:
            raise ValueError(f"{cfg.name}: the compiled explorer cannot check it: {why}")
        assert _C is not None
        if not 1 <= jobs <= 16:
            raise ValueError(f"the compiled explorer runs 1 to 16 threads, not {jobs}")
        self.cfg, self.progress, self.max_memory, self.jobs = cfg, progress, max_memory, jobs
        self.model = SpecModel(cfg)
        self.properties = self.model.properties
        self.roots = initial_states(cfg)
        self.c: Any = c_search(cfg, max_states, self.model, self.roots)
        self.remote = remote
        self.max_states = max_states
        self.checkpoint, self.checkpoint_seconds, self.resume = checkpoint, checkpoint_seconds, resume
        self._last_save = 0.0
        self._resumed_from: Path | None = None
        self.result = self.model.new_result()
        self._interrupted = False

    def run(self) -> CheckResult:
        """Explore; Ctrl-C, ``max_states`` or ``max_memory`` end it with a partial result."""
        start = time.perf_counter()
        run_phases(lambda: self._search(start), self._graph_phase, self._partial,
                   lambda: not self.result.partial and not self._stopped())
        stats = self.c.stats()
        r = self.result
        r.seconds = time.perf_counter() - start
        r.distinct_states, r.transitions, r.depth = stats["states"], stats["transitions"], stats["depth"]
        for i, name in enumerate(ALL_EVENTS):
            r.witnesses[name] = bool(stats["witnesses"] >> i & 1)
        return r

    def _stopped(self) -> bool:
        return bool(self.result.violations) and any(self.model.stops_on(v.property) for v in self.result.violations)

    def _search(self, start: float) -> None:
        stack = ExitStack()
        stack.enter_context(interrupt.catching(lambda: setattr(self, "_interrupted", True)))
        try:
            self._resume_or_start()
            self._last_save = time.perf_counter()
            status, chunk = (2 if self._stopped() else 0), FIRST_CHUNK
            while status == 0:
                status = self.c.run(chunk, self.jobs) if self.remote is None else self.remote.run(self.c, chunk)
                chunk = CHUNK if self.jobs == 1 else THREADED_CHUNK
                self._record_found()
                if status == 3:
                    self._partial(f"stopped at --max-states {self.max_states}")
                elif status in (0, 1):  # as the fast explorer, after every batch, the last one too
                    status = self._between_chunks(start, status == 0) or status
        finally:
            stack.close()
        if self._interrupted and not self.result.partial and not self._stopped():
            self._partial(interrupt.reason())

    def _resume_or_start(self) -> None:
        """Take the checkpoint over (``--resume``, checked: ``checker/compiled_checkpoint.py``), then
        record the violations found so far, each checked by the spec."""
        path = self.checkpoint
        if not (self.resume and path is not None and path.exists()):
            self._record_found()
            return
        snapshot, found = ckpt.load(path, self.cfg, _build())
        if snapshot["witnesses"] >> len(ALL_EVENTS):
            raise CheckpointError(f"{path}: a malformed checkpoint (its witnesses name no event); {WHAT_TO_DO}")
        ckpt.restore(self.c, snapshot, found, path)
        self._resumed_from = path
        try:
            self._record_found()
        except RuntimeError:
            raise CheckpointError(f"{path}: a malformed checkpoint (a violation it records is not one); "
                                  f"{WHAT_TO_DO}") from None

    def _save(self) -> None:
        """A checkpoint of the search as it stands (a boundary between two parents)."""
        if self.checkpoint is not None:
            ckpt.save(self.checkpoint, self.cfg, _build(), self.c.snapshot(), self.c.found())
            self._last_save = time.perf_counter()

    def _between_chunks(self, start: float, frontier: bool) -> int:
        """Interrupts, progress and memory, as the fast explorer sees them between parents (0: go on)."""
        interrupt.pause_point("mid-run")
        stats = self.c.stats()
        if self.progress is not None:
            self.progress(stats["states"], stats["states"] - stats["head"], stats["depth"],
                          time.perf_counter() - start)
        if self._interrupted:
            self._partial(interrupt.reason())
            return 4
        if frontier and self.max_memory is not None and (held := rss_bytes()) > self.max_memory:
            self._partial(f"stopped at --max-memory {self.max_memory // 2**20} MiB (resident {held // 2**20} MiB)")
            return 4
        if frontier and self.checkpoint is not None and time.perf_counter() - self._last_save >= self.checkpoint_seconds:
            self._save()
        return 0

    def _partial(self, reason: str) -> None:
        """A partial run; its checkpoint is saved unless a violation ended it (nothing to resume)."""
        self.result.partial = True
        self.result.partial_reason = reason
        if not self._stopped():
            self._save()

    def _record_found(self) -> None:
        """The violations the C search found since the last look, each checked by the spec itself."""
        for k, node in self.c.found()[len(self.result.violations):]:
            prop = self.properties[k]
            message = prop.check(self.cfg, self.state(node))
            if message is None:  # the C encoding and the spec disagree: never a silent answer
                raise RuntimeError(f"{self.cfg.name}: the compiled explorer found {prop.name} failing in "
                                   f"state {node}, the spec does not: csrc/ disagrees with spec/")
            self.result.violations.append(self._violation(prop.name, message, node))

    def _violation(self, prop: str, message: str, node: int) -> Violation:
        root, actions, _ = self.path(node)
        return Violation(prop, message, self.model.trace(self.roots[root], actions, prop))

    def path(self, i: int) -> tuple[int, list[Action], EngineState]:
        """The initial state's ordinal, the actions of the shortest path to state ``i``, and state
        ``i`` itself, replayed through the spec (canonical, as the plain explorer stores it)."""
        root, ids = self.c.path(i)
        try:
            s = canonical(self.roots[root])
            actions = []
            for a in ids:
                actions.append(action_of(self.cfg, a, s))
                s = canonical(engine.apply(self.cfg, s, actions[-1])[0])
        except Exception:  # noqa: BLE001  only a resumed store can hold an action the spec cannot take
            if self._resumed_from is None:
                raise
            raise CheckpointError(f"{self._resumed_from}: a malformed checkpoint (state {i}'s path holds an "
                                  f"action this config has not); {WHAT_TO_DO}") from None
        return root, actions, s

    def state(self, i: int) -> EngineState:
        """State ``i``, replayed through the spec along its shortest path."""
        return self.path(i)[2]

    def all_states(self) -> list[EngineState]:
        """Every stored state in index order, each replayed through the spec from its parent's: one
        ``spec.engine.apply`` per state, where ``state(i)`` for each ``i`` replays its whole path."""
        snap = self.c.snapshot()
        parent, roots, via = memoryview(snap["parent"]).cast("i"), memoryview(snap["roots"]).cast("H"), snap["via"]
        states: list[EngineState] = []
        for i, p in enumerate(parent):
            if p < 0:
                states.append(canonical(self.roots[roots[i]]))
                continue
            s = states[p]
            states.append(canonical(engine.apply(self.cfg, s, action_of(self.cfg, via[i], s))[0]))
        return states

    def _graph_phase(self) -> None:
        stats = self.c.stats()
        if self.progress is not None:
            self.progress(stats["states"], 0, stats["depth"], 0.0)
        for prop, node, message in failures(eventually_for(self.cfg), CompiledView(self)):
            self.result.violations.append(self._violation(prop, message, node))
        if self.checkpoint is not None and self.checkpoint.exists():  # a complete run leaves none to resume
            self.checkpoint.unlink()


class CompiledView:
    """A ``checker/graph.GraphView`` of the C search: its CSR arrays, messages from the spec."""

    def __init__(self, e: CompiledExplorer) -> None:
        self.e = e

    def terminal(self) -> list[int]:
        """The states without successors."""
        found: list[int] = self.e.c.terminal()
        return found

    def cycles(self) -> list[int]:
        """Tarjan's in C (``csrc/scc.h``, ``checker/scc.py``'s result); none without an edge back."""
        if not self.e.c.stats()["back_edges"]:
            return []
        nodes: list[int] = self.e.c.cycles()
        return nodes

    def unfinished(self, i: int) -> str | None:
        """``graph.unfinished_work``, decided in C and worded by the spec."""
        return unfinished_work(self.e.cfg, self.e.state(i)) if self.e.c.unfinished(i) else None

    def parked(self, i: int) -> int:
        """The parked frees of state ``i``."""
        n: int = self.e.c.parked(i)
        return n


def explore_compiled(cfg: SpecConfig, **options: Any) -> CheckResult:
    """``checker.bfs.explore`` on the C encoding (any ``CompiledExplorer`` option by keyword)."""
    return CompiledExplorer(cfg, **options).run()
