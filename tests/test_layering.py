"""The package's layering, read from its source: no import circle between packages, no
training loop inside the package.

Every module under ``pytest_llmeval/`` is parsed with ``ast`` (nothing is imported).
An edge ``A -> B`` means a module of ``pytest_llmeval.A`` imports from
``pytest_llmeval.B``; every import statement counts: module level, inside functions,
and under ``if TYPE_CHECKING:``. A lazy import inside a function still makes the importing
package depend on the imported one, so it cannot be the way out of a circle. The
top-level modules (``_errors``, ``_json``) are nodes of their own; ``pytest_llmeval``
itself (the root ``__init__.py``) is a node only when a module imports a name it defines.
"""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import pytest_llmeval

PACKAGE_DIR = Path(pytest_llmeval.__file__).resolve().parent
REPO = Path(__file__).resolve().parents[1]
ROOT = "pytest_llmeval"


def module_name(path: Path, package_dir: Path) -> str:
    """``pytest_llmeval.record._compare`` for ``pytest_llmeval/record/_compare.py``."""
    parts = list(path.relative_to(package_dir).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([ROOT, *parts])


def imported_modules(path: Path, package_dir: Path) -> Iterator[tuple[str, int]]:
    """Absolute names of what each import statement of a module imports, with its line
    (``from X import a, b`` gives ``X.a`` and ``X.b``: either may be a submodule)."""
    name = module_name(path, package_dir)
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                drop = node.level - 1 if is_package else node.level
                base = base[: len(base) - drop] if drop else base
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                yield f"{origin}.{alias.name}", node.lineno


def node_of(target: str, package_dir: Path) -> str | None:
    """The graph node an imported name belongs to: the first component below the root
    (``pytest_llmeval.gate._plan.X`` -> ``gate``), ``pytest_llmeval`` for a name the root
    ``__init__.py`` defines, None outside the package."""
    parts = target.split(".")
    if parts[0] != ROOT:
        return None
    if len(parts) == 1:
        return ROOT
    first = parts[1]
    if (package_dir / first).is_dir() or (package_dir / f"{first}.py").is_file():
        return first
    return ROOT


def source_node(path: Path, package_dir: Path) -> str:
    parts = path.relative_to(package_dir).with_suffix("").parts
    return ROOT if parts == ("__init__",) else parts[0]


def package_graph(package_dir: Path) -> dict[str, dict[str, list[str]]]:
    """``{A: {B: ["A/file.py:LINE", ...]}}``: where package A imports from package B."""
    graph: dict[str, dict[str, list[str]]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        source = source_node(path, package_dir)
        graph.setdefault(source, {})
        for target, line in imported_modules(path, package_dir):
            node = node_of(target, package_dir)
            if node is None or node == source:
                continue
            where = f"{path.relative_to(package_dir.parent)}:{line}"
            places = graph[source].setdefault(node, [])
            if where not in places:
                places.append(where)
    return graph


def find_cycle(graph: Mapping[str, Mapping[str, object]]) -> list[str] | None:
    """One cycle of the graph as ``[A, B, ..., A]``, or None (depth-first search)."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for succ in sorted(graph.get(node, {})):
            if state.get(succ) == "open":
                return [*stack[stack.index(succ) :], succ]
            if succ not in state and (found := visit(succ)) is not None:
                return found
        stack.pop()
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


def describe_cycle(cycle: list[str], graph: Mapping[str, Mapping[str, list[str]]]) -> str:
    lines = [" -> ".join(cycle)]
    for source, target in itertools.pairwise(cycle):
        lines.append(f"  {source} -> {target}: {', '.join(graph[source][target])}")
    return "\n".join(lines)


def test_no_import_cycle_between_packages() -> None:
    graph = package_graph(PACKAGE_DIR)
    cycle = find_cycle(graph)
    assert cycle is None, (
        "import cycle between packages of pytest_llmeval (every import counts, also those "
        "inside functions):\n"
        + describe_cycle(cycle, graph)
        + "\nmove the code that needs both into the package that sits above, or the shared "
        "part into the package below"
    )


def private_module_imports(package_dir: Path) -> set[tuple[str, str]]:
    """(importer, ``pytest_llmeval.X._y``) for each import of a private module of package
    X from a module outside X (those inside functions included)."""
    found: set[tuple[str, str]] = set()
    for path in sorted(package_dir.rglob("*.py")):
        source = source_node(path, package_dir)
        for target, _ in imported_modules(path, package_dir):
            parts = target.split(".")
            if parts[0] != ROOT or len(parts) < 3 or parts[1] in (source, "__init__"):
                continue
            if parts[1].startswith("_") or not (package_dir / parts[1]).is_dir():
                continue  # a root module (_errors, _json, _digest) is the package's own
            if parts[2].startswith("_") and not parts[2].startswith("__"):
                importer = path.relative_to(package_dir).as_posix()
                found.add((importer, ".".join(parts[:3])))
    return found


def test_no_import_of_another_packages_private_module() -> None:
    found = sorted(private_module_imports(PACKAGE_DIR))
    assert found == [], (
        "a module imports another package's private module: import the package's public "
        f"name (add it to that package's __init__) instead: {found}"
    )


#: What a package whose work is plain data must not load when imported: the evaluation
#: stack (which reaches the backends) and the pytest wiring.
HEAVY_PACKAGES = ("pytest_llmeval.eval", "pytest_llmeval.model", "pytest_llmeval.plugin")


@pytest.mark.parametrize("package", ["gate", "record", "scorer"])
def test_a_data_package_loads_no_evaluation_stack(package: str) -> None:
    """``import pytest_llmeval.gate`` (record, scorer) in a fresh interpreter loads that
    package and what it uses, not ``eval``, ``model`` or ``plugin`` (the root package's
    names are imported when first used)."""
    code = (
        f"import sys, pytest_llmeval.{package}\n"
        "print('\\n'.join(m for m in sys.modules if m.startswith('pytest_llmeval')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    loaded = done.stdout.split()
    assert f"pytest_llmeval.{package}" in loaded
    heavy = [m for m in loaded if m.startswith(HEAVY_PACKAGES)]
    assert heavy == [], f"pytest_llmeval.{package} loads {heavy}"


def test_the_root_package_still_gives_its_names() -> None:
    assert pytest_llmeval.TaskRunner.__name__ == "TaskRunner"
    assert pytest_llmeval.load_backend.__module__ == "pytest_llmeval.model"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        pytest_llmeval.nothing  # noqa: B018


def private_imports(path: Path, package_dir: Path) -> Iterator[tuple[str, int]]:
    """Names with a leading underscore that a module imports from another module of the
    package (a module of its own, such as ``_json``, is not such a name)."""
    source = module_name(path, package_dir)
    for target, line in imported_modules(path, package_dir):
        origin, _, name = target.rpartition(".")
        if not name.startswith("_") or name.startswith("__") or origin == source:
            continue
        if node_of(target, package_dir) is None:
            continue
        relative = Path(*target.split(".")[1:])
        if (package_dir / relative).is_dir() or (package_dir / f"{relative}.py").is_file():
            continue
        yield target, line


def test_no_module_imports_another_modules_private_names() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE_DIR.parent)}:{line} imports {target}"
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        for target, line in private_imports(path, PACKAGE_DIR)
    ]
    assert not offenders, (
        "a private name used across modules: "
        + "; ".join(offenders)
        + "; give it a public name in the module where it belongs"
    )


def dotted(node: ast.expr) -> list[str] | None:
    """``["torch", "optim", "AdamW"]`` for the expression ``torch.optim.AdamW``."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute) and (base := dotted(node.value)) is not None:
        return [*base, node.attr]
    return None


def uses_of(path: Path, prefix: str) -> Iterator[tuple[str, int]]:
    """What a module takes from module ``prefix`` (``torch.optim``): imports of it or of
    its names, and attribute chains through a name an import bound (``import torch`` then
    ``torch.optim.AdamW(...)``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def under(name: str) -> bool:
        return name == prefix or name.startswith(prefix + ".")

    found: dict[int, str] = {}  # line -> the longest name used there
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute) and (chain := dotted(node)) and chain[0] in bound:
            names = [".".join([bound[chain[0]], *chain[1:]])]
        else:
            continue
        for name in names:
            if under(name) and len(name) > len(found.get(node.lineno, "")):
                found[node.lineno] = name
    yield from sorted((name, line) for line, name in found.items())


def test_the_package_imports_no_training_loop() -> None:
    """Training (an optimizer such as AdamW) is for the measurement tools in ``tools/``,
    not the package: nothing under ``pytest_llmeval/`` uses ``torch.optim``."""
    offenders = [
        f"{path.relative_to(PACKAGE_DIR.parent)}:{line} uses {name}"
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        for name, line in uses_of(path, "torch.optim")
    ]
    assert not offenders, (
        "the package uses a training loop's optimizer: "
        + "; ".join(offenders)
        + "; move the training code out of pytest_llmeval/ (into tools/)"
    )


# The checks above must be able to fail: a planted package shows they do.


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    package = tmp_path / ROOT
    write(tmp_path, f"{ROOT}/__init__.py", "from pytest_llmeval.alpha import a\n")
    write(tmp_path, f"{ROOT}/_errors.py", "")
    write(tmp_path, f"{ROOT}/alpha/__init__.py", "from ._a import a\n")
    write(tmp_path, f"{ROOT}/alpha/_a.py", "from pytest_llmeval._errors import E\na = 1\n")
    write(tmp_path, f"{ROOT}/beta/__init__.py", "")
    write(
        tmp_path,
        f"{ROOT}/beta/_b.py",
        "def f():\n    from ..alpha import a\n    return a\n",
    )
    return package


def test_graph_reads_relative_and_function_level_imports(planted: Path) -> None:
    graph = package_graph(planted)
    assert graph["beta"] == {"alpha": [f"{ROOT}/beta/_b.py:2"]}
    assert set(graph["alpha"]) == {"_errors"}
    assert set(graph[ROOT]) == {"alpha"}
    assert find_cycle(graph) is None


def test_a_lazy_import_closing_a_circle_is_a_cycle(planted: Path) -> None:
    write(
        planted.parent,
        f"{ROOT}/alpha/_late.py",
        "def g():\n    from pytest_llmeval.beta._b import f\n    return f\n",
    )
    graph = package_graph(planted)
    cycle = find_cycle(graph)
    assert cycle == ["alpha", "beta", "alpha"]
    assert f"{ROOT}/alpha/_late.py:2" in describe_cycle(cycle, graph)


def test_importing_a_root_name_is_an_edge_to_the_root(planted: Path) -> None:
    write(planted.parent, f"{ROOT}/alpha/_root.py", "from pytest_llmeval import alpha, beta\n")
    assert set(package_graph(planted)["alpha"]) == {"_errors", "beta"}
    write(planted.parent, f"{ROOT}/alpha/_root.py", "from .. import __version__\n")
    assert find_cycle(package_graph(planted)) == ["alpha", ROOT, "alpha"]


@pytest.mark.parametrize(
    ("source", "line", "name"),
    [
        (
            "def train(m):\n    import torch\n    return torch.optim.AdamW(m)\n",
            3,
            "torch.optim.AdamW",
        ),
        ("from torch.optim import AdamW\n", 1, "torch.optim.AdamW"),
        ("import torch.optim as o\n", 1, "torch.optim"),
        ("from torch import optim\nopt = optim.SGD\n", 2, "torch.optim.SGD"),
    ],
)
def test_an_optimizer_is_found_however_it_is_reached(
    planted: Path, source: str, line: int, name: str
) -> None:
    write(planted.parent, f"{ROOT}/alpha/_train.py", source)
    assert (name, line) in list(uses_of(planted / "alpha" / "_train.py", "torch.optim"))


def test_torch_without_its_optimizer_is_no_training_loop(planted: Path) -> None:
    write(
        planted.parent, f"{ROOT}/alpha/_step.py", "import torch\nx = torch.nn.functional.softmax\n"
    )
    assert list(uses_of(planted / "alpha" / "_step.py", "torch.optim")) == []


def test_a_private_name_from_another_module_is_found(planted: Path) -> None:
    write(
        planted.parent,
        f"{ROOT}/beta/_c.py",
        "from pytest_llmeval.alpha._a import _hidden, a\n"
        "from pytest_llmeval import _errors\n"
        "from . import _b\n",
    )
    assert list(private_imports(planted / "beta" / "_c.py", planted)) == [
        (f"{ROOT}.alpha._a._hidden", 1)
    ]


def test_a_private_module_of_another_package_is_found(planted: Path) -> None:
    assert private_module_imports(planted) == set()  # alpha's own _a, beta's lazy public name
    write(
        planted.parent,
        f"{ROOT}/beta/_d.py",
        "def g():\n    from pytest_llmeval.alpha._a import a\n    return a\n",
    )
    assert private_module_imports(planted) == {("beta/_d.py", f"{ROOT}.alpha._a")}
