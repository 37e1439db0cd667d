"""The reachable state graph of a small config, drawn with graphviz, the trace's path marked.

Explored here from the trace's own initial state, on concrete states (no
symmetry reduction, so every node is a state the trace could pass through),
up to ``MAX_NODES``; a larger graph is not drawn (a picture of it would not
be read).  Needs graphviz's ``dot`` on the PATH; without it, no drawing.
"""
from __future__ import annotations

import shutil
import subprocess
from collections import deque

from asyncspec.spec import engine
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.engine import parse_action
from asyncspec.spec.state import EngineState, initial_state

MAX_NODES = 300
DOT_TIMEOUT_S = 20


def reachable(cfg: SpecConfig, start: EngineState) -> tuple[list[EngineState], list[tuple[int, int, str]]] | None:
    """States (BFS order) and edges ``(from, to, action)``; ``None`` past ``MAX_NODES``."""
    index = {start: 0}
    states, edges = [start], []
    queue = deque([start])
    while queue:
        s = queue.popleft()
        for t in engine.next_states(cfg, s):
            if t.state not in index:
                if len(states) >= MAX_NODES:
                    return None
                index[t.state] = len(states)
                states.append(t.state)
                queue.append(t.state)
            edges.append((index[s], index[t.state], str(t.action)))
    return states, edges


def dot_source(cfg: SpecConfig, eos: tuple[int, ...], actions: list[str]) -> str | None:
    """The DOT text, the trace's path in red; ``None`` when the graph is too large."""
    start = initial_state(cfg, eos)
    found = reachable(cfg, start)
    if found is None:
        return None
    states, edges = found
    index = {s: i for i, s in enumerate(states)}
    path, s = [0], start
    for text in actions:
        s, _ = engine.apply(cfg, s, parse_action(text))
        if s not in index:
            return None
        path.append(index[s])
    on_path = set(zip(path, path[1:]))
    lines = ["digraph states {", "  graph [rankdir=LR, bgcolor=transparent, nodesep=0.08, ranksep=0.25];",
             '  node [shape=point, width=0.08, color="#8890a0", label=""];', '  edge [color="#c0c4cc", arrowsize=0.3];']
    terminal = set(range(len(states))) - {src for src, _, _ in edges}
    for i in range(len(states)):
        attrs = [f'tooltip="state {i}"']
        if i == 0:
            attrs += ['shape=circle', 'width=0.15', 'color="#06c"']
        elif i == path[-1]:
            attrs += ['shape=doublecircle', 'width=0.15', 'color="#c22"']
        elif i in path:
            attrs += ['color="#c22"', 'width=0.11']
        elif i in terminal:
            attrs += ['color="#2a2"']
        lines.append(f"  n{i} [{', '.join(attrs)}];")
    for a, b, label in edges:
        style = ', color="#c22", penwidth=2.2' if (a, b) in on_path else ""
        lines.append(f'  n{a} -> n{b} [tooltip="{label}"{style}];')
    lines.append("}")
    return "\n".join(lines)


def graph_svg(cfg: SpecConfig, eos: tuple[int, ...], actions: list[str]) -> str | None:
    """Inline SVG of the state graph from EOS choice ``eos`` with the path of ``actions``, or ``None``."""
    dot = shutil.which("dot")
    if dot is None:
        return None
    source = dot_source(cfg, eos, actions)
    if source is None:
        return None
    done = subprocess.run([dot, "-Tsvg"], input=source, capture_output=True, text=True, timeout=DOT_TIMEOUT_S,
                          check=False)
    if done.returncode != 0:
        return None
    svg = done.stdout
    return svg[svg.find("<svg"):] if "<svg" in svg else None
