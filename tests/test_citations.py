"""Citations as data: every spec action and property names the vLLM function it models,
each cited function exists in the installed vLLM, docs/spec.md's table is generated from
them, and every file path the docs and comments cite exists."""
from __future__ import annotations

import doctest
import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from asyncspec.fidelity import citation_table
from asyncspec.fidelity.cited import repo_root, spec_citations
from asyncspec.fidelity.fingerprint import locate
from asyncspec.fidelity.source import SourceError, VllmSource
from asyncspec.spec import cites, engine, output, properties, scheduler
from asyncspec.spec import request as rq

ROOT = repo_root()


def test_every_engine_action_and_property_names_a_vllm_function() -> None:
    actions = [scheduler.schedule, output.update_from_output, engine.abort, engine.add_request,
               engine.reset_prefix_cache, engine.at_call_boundary, scheduler.preempt_request]
    missing = [f.__qualname__ for f in actions if not getattr(f, "__vllm_models__", ())]
    missing += [p.name for p in properties.ALL_ALWAYS.values() if not getattr(p.check, "__vllm_models__", ())]
    missing += [e.name for e in properties.EVENTUALLY if not e.models]
    assert not missing


def test_every_counter_transition_names_a_vllm_function() -> None:
    transitions = [rq.admit, rq.after_schedule, rq.preempt, rq.drain_in_flight, rq.reject_drafts,
                   rq.deliver_tokens, rq.finish, rq.tick_decode_wait, rq.max_tokens_guard, rq.first_stop]
    assert [f.__name__ for f in transitions if not getattr(f, "__vllm_models__", ())] == []


def test_models_rejects_a_path_outside_vllm() -> None:
    with pytest.raises(ValueError, match="dotted vLLM paths"):
        cites.models("Scheduler.schedule")


def test_cites_doctest() -> None:
    assert doctest.testmod(cites).failed == 0


def test_every_cited_function_exists_in_the_installed_vllm() -> None:
    try:
        installed = VllmSource.installed()
    except SourceError as exc:
        pytest.skip(str(exc))
    cited = spec_citations()
    assert len(cited) > 30
    assert sorted(path for path in cited if locate(installed, path) is None) == []


def test_docs_citation_table_is_generated_from_the_records() -> None:
    text = citation_table.docs_path().read_text(encoding="utf-8")
    expected = citation_table.replace_table(text, citation_table.render_table())
    assert text == expected, "run: python -m asyncspec.fidelity.citation_table"


# ---------------------------------------------------------------- cited paths

FOLDERS = ("spec", "configs", "checker", "proofs", "reference", "engine", "statemachine_tests", "cli", "asyncspec",
           "tests", "docs", "bench", "fidelity")
PATH = re.compile(rf"(?<![\w/.\-])((?:{'|'.join(FOLDERS)}|vllm)/[\w./\-]*\w)(?![\w*{{])")
EXTENSIONS = (".py", ".md", ".toml", ".json", ".txt", ".yml", ".yaml", ".sh")


def cited_paths(text: str) -> list[str]:
    """File paths a text cites: ``folder/...ext`` or ``folder/module.attribute``; doctest
    code lines, globs and elisions are not citations."""
    out = []
    for line in text.splitlines():
        if line.lstrip().startswith((">>>", "...")):
            continue
        for m in PATH.finditer(line):
            token = m.group(1)
            if "..." not in token and "." in token.rsplit("/", 1)[-1]:
                out.append(token)
    return out


def path_exists(token: str, vllm_root: Path | None) -> bool:
    """``token`` names a file (or ``file.attribute``) of this repository, or of vLLM."""
    base = vllm_root if token.startswith("vllm/") else ROOT
    if base is None:
        return True  # vLLM not installed: its paths cannot be checked here
    if token.endswith(EXTENSIONS) or (base / token).exists():
        return (base / token).exists()
    module = token.rsplit(".", 1)[0]
    return (base / f"{module}.py").exists() or (base / module).exists()


def _vllm_root() -> Path | None:
    """The folder holding the installed ``vllm`` package (found without importing it)."""
    found = importlib.util.find_spec("vllm")
    if found is None or not found.submodule_search_locations:
        return None
    return Path(next(iter(found.submodule_search_locations))).parent


def test_cited_paths_parser() -> None:
    text = ("see spec/request.py and `proofs/proof_mutants.DRAFT_MUTANTS`, spec/worker*.py, reference/vllm,\n"
            "    >>> VllmSource.from_files('1', {'vllm/m.py': ''})\nvllm/v1/request.py")
    assert cited_paths(text) == ["spec/request.py", "proofs/proof_mutants.DRAFT_MUTANTS", "vllm/v1/request.py"]
    assert path_exists("proofs/proof_mutants.DRAFT_MUTANTS", None) and not path_exists("proofs/encoding.py", None)


def _tracked(files: list[Path]) -> list[Path]:
    """The files git tracks (others' work in progress is not checked), all if git is absent."""
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return files
    tracked = set(listed.stdout.split())
    return [f for f in files if f.relative_to(ROOT).as_posix() in tracked]


def test_every_path_cited_in_docs_and_comments_exists() -> None:
    vllm_root = _vllm_root()
    files = [*ROOT.glob("*.md"), *(ROOT / "docs").glob("*.md")]
    for folder in FOLDERS:
        if folder != "docs":
            files += sorted((ROOT / folder).rglob("*.py"))
    exempt = {Path(__file__).resolve(): "cites bad paths on purpose",
              ROOT / "tests" / "test_drift.py": "builds synthetic vLLM source trees with made-up paths"}
    files = [f for f in _tracked(files) if f.resolve() not in exempt]
    missing = [f"{f.relative_to(ROOT)}: {token}" for f in files
               for token in cited_paths(f.read_text(encoding="utf-8", errors="replace"))
               if not path_exists(token, vllm_root)]
    assert missing == []
