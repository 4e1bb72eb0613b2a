"""TS-Guessing: can the model fill in a masked wrong option of a multiple-choice item?

Deng et al. (2024), "Investigating Data Contamination in Modern Benchmarks for Large
Language Models", testset slot guessing, multiple-choice variant: show the question with
its options, one wrong option replaced by ``[MASK]``, and ask for that option's exact
text. A wrong option's wording is arbitrary (the question does not determine it), so a
model that reproduces it word for word has likely seen the item. The probe needs
generation only: it works where log-probabilities are not available (chat templates
rendered by a server, chat-completions APIs).

- Which option is masked: for each item, among its wrong options that are not trivially
  guessable (:func:`maskable`), the longest (characters, after stripping); ties broken by
  a shuffle seeded with ``seed`` and the item id (as :func:`option_orders` is), so a run is
  reproducible and a reference run masks the same options. Items with no maskable wrong
  option are skipped and listed.
- Scoring: the first non-blank line of the output against the masked option, exact match
  after :func:`normalize_guess` (and a leading label of the masked option's own letter
  removed: ``B.``, ``(B)``, ``Option B:``); ROUGE-L F1 over :func:`normalize` tokens is
  recorded too.

There is no verdict from one report: free-text guessing has no chance level to test
against, so :class:`GuessingReport` gives rates only. The verdict compares the tested
model with a reference model on the same items (:func:`guessing_vs_reference`, a one-sided
exact McNemar test on the exact matches).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_llmeval._errors import DataError, LlmEvalError, SpecError
from pytest_llmeval.contamination._cues import rouge_l
from pytest_llmeval.contamination._ngram import normalize
from pytest_llmeval.contamination._probes import option_fields
from pytest_llmeval.contamination._reference import ReferenceComparison, compare_indicator
from pytest_llmeval.contamination._rewrite import gold_index, item_rng, option_texts
from pytest_llmeval.dataset import Item
from pytest_llmeval.eval import TaskRunner
from pytest_llmeval.model import Backend, GenerateRequest
from pytest_llmeval.scorer import strip_thinking, thinking_opened, wilson_interval

MASK = "[MASK]"
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

# A word: one CJK ideograph, kana or hangul syllable, or a run of two or more letters.
_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]|[^\W\d_]{2,}")
# Words that make up references to other options or truth values, not content.
_FILLER = frozenset(
    (
        "a",
        "an",
        "the",
        "of",
        "and",
        "or",
        "nor",
        "not",
        "only",
        "both",
        "neither",
        "either",
        "all",
        "none",
        "any",
        "each",
        "above",
        "below",
        "these",
        "those",
        "them",
        "this",
        "that",
        "following",
        "options",
        "option",
        "answers",
        "answer",
        "choices",
        "choice",
        "true",
        "false",
        "yes",
        "no",
        "correct",
        "incorrect",
        "wrong",
        "i",
        "ii",
        "iii",
        "iv",
        "v",
        "vi",
        "vii",
        "viii",
        "ix",
        "x",
    )
)
_REFERS_TO_OPTIONS = re.compile(
    r"\b(?:all|none|both|neither|either|any)\s+(?:of\s+)?(?:the\s+)?"
    r"(?:above|below|these|those|them|following|options|answers|choices)\b",
    re.IGNORECASE,
)
# Operator symbols of a formula ("/" is left out: "and/or", "km/h" in prose).
_FORMULA = re.compile(r"[=+*^<>×÷√∫∑∏≤≥≠±]")


def maskable(option: str) -> bool:
    """Whether an option's text is worth masking: one that cannot be guessed from the
    question and the other options alone.

    Not maskable: an option that refers to the others (``All of the above``, ``None of
    these``, ``Both of them``, ``Neither A nor B``, ``I and III only``); a truth-value
    pattern (``True, False``, ``Wrong, Not wrong``); a number or a formula (``42``,
    ``3.5 m/s``, ``sin(x) + cos(x)``: any of ``= + * ^ < > × ÷ √ ≤ ≥ ±``); and anything
    with fewer than two distinct content words. A content word is a run of two or more
    letters (each CJK character counts as one word) that is not one of the filler words
    of such references (articles, ``and``, ``or``, ``not``, ``only``, ``all``, ``none``,
    ``both``, ``neither``, ``above``, ``true``, ``false``, ``wrong``, ``correct``, roman
    numerals ...). Digits and symbols are never content words, which is what rules out
    numbers with units (``5 kg``, ``10 m/s``).
    """
    text = option.strip()
    if not text or _REFERS_TO_OPTIONS.search(text) or _FORMULA.search(text):
        return False
    words = {w.lower() for w in _WORD.findall(text)}
    return len(words - _FILLER) >= 2


def masked_option(options: Sequence[str], gold: int, *, seed: int, item_id: str) -> int | None:
    """The index of the option to mask (see the module docstring), None when no wrong
    option is :func:`maskable`."""
    candidates = [i for i, o in enumerate(options) if i != gold and maskable(str(o))]
    if not candidates:
        return None
    item_rng(seed, item_id, "ts-guessing").shuffle(candidates)
    # max keeps the first of equals: the seeded shuffle breaks ties.
    return max(candidates, key=lambda i: len(str(options[i]).strip()))


def _strippable(ch: str) -> bool:
    return ch.isspace() or ch == "`" or unicodedata.category(ch).startswith("P")


def normalize_guess(text: str) -> str:
    """The form guesses and options are compared in: lowercased (``str.lower``), runs of
    whitespace collapsed to one space, and whitespace, punctuation and quotes (Unicode
    category P*, which holds straight and curly quotes, and the backtick) stripped from
    both ends. Inner punctuation stays: ``"The cell's wall."`` gives ``the cell's wall``."""
    collapsed = " ".join(text.lower().split())
    start, end = 0, len(collapsed)
    while start < end and _strippable(collapsed[start]):
        start += 1
    while end > start and _strippable(collapsed[end - 1]):
        end -= 1
    return collapsed[start:end]


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def _without_label(answer: str, letter: str) -> str:
    """The answer without a leading label of the masked option's own letter (``B.``,
    ``B)``, ``B:``, ``(B)``, each optionally after ``Option``); unchanged when nothing
    would be left."""
    label = re.compile(
        rf"^(?:(?i:option)\s+)?(?:\({re.escape(letter)}\)|{re.escape(letter)}\s*[.):])\s*"
    )
    match = label.match(answer)
    return answer[match.end() :] if match and match.end() < len(answer) else answer


