"""IFEval's rule-based instruction checks and their registry.

Each check is a function ``(response, kwargs, prompt) -> bool`` that says whether
``response`` follows one instruction, with the semantics of the reference implementation
of Zhou et al. (2023), "Instruction-Following Evaluation for Large Language Models"
(google-research ``instruction_following_eval/instructions.py``). Entries of ``kwargs``
whose value is ``None`` are ignored (the Hugging Face copy of the data lists every
argument of every instruction, ``None`` where unused). The reference fills a missing
argument with a random value; here a missing argument is a :class:`ValueError`.
``prompt`` is the item's prompt; no IFEval check reads it today (it is there for checks
that compare with the prompt). A check judges the text it is given: that a blank
response follows nothing is the evaluation's rule (:func:`~pytest_llmeval.ifeval.evaluate_item`).

Language identification, sentence counting and word tokenization are the reference's
libraries (langdetect, NLTK) or our dependency-free heuristics
(:mod:`pytest_llmeval.ifeval._language`, :mod:`pytest_llmeval.ifeval._text`), whichever
:mod:`pytest_llmeval.ifeval._judges` has made current (the spec chooses;
:func:`~pytest_llmeval.ifeval.evaluate_item` defaults to the heuristics). Keywords are
matched literally (the reference passes them to ``re`` unescaped; the IFEval keywords
contain no regex syntax).

Relations are ``"less than"`` (count < threshold) and ``"at least"`` (count >= threshold).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pytest_llmeval.ifeval._judges import current
from pytest_llmeval.ifeval._text import count_words

CheckFn = Callable[[str, Mapping[str, Any], str], bool]

RELATIONS = ("less than", "at least")


# --------------------------------------------------------------------------- arguments


def _arg(kwargs: Mapping[str, Any], name: str) -> Any:
    value = kwargs.get(name)
    if value is None:
        raise ValueError(f"missing argument '{name}'")
    return value


def _int(kwargs: Mapping[str, Any], name: str) -> int:
    value = _arg(kwargs, name)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"argument '{name}' must be an integer, got {value!r}")
    return value


def _str(kwargs: Mapping[str, Any], name: str) -> str:
    value = _arg(kwargs, name)
    if not isinstance(value, str):
        raise ValueError(f"argument '{name}' must be a string, got {value!r}")
    return value


def _words(kwargs: Mapping[str, Any], name: str) -> list[str]:
    value = _arg(kwargs, name)
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"argument '{name}' must be a list of strings, got {value!r}")
    if not all(isinstance(v, str) for v in value):
        raise ValueError(f"argument '{name}' must be a list of strings, got {value!r}")
    return list(value)


def compare(count: int, relation: str, threshold: int) -> bool:
    """``count < threshold`` for ``"less than"``, ``count >= threshold`` for ``"at least"``."""
    if relation == "less than":
        return count < threshold
    if relation == "at least":
        return count >= threshold
    raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")


def _relation(kwargs: Mapping[str, Any], name: str) -> str:
    relation = _str(kwargs, name)
    if relation not in RELATIONS:
        raise ValueError(f"argument '{name}' must be one of {RELATIONS}, got {relation!r}")
    return relation


# --------------------------------------------------------------------------- keywords


def keywords_existence(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """Every keyword occurs, case-insensitively, anywhere (also inside longer words)."""
    return all(
        re.search(re.escape(k), response, flags=re.IGNORECASE) for k in _words(kwargs, "keywords")
    )


def keywords_frequency(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """Case-insensitive, non-overlapping occurrences of ``keyword`` against ``frequency``."""
    keyword = _str(kwargs, "keyword").strip()
    count = len(re.findall(re.escape(keyword), response, flags=re.IGNORECASE))
    return compare(count, _relation(kwargs, "relation"), _int(kwargs, "frequency"))


def keywords_forbidden_words(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """No forbidden word occurs as a whole word (``\\b`` boundaries), ignoring case."""
    return not any(
        re.search(r"\b" + re.escape(w) + r"\b", response, flags=re.IGNORECASE)
        for w in _words(kwargs, "forbidden_words")
    )


def keywords_letter_frequency(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """Occurrences of one character (case-insensitive) against ``let_frequency``."""
    letter = _str(kwargs, "letter").strip()
    if len(letter) != 1:
        raise ValueError(f"argument 'letter' must be one character, got {letter!r}")
    count = response.lower().count(letter.lower())
    return compare(count, _relation(kwargs, "let_relation"), _int(kwargs, "let_frequency"))


# --------------------------------------------------------------------------- language


def language_response_language(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """The response's detected language is ``language`` (an ISO 639-1 code).

    Detection is the current judge's (langdetect, or the heuristic of
    :func:`~pytest_llmeval.ifeval.detect_language`); undeterminable text counts as
    followed, as in the reference.
    """
    detected = current().detect_language(response)
    return detected is None or detected == _str(kwargs, "language")


# --------------------------------------------------------------------------- length


def length_number_sentences(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """Sentence count (the current judge: NLTK's Punkt or our Punkt-like heuristic) against
    ``num_sentences``."""
    count = current().count_sentences(response)
    return compare(count, _relation(kwargs, "relation"), _int(kwargs, "num_sentences"))


_PARAGRAPH_DIVIDER = re.compile(r"\s?\*\*\*\s?")


def length_number_paragraphs(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """Exactly ``num_paragraphs`` paragraphs separated by the markdown divider ``***``.

    An empty piece before the first or after the last divider is not a paragraph; an
    empty piece between two dividers fails the check.
    """
    pieces = _PARAGRAPH_DIVIDER.split(response)
    count = len(pieces)
    for index, piece in enumerate(pieces):
        if not piece.strip():
            if index in (0, len(pieces) - 1):
                count -= 1
            else:
                return False
    return count == _int(kwargs, "num_paragraphs")


def length_number_words(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """Word count (runs of ``\\w``) against ``num_words``."""
    count = count_words(response)
    return compare(count, _relation(kwargs, "relation"), _int(kwargs, "num_words"))


_FIRST_WORD_STOP = frozenset(".,?!'\"")


def length_nth_paragraph_first_word(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """Exactly ``num_paragraphs`` paragraphs separated by ``\\n\\n``, and paragraph
    ``nth_paragraph`` (1-based) starts with ``first_word`` (case-insensitive, leading
    quotes and trailing punctuation ignored).

    As in the reference, empty pieces do not count as paragraphs, but the n-th paragraph
    is looked up among all pieces.
    """
    pieces = response.split("\n\n")
    count = sum(1 for piece in pieces if piece.strip())
    nth = _int(kwargs, "nth_paragraph")
    if not 1 <= nth <= count:
        return False
    paragraph = pieces[nth - 1].strip()
    if not paragraph:
        return False
    word = paragraph.split()[0].strip().lstrip("'").lstrip('"')
    first = ""
    for char in word:
        if char in _FIRST_WORD_STOP:
            break
        first += char.lower()
    return count == _int(kwargs, "num_paragraphs") and first == _str(kwargs, "first_word").lower()


# --------------------------------------------------------------------------- content


def count_placeholders(text: str) -> int:
    """Non-overlapping ``[...]`` spans within one line, as ``re.findall(r"\\[.*?\\]")``
    counts them, in linear time (the regex is quadratic on a long line of ``[``)."""
    count = 0
    start = 0
    while (start := text.find("[", start)) != -1:
        line_end = text.find("\n", start)
        if line_end == -1:
            line_end = len(text)
        close = text.find("]", start + 1, line_end)
        if close == -1:  # no "[" left on this line can be closed
            start = line_end + 1
        else:
            count += 1
            start = close + 1
    return count


def content_number_placeholders(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """At least ``num_placeholders`` square-bracket placeholders such as ``[address]``."""
    return count_placeholders(response) >= _int(kwargs, "num_placeholders")


def content_postscript(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """A postscript starting with ``postscript_marker`` appears (case-insensitive).

    ``P.S.`` also accepts ``p. s.``, and ``P.P.S`` accepts ``p. p. s``; any other marker
    is matched literally. As in the reference, the marker may appear anywhere, not only
    at the start of a line.
    """
    marker = _str(kwargs, "postscript_marker").strip()
    if marker == "P.P.S":
        pattern = r"p\.\s?p\.\s?s"
    elif marker == "P.S.":
        pattern = r"p\.\s?s\."
    else:
        pattern = re.escape(marker.lower())
    return re.search(pattern, response.lower()) is not None


# --------------------------------------------------------------------------- format

# The reference's r"^\s*\*[^\*].*$" and r"^\s*-.*$", with the leading whitespace kept on
# one line: the same matches are counted, without quadratic backtracking over blank lines.
_BULLET_STAR = re.compile(r"^[^\S\n]*\*[^\*].*$", flags=re.MULTILINE)
_BULLET_DASH = re.compile(r"^[^\S\n]*-.*$", flags=re.MULTILINE)


def format_number_bullet_lists(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """Exactly ``num_bullets`` markdown bullet lines (``* item`` or ``- item``)."""
    count = len(_BULLET_STAR.findall(response)) + len(_BULLET_DASH.findall(response))
    return count == _int(kwargs, "num_bullets")


CONSTRAINED_RESPONSES = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


def format_constrained_response(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """The response contains one of :data:`CONSTRAINED_RESPONSES` (case-sensitive)."""
    stripped = response.strip()
    return any(option in stripped for option in CONSTRAINED_RESPONSES)


_HIGHLIGHT = re.compile(r"\*[^\n\*]*\*")
_DOUBLE_HIGHLIGHT = re.compile(r"\*\*[^\n\*]*\*\*")


def format_number_highlighted_sections(
    response: str, kwargs: Mapping[str, Any], prompt: str
) -> bool:
    """At least ``num_highlights`` non-empty ``*highlighted*`` or ``**highlighted**`` spans
    (each within one line)."""
    count = sum(1 for h in _HIGHLIGHT.findall(response) if h.strip("*").strip())
    count += sum(1 for h in _DOUBLE_HIGHLIGHT.findall(response) if h[2:-2].strip())
    return count >= _int(kwargs, "num_highlights")


def format_multiple_sections(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """At least ``num_sections`` sections, each begun by ``section_spliter`` and a number
    (``SECTION 1``; the splitter is case-sensitive)."""
    splitter = _str(kwargs, "section_spliter").strip()
    pattern = r"\s?" + re.escape(splitter) + r"\s?\d+\s?"
    return len(re.split(pattern, response)) - 1 >= _int(kwargs, "num_sections")


def format_json(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """The whole response parses as JSON, optionally fenced in ```` ```json ... ``` ````."""
    text = response.strip()
    for fence in ("```json", "```Json", "```JSON", "```"):
        text = text.removeprefix(fence)
    text = text.removesuffix("```").strip()
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def format_title(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """A non-empty title in double angular brackets, ``<<title>>``, on one line.

    Per line this takes the span the reference's ``<<[^\\n]+>>`` matches (from the first
    ``<<`` to the last ``>>``), in linear time.
    """
    for line in response.split("\n"):
        opening = line.find("<<")
        closing = line.rfind(">>")
        span = line[opening : closing + 2] if opening != -1 and closing >= opening + 3 else ""
        if span.lstrip("<").rstrip(">").strip():
            return True
    return False


# --------------------------------------------------------------------------- combination


def combination_two_responses(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """Exactly two different non-empty responses separated by ``******``."""
    pieces = response.split("******")
    answers: list[str] = []
    for index, piece in enumerate(pieces):
        if piece.strip():
            answers.append(piece.strip())
        elif index not in (0, len(pieces) - 1):
            return False
    return len(answers) == 2 and answers[0] != answers[1]


def combination_repeat_prompt(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """The response starts with ``prompt_to_repeat`` (case-insensitive, whitespace-trimmed)."""
    request = _str(kwargs, "prompt_to_repeat").strip().lower()
    if not request:
        raise ValueError("argument 'prompt_to_repeat' must not be empty")
    return response.strip().lower().startswith(request)


# --------------------------------------------------------------------------- start/end


def startend_end_checker(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """The response ends with ``end_phrase`` (case-insensitive; surrounding whitespace
    and double quotes ignored)."""
    phrase = _str(kwargs, "end_phrase").strip().lower()
    return response.strip().strip('"').lower().endswith(phrase)


def startend_quotation(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """The whole response is wrapped in double quotation marks."""
    stripped = response.strip()
    return len(stripped) > 1 and stripped[0] == '"' and stripped[-1] == '"'


# --------------------------------------------------------------------------- case


def case_capital_word_frequency(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """Words in all capitals (Treebank-like tokens, see :func:`word_tokens`) against
    ``capital_frequency``."""
    count = sum(1 for token in current().word_tokens(response) if token.isupper())
    return compare(count, _relation(kwargs, "capital_relation"), _int(kwargs, "capital_frequency"))


def case_english_capital(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """All cased characters are upper case and the language is English (or undetermined)."""
    return response.isupper() and current().detect_language(response) in ("en", None)


def case_english_lowercase(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """All cased characters are lower case and the language is English (or undetermined)."""
    return response.islower() and current().detect_language(response) in ("en", None)


def punctuation_no_comma(response: str, kwargs: Mapping[str, Any], prompt: str) -> bool:
    """No ASCII comma anywhere."""
    return "," not in response


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Instruction:
    """One instruction type: its id, its check and the arguments the check reads."""

    id: str
    check: CheckFn
    params: tuple[str, ...]


def _registry(*entries: tuple[str, CheckFn, tuple[str, ...]]) -> Mapping[str, Instruction]:
    return MappingProxyType({i: Instruction(id=i, check=c, params=p) for i, c, p in entries})


INSTRUCTIONS: Mapping[str, Instruction] = _registry(
    ("keywords:existence", keywords_existence, ("keywords",)),
    ("keywords:frequency", keywords_frequency, ("keyword", "frequency", "relation")),
    ("keywords:forbidden_words", keywords_forbidden_words, ("forbidden_words",)),
    (
        "keywords:letter_frequency",
        keywords_letter_frequency,
        ("letter", "let_frequency", "let_relation"),
    ),
    ("language:response_language", language_response_language, ("language",)),
    (
        "length_constraints:number_sentences",
        length_number_sentences,
        ("num_sentences", "relation"),
    ),
    ("length_constraints:number_paragraphs", length_number_paragraphs, ("num_paragraphs",)),
    ("length_constraints:number_words", length_number_words, ("num_words", "relation")),
    (
        "length_constraints:nth_paragraph_first_word",
        length_nth_paragraph_first_word,
        ("num_paragraphs", "nth_paragraph", "first_word"),
    ),
    (
        "detectable_content:number_placeholders",
        content_number_placeholders,
        ("num_placeholders",),
    ),
    ("detectable_content:postscript", content_postscript, ("postscript_marker",)),
    ("detectable_format:number_bullet_lists", format_number_bullet_lists, ("num_bullets",)),
    ("detectable_format:constrained_response", format_constrained_response, ()),
    (
        "detectable_format:number_highlighted_sections",
        format_number_highlighted_sections,
        ("num_highlights",),
    ),
    (
        "detectable_format:multiple_sections",
        format_multiple_sections,
        ("section_spliter", "num_sections"),
    ),
    ("detectable_format:json_format", format_json, ()),
    ("detectable_format:title", format_title, ()),
    ("combination:two_responses", combination_two_responses, ()),
    ("combination:repeat_prompt", combination_repeat_prompt, ("prompt_to_repeat",)),
    ("startend:end_checker", startend_end_checker, ("end_phrase",)),
    ("startend:quotation", startend_quotation, ()),
    (
        "change_case:capital_word_frequency",
        case_capital_word_frequency,
        ("capital_frequency", "capital_relation"),
    ),
    ("change_case:english_capital", case_english_capital, ()),
    ("change_case:english_lowercase", case_english_lowercase, ()),
    ("punctuation:no_comma", punctuation_no_comma, ()),
)


def get_instruction(instruction_id: str) -> Instruction:
    """The registered instruction, or a :class:`ValueError` naming the unknown id."""
    try:
        return INSTRUCTIONS[instruction_id]
    except KeyError:
        raise ValueError(f"unknown IFEval instruction id {instruction_id!r}") from None


def clean_kwargs(instruction_id: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` without ``None`` values; a :class:`ValueError` for an argument the
    instruction does not take or one it needs but lacks (both named)."""
    instruction = get_instruction(instruction_id)
    cleaned = {k: v for k, v in kwargs.items() if v is not None}
    unknown = sorted(set(cleaned) - set(instruction.params))
    if unknown:
        raise ValueError(f"{instruction_id}: unexpected argument(s) {', '.join(unknown)}")
    missing = [p for p in instruction.params if p not in cleaned]
    if missing:
        raise ValueError(f"{instruction_id}: missing argument(s) {', '.join(missing)}")
    return cleaned


def check_instruction(
    instruction_id: str, response: str, kwargs: Mapping[str, Any], prompt: str = ""
) -> bool:
    """Whether ``response`` follows one instruction, checked as is (no strict/loose logic).

    Raises :class:`ValueError` for an unknown id or invalid arguments.
    """
    cleaned = clean_kwargs(instruction_id, kwargs)
    return get_instruction(instruction_id).check(response, cleaned, prompt)
