"""docs/ARCHITECTURE.md's module map names every module of the package, and only those:
a module added without a line there, or a line left for a module that is gone, fails."""

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
