"""``asyncspec drift``: fingerprints by AST, changed / moved / disappeared, exit codes, JSON."""
from __future__ import annotations

import doctest
import io
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from asyncspec.fidelity import drift as drift_module
from asyncspec.fidelity import fingerprint, source
from asyncspec.fidelity.cited import static_references, touched_symbols
from asyncspec.fidelity.drift import compare
from asyncspec.fidelity.fingerprint import locate
from asyncspec.fidelity.source import SourceError, VllmSource
from asyncspec.spec.cites import NEURON_RUNNER, StaticReference
from tests.conftest import cli_json, run_cli

BASE = {
    "vllm/__init__.py": "",
    "vllm/core/__init__.py": "from .sched import Scheduler\n",
    "vllm/core/sched.py": (
        "class Scheduler:\n"
        "    def schedule(self):\n"
        "        return self.plan(1)  # plan one step\n"
        "    def _preempt_request(self, r):\n"
        "        r.num_computed_tokens = 0\n"
        "    def reset_prefix_cache(self):\n"
        "        return True\n"
    ),
}


def _other(**changes: str) -> dict[str, str]:
    files = dict(BASE)
    files.update({k.replace("__", "/") + ".py": v for k, v in changes.items()})
    return files


DEPS = {"vllm.core.sched.Scheduler.schedule": {"spec scheduler.schedule"},
        "vllm.core.sched.Scheduler._preempt_request": {"spec request.preempt"},
        "vllm.core.sched.Scheduler.reset_prefix_cache": {"spec engine.reset_prefix_cache"}}


def test_doctests() -> None:
    for module in (source, fingerprint, drift_module):
        assert doctest.testmod(module).failed == 0


def test_formatting_comments_and_docstrings_do_not_count() -> None:
    reformatted = BASE["vllm/core/sched.py"].replace(
        "        return self.plan(1)  # plan one step\n",
        '        """Plan."""\n\n        return (self.plan(\n            1))\n')
    other = VllmSource.from_files("2", _other(vllm__core__sched=reformatted))
    assert compare(VllmSource.from_files("1", BASE), other, DEPS) == []


def test_changed_moved_and_disappeared() -> None:
    sched = BASE["vllm/core/sched.py"]
    sched = sched.replace("return self.plan(1)", "return self.plan(2)")
    sched = sched.replace("    def _preempt_request(self, r):\n        r.num_computed_tokens = 0\n", "")
    sched = sched.replace("    def reset_prefix_cache(self):\n        return True\n", "")
    moved = "class Scheduler:\n    def _preempt_request(self, r):\n        r.num_computed_tokens = 0\n"
    other = VllmSource.from_files("2", {**BASE, "vllm/core/sched.py": sched, "vllm/core/preempt.py": moved})
    items = compare(VllmSource.from_files("1", BASE), other, DEPS)
    assert [(i.symbol.rsplit(".", 1)[-1], i.status, i.moved_to, i.cited_by) for i in items] == [
        ("_preempt_request", "moved", "vllm.core.preempt.Scheduler._preempt_request", ("spec request.preempt",)),
        ("reset_prefix_cache", "disappeared", None, ("spec engine.reset_prefix_cache",)),
        ("schedule", "changed", None, ("spec scheduler.schedule",)),
    ]


def test_static_references_are_listed_apart_and_never_count() -> None:
    refs = (StaticReference("worker_neuron._swap", NEURON_RUNNER, ("NeuronModelRunner._maybe_swap_async_input_ids",)),)
    same = VllmSource.from_files("1", BASE)
    report = drift_module.drift(same, same, DEPS, refs)
    assert report.items == [] and report.to_json()["static_references"] == [{
        "spec": "worker_neuron._swap", "repo": "vllm-project/vllm-neuron",
        "commit": "9fc042eaa7e50fbfda292b75c980bf56a9a0e8b6",
        "file": "vllm_neuron/vllm/worker/neuron_model_runner.py",
        "symbols": ["NeuronModelRunner._maybe_swap_async_input_ids"]}]
    text = drift_module.render(report)
    assert "0 of 3 depended-on symbols drifted" in text and "not compared (static, vllm-project/vllm-neuron@9fc042e" in text
    assert "worker_neuron._swap: NeuronModelRunner._maybe_swap_async_input_ids" in text


def test_a_reexport_is_followed_to_its_definition() -> None:
    src = VllmSource.from_files("1", BASE)
    found = locate(src, "vllm.core.Scheduler.schedule")
    assert found is not None and found.module == "vllm.core.sched"


def test_driver_touches_imported_classes_and_the_methods_it_calls() -> None:
    driver = "from vllm.core.sched import Scheduler\ns = Scheduler()\ns.schedule()\n"
    touched = touched_symbols(VllmSource.from_files("1", BASE), driver)
    assert touched == {"vllm.core.sched.Scheduler", "vllm.core.sched.Scheduler.schedule"}


