"""Which language identifier and sentence splitter IFEval's checks use.

The reference implementation (google-research IFEval; lm-evaluation-harness's ``ifeval``
task) identifies languages with ``langdetect`` and splits sentences and words with NLTK
(Punkt's English model, ``word_tokenize``). Ours (:mod:`._language`, :mod:`._text`) need
no dependency. :class:`TextJudges` bundles one choice of each; :func:`text_judges` builds
it from a spec's names, and :func:`using` makes it the one the checks call while a
response is scored (a context variable, so concurrent scorers do not interfere).

**langdetect determinism.** langdetect samples n-grams at random; unseeded, the same text
can get a different language on another call (and the reference leaves it unseeded: neither
google-research's ``instructions.py`` nor lm-eval's sets ``DetectorFactory.seed``). We
seed it (:data:`LANGDETECT_SEED` = 0, the value langdetect's own documentation uses) in a
private factory, so a response gets one answer on every run and the process-wide factory
of other langdetect users is left alone. docs/PARITY.md measures how often an unseeded
reference would disagree with itself on IFEval.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pytest_llmeval.ifeval._language import detect_language
from pytest_llmeval.ifeval._text import count_sentences, word_tokens

LANGDETECT_SEED = 0


@dataclass(frozen=True)
class TextJudges:
    """The language identifier and tokenizers the checks use, and their names."""

    detect_language: Callable[[str], str | None] = detect_language
    count_sentences: Callable[[str], int] = count_sentences
    word_tokens: Callable[[str], list[str]] = word_tokens
    labels: dict[str, str] = field(
        default_factory=lambda: {"language": "heuristic", "sentences": "heuristic"}
    )


HEURISTIC = TextJudges()
_current: contextvars.ContextVar[TextJudges] = contextvars.ContextVar(
    "ifeval_text_judges", default=HEURISTIC
)


def current() -> TextJudges:
    """The judges of the response being scored (ours outside :func:`using`)."""
    return _current.get()


@contextlib.contextmanager
def using(judges: TextJudges) -> Iterator[None]:
    """Score with ``judges`` inside the block."""
    token = _current.set(judges)
    try:
        yield
    finally:
        _current.reset(token)


@functools.cache
def _langdetect_factory() -> Any:
    from langdetect.detector_factory import PROFILES_DIRECTORY, DetectorFactory

    factory = DetectorFactory()
    factory.load_profile(PROFILES_DIRECTORY)
    factory.set_seed(LANGDETECT_SEED)
    return factory


def langdetect_language(text: str) -> str | None:
    """langdetect's language code for ``text`` (seeded), or ``None`` where langdetect
    raises (no features: empty, digits, punctuation), which the checks count as followed,
    as the reference does."""
    from langdetect.lang_detect_exception import LangDetectException

    detector = _langdetect_factory().create()
    try:
        detector.append(text)
        return str(detector.detect())
    except LangDetectException:
        return None


@functools.cache
def _punkt() -> Any:
    from nltk.tokenize.punkt import PunktTokenizer

    return PunktTokenizer("english")


def nltk_count_sentences(text: str) -> int:
    """Sentences by NLTK's English Punkt model (punkt_tab), as the reference counts them."""
    return len(_punkt().tokenize(text))


def nltk_word_tokens(text: str) -> list[str]:
    """``nltk.word_tokenize``, as the reference's capital-word count uses it."""
    import nltk

    return list(nltk.word_tokenize(text))


def text_judges(language: str, sentences: str, labels: dict[str, str] | None = None) -> TextJudges:
    """The judges a spec names: ``language`` is ``langdetect`` or ``heuristic``,
    ``sentences`` is ``nltk`` or ``heuristic``. ``labels`` (what records carry) default to
    the names."""
    if language not in ("langdetect", "heuristic"):
        raise ValueError(f"unknown language judge {language!r}")
    if sentences not in ("nltk", "heuristic"):
        raise ValueError(f"unknown sentence judge {sentences!r}")
    nltk = sentences == "nltk"
    return TextJudges(
        detect_language=langdetect_language if language == "langdetect" else detect_language,
        count_sentences=nltk_count_sentences if nltk else count_sentences,
        word_tokens=nltk_word_tokens if nltk else word_tokens,
        labels={"language": language, "sentences": sentences, **(labels or {})},
    )