def guessing_prompt(
    question: str, options: Sequence[str], letters: Sequence[str], masked: int
) -> str:
    """The plain-text instruction: the question, its options as ``A. ...`` lines with the
    masked one shown as ``[MASK]``, and the request for the masked option's exact text."""
    letter = letters[masked]
    lines = [
        f"{letters[i]}. {MASK if i == masked else str(o).strip()}" for i, o in enumerate(options)
    ]
    return (
        "Below is a multiple-choice question from a benchmark with one of its options "
        f"hidden as {MASK}. Fill in the {MASK}: write the exact text of option {letter} "
        "as it appears in the benchmark. It differs from the other options.\n"
        f"Reply with the text of option {letter} only, on one line.\n\n"
        f"Question: {question.strip()}\n"
        "Options:\n" + "\n".join(lines) + f"\n\nOption {letter}:"
    )


@dataclass(frozen=True)
class GuessingItem:
    """One item's guess: the masked option (index in the published order, its text and
    letter), the prompt as sent (rendered by the chat template when one applies), the
    model's output and its scores."""

    item_id: str
    masked_index: int
    masked_letter: str
    masked_text: str
    prompt: str
    output: str
    guess: str  # the first non-blank line of the output, label removed
    exact_match: bool
    rouge_l: float


@dataclass(frozen=True)
class GuessingReport:
    """TS-Guessing over a task's items: exact-match rate with its Wilson 95% interval and
    mean ROUGE-L. Rates only, no verdict: see :func:`guessing_vs_reference`.

    ``skipped``: items without a maskable wrong option. ``failed``: items the backend did
    not answer (an error, or a prompt that does not fit the context window), by id with
    the reason; both are left out of the rates.
    """

    task: str
    seed: int
    items: tuple[GuessingItem, ...]
    skipped: tuple[str, ...] = ()
    failed: tuple[tuple[str, str], ...] = field(default=())

    @property
    def n(self) -> int:
        return len(self.items)

    @property
    def exact_matches(self) -> int:
        return sum(1 for i in self.items if i.exact_match)

    @property
    def exact_match_rate(self) -> float:
        return self.exact_matches / self.n if self.n else float("nan")

    @property
    def exact_match_interval(self) -> tuple[float, float]:
        return wilson_interval(self.exact_matches, self.n)

    @property
    def mean_rouge_l(self) -> float:
        return sum(i.rouge_l for i in self.items) / self.n if self.n else float("nan")

    def to_dict(self) -> dict[str, Any]:
        low, high = self.exact_match_interval
        return {
            "probe": "ts_guessing",
            "task": self.task,
            "seed": self.seed,
            "n": self.n,
            "exact_matches": self.exact_matches,
            "exact_match_rate": self.exact_match_rate,
            "exact_match_interval": [low, high],
            "mean_rouge_l": self.mean_rouge_l,
            "verdict": None,  # no chance level: compare with a reference model
            "skipped": list(self.skipped),
            "failed": [list(f) for f in self.failed],
            "items": [asdict(i) for i in self.items],
        }


