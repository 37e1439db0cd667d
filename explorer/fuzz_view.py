"""A fuzz divergence file (``statemachine_tests/core/replay_file.py``) as the explorer's view.

The spec side is re-run here, event by event, on the spec target (no engine
is needed); the target side is the spec's observation with the file's
differences put in at the diverging event: the fuzzer compares every field
after every event and stops at the first difference, so before it the two
agree.  A file this version cannot replay on the spec (another target's
event language, say) is shown from what it carries: its events, the
differences, and any per-event column, each rendered as it is.
"""
from __future__ import annotations

import json
from typing import Any

from asyncspec.statemachine_tests.core.harness import (
    ABORT, ADD_REQUEST, DELIVER, RESET_PREFIX_CACHE, SCHEDULE, Observation, Workload, parse_event,
    step_and_observe, workload_problem,
)
from asyncspec.statemachine_tests.scheduler.spec_target import SpecTarget

from asyncspec.explorer.spec_info import action_info

SPEC_ACTION = {ADD_REQUEST: "add_request", SCHEDULE: "schedule", DELIVER: "update_from_output",
               ABORT: "abort", RESET_PREFIX_CACHE: "reset_prefix_cache"}
"""The spec action each fuzz event runs (``statemachine_tests/scheduler/spec_target.py``)."""

KNOWN_KEYS = {"asyncspec_fuzz_replay", "target", "workload", "events", "divergence"}
"""What every fuzz replay file holds; any other key is shown as it is (per event where it can be)."""
LANE_FIELDS = {"status": "status", "N": "num_tokens", "C": "num_computed_tokens", "H": "num_output_placeholders",
               "F": "num_in_flight_tokens", "X": "num_stale_output_tokens", "blocks": "block_table"}


def text(value: Any) -> str:
    """A value as the page shows it (JSON for containers, never ``None``)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str)


def _lanes(flat: dict[str, Any], n: int) -> dict[str, dict[str, Any]]:
    lanes = {}
    for i in range(n):
        if f"r{i}.status" not in flat:
            lanes[f"r{i}"] = {"status": "-"}
            continue
        cell = {k: flat.get(f"r{i}.{f}", "") for k, f in LANE_FIELDS.items()}
        cell["blocks"] = " ".join(map(str, cell["blocks"])) if isinstance(cell["blocks"], (list, tuple)) else "-"
        lanes[f"r{i}"] = cell
    return lanes


def _engine(obs: Observation) -> dict[str, str]:
    return {"batch queue": f"{obs.num_in_flight_steps} step(s) in flight",
            "free blocks": " ".join(map(str, obs.free_blocks)) or "-",
            "waiting": " ".join(f"r{r}" for r in obs.waiting) or "-",
            "running": " ".join(f"r{r}" for r in obs.running) or "-"}


def _detail(obs: Observation) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if obs.scheduled:
        out["scheduled"] = [{"request": f"r{r}", "tokens": t, "samples": p or "chunk"} for r, t, p in obs.scheduled]
    if obs.payload:
        out["fed to the worker"] = [{"entry": text(p)} for p in obs.payload]
    if obs.delivered:
        out["delivered"] = [{"request": f"r{r}", "tokens": text(list(t))} for r, t in obs.delivered]
    return out


def _side(flat: dict[str, Any], diffs: dict[str, Any]) -> list[dict[str, Any]]:
    rows = [{"field": k, "spec": text(v), "target": text(diffs.get(k, v)), "differs": k in diffs}
            for k, v in flat.items()]
    rows += [{"field": k, "spec": "<absent>", "target": text(v), "differs": True} for k, v in diffs.items()
             if k not in flat]
    return sorted(rows, key=lambda r: not r["differs"])


def _differences(data: dict[str, Any], target: str) -> tuple[int, dict[str, Any], list[dict[str, str]]]:
    div = data.get("divergence") or {}
    if not isinstance(div, dict):
        return 0, {}, []
    diffs: dict[str, Any] = {}
    extras: list[dict[str, str]] = []
    for d in div.get("differences", []) or []:
        if isinstance(d, dict) and "field" in d:
            diffs[str(d["field"])] = d.get(target, d.get("target"))
            extras += [{"field": str(d["field"]), "key": k, "value": text(v)} for k, v in d.items()
                       if k not in ("field", "spec", target, "target")]
    return int(div.get("event", 0) or 0), diffs, extras


def per_event_columns(data: dict[str, Any], n_events: int) -> dict[str, dict[int, Any]]:
    """Unknown keys with one item per event, shown at their step: a list as long as the
    events, or an object keyed by event number (the ``vllm-engine`` worker column)."""
    out: dict[str, dict[int, Any]] = {}
    for k, v in data.items():
        if k in KNOWN_KEYS or not n_events:
            continue
        if isinstance(v, list) and len(v) == n_events:
            out[k] = dict(enumerate(v, start=1))
        elif isinstance(v, dict) and v and all(str(i).isdigit() and 1 <= int(i) <= n_events for i in v):
            out[k] = {int(i): item for i, item in v.items()}
    return out


def fuzz_view(data: dict[str, Any], title: str) -> dict[str, Any]:
    """The explorer's view of a fuzz replay file (``ValueError``, one line, if it is unusable)."""
    target = str(data.get("target", "target"))
    events = [str(e) for e in data.get("events", [])]
    at, diffs, diff_extras = _differences(data, target)
    columns = per_event_columns(data, len(events))
    extra = {k: text(v) for k, v in data.items() if k not in KNOWN_KEYS and k not in columns}
    if diff_extras:
        extra["differences (other keys)"] = text(diff_extras)
    try:
        w = Workload.from_json(data["workload"])
        parsed = [parse_event(e) for e in events]
    except (KeyError, TypeError, ValueError):
        w, parsed = None, []
    if w is not None and workload_problem(w) is None:
        steps, requests = _spec_steps(spec_oracle(w, data.get("case")), parsed, at, diffs), len(w.requests)
    else:
        steps, requests = _plain_steps(events, at, diffs), _request_count(data, diffs)
    for name, values in columns.items():
        for step in steps:
            if step["index"] in values:
                value = values[step["index"]]
                step["detail"][name] = value if isinstance(value, list) else [{"value": text(value)}]
    return {"kind": "fuzz", "title": title, "target": target,
            "config": {"name": f"fuzz: spec vs {target}", "description": text(data.get("workload", {}))},
            "requests": [{"name": f"r{i}", "params": _params(w, i)} for i in range(requests)],
            "counters": ["N", "C", "H", "F", "X"], "steps": steps, "loop_start": None,
            "violated": {"name": f"spec = {target}", "kind": "divergence", "step": (at or len(steps)) - 1,
                         "why": "the engine under test and the spec differ after this event",
                         "message": ", ".join(sorted(diffs)) or "(no differences recorded)",
                         "source": "", "cites": []},
            "side": {"target": target}, "extra": extra}


