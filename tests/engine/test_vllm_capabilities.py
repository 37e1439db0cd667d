"""The capability probe (engine/vllm/capabilities.py, surfaces.py) and the driven vLLM's identity.

Stand-in classes that lack each kind of surface give one line naming the missing
piece and the right capability absent; the installed vLLM (0.33.0, the reference)
has every capability; the probe's surfaces cover every vLLM name the drivers
import or call (fidelity/cited.py), so a new call cannot bypass the probe.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from asyncspec.engine.vllm import surfaces
from asyncspec.engine.vllm.capabilities import (
    Attr, Behaviour, Capabilities, Exists, Field, MissingCapability, Param, Surface, probe,
)
from asyncspec.engine.vllm.vllm_identity import (
    METADATA, PKG_INFO, PYPROJECT, UNKNOWN, VERSION_FILE, driven_vllm, in_supported_range,
)


# ---------------------------------------------------------------- stand-ins


class NewScheduler:
    """Has what the probe asks of a scheduler: a keyword, a class attribute, an assigned attribute."""

    policy_name = "fcfs"

    def __init__(self, vllm_config: Any, block_size: int, **unused: Any) -> None:
        """Assigns the queue the probe looks for."""
        self.kv_holding_waiting: list[Any] = []


class OldScheduler:
    """Lacks the keyword ``block_size`` and the attribute ``kv_holding_waiting``."""

    def __init__(self, vllm_config: Any) -> None:
        """Assigns only ``waiting`` (``self.kv_holding_waiting_count`` must not count)."""
        self.waiting: list[Any] = []
        self.kv_holding_waiting_count = 0


@dataclasses.dataclass
class NewSchedulerConfig:
    """A config class with an init-only field and the adaptive flag."""

    max_model_len: dataclasses.InitVar[int]
    long_prefill_token_threshold_adaptive: bool = False


@dataclasses.dataclass
class OldSchedulerConfig:
    """A config class without the adaptive flag."""

    max_model_len: dataclasses.InitVar[int]


def names(**objects: Any) -> Any:
    """A resolver over ``m.<name>`` stand-ins."""
    table = {f"m.{key}": value for key, value in objects.items()}
    return table.get


STAND_IN_SURFACES: list[Surface] = [
    Exists("core", "m.Scheduler"),
    Param("core", "m.Scheduler", "vllm_config"),
    Param("block-size", "m.Scheduler", "block_size"),
    Attr("kv-holding", "m.Scheduler", "kv_holding_waiting"),
    Field("adaptive", "m.SchedulerConfig", "long_prefill_token_threshold_adaptive"),
    Field("core", "m.SchedulerConfig", "max_model_len"),
    Exists("grammar", "m.Grammar"),
]


def test_a_complete_stand_in_has_every_capability() -> None:
    caps = probe(STAND_IN_SURFACES, names(Scheduler=NewScheduler, SchedulerConfig=NewSchedulerConfig,
                                          Grammar=object))
    assert caps.names() == ["adaptive", "block-size", "core", "grammar", "kv-holding"] and caps.missing == {}


def test_each_missing_piece_gives_its_line_and_only_its_capability_absent() -> None:
    caps = probe(STAND_IN_SURFACES, names(Scheduler=OldScheduler, SchedulerConfig=OldSchedulerConfig))
    assert caps.present == frozenset({"core"})
    assert caps.missing == {
        "block-size": "m.Scheduler takes no keyword argument block_size",
        "kv-holding": "m.Scheduler has no attribute kv_holding_waiting",
        "adaptive": "m.SchedulerConfig has no field long_prefill_token_threshold_adaptive",
        "grammar": "m.Grammar does not exist",
    }
    assert all("\n" not in line for line in caps.lines())


def test_var_keyword_accepts_any_keyword_and_a_class_attribute_counts() -> None:
    caps = probe([Param("k", "m.S", "anything"), Attr("a", "m.S", "policy_name")], names(S=NewScheduler))
    assert caps.names() == ["a", "k"]


def test_a_named_keyword_is_not_satisfied_by_var_keyword_alone() -> None:
    class OldRunner:
        def load_model(self, load_dummy_weights: bool = False, *args: Any, **kwargs: Any) -> None: ...

    class NewRunner:
        def load_model(self, load_dummy_weights: bool = False, *args: Any, model: Any = None,
                       **kwargs: Any) -> None: ...

    surface = [Param("mrv2", "m.R.load_model", "model", named=True)]
    assert probe(surface, names(**{"R.load_model": NewRunner.load_model})).names() == ["mrv2"]
    assert probe(surface, names(**{"R.load_model": OldRunner.load_model})).missing == {
        "mrv2": "m.R.load_model takes no keyword argument model (only **kwargs, which ignore it)"}


def test_only_the_first_missing_piece_of_a_capability_is_reported() -> None:
    caps = probe([Param("c", "m.S", "block_size"), Attr("c", "m.S", "kv_holding_waiting")], names(S=OldScheduler))
    assert caps.missing == {"c": "m.S takes no keyword argument block_size"}


def test_a_behaviour_surface_reports_its_own_line() -> None:
    refuses = Behaviour("mrv2", "m.Config", test=lambda cls: f"{cls.__name__} requires Triton")
    accepts = Behaviour("v1", "m.Config", test=lambda cls: None)
    caps = probe([refuses, accepts], names(Config=NewSchedulerConfig))
    assert caps.names() == ["v1"] and caps.missing == {"mrv2": "NewSchedulerConfig requires Triton"}


def test_require_raises_one_typed_exception_naming_capability_and_piece() -> None:
    caps = Capabilities(frozenset({"core"}), {"adaptive": "m.C has no field x"})
    caps.require("core")
    with pytest.raises(MissingCapability) as info:
        caps.require("core", "adaptive")
    assert (info.value.capability, info.value.reason) == ("adaptive", "m.C has no field x")
    assert str(info.value) == "adaptive: m.C has no field x"
    with pytest.raises(MissingCapability, match="never-probed: not probed"):
        caps.require("never-probed")


def test_the_real_mrv2_validator_check_reads_the_validator_source() -> None:
    """0.31.0/0.32.0's shape: a validator that tests HAS_TRITON; 0.33.0's: one that does not."""
    class Old:
        def _validate_v2_model_runner(self) -> None:
            HAS_TRITON = False
            if not HAS_TRITON:
                raise ValueError("Model Runner V2 requires Triton.")

    class New:
        def _validate_v2_model_runner(self) -> None:
            pass

    check = surfaces._mrv2_validator_without_triton
    assert check(New) is None and check(object) is None
    from asyncspec.engine.vllm.vllm_environment import prepare_environment

    prepare_environment()  # before vLLM is first imported, or its platform is detected without the CPU setting
    pytest.importorskip("vllm")
    from vllm.triton_utils import HAS_TRITON

    problem = check(Old)
    assert (problem is None) == bool(HAS_TRITON)
    if problem is not None:
        assert "_validate_v2_model_runner requires Triton" in problem and "\n" not in problem


# ---------------------------------------------------------------- the drivers' use of it


def _without(capability: str, reason: str = "m.X has no field y") -> Capabilities:
    """The installed probe's answer less ``capability``."""
    real = surfaces.installed_capabilities()
    return Capabilities(real.present - {capability}, {**real.missing, capability: reason})


