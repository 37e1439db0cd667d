"""Runs cases on SGLang's real ``Scheduler`` and its real event loop, recording every iteration.

``SGLangDriver`` builds one ``Scheduler`` per engine configuration (``environment.py``) and
replaces exactly two things on it (docs/sglang.md, "Stubs"):

* ``model_worker.forward_batch_generation``: the fake worker (``worker.py``);
* ``request_receiver.recv_requests``: the request transport (ZMQ from the tokenizer): it
  hands the scheduler this iteration's arrivals and aborts as ``TokenizedGenerateReqInput``
  and ``AbortReq`` objects, which ``ingest_requests``/``process_input_requests`` and
  ``handle_generate_request``/``abort_request`` then handle as shipped.  It is called once
  at the top of every loop iteration, so it also closes the previous iteration's record and
  stops the loop (``gracefully_exit``) once the case is over.

The loop itself is ``Scheduler.run_event_loop()``: ``event_loop_overlap`` or
``event_loop_normal``.  Observers (``recorder.py``) wrap, without changing,
``process_batch_result`` and ``ScheduleBatch.retract_decode``.
"""
from __future__ import annotations

from array import array
from typing import Any

from asyncspec.engine.sglang import case as cs
from asyncspec.engine.sglang import sglang_environment as env
from asyncspec.engine.sglang.recorder import Recorder
from asyncspec.engine.sglang.sglang_worker import FakeWorker, RequestScript

MAX_ITERATIONS = 400  # a case that has not drained by then is reported as stalled


class SGLangDriver:
    """One process, one Scheduler: SGLang builds its parallel runtime once per process, so a
    driver serves one engine configuration (the client starts one driver per configuration)."""

    def __init__(self) -> None:
        env.check_version()
        self.model_dir = env.tiny_model_dir()
        self.config: cs.EngineConfig | None = None
        self.scheduler: Any = None
        self.worker: FakeWorker | None = None
        self.recorder = Recorder()

    def prepare(self, config: cs.EngineConfig) -> None:
        """Build the Scheduler for ``config`` now (start-up is then not charged to a case)."""
        self._ensure(config)

    def _ensure(self, config: cs.EngineConfig) -> None:
        if self.config == config:
            return
        if self.scheduler is not None:
            raise RuntimeError("a driver serves one engine configuration; start another driver")
        self.scheduler = env.build_scheduler(config, self.model_dir)
        pool = self.scheduler.token_to_kv_pool_allocator.size
        self.worker = FakeWorker(self.scheduler.req_to_token_pool.req_to_token, pool)
        self.worker.sink = self.recorder.add
        self.scheduler.model_worker.forward_batch_generation = self.worker.forward_batch_generation
        self.scheduler.request_receiver = _Receiver(self.scheduler.request_receiver, self._recv_requests)
        self.recorder.wrap(self.scheduler)
        self.config = config

    # ---- one case ---------------------------------------------------------------------

    def run(self, case: cs.Case) -> dict[str, Any]:
        """Run ``case`` to the end; the trace: one record per loop iteration."""
        import sglang.srt.managers.scheduler as scheduler_module

        self._ensure(case.engine)
        assert self.worker is not None
        s = self.scheduler
        s.flush_cache()  # a case never hits another case's radix-cache entries
        self.worker.reset()
        self.worker.scripts = {cs.rid(i): RequestScript(len(r.prompt), r.eos_at)
                               for i, r in enumerate(case.requests)}
        self.case = case
        self.iteration = -1
        self.stalled = False
        self.recorder.start(case)
        scheduler_module.TEST_RETRACT = case.test_retract  # SGLANG_TEST_RETRACT, read per decode step
        s.forward_ct = 0
        s.new_token_ratio_tracker.reset()  # admission starts from the configured ratio in every case
        s.gracefully_exit = False
        try:
            s.run_event_loop()
        finally:
            scheduler_module.TEST_RETRACT = False
        return {"iterations": self.recorder.iterations, "stalled": self.stalled,
                "pool_size": s.token_to_kv_pool_allocator.size}

    def _recv_requests(self, local_reqs: Any = None) -> list[Any]:
        """The request transport: this iteration's inputs; ends the case once drained."""
        s = self.scheduler
        if self.iteration >= 0:
            self.recorder.close_iteration(s)
        self.iteration += 1
        if self._drained() or self.iteration >= MAX_ITERATIONS:
            self.stalled = not self._drained()
            s.gracefully_exit = True
            return []
        self.recorder.open_iteration(self.iteration)
        inputs: list[Any] = []
        for i, r in enumerate(self.case.requests):
            if r.arrive_at == self.iteration:
                inputs.append(_generate_input(i, r))
                self.recorder.note("arrive", i)
        for a in self.case.aborts:
            if a.at == self.iteration and a.req < len(self.case.requests):
                inputs.append(_abort_input(a.req))
                self.recorder.note("abort", a.req)
        return inputs

    def _drained(self) -> bool:
        s = self.scheduler
        last = max((r.arrive_at for r in self.case.requests), default=0)
        last = max([last] + [a.at for a in self.case.aborts])
        return (self.iteration > last and s.last_batch is None and not s.waiting_queue
                and s.running_batch.is_empty() and s.chunked_req is None)


class _Receiver:
    """Stands in for the scheduler's ``request_receiver`` (the ZMQ intake); only
    ``recv_requests`` is replaced, everything else is the original's."""

    def __init__(self, original: Any, recv: Any) -> None:
        self._original = original
        self.recv_requests = recv

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


def _generate_input(i: int, r: cs.Request) -> Any:
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = SamplingParams(max_new_tokens=r.max_new_tokens, temperature=0.0)
    params.normalize(None)  # as the tokenizer manager does before sending
    return TokenizedGenerateReqInput(
        rid=cs.rid(i), input_text=None, input_ids=array("q", r.prompt), input_embeds=None,
        mm_inputs=None, token_type_ids=None, sampling_params=params, return_logprob=False,
        logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, stream=False,
    )


def _abort_input(i: int) -> Any:
    from sglang.srt.managers.io_struct import AbortReq
    return AbortReq(rid=cs.rid(i))
