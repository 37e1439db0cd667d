"""Parts of a fuzz workload as a profile draws them: one request, streaming-input sessions, images.

``draw_request`` draws one request that fits the pool alone.  A session (vLLM's resumable
request, ``spec/streaming.py``) gets later input chunks
(``stream_update rN``) and the end of its input stream (``stream_close rN``), sent at any
call boundary; a turn stops with its steps in flight, pauses in
``WAITING_FOR_STREAMING_REQ`` holding its blocks and a model-runner slot, or takes a queued
chunk at once.  ``profiles.STREAMING_PROFILE`` draws them with chunked prefill on and prefix
caching off (the spec's block hashes do not follow a turn's discarded token).
"""
from __future__ import annotations

from hypothesis import strategies as st

from asyncspec.spec import events as ev

from asyncspec.statemachine_tests.core.harness import RequestSpec

STREAMING_COVERAGE: dict[str, tuple[str, ...]] = {
    "stream_stop_in_flight": (ev.STREAM_STOP_IN_FLIGHT,),
    "stream_resume": (ev.STREAM_RESUME, ev.STREAM_CONTINUE),
}
"""Reported when the profile draws streaming-input sessions: a turn that stops with its steps in
flight (their output dropped), and a session that takes its next input (paused or queued)."""

STREAMING_EVENTS = (ev.STREAM_STOP_IN_FLIGHT, ev.STREAM_PAUSE, ev.STREAM_CONTINUE, ev.STREAM_QUEUED,
                    ev.STREAM_RESUME, ev.STREAM_END, ev.STREAM_PAUSED_SKIP)
"""The witnesses of streaming-input sessions."""

def draw_request(draw: st.DrawFn, capacity: int, max_output: int, min_prompt: int = 1) -> RequestSpec:
    """P + M <= capacity (the request fits the pool alone, and the budget without chunking)."""
    max_tokens = draw(st.integers(1, min(max_output, capacity - min_prompt)))
    prompt = draw(st.integers(min_prompt, capacity - max_tokens))
    eos = draw(st.integers(0, max_tokens))
    return RequestSpec(prompt, max_tokens, eos)


def held_send(requests: tuple[RequestSpec, ...], loads: tuple[int, ...], sends: tuple[int, ...], capacity: int,
              max_output: int, short: int) -> tuple[tuple[RequestSpec, ...], tuple[int, ...], tuple[int, ...]]:
    """The shape of a keep-mode pause the engine still steps through (half the pause part's draws of two
    requests or more, under the toy connector): r0 decodes as long as it may (no EOS, up to ``max_output``),
    r1 finishes at its first token and sends its KV, both prompts at most ``short`` tokens (one step admits
    them together), neither loads.  A ``PAUSED_ALL`` pause from r1's admission to its send's report leaves
    ``get_num_unfinished_requests`` at 0, but r1's finished id and its held blocks keep ``has_requests``
    true (vLLM 0.33.0 ``v1/core/sched/scheduler.py``: ``Scheduler.has_requests``, ``has_finished_requests``),
    so the engine calls ``schedule()`` with r0 running; its token budget is 0 there (``Scheduler.schedule``),
    what ``sched_paused_all_keeps_budget`` removes.  Returns (requests, remote loads, remote sends)."""
    r0 = requests[0]._replace(prompt_len=max(1, min(requests[0].prompt_len, short)))
    r0 = r0._replace(max_tokens=max(r0.max_tokens, min(max_output, capacity - r0.prompt_len)), eos_position=0)
    r1 = requests[1]._replace(prompt_len=max(1, min(requests[1].prompt_len, short)), max_tokens=1, eos_position=0)
    return (r0, r1, *requests[2:]), tuple(i for i in loads if i > 1), tuple(sorted({1, *sends}))


MAX_UPDATES = 3
"""Later inputs drawn per workload (the spec takes up to 4)."""