def test_the_config_builder_leaves_out_a_field_the_release_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("vllm")
    from asyncspec.engine.vllm import vllm_config
    from asyncspec.engine.vllm.vllm_config import DriverConfig

    default = DriverConfig()
    assert vllm_config._optional_scheduler_fields(default) == {
        "policy": "fcfs", "long_prefill_token_threshold_adaptive": False}
    reduced = _without(surfaces.LONG_PREFILL_ADAPTIVE)
    monkeypatch.setattr(surfaces, "probed", lambda name: reduced)
    assert vllm_config._optional_scheduler_fields(default) == {"policy": "fcfs"}
    assert surfaces.LONG_PREFILL_ADAPTIVE not in vllm_config.needed_capabilities(default)
    adaptive = DriverConfig(long_prefill_token_threshold=8, long_prefill_adaptive=True)
    with pytest.raises(MissingCapability) as info:
        vllm_config.configs_for(adaptive)
    assert info.value.capability == surfaces.LONG_PREFILL_ADAPTIVE


@pytest.mark.parametrize(("field", "value", "capability"), [
    ("mrv2_pp", True, surfaces.MRV2_CONFIG), ("kv_connector", True, surfaces.KV_HOLDING_WAITING),
    ("num_speculative_tokens", 2, surfaces.SPEC_DECODE), ("sliding_window", 32, surfaces.SLIDING_WINDOW),
    ("policy", "priority", surfaces.PRIORITY),
])
def test_a_driver_config_needs_the_capability_of_each_feature(field: str, value: Any, capability: str) -> None:
    from asyncspec.engine.vllm.vllm_config import DriverConfig, needed_capabilities

    assert capability not in needed_capabilities(DriverConfig())
    assert capability in needed_capabilities(dataclasses.replace(DriverConfig(), **{field: value}))