def _wheel(path: Path, files: dict[str, str], version: str) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr(f"vllm-{version}.dist-info/METADATA", f"Name: vllm\nVersion: {version}\n")
    return path


def _sdist(path: Path, files: dict[str, str], version: str) -> Path:
    with tarfile.open(path, "w:gz") as t:
        for name, text in {**files, "PKG-INFO": f"Version: {version}\n"}.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-{version}/{name}")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def test_wheel_sdist_and_folder_read_the_same(tmp_path: Path) -> None:
    for name, text in BASE.items():
        (tmp_path / "tree" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "tree" / name).write_text(text)
    sources = [VllmSource.open(_wheel(tmp_path / "v.whl", BASE, "9.1")),
               VllmSource.open(_sdist(tmp_path / "v.tar.gz", BASE, "9.1")),
               VllmSource.open(tmp_path / "tree")]
    assert [s.version for s in sources[:2]] == ["9.1", "9.1"]
    prints = {loc.fingerprint for s in sources if (loc := locate(s, "vllm.core.sched.Scheduler.schedule"))}
    assert len(prints) == 1


@pytest.mark.parametrize("make", [
    lambda p: p / "missing.whl",
    lambda p: (p / "x.txt", (p / "x.txt").write_text("no"))[0],
    lambda p: (p / "bad.whl", (p / "bad.whl").write_text("not a zip"))[0],
    lambda p: p,
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, make) -> None:  # type: ignore[no-untyped-def]
    p = run_cli("drift", str(make(tmp_path)))
    assert p.returncode == 2 and p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    with pytest.raises(SourceError):
        VllmSource.open(make(tmp_path))


def _installed_or_skip() -> VllmSource:
    try:
        return VllmSource.installed()
    except SourceError as exc:
        pytest.skip(str(exc))


def test_the_installed_vllm_against_itself_reports_nothing() -> None:
    installed = _installed_or_skip()
    folder = next(iter(installed.paths.values()))
    while folder.name != "vllm":
        folder = folder.parent
    code, data = cli_json("drift", str(folder.parent))
    assert code == 0 and data["items"] == [] and data["base"].startswith(installed.version)
    static = data["static_references"]  # vllm-neuron: listed apart, never compared
    assert static and {r["repo"] for r in static} == {"vllm-project/vllm-neuron"}
    assert [r["spec"] for r in static] == [r.spec for r in static_references()]


def test_json_lists_a_changed_function_with_who_cites_it(tmp_path: Path) -> None:
    installed = _installed_or_skip()
    module = "vllm/v1/core/sched/scheduler.py"
    text = installed.module_text("vllm.v1.core.sched.scheduler") or ""
    changed = text.replace("request.num_computed_tokens = 0\n", "request.num_computed_tokens = 1\n", 1)
    assert changed != text
    other = _wheel(tmp_path / "vllm-0.0.1-py3-none-any.whl", {"vllm/__init__.py": "", module: changed}, "0.0.1")
    code, data = cli_json("drift", str(other))
    assert code == 1 and data["other"].startswith("0.0.1")
    assert set(data) == {"schema_version", "base", "other", "items", "static_references"}
    by_symbol = {i["symbol"]: i for i in data["items"]}
    preempt = by_symbol["vllm.v1.core.sched.scheduler.Scheduler._preempt_request"]
    assert preempt["status"] == "changed" and "spec request.preempt" in preempt["cited_by"]
    gone = by_symbol["vllm.v1.core.kv_cache_manager.KVCacheManager.allocate_slots"]
    assert gone["status"] == "disappeared"
    runner = by_symbol["vllm.v1.worker.gpu_model_runner.GPUModelRunner._prepare_input_ids"]  # the worker half
    assert runner["status"] == "disappeared" and "property W1_feed_is_last_sampled" in runner["cited_by"]
    assert not [s for s in by_symbol if "neuron" in s.lower()]  # static references are never drift


@pytest.mark.slow
def test_vllm_0_32_0_against_the_installed_0_33_0(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The real release before the pin (a ~330 MB wheel from the package registry)."""
    _installed_or_skip()
    folder = tmp_path_factory.mktemp("vllm-0.32.0")
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "vllm==0.32.0", "-d", str(folder)],
                   check=True, capture_output=True, timeout=1800)
    wheel = next(folder.glob("vllm-0.32.0-*.whl"))
    code, data = cli_json("drift", str(wheel))
    assert code == 1 and data["other"].startswith("0.32.0")
    by_symbol = {i["symbol"]: i for i in data["items"]}
    schedule = by_symbol["vllm.v1.core.sched.scheduler.Scheduler.schedule"]
    assert schedule["status"] == "changed" and "spec scheduler.schedule" in schedule["cited_by"]
    assert "vllm.v1.core.sched.scheduler.Scheduler.add_request" not in by_symbol  # unchanged
    assert run_cli("drift", str(wheel)).stdout.startswith("vLLM drift: base 0.33.0")
