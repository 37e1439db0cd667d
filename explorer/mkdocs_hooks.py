"""mkdocs hooks (``mkdocs.yml``: ``hooks:``): generated tables, spec source pages, finding traces.

* ``on_files``: one page per spec module (``source/NAME.md``), its code with
  line anchors, so a property or action links to the line that defines it;
* ``on_page_markdown``: each ``<!-- asyncspec:table NAME -->`` becomes the
  table ``site.TABLES[NAME]`` generates from the code (and ``configs/``);
* ``on_files`` also adds each finding config's counterexample as an explorer
  page (``traces/NAME.html``), found by the checker at build time, and a sample
  run per witness of ``site.SAMPLE_CONFIG`` (``samples.py``);
* ``on_config`` lists the source pages in the navigation.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from asyncspec.checker.bfs import explore
from asyncspec.spec import engine

from asyncspec.explorer.load import view_of
from asyncspec.explorer.samples import witness_view
from asyncspec.explorer.site import SAMPLE_CONFIG, TRACES, configs_of, fill_tables, witnesses_of

SPEC_DIR = Path(engine.__file__).resolve().parent


def _root(config: Any) -> Path:
    return Path(config["config_file_path"]).resolve().parent


def source_page(path: Path) -> str:
    """A spec module as a page: its code, line numbers anchored (``#__codelineno-0-N``)."""
    return (f"# `spec/{path.name}`\n\nThe spec module as it is in this build; every line has an anchor.\n\n"
            f'````python linenums="1"\n{path.read_text(encoding="utf-8")}````\n')


def spec_modules() -> list[Path]:
    return [p for p in sorted(SPEC_DIR.glob("*.py")) if p.name != "__init__.py"]


def _listed(nav: Any) -> set[str]:
    """Every page file a nav (nested lists and one-key dicts) names."""
    if isinstance(nav, str):
        return {nav}
    found: set[str] = set()
    for item in nav.values() if isinstance(nav, dict) else nav if isinstance(nav, list) else ():
        found |= _listed(item)
    return found


def on_config(config: Any) -> Any:
    """The spec source pages, and any page of ``docs/`` the nav does not name yet (under "More",
    so a new page never fails the strict build for being unlisted), join the navigation."""
    nav = config["nav"]
    if nav is not None:
        docs = Path(config["docs_dir"])
        unlisted = sorted(p.relative_to(docs).as_posix() for p in docs.rglob("*.md"))
        more = [page for page in unlisted if page not in _listed(nav)]
        if more:
            nav.append({"More": more})
        nav.append({"Spec source": [{f"spec/{p.name}": f"source/{p.stem}.md"} for p in spec_modules()]})
    return config


def finding_pages(root: Path) -> dict[str, str]:
    """``traces/NAME.html`` -> the explorer page of each finding config's counterexample."""
    from asyncspec.explorer.page import render_page

    pages = {}
    for name, cfg in configs_of(root).items():
        if not cfg.expect_violation:
            continue
        found = [v for v in explore(cfg).violations if v.property == cfg.expect_violation]
        if not found:
            raise RuntimeError(f"finding config {name} no longer violates {cfg.expect_violation}")
        view = view_of(found[0].trace.to_json(), f"{name}: {cfg.expect_violation}")
        pages[f"{TRACES}/{name}.html"] = render_page(view)
    sample = configs_of(root)[SAMPLE_CONFIG]
    for w in witnesses_of(sample):
        found_view = witness_view(sample, w)
        if found_view is None:
            raise RuntimeError(f"witness {w} of {SAMPLE_CONFIG} is unreachable: the config is vacuous for it")
        pages[f"{TRACES}/sample-{SAMPLE_CONFIG}-{w}.html"] = render_page(found_view)
    return pages


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for path in spec_modules():
        files.append(File.generated(config, f"source/{path.stem}.md", content=source_page(path)))
    for uri, html in finding_pages(_root(config)).items():
        files.append(File.generated(config, uri, content=html))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return fill_tables(markdown, _root(config))