def test_the_engine_config_needs_its_runner_and_drafter() -> None:
    from asyncspec.engine.vllm.engine_config import EngineDriverConfig, needed_engine_capabilities

    assert set(needed_engine_capabilities(EngineDriverConfig())) == {
        surfaces.SCHEDULER, surfaces.ENGINE_CORE, surfaces.V1_RUNNER}
    mrv2 = needed_engine_capabilities(EngineDriverConfig(runner="mrv2", num_speculative_tokens=2))
    assert {surfaces.MRV2_RUNNER, surfaces.MRV2_CONFIG, surfaces.ENGINE_SPEC_DECODE} <= set(mrv2)
    assert surfaces.V1_RUNNER not in mrv2


def test_an_engine_is_refused_before_it_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("vllm")
    from asyncspec.engine.vllm.engine_config import EngineDriverConfig, build_engine_config

    reduced = _without(surfaces.ENGINE_CORE, "vllm.v1.engine.core.EngineCore has no attribute x")
    monkeypatch.setattr(surfaces, "probed", lambda name: reduced)
    with pytest.raises(MissingCapability, match="^engine-core: vllm.v1.engine.core.EngineCore has no attribute x$"):
        build_engine_config(EngineDriverConfig(), object)


# ---------------------------------------------------------------- the installed vLLM


def test_the_installed_reference_release_has_every_capability() -> None:
    pytest.importorskip("vllm")
    if driven_vllm().version != "0.33.0":
        pytest.skip(f"the reference probe needs vllm 0.33.0, found {driven_vllm().describe()}")
    caps = surfaces.installed_capabilities()
    assert caps.lines() == [] and caps.names() == sorted(surfaces.CAPABILITIES)


def test_an_unknown_capability_name_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="no capability named 'scheduler.typo'"):
        surfaces.require("scheduler.typo")


def test_the_report_names_version_path_and_capabilities() -> None:
    pytest.importorskip("vllm")
    report = surfaces.vllm_report()
    assert report["version"] == driven_vllm().version and report["path"] == driven_vllm().path
    assert report["capabilities"] == surfaces.installed_capabilities().names()
    assert set(report["capabilities"]) | set(report["missing"]) == set(surfaces.CAPABILITIES)


def test_every_surface_names_a_real_vllm_path_of_the_reference() -> None:
    """A misspelt surface would be reported missing on every release: none is, on 0.33.0."""
    pytest.importorskip("vllm")
    from asyncspec.engine.vllm.capabilities import missing_piece
    from asyncspec.engine.vllm.vllm_environment import load_vllm, resolve_dotted

    load_vllm()
    if driven_vllm().version == "0.33.0":
        assert [s for s in surfaces.SURFACES if missing_piece(s, resolve_dotted) is not None] == []