def _letters(runner: TaskRunner, item: Item, n: int) -> list[str]:
    """The task's own option labels when its choices are short labels (MMLU's A-D), else
    A, B, C, ..."""
    choices = runner.prepare(item).choices
    labels = [c.strip() for c in choices]
    if len(labels) == n and len(set(labels)) == n and all(1 <= len(c) <= 2 for c in labels):
        return labels
    return list(LETTERS[:n])


def _question_field(runner: TaskRunner, item: Item, given: str | None) -> str:
    name = given or runner.spec.probes.question or "question"
    if not isinstance(item.doc.get(name), str):
        raise SpecError(
            runner.spec.source,
            "contamination.question",
            f"item {item.id}: TS-Guessing shows the question from the document field "
            f"{name!r}, which it does not have as text (name the field in the spec's "
            "contamination block or with question_field)",
        )
    return name


def ts_guessing_probe(
    runner: TaskRunner,
    items: Sequence[Item],
    backend: Backend,
    *,
    seed: int = 1234,
    max_new_tokens: int = 48,
    question_field: str | None = None,
) -> GuessingReport:
    """Ask each multiple-choice item with one wrong option masked to fill it in (see the
    module docstring); greedy generation, ``max_new_tokens``, stopping at a newline.

    The options are the spec's ``contamination.options`` / ``.gold`` fields; the question
    is the document field ``question_field``, else ``contamination.question``, else
    ``question``. The prompt goes through :meth:`TaskRunner.instruction_prompt`: under the
    runner's chat mode the backend's chat template renders it as one user turn, exactly as
    the task's own prompts are rendered (a server that applies its template gets the
    conversation), else it is sent as plain text. With the runner's thinking settings a
    reasoning block is stripped from the output before scoring.
    """
    options_field, gold_field = option_fields(runner)
    markers = runner.thinking_markers if runner.strip_thinking else None
    asked: list[tuple[Item, int, str, str]] = []
    requests: list[GenerateRequest] = []
    skipped: list[str] = []
    failed: list[tuple[str, str]] = []
    for item in items:
        options = option_texts(item.doc, options_field)
        gold = gold_index(item.doc, gold_field, len(options))
        masked = masked_option(options, gold, seed=seed, item_id=item.id)
        if masked is None:
            skipped.append(item.id)
            continue
        question = str(item.doc[_question_field(runner, item, question_field)])
        try:
            letters = _letters(runner, item, len(options))
        except LlmEvalError as exc:  # this item's data or templates, as TaskRunner.run
            failed.append((item.id, str(exc)))
            continue
        text = guessing_prompt(question, options, letters, masked)
        prompt, sent = runner.instruction_prompt(text, backend)
        asked.append((item, masked, letters[masked], prompt))
        requests.append(
            GenerateRequest(
                context=prompt,
                max_new_tokens=max_new_tokens,
                stop=("\n",),
                messages=tuple((m.role, m.content) for m in sent),
                thinking=markers,
                thinking_open=markers is not None and thinking_opened(prompt, markers[0]),
            )
        )
    outputs = backend.generate(requests) if requests else []
    if len(outputs) != len(requests):
        raise DataError(f"backend returned {len(outputs)} results for {len(requests)} requests")
    scored: list[GuessingItem] = []
    for (item, masked, letter, prompt), out in zip(asked, outputs, strict=True):
        if out.error is not None or out.finish_reason == "context_overflow":
            failed.append((item.id, out.error or "the prompt does not fit the context window"))
            continue
        target = option_texts(item.doc, options_field)[masked]
        scored.append(_scored(item.id, masked, letter, target, prompt, out.text, markers))
    return GuessingReport(
        task=runner.spec.name,
        seed=seed,
        items=tuple(scored),
        skipped=tuple(skipped),
        failed=tuple(failed),
    )


