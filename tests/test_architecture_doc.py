"""docs/ARCHITECTURE.md's module map names every module of the package, and only those:
a module added without a line there, or a line left for a module that is gone, fails. Every
code name its glossary gives still exists."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The source tree (an installed package also holds ``suite/``: the repository's
#: ``benchmarks/``, which the doc's layout names).
PACKAGE_DIR = REPO / "pytest_llmeval"
DOC = REPO / "docs" / "ARCHITECTURE.md"


def _mapped() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+\.py)` \|", section, re.M)


def test_every_module_is_in_the_map_and_every_entry_is_a_module() -> None:
    modules = sorted(
        str(p.relative_to(PACKAGE_DIR))
        for p in PACKAGE_DIR.rglob("*.py")
        if "__pycache__" not in p.parts
    )
    mapped = _mapped()
    assert len(mapped) == len(set(mapped)), "a module is listed twice"
    assert sorted(set(modules) - set(mapped)) == [], "modules missing from the module map"
    assert sorted(set(mapped) - set(modules)) == [], "the module map names modules that are gone"


def _glossary_names() -> list[str]:
    """The code names in the glossary's third column (``gate.TaskTally``, ``RunDir``,
    ``load_backend``): file names, flags and record values (``verdict``, ``pass``) left
    out."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Glossary", 1)[1].split("\n## ", 1)[0]
    names: list[str] = []
    for row in re.findall(r"^\|[^|]+\|[^|]+\|([^|]*)\|$", section, re.M):
        for name in re.findall(r"`([A-Za-z_][\w.]*)`", row):
            code = "_" in name or "." in name or name[0].isupper()
            if code and not name.endswith((".json", ".jsonl", ".md", ".html")):
                names.append(name)
    return names


def _defined(name: str, source: str) -> bool:
    """``pkg.Class.field``: ``pkg`` a package, ``Class`` a class, ``field`` a field or
    method; ``function``: a def; ``Class``: a class."""
    parts = name.split(".")
    if parts[0][0].islower() and len(parts) > 1:
        if not (PACKAGE_DIR / parts[0]).is_dir():
            return False
        parts = parts[1:]
    for part in parts:
        kind = r"(class|def) " if part[0].isupper() or part == parts[0] else r"(def )?"
        if not re.search(rf"^\s*{kind}{re.escape(part)}\b", source, re.M):
            return False
    return True


def test_every_code_name_of_the_glossary_exists() -> None:
    source = "\n".join(p.read_text(encoding="utf-8") for p in PACKAGE_DIR.rglob("*.py"))
    names = _glossary_names()
    assert {"gate.TaskTally", "RunRecord", "load_backend"} <= set(names), names
    missing = [n for n in names if not _defined(n, source)]
    assert missing == [], f"the glossary names code that is gone: {missing}"
    assert not _defined("gate.TaskVerdictGone", source)  # the check can fail


def _layer_table() -> list[tuple[list[str], set[str]]]:
    """The rows of the Layers section's table: (packages, what they import)."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Layers", 1)[1].split("\n## ", 1)[0]
    rows = []
    for first, second in re.findall(r"^\| ([^|]+) \| ([^|]+) \|$", section, re.M):
        if first.strip() in ("package", "---"):
            continue
        packages = re.findall(r"`([\w]+)`", first)
        imports = set(re.findall(r"`([\w]+)`", second))
        rows.append((packages, imports))
    return rows


def test_the_layer_table_is_the_import_graph_from_the_bottom() -> None:
    """Every package of the layering test's graph is in the table once, with exactly the
    packages it imports, and imports only packages of the rows above its own."""
    from test_layering import package_graph

    # The source tree's (an installed package also holds suite/, the shipped specs).
    graph = {node: set(edges) for node, edges in package_graph(PACKAGE_DIR).items()}
    rows = _layer_table()
    listed = [p for packages, _ in rows for p in packages]
    assert len(listed) == len(set(listed)), f"a package is in two rows: {listed}"
    assert sorted(listed) == sorted(graph), "the table and the import graph name other packages"
    below: set[str] = set()
    for packages, imports in rows:
        for package in packages:
            assert graph[package] == imports, (package, sorted(graph[package]), sorted(imports))
        assert imports <= below, f"{packages} import {sorted(imports - below)} from above"
        below |= set(packages)
    assert len(rows) > 5  # the table was read