ATTEMPTS = ("engine/vllm/feature_attempts", "engine/vllm/cpu_limit_attempts")
"""Issue 28's attempts (``feature_attempts*.py``) and issue 27's CPU-limit attempts (``cpu_limit_attempts.py``)
drive no fuzz target: a name they miss fails their own
tests (tests/engine/test_feature_attempts.py), not a campaign, so the probe need not cover them."""


def _attempts_only(symbol: str, dependents: dict[str, set[str]]) -> bool:
    """Whether only the attempts (or tests) name ``symbol``, or the class it is a member of: a method
    is matched by its name wherever it is called, so a class the attempts alone import would bring
    every same-named call of the drivers with it."""
    owner = symbol.rsplit(".", 1)[0]
    for name in (symbol, owner):
        who = dependents.get(name)
        if who and all(w.startswith((*ATTEMPTS, "tests/")) for w in who):
            return True
    return False


def test_the_probe_covers_every_vllm_name_the_drivers_touch() -> None:
    """fidelity/cited.py's reading of engine/vllm/*.py, and the engine stubs' TOUCHED list."""
    pytest.importorskip("vllm")
    from asyncspec.engine.vllm.runner_stubs import TOUCHED
    from asyncspec.fidelity.cited import project_dependents
    from asyncspec.fidelity.source import VllmSource

    cited = {s.cited() for s in surfaces.SURFACES}
    dependents = project_dependents(VllmSource.installed())
    touched = {symbol for symbol, who in dependents.items()
               if any(w.startswith("engine/vllm/") for w in who) and not _attempts_only(symbol, dependents)}
    touched |= set(TOUCHED)
    assert len(touched) > 80
    uncovered = sorted(t for t in touched if t not in cited and t.removesuffix(".__init__") not in cited)
    assert uncovered == [], "add a surface to engine/vllm/surfaces.py for each"


# ---------------------------------------------------------------- which vLLM is driven


def test_the_installed_release_is_read_from_its_metadata() -> None:
    pytest.importorskip("vllm")
    found = driven_vllm()
    assert found.source == METADATA and found.path is not None and Path(found.path).name == "vllm"
    assert found.describe() == f"vllm {found.version} at {found.path}"


@pytest.mark.parametrize(("files", "version", "source"), [
    ({"vllm/_version.py": "__version__ = version = '0.34.0.dev3+gabc'\n", "PKG-INFO": "Version: 1\n"},
     "0.34.0.dev3+gabc", VERSION_FILE),
    ({"PKG-INFO": "Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0\n"}, "0.32.0", PKG_INFO),
    ({"pyproject.toml": "[project]\nname = 'vllm'\nversion = '0.31.0'\n"}, "0.31.0", PYPROJECT),
    ({"pyproject.toml": "[project]\nname = 'vllm'\ndynamic = ['version']\n"}, None, UNKNOWN),
])
def test_an_unbuilt_checkout_names_its_version_and_where_it_came_from(
        tmp_path: Path, files: dict[str, str], version: str | None, source: str) -> None:
    (tmp_path / "vllm").mkdir()
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    found = driven_vllm(tmp_path / "vllm")
    assert (found.version, found.source, found.path) == (version, source, str((tmp_path / "vllm").resolve()))
    assert f"(version from {source}: a source checkout)" in found.describe()
    assert found.as_json()["version_source"] == source


def test_a_checkout_first_on_the_path_is_the_one_named(tmp_path: Path) -> None:
    """``PYTHONPATH=<checkout>`` over an installed release: the checkout's version, not the metadata's."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    (tmp_path / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.31.0\n")
    code = ("import json; from asyncspec.engine.vllm.vllm_identity import driven_vllm; "
            "print(json.dumps(driven_vllm().as_json()))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert json.loads(done.stdout) == {"version": "0.31.0", "path": str((tmp_path / "vllm").resolve()),
                                       "version_source": PKG_INFO}, done.stderr


def test_the_supported_range() -> None:
    assert [in_supported_range(v) for v in ("0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.33.0rc1")] == [True] * 5
    assert [in_supported_range(v) for v in ("0.29.9", "0.33.1", "0.34.0.dev1", "1.0.0", "junk")] == [False] * 5