def _scored(
    item_id: str,
    masked: int,
    letter: str,
    target: str,
    prompt: str,
    output: str,
    markers: tuple[str, str] | None,
) -> GuessingItem:
    """One answered item: the guess (its first line, without a repeated option label, a
    reasoning block stripped under the thinking settings) against the masked option."""
    text = output
    if markers is not None:
        text, _ = strip_thinking(text, prompt, *markers)
    guess = _without_label(_first_line(text), letter)
    return GuessingItem(
        item_id=item_id,
        masked_index=masked,
        masked_letter=letter,
        masked_text=target,
        prompt=prompt,
        output=output,
        guess=guess,
        exact_match=bool(normalize_guess(target))
        and normalize_guess(guess) == normalize_guess(target),
        rouge_l=rouge_l(normalize(guess), normalize(target)),
    )


def guessing_vs_reference(test: GuessingReport, ref: GuessingReport) -> ReferenceComparison:
    """The verdict of TS-Guessing: the tested model's exact matches against a reference
    model's on the same items (paired by item id), one-sided exact McNemar:
    ``b`` = items the tested model guesses and the reference does not, ``c`` = the reverse,
    ``p = P(X >= b | X ~ Binomial(b + c, 1/2))``.

    Both reports must mask the same option of each paired item (same seed and data): a
    ValueError says which item differs. A small p-value says the tested model reproduces
    masked options the reference cannot; contamination explains that, and so does a
    stronger model's better guessing: pick a reference of similar ability."""
    if test.task != ref.task:
        raise ValueError(f"reports of different tasks: {test.task!r} and {ref.task!r}")
    ref_items = {i.item_id: i for i in ref.items}
    for item in test.items:
        other = ref_items.get(item.item_id)
        if other is not None and (other.masked_index, other.masked_text) != (
            item.masked_index,
            item.masked_text,
        ):
            raise ValueError(
                f"item {item.item_id}: the reports mask different options "
                f"({item.masked_index} and {other.masked_index}); run both with the same "
                "seed and data"
            )
    return compare_indicator(
        "ts_guessing",
        "exact_match",
        {i.item_id: i.exact_match for i in test.items},
        {i.item_id: i.exact_match for i in ref.items},
    )
