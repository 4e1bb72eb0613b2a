"""Reference judges: third-party scorers a spec can name, checked before any model loads.

Some scorers have a reference implementation that published numbers come from
(``math-verify`` for MATH answers, ``langdetect`` and NLTK's Punkt for IFEval). They are
optional (the ``reference`` extra), so a spec that names one must fail at collection, with
the spec file, the field and the extra to install, when its package is missing: a silent
fall back to our own scorer would produce numbers that look comparable and are not.

:data:`JUDGES` says which package (and, for NLTK, which data) each judge needs;
:func:`require_judge` raises :class:`~pytest_llmeval._errors.SpecError` when one is
missing; :func:`judge_label` is what item records carry (``math_verify 0.9.0``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass

from pytest_llmeval._errors import JudgeNotInstalled, SpecError

EXTRA = "reference"
INSTALL_HINT = f"pip install 'pytest-llm-evaluation[{EXTRA}]'"


@dataclass(frozen=True)
class Judge:
    """A reference judge: its import name and the distribution that provides it."""

    name: str
    module: str
    distribution: str
    note: str = ""


JUDGES: dict[str, Judge] = {
    "math_verify": Judge("math_verify", "math_verify", "math-verify"),
    "langdetect": Judge("langdetect", "langdetect", "langdetect"),
    "nltk": Judge(
        "nltk",
        "nltk",
        "nltk",
        note=(
            "and NLTK's English Punkt data (punkt_tab): python -m nltk.downloader punkt_tab "
            "(it comes from GitHub; no package registry carries the official files)"
        ),
    ),
}


def judge_version(name: str) -> str | None:
    """The installed version of judge ``name``'s distribution, or ``None``."""
    judge = JUDGES[name]
    try:
        if importlib.util.find_spec(judge.module) is None:
            return None
    except (ImportError, ValueError):  # a broken or blocked install
        return None
    try:
        return importlib.metadata.version(judge.distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def judge_label(name: str) -> str:
    """``"<judge> <version>"`` for the records (the version pins what scored an item)."""
    version = judge_version(name)
    return f"{name} {version}" if version else name


def _punkt_installed() -> bool:
    import nltk

    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
    except LookupError:
        return False
    return True


def _math_verify_works() -> str | None:
    """``None`` when math-verify parses LaTeX, else why not.

    math-verify swallows parser errors and returns no parse (so every answer would be
    judged wrong) when latex2sympy2_extended's ANTLR parser does not load, for example
    with an antlr4 runtime other than the one it was generated for.
    """
    import sympy
    from math_verify import LatexExtractionConfig, parse

    parsed = parse("$\\frac{1}{2}$", extraction_config=[LatexExtractionConfig()], parsing_timeout=5)
    if parsed and parsed[0] == sympy.Rational(1, 2):
        return None
    try:
        antlr = importlib.metadata.version("antlr4-python3-runtime")
    except importlib.metadata.PackageNotFoundError:
        antlr = "not installed"
    return (
        f"math-verify is installed but cannot parse LaTeX (antlr4-python3-runtime {antlr}; "
        f"it needs 4.13.2): {INSTALL_HINT}"
    )


def require_judge(name: str, source: str, field: str) -> None:
    """Raise :class:`SpecError` naming ``source`` and ``field`` unless judge ``name`` can run."""
    judge = JUDGES[name]
    if judge_version(name) is None:
        needs = f"the Python package {judge.distribution!r}"
        if judge.note:
            needs += f" {judge.note}"
        raise JudgeNotInstalled(
            source,
            field,
            f"names the reference judge {name!r}, which needs {needs}; it is not installed: "
            f"{INSTALL_HINT}",
        )
    if name == "nltk" and not _punkt_installed():
        raise JudgeNotInstalled(
            source,
            field,
            f"names the reference judge 'nltk', which needs {judge.note}; nltk is installed "
            "but punkt_tab is not",
        )
    if name == "math_verify":
        problem = _math_verify_works()
        if problem is not None:
            raise SpecError(source, field, problem)
