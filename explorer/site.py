"""The documentation site's tables, generated from the code when the site is built.

Each page of ``docs/`` may hold markers ``<!-- asyncspec:table NAME -->``; the
mkdocs hook (``mkdocs_hooks.py``) replaces each with ``TABLES[NAME](root)``,
where ``root`` is the folder of ``mkdocs.yml``: configs and pinned counts are
read from ``root/configs`` (so a changed count shows on the next build), the
rest from the spec's own records (``@always``/``why``, ``@models``, ``MUTANTS``).

>>> "| `async-d2` |" in configs_table(REPO)
True
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from asyncspec.checker.configs import load_config_file
from asyncspec.checker.spec_mutants import MUTANTS
from asyncspec.spec.config import SpecConfig
from asyncspec.spec.properties import ALL_ALWAYS, ALWAYS, EVENTUALLY

from asyncspec.explorer.spec_info import property_info

REPO = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"<!--\s*asyncspec:table\s+([a-z-]+)\s*-->")
TRACES = "traces"  # the site folder of the findings' explorer pages


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def configs_of(root: Path) -> dict[str, SpecConfig]:
    """The named configs of ``root/configs``, by name."""
    return {c.name: c for c in (load_config_file(p) for p in sorted((root / "configs").glob("*.toml")))}


def manifest_of(root: Path) -> dict[str, dict[str, object]]:
    data: dict[str, dict[str, object]] = json.loads((root / "configs" / "manifest.json").read_text())
    return data


def configs_table(root: Path) -> str:
    """Every named config, its constants and its pinned counts (``configs/manifest.json``)."""
    manifest = manifest_of(root)
    rows = ["| config | set | requests (P, M) | D | blocks | budget | pinned states | depth | expected | what it covers |",
            "|---|---|---|---|---|---|---:|---:|---|---|"]
    for name, c in configs_of(root).items():
        pin = manifest.get(name, {})
        requests = " ".join(f"({p}, {m})" for p, m in c.requests)
        rows.append(f"| `{name}` | {c.extra.get('set', 'default')} | {requests} | {c.batch_queue_depth} | "
                    f"{c.num_blocks} | {c.token_budget} | {pin.get('distinct_states', '—')} | "
                    f"{pin.get('depth', '—')} | {c.expect_violation or 'ok'} | {_cell(c.description)} |")
    return "\n".join(rows)


def source_link(source: str) -> str:
    """``spec/properties.py:243`` -> a link to that line of the site's source page."""
    path, _, line = source.partition(":")
    if not path.startswith("spec/"):
        return f"`{source}`" if source else ""
    anchor = f"#__codelineno-0-{line}" if line else ""
    return f"[`{source}`](source/{Path(path).stem}.md{anchor})"


def _cites(cites: list[dict[str, object]]) -> str:
    return "<br>".join(f"`{c['target']}`" + "".join(f" #{p}" for p in c["prs"])  # type: ignore[attr-defined]
                       for c in cites)


def properties_table(root: Path) -> str:
    """Every property: kind, default or opt-in, what breaks if it fails, the vLLM it models, the source."""
    rows = ["| property | kind | checked | why it matters | models (vLLM) | spec |", "|---|---|---|---|---|---|"]
    defaults = {p.name for p in ALWAYS}
    for name in ALL_ALWAYS:
        info = property_info(name)
        rows.append(f"| `{name}` | always | {'by default' if name in defaults else 'opt-in'} | {_cell(info['why'])} | "
                    f"{_cites(info['cites'])} | {source_link(info['source'])} |")
    for e in EVENTUALLY:
        info = property_info(e.name)
        rows.append(f"| `{e.name}` | eventually | by default | {_cell(e.why)} | {_cites(info['cites'])} | "
                    "`checker/graph.py` |")
    return "\n".join(rows)


def findings_table(root: Path) -> str:
    """The finding configs, the property each violates, and its trace in the explorer."""
    rows = ["| finding config | property violated | why it matters | trace |", "|---|---|---|---|"]
    for name, c in configs_of(root).items():
        if c.expect_violation:
            why = property_info(c.expect_violation)["why"]
            rows.append(f"| `{name}` | `{c.expect_violation}` | {_cell(why)} | "
                        f"[open in the explorer]({TRACES}/{name}.html) |")
    return "\n".join(rows)


SAMPLE_CONFIG = "async-d2"  # the default config whose witnesses get sample traces on the site


def witnesses_of(cfg: SpecConfig) -> list[str]:
    """The witnesses a config requires (its TOML's ``witnesses``)."""
    listed = cfg.extra.get("witnesses", ())
    return [str(w) for w in listed] if isinstance(listed, (list, tuple)) else []


def samples_table(root: Path) -> str:
    """One sample run per witness of ``SAMPLE_CONFIG``: the behaviours a passing run exercises."""
    cfg = configs_of(root)[SAMPLE_CONFIG]
    rows = [f"| witness of `{SAMPLE_CONFIG}` | sample run |", "|---|---|"]
    rows += [f"| `{w}` | [open in the explorer]({TRACES}/sample-{SAMPLE_CONFIG}-{w}.html) |"
             for w in witnesses_of(cfg)]
    return "\n".join(rows)


def mutants_table(root: Path) -> str:
    """Every seeded spec bug, the property that must kill it and where."""
    rows = ["| mutant | killed by | on config | the bug |", "|---|---|---|---|"]
    rows += [f"| `{m.name}` | `{m.property}` | `{m.config}` | {_cell(m.description)} |" for m in MUTANTS]
    return "\n".join(rows)


def citations_table(root: Path) -> str:
    """The ``@models`` records (``fidelity/citation_table.py``), without its markers."""
    from asyncspec.fidelity.citation_table import BEGIN, END, render_table

    return render_table().replace(BEGIN, "").replace(END, "").strip()


TABLES: dict[str, Callable[[Path], str]] = {
    "configs": configs_table, "properties": properties_table, "findings": findings_table,
    "mutants": mutants_table, "citations": citations_table, "samples": samples_table,
}


def fill_tables(markdown: str, root: Path) -> str:
    """``markdown`` with every table marker replaced (``KeyError`` names an unknown table)."""
    def table(m: re.Match[str]) -> str:
        if m.group(1) not in TABLES:
            raise KeyError(f"unknown table '{m.group(1)}' (one of {', '.join(TABLES)})")
        return TABLES[m.group(1)](root)
    return MARKER.sub(table, markdown)