def sessions(draw: st.DrawFn, streaming: bool, max_output: int, requests: tuple[RequestSpec, ...],
             pool_tokens: int) -> tuple[tuple[RequestSpec, ...], tuple[int, ...], tuple[tuple[int, int], ...]]:
    """(requests, resumable requests, stream_updates): as given and none unless ``streaming``; else
    r0 and, each half the time, the others become sessions, their prompts cut to leave half the pool
    (``pool_tokens``) for later turns, with 0 to ``MAX_UPDATES`` later inputs of 1 to 4 new prompt
    tokens and max_tokens up to ``max_output``; an input that would not fit every session in the
    pool alone ends the list."""
    if not streaming:
        return requests, (), ()
    resumable = tuple(i for i in range(len(requests)) if i == 0 or draw(st.booleans()))
    requests = tuple(r._replace(prompt_len=max(1, min(r.prompt_len, pool_tokens // 2 - r.max_tokens)))
                     if i in resumable else r for i, r in enumerate(requests))
    room = min(pool_tokens - r.prompt_len - r.max_tokens for i, r in enumerate(requests) if i in resumable)
    updates: list[tuple[int, int]] = []
    for _ in range(draw(st.integers(0, MAX_UPDATES))):
        update = (draw(st.integers(1, 4)), draw(st.integers(1, max_output)))
        if sum(update) - 1 > room:
            break
        room -= sum(update) - 1
        updates.append(update)
    return requests, resumable, tuple(updates)


def streaming_categories(streaming: bool, max_depth: int = 2) -> list[str]:
    """The streaming coverage categories a profile reports (``max_depth`` 2) or can reach: none
    without sessions; a turn stopping with steps in flight needs depth 2 or more."""
    return [c for c in STREAMING_COVERAGE if streaming and (max_depth >= 2 or c != "stream_stop_in_flight")]


def streaming_unreachable(streaming: bool, max_depth: int) -> dict[str, str]:
    """The streaming witnesses a profile cannot reach, and why (``profiles.unreachable_witnesses``)."""
    if not streaming:
        return {name: "no streaming-input sessions in this profile" for name in STREAMING_EVENTS}
    if max_depth < 2:
        return {ev.STREAM_STOP_IN_FLIGHT: "needs a step in flight behind the one scheduled (depth 2 or 3)"}
    return {}


ENCODER_COVERAGE: dict[str, tuple[str, ...]] = {
    "encoder_cache_eviction": (ev.ENCODER_CACHE_EVICTION,),
    "encoder_input_blocked": (ev.ENCODER_INPUT_BLOCKED,),
    "encoder_released_in_flight": (ev.ENCODER_RELEASED_IN_FLIGHT,),
    "encoder_cache_revived": (ev.ENCODER_CACHE_REVIVED,),
    "encoder_evicted_reallocated": (ev.ENCODER_EVICTED_REALLOCATED,),
}
"""Reported when the profile draws images (``spec/encoder.py``): an allocation that evicts a freeable
entry (sent to the worker), a chunk cut before an image the cache or the budget cannot take, an image
released while a step reading it is in flight, a request taking back a freeable entry it shares, an entry
evicted and allocated again in one pass (which ``get_freed_mm_hashes`` must not send as freed, vllm#52482)."""

ENCODER_EVENTS = (ev.ENCODER_INPUT_SCHEDULED, ev.ENCODER_CACHE_REVIVED, ev.ENCODER_CACHE_EVICTION,
                  ev.ENCODER_INPUT_BLOCKED, ev.ENCODER_INPUT_RELEASED, ev.ENCODER_RELEASED_IN_FLIGHT,
                  ev.ENCODER_EVICTED_REALLOCATED, ev.ENCODER_MISS)
"""The witnesses of encoder inputs."""


IMAGE_LENGTHS = (2, 1, 3, 4)
"""Positions per image, 2 first: equal lengths make the entries of different items interchangeable
in the cache, so that one pass evicts an entry and allocates it again (vllm#52482)."""


def images(draw: st.DrawFn, requests: tuple[RequestSpec, ...], token_budget: int
           ) -> tuple[tuple[tuple[int, int, int, int], ...], int, int]:
    """(images, encoder_cache_size, encoder_compute_budget): r0 and, each half the time, the others get
    one or two images of 1 to 4 positions inside their prompt; an item drawn among three at most, so
    requests share items and compete for their entries (a shared item keeps its first length); a cache
    of two, one or one and a bit of the largest image, a compute budget of the largest image up to the token budget."""
    chosen: list[tuple[int, int, int, int]] = []
    lengths: dict[int, int] = {}
    for req, r in enumerate(requests):
        if req and not draw(st.booleans()) or len(chosen) > 6:  # at most 8 images (spec/config.py)
            continue
        start, mine = 0, set()
        for _ in range(draw(st.integers(1, 2))):
            item = draw(st.integers(0, min(2, len(requests))))
            length = lengths.get(item, draw(st.sampled_from(IMAGE_LENGTHS)))
            if item in mine or start + length > r.prompt_len:
                break
            offset = draw(st.integers(start, r.prompt_len - length))
            chosen.append((req, offset, length, item))
            lengths[item], start = length, offset + length
            mine.add(item)
    if not chosen:
        return (), 0, 0
    largest = max(lengths.values())
    cache = draw(st.sampled_from((2 * largest, largest, largest + 1)))
    budget = draw(st.sampled_from((largest, max(largest, token_budget), cache)))
    return tuple(chosen), cache, budget


RECYCLE_PROMPT = 3
"""The prompt length of the recycled shape: two admissions prefill whole in a budget of 6 (as the hand trace)."""


def recycled_images(draw: st.DrawFn, requests: tuple[RequestSpec, ...], token_budget: int
                    ) -> tuple[tuple[RequestSpec, ...], tuple[tuple[int, int, int, int], ...], int, int, int]:
    """The shape of vllm#52482 (half the encoder part's draws of four requests or more): prompts of at most
    3 tokens, each opening with an image of 2 positions, items 0, 1, 2, 0, 1, ... in request order, a cache of
    two images, a compute budget of two, a token budget of 6 or more.  Once r0's and r1's entries are
    freeable, a pass that admits r2 (item 2: evicts r0's entry) and r3 (item 0 again: evicts r1's) allocates
    again the entry it evicted (``encoder_evicted_reallocated``), which ``get_freed_mm_hashes`` must not send
    as freed.  Returns (requests, images, cache size, compute budget, token budget)."""
    length = IMAGE_LENGTHS[0]
    short = tuple(r._replace(prompt_len=min(r.prompt_len, RECYCLE_PROMPT)) for r in requests)
    chosen = tuple((req, 0, length, req % 3) for req, r in enumerate(short[:8]) if r.prompt_len >= length)
    budget = max(token_budget, 2 * RECYCLE_PROMPT)
    return short, chosen, 2 * length, 2 * length, budget


def encoder_categories(drawn: bool, max_depth: int = 2) -> list[str]:
    """The encoder coverage categories a profile reports (``max_depth`` 2) or can reach: none without
    images; a release under a step in flight needs depth 2 or more."""
    return [c for c in ENCODER_COVERAGE if drawn and (max_depth >= 2 or c != "encoder_released_in_flight")]


def encoder_unreachable(drawn: bool, max_depth: int) -> dict[str, str]:
    """The encoder witnesses a profile cannot reach, and why (``profiles.unreachable_witnesses``)."""
    out = {ev.ENCODER_MISS: ("finding V11's witness (docs/findings_vllm.md): the checker reaches it on "
                             "finding-encoder-undo-miss; a campaign compares vLLM's cache with the spec's instead")}
    if not drawn:
        return out | {name: "no images in this profile" for name in ENCODER_EVENTS}
    if max_depth < 2:
        out[ev.ENCODER_RELEASED_IN_FLIGHT] = "needs a step in flight behind the one scheduled (depth 2 or 3)"
    return out


MAMBA_COVERAGE: dict[str, tuple[str, ...]] = {
    "mamba_aligned_split": (ev.MAMBA_ALIGNED_SPLIT,),
    "mamba_state_freed_in_flight": (ev.MAMBA_STATE_FREED_IN_FLIGHT,),
}
"""Reported when the profile draws a Mamba group in "align" mode (``spec/mamba.py``): a prefill chunk
cut back to a block boundary, and a state block freed behind C - F while a step of its request is in
flight."""

MAMBA_EVENTS = (ev.MAMBA_ALIGNED_SPLIT, ev.MAMBA_SUB_BLOCK_CHUNK, ev.MAMBA_SPLIT_STOPS_PASS, ev.MAMBA_STATE_FREED,
                ev.MAMBA_STATE_FREED_IN_FLIGHT, ev.MAMBA_HIT_CUT)
"""The witnesses of Mamba groups."""


def mamba_categories(modes: tuple[str, ...], max_depth: int = 2) -> list[str]:
    """The Mamba coverage categories a profile reports (``max_depth`` 2) or can reach: none without
    "align"; a free under a step in flight needs depth 2 or more."""
    return [c for c in MAMBA_COVERAGE if "align" in modes and (max_depth >= 2 or c != "mamba_state_freed_in_flight")]


def mamba_unreachable(modes: tuple[str, ...], max_depth: int) -> dict[str, str]:
    """The Mamba witnesses a profile cannot reach, and why (``profiles.unreachable_witnesses``)."""
    if "align" not in modes:
        return {name: "no Mamba group in align mode in this profile" for name in MAMBA_EVENTS}
    if max_depth < 2:
        return {ev.MAMBA_STATE_FREED_IN_FLIGHT: "needs a step in flight behind the one scheduled (depth 2 or 3)"}
    return {}


StopEntry = tuple[int, int, int, int, int, int, int]


def stops(draw: st.DrawFn, requests: tuple[RequestSpec, ...], resumable: tuple[int, ...]
          ) -> tuple[tuple[RequestSpec, ...], tuple[StopEntry, ...]]:
    """(requests, stops): each plain request, three times in four, gets a ``stops`` entry
    (``core/stop_tokens.py``): EOS, a stop token or a pattern repeated from its ``eos_position``
    (redrawn then: a period of 1 to 4, ``min_count`` 2 or 3, pattern sizes around the period,
    the start early enough that the detector can match it within max_tokens most of the
    time), and, half the time, ``min_tokens``: for a repetition from where the detector matches to
    max_tokens (holding it back), else half or all of max_tokens."""
    out: list[StopEntry] = []
    drawn = list(requests)
    for i, r in enumerate(requests):
        if i in resumable or not draw(st.integers(0, 3)):
            continue
        kind = draw(st.sampled_from((2, 1, 0)))
        low = high = count = period = 0
        if kind == 2:
            period, count = draw(st.integers(1, 4)), draw(st.integers(2, 3))
            low = draw(st.sampled_from((0, period, 1, period + 1)))
            high = draw(st.sampled_from((period, 2 * period, max(low, 1), period + 1)))
            high = max(high, low, 1)
            first = -(-max(low, 1) // period) * period  # the length the detector matches (spec/stop.py)
            span = (first if first <= high else period) * count
            start = draw(st.integers(1, max(1, r.max_tokens - span)))
            drawn[i] = r._replace(eos_position=start)
            seen = min(start + span - 1, r.max_tokens)  # min_tokens past it holds the stop back
            min_tokens = draw(st.integers(seen, r.max_tokens)) if draw(st.booleans()) else 0
        else:
            min_tokens = draw(st.sampled_from((0, r.max_tokens // 2, r.max_tokens))) if draw(st.booleans()) else 0
        out.append((i, kind, min_tokens, low, high, count, period))
    return tuple(drawn), tuple(out)