def _params(w: Workload | None, i: int) -> str:
    if w is None or i >= len(w.requests):
        return ""
    r = w.requests[i]
    return f"P={r.prompt_len} M={r.max_tokens} eos={r.eos_position or 'never'}"


def spec_oracle(w: Workload, case: Any) -> SpecTarget:
    """The spec side as the fuzzer built it: a ``vllm-engine`` file's case gives the real token
    ids (prompts, and the oracle model's streams), so the spec's tokens and payload match."""
    if not isinstance(case, dict):
        return SpecTarget(w)
    from asyncspec.statemachine_tests.vllm_engine.engine_case import EngineCase

    try:
        c = EngineCase.from_json(case)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"the file's 'case' is unreadable: {exc}") from exc
    return SpecTarget(w, prompt_of=lambda req: c.requests[req].prompt,
                      token_of=lambda req, k: c.requests[req].stream[k - 1])


def _spec_steps(oracle: SpecTarget, events: list[Any], at: int, diffs: dict[str, Any]) -> list[dict[str, Any]]:
    w = oracle.workload
    steps: list[dict[str, Any]] = []
    for k, event in enumerate(events, start=1):
        if event not in oracle.enabled():
            raise ValueError(f"event {k} '{event}' is not enabled in the spec: the file does not replay")
        obs = step_and_observe(oracle, w, event)
        flat = obs.flat()
        steps.append({"index": k, "action": str(event), "events": sorted(oracle.last_events()),
                      "lanes": _lanes(flat, len(w.requests)), "engine": _engine(obs), "detail": _detail(obs),
                      "spec": action_info(SPEC_ACTION.get(event.kind, event.kind)),
                      "side": _side(flat, diffs if k == at else {})})
    if 0 < at <= len(steps):
        for name in diffs:  # the lanes of the requests whose fields differ, marked at the divergence
            lane = steps[at - 1]["lanes"].get(name.split(".")[0])
            if lane is not None:
                lane.setdefault("differs", []).append(name)
    return steps


def _plain_steps(events: list[str], at: int, diffs: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"index": k, "action": e, "events": [], "lanes": {}, "engine": {}, "detail": {},
             "spec": action_info(SPEC_ACTION.get(e.split()[0] if e.split() else "", "")),
             "side": [{"field": f, "spec": "(not replayed)", "target": text(v), "differs": True}
                      for f, v in diffs.items()] if k == at else []}
            for k, e in enumerate(events, start=1)]


def _request_count(data: dict[str, Any], diffs: dict[str, Any]) -> int:
    workload = data.get("workload")
    reqs = workload.get("requests") if isinstance(workload, dict) else None
    if isinstance(reqs, list):
        return len(reqs)
    named = [int(f[1:].split(".")[0]) for f in diffs if f.startswith("r") and f[1:].split(".")[0].isdigit()]
    return max(named, default=-1) + 1
