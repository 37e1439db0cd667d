"""The architecture as a test: no import cycle, no import against the reading order, small modules.

Rule in one sentence: a module of the package imports only modules of its own
layer or of a layer listed before it in ARCHITECTURE.md's "Layers", and no
chain of imports of any length (function-local and ``TYPE_CHECKING`` imports
included) returns to its start.
"""
from __future__ import annotations

from tests.layering import (
    LAYERS,
    ROOT,
    documented_layers,
    find_cycle,
    import_graph,
    layer_of,
    long_modules,
    module_files,
    upward_imports,
)

ALLOWED_UPWARD: dict[tuple[str, str], str] = {}
"""Imports against the layer order that are accepted, each with its reason (none today)."""


def test_the_graph_is_read_from_every_module() -> None:
    files = module_files()
    assert "asyncspec.spec.engine" in files and "asyncspec.engine.torch.torch_oracle" in files
    graph = import_graph()
    # function-local imports count: the CLI imports the fuzz entry points inside a command
    assert "asyncspec.statemachine_tests.scheduler.fuzz" in graph["asyncspec.cli.fuzz_command"]
    assert "asyncspec.spec.request" in graph["asyncspec.spec.scheduler"]


def test_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_import_against_the_layer_order() -> None:
    assert upward_imports(import_graph(), ALLOWED_UPWARD) == []


def test_allowed_exceptions_are_still_needed() -> None:
    graph = import_graph()
    stale = [pair for pair in ALLOWED_UPWARD if pair[1] not in graph.get(pair[0], ())]
    assert stale == [], f"remove these from ALLOWED_UPWARD: {stale}"


def test_architecture_md_lists_the_layers_in_this_order() -> None:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    assert documented_layers(text) == [folder for folder, _ in LAYERS]


def test_no_module_over_the_size_limit() -> None:
    assert long_modules() == []


# ------------------------------------------------------- the rule on synthetic graphs


def test_a_reintroduced_two_module_cycle_is_found() -> None:
    graph = {"asyncspec.checker.bfs": {"asyncspec.checker.graph"},
             "asyncspec.checker.graph": {"asyncspec.checker.bfs"}}
    assert find_cycle(graph) == ["asyncspec.checker.bfs", "asyncspec.checker.graph", "asyncspec.checker.bfs"]


def test_a_long_cycle_is_found_and_an_acyclic_diamond_is_not() -> None:
    long = {"a": {"b"}, "b": {"c"}, "c": {"d"}, "d": {"b"}}
    assert find_cycle(long) == ["b", "c", "d", "b"]
    diamond = {"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}
    assert find_cycle(diamond) is None


def test_an_upward_import_is_reported_unless_allowed() -> None:
    graph = {"asyncspec.spec.engine": {"asyncspec.checker.bfs"}, "asyncspec.checker.bfs": set()}
    assert len(upward_imports(graph, {})) == 1
    assert "spec/" in upward_imports(graph, {})[0]
    reason = {("asyncspec.spec.engine", "asyncspec.checker.bfs"): "synthetic"}
    assert upward_imports(graph, reason) == []


def test_layer_of_uses_the_longest_prefix() -> None:
    order = [folder for folder, _ in LAYERS]
    assert layer_of("asyncspec.engine.vllm.vllm_config") == order.index("engine/vllm")
    assert layer_of("asyncspec.engine.torch.model") == order.index("engine/torch")
    assert layer_of("asyncspec.cli.main") == order.index("cli")
    assert layer_of("asyncspec.statemachine_tests.scheduler.fuzz") > layer_of("asyncspec.engine.torch.torch_oracle")
