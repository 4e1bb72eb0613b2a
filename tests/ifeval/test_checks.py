"""IFEval checks: hand-written passing and failing responses for every instruction,
strict vs loose scoring, the accuracies, the no-library heuristics, and the real data.

The response texts here are written for these tests; no benchmark item is copied. The
data tests read the shared IFEval file beside the checkout and skip when it is absent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_llmeval.ifeval import (
    INSTRUCTIONS,
    IFEvalResult,
    InstructionResult,
    aggregate,
    check_instruction,
    count_sentences,
    count_words,
    detect_language,
    evaluate_item,
    loose_variants,
    split_sentences,
    word_tokens,
)

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "benchmarks"
IFEVAL_DATA = SHARED / "ifeval" / "input_data.jsonl"

EXPECTED_IDS = {
    "keywords:existence",
    "keywords:frequency",
    "keywords:forbidden_words",
    "keywords:letter_frequency",
    "language:response_language",
    "length_constraints:number_sentences",
    "length_constraints:number_paragraphs",
    "length_constraints:number_words",
    "length_constraints:nth_paragraph_first_word",
    "detectable_content:number_placeholders",
    "detectable_content:postscript",
    "detectable_format:number_bullet_lists",
    "detectable_format:constrained_response",
    "detectable_format:number_highlighted_sections",
    "detectable_format:multiple_sections",
    "detectable_format:json_format",
    "detectable_format:title",
    "combination:two_responses",
    "combination:repeat_prompt",
    "startend:end_checker",
    "startend:quotation",
    "change_case:capital_word_frequency",
    "change_case:english_capital",
    "change_case:english_lowercase",
    "punctuation:no_comma",
}

# (instruction id, kwargs, a response that follows it, a response that does not)
CASES: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "keywords:existence",
        {"keywords": ["river", "lantern"]},
        "A Lantern glowed by the riverbank.",
        "A lantern glowed by the lake.",
    ),
    (
        "keywords:frequency",
        {"keyword": "tide", "frequency": 3, "relation": "at least"},
        "Tide in, tide out, the TIDE turns.",
        "The tide turns; the tide rests.",
    ),
    (
        "keywords:frequency",
        {"keyword": "maybe", "frequency": 2, "relation": "less than"},
        "Maybe tomorrow.",
        "Maybe tomorrow, maybe not.",
    ),
    (
        "keywords:forbidden_words",
        {"forbidden_words": ["storm", "rain"]},
        "Brainstorming under a rainbow is allowed.",
        "A Storm is coming over the hills.",
    ),
    (
        "keywords:letter_frequency",
        {"letter": "z", "let_frequency": 2, "let_relation": "less than"},
        "A lazy afternoon.",
        "Zany zebras.",
    ),
    (
        "keywords:letter_frequency",
        {"letter": "!", "let_frequency": 3, "let_relation": "at least"},
        "Go! Go! Go!",
        "Go! Go.",
    ),
    (
        "language:response_language",
        {"language": "de"},
        "Das ist ein kurzer Satz, und ich schreibe ihn auf Deutsch.",
        "This is a short sentence, and I am writing it in English.",
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 3, "relation": "less than"},
        "The sky is grey. Will it rain?",
        "The sky is grey. Will it rain? Mr. Lee thinks so.",
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 2, "relation": "at least"},
        "Dr. Ruiz arrived at noon. She left at five!",
        "Dr. Ruiz arrived at noon and left at five",
    ),
    (
        "length_constraints:number_paragraphs",
        {"num_paragraphs": 2},
        "***\nThe first part.\n***\nThe second part.\n***",
        "The first part.\n***\n***\nThe second part.",
    ),
    (
        "length_constraints:number_words",
        {"num_words": 5, "relation": "at least"},
        "one two three four five",
        "one two three four",
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 3, "nth_paragraph": 2, "first_word": "harbor"},
        'The town wakes.\n\n"Harbor, lights fade.\n\nBoats leave.',
        "The town wakes.\n\nThe harbor lights fade.\n\nBoats leave.",
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 1, "first_word": "harbor"},
        "Harbor lights.\n\nBoats leave.",
        "Harbor lights.\n\nBoats leave.\n\nGulls cry.",
    ),
    (
        "detectable_content:number_placeholders",
        {"num_placeholders": 2},
        "Dear [name], see you at [place].",
        "Dear [name], see you soon.",
    ),
    (
        "detectable_content:postscript",
        {"postscript_marker": "P.S."},
        "Thanks for coming.\n\np. s. Bring snacks next time.",
        "Thanks for coming. PS bring snacks next time.",
    ),
    (
        "detectable_content:postscript",
        {"postscript_marker": "P.P.S"},
        "See you.\nP.S. One.\nP.P.S Two.",
        "See you.\nP.S. Only one.",
    ),
    (
        "detectable_format:number_bullet_lists",
        {"num_bullets": 2},
        "Fruit:\n* apples\n  - pears\n**Note:** ripe only",
        "* apples\n* pears\n* plums",
    ),
    (
        "detectable_format:constrained_response",
        {},
        "My answer is maybe.",
        "My answer is: yes.",
    ),
    (
        "detectable_format:number_highlighted_sections",
        {"num_highlights": 2},
        "*First* and **Second** part",
        "*First* and ** ** and *\n*",
    ),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "SECTION", "num_sections": 2},
        "SECTION 1\nIntro.\nSECTION 2\nBody.",
        "SECTION 1\nIntro.\nSection 2\nBody.",
    ),
    (
        "detectable_format:json_format",
        {},
        '```json\n{"answer": [1, 2]}\n```',
        '{"answer": [1, 2],}',
    ),
    (
        "detectable_format:title",
        {},
        "<<Ode to Rain>>\nDrops on the roof.",
        "<< >> and <<broken\ntitle>>",
    ),
    (
        "combination:two_responses",
        {},
        "Tea is calming.\n******\nCoffee is bracing.",
        "Tea is calming.\n******\nTea is calming.",
    ),
    (
        "combination:repeat_prompt",
        {"prompt_to_repeat": "Write a haiku about frogs."},
        "  write a haiku about frogs. Green frog leaps, the pond ripples.",
        "Sure. Write a haiku about frogs. Green frog leaps.",
    ),
    (
        "startend:end_checker",
        {"end_phrase": "Any questions?"},
        'That is all. any questions?"\n',
        "Any questions? Thanks.",
    ),
    (
        "startend:quotation",
        {},
        '  "Hello there."  ',
        '"Hello there.',
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 3, "capital_relation": "at least"},
        "THIS is VERY important, OK?",
        "This is Very important, Ok?",
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "less than"},
        "Only ONE shout here.",
        "DON'T do that.",
    ),
    (
        "change_case:english_capital",
        {},
        "THIS IS ALL IN CAPITALS AND IN ENGLISH.",
        "This is not all in capitals.",
    ),
    (
        "change_case:english_capital",
        {},
        "THE WEATHER IS FINE.",
        "DAS WETTER IST HEUTE SCHÖN UND WARM.",
    ),
    (
        "change_case:english_lowercase",
        {},
        "this is all lower case and in english.",
        "This Has Capitals.",
    ),
    (
        "change_case:english_lowercase",
        {},
        "the weather is fine.",
        "das wetter ist heute schön und warm.",
    ),
    (
        "punctuation:no_comma",
        {},
        "No commas here at all.",
        "Well, there is one.",
    ),
]


# --------------------------------------------------------------------------- registry


def test_registry_has_every_instruction_of_the_paper_data() -> None:
    assert set(INSTRUCTIONS) == EXPECTED_IDS
    for instruction_id, instruction in INSTRUCTIONS.items():
        assert instruction.id == instruction_id


def test_every_instruction_has_hand_written_cases() -> None:
    assert {case[0] for case in CASES} == EXPECTED_IDS


@pytest.mark.parametrize(
    ("instruction_id", "kwargs", "follows", "violates"),
    CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)],
)
def test_check_passes_and_fails(
    instruction_id: str, kwargs: dict[str, Any], follows: str, violates: str
) -> None:
    assert check_instruction(instruction_id, follows, kwargs, "a prompt") is True
    assert check_instruction(instruction_id, violates, kwargs, "a prompt") is False
    result = evaluate_item("a prompt", follows, [instruction_id], [kwargs])
    assert result.strict == (True,)
    assert result.loose == (True,)


def test_none_kwargs_are_ignored() -> None:
    # The Hugging Face copy of the data lists every argument, None where unused.
    all_params = {p for instruction in INSTRUCTIONS.values() for p in instruction.params}
    for instruction_id, kwargs, follows, violates in CASES:
        padded = {p: None for p in all_params} | kwargs
        assert check_instruction(instruction_id, follows, padded) is True
        assert check_instruction(instruction_id, violates, padded) is False
    no_args = dict.fromkeys(all_params)
    assert evaluate_item("p", "No commas.", ["punctuation:no_comma"], [no_args]).strict == (True,)


def test_unknown_instruction_id_is_named() -> None:
    with pytest.raises(ValueError, match="detectable_format:haiku"):
        evaluate_item("p", "r", ["punctuation:no_comma", "detectable_format:haiku"], [{}, {}])
    with pytest.raises(ValueError, match="detectable_format:haiku"):
        check_instruction("detectable_format:haiku", "r", {})


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match=r"missing argument.*num_words"):
        evaluate_item("p", "r", ["length_constraints:number_words"], [{"relation": "at least"}])
    with pytest.raises(ValueError, match=r"unexpected argument.*colour"):
        evaluate_item("p", "r", ["punctuation:no_comma"], [{"colour": "red"}])
    with pytest.raises(ValueError, match="more than"):
        # validated even when the response is blank and so fails without being checked
        evaluate_item(
            "p",
            "",
            ["length_constraints:number_words"],
            [{"relation": "more than", "num_words": 3}],
        )
    with pytest.raises(ValueError, match="2 instruction ids but 1 kwargs"):
        evaluate_item("p", "r", ["punctuation:no_comma", "startend:quotation"], [{}])


# --------------------------------------------------------------------------- relations


@pytest.mark.parametrize(
    ("relation", "threshold", "expected"),
    [
        ("at least", 3, True),  # 3 >= 3
        ("at least", 4, False),
        ("less than", 4, True),  # 3 < 4
        ("less than", 3, False),
    ],
)
def test_relations_at_the_boundary(relation: str, threshold: int, expected: bool) -> None:
    text = "alpha beta gamma"
    words = {"relation": relation, "num_words": threshold}
    assert check_instruction("length_constraints:number_words", text, words) is expected
    sentences = {"relation": relation, "num_sentences": threshold}
    text = "One. Two! Three?"
    assert check_instruction("length_constraints:number_sentences", text, sentences) is expected
    capitals = {"capital_relation": relation, "capital_frequency": threshold}
    text = "ONE TWO THREE four"
    assert check_instruction("change_case:capital_word_frequency", text, capitals) is expected
    letters = {"let_relation": relation, "let_frequency": threshold, "letter": "a"}
    assert check_instruction("keywords:letter_frequency", "bAnana", letters) is expected
    keyword = {"relation": relation, "frequency": threshold, "keyword": "ab"}
    assert check_instruction("keywords:frequency", "ab AB aB", keyword) is expected


def test_integral_float_arguments_are_accepted() -> None:
    kwargs = {"relation": "at least", "num_words": 2.0}
    assert check_instruction("length_constraints:number_words", "a b", kwargs) is True
    with pytest.raises(ValueError, match="num_words"):
        check_instruction("length_constraints:number_words", "a b", {**kwargs, "num_words": 2.5})


# --------------------------------------------------------------------------- strict vs loose


def test_loose_variants_follow_the_reference_order() -> None:
    assert loose_variants("*a*\nb\n*c*") == (
        "*a*\nb\n*c*",
        "a\nb\nc",
        "b\n*c*",
        "*a*\nb",
        "b",
        "b\nc",
        "a\nb",
        "b",
    )


def test_markdown_preamble_fails_strict_and_passes_loose() -> None:
    response = 'Sure! Here it is:\n```json\n{"city": "Oslo"}\n```'
    result = evaluate_item("p", response, ["detectable_format:json_format"], [{}])
    assert result.strict == (False,)
    assert result.loose == (True,)
    assert not result.prompt_strict
    assert result.prompt_loose


def test_loose_forgives_a_closing_line_and_asterisks() -> None:
    ids = ["startend:quotation", "punctuation:no_comma", "startend:end_checker"]
    kwargs: list[Mapping[str, Any]] = [{}, {}, {"end_phrase": "Bye now."}]
    response = '**"A quiet reply. Bye now."**\nHope this helps, friend!'
    result = evaluate_item("p", response, ids, kwargs)
    assert result.strict == (False, False, False)
    assert result.loose == (True, True, True)


def test_blank_response_follows_nothing() -> None:
    ids = ["punctuation:no_comma", "keywords:forbidden_words", "language:response_language"]
    kwargs: list[dict[str, Any]] = [{}, {"forbidden_words": ["x"]}, {"language": "en"}]
    for blank in ("", "  \n\t "):
        result = evaluate_item("p", blank, ids, kwargs)
        assert result.strict == (False, False, False)
        assert result.loose == (False, False, False)


def test_prompt_level_needs_every_instruction() -> None:
    ids = ["punctuation:no_comma", "startend:quotation"]
    result = evaluate_item("p", "Plain text, no quotes", ids, [{}, {}])
    assert result.instruction_ids == tuple(ids)
    assert result.strict == (False, False)
    result = evaluate_item("p", '"Quoted, with a comma"', ids, [{}, {}])
    assert result.strict == (False, True)
    assert not result.prompt_strict
    assert result.to_dict() == {
        "instruction_ids": ids,
        "strict": [False, True],
        "loose": [False, True],
        "prompt_strict": False,
        "prompt_loose": False,
    }
    assert evaluate_item("p", "anything", [], []).prompt_strict  # nothing to follow


def test_aggregate_the_four_accuracies() -> None:
    def result(*outcomes: tuple[bool, bool]) -> IFEvalResult:
        return IFEvalResult(
            tuple(InstructionResult("punctuation:no_comma", s, lo) for s, lo in outcomes)
        )

    results = [
        result((True, True), (True, True)),
        result((False, True), (True, True)),
        result((False, False), (False, True), (True, True)),
        result((False, False)),
    ]
    assert aggregate(results) == {
        "prompt_level_strict_acc": 1 / 4,
        "inst_level_strict_acc": 4 / 8,
        "prompt_level_loose_acc": 2 / 4,
        "inst_level_loose_acc": 6 / 8,
    }
    assert all(math.isnan(v) for v in aggregate([]).values())


# --------------------------------------------------------------------------- heuristics


def test_word_and_sentence_counting() -> None:
    assert count_words("It's a well-known fact: 3.5 apples!") == 9  # runs of \w
    assert split_sentences("Hello there. Mr. Smith met J. Doe, e.g. at 5 p.m. today!") == [
        "Hello there.",
        "Mr. Smith met J. Doe, e.g. at 5 p.m. today!",
    ]
    assert count_sentences("One line\nwith no end") == 1  # newlines do not split
    assert count_sentences('He said "stop." Then he left... And so? Yes.') == 4
    assert count_sentences("Version 3.5 is out. See example.com for more") == 2
    assert count_sentences("") == 0


def test_word_tokens_split_punctuation_and_contractions() -> None:
    assert word_tokens("DON'T panic, IT'S well-known (U.S.)!") == [
        "DO",
        "N'T",
        "panic",
        "IT",
        "'S",
        "well-known",
        "U.S",
    ]


# Short sentences written for these tests, one per language of the IFEval data (plus a few
# more the reference lists).
LANGUAGE_SAMPLES = {
    "ar": "هذه جملة قصيرة وأنا أكتب باللغة العربية.",
    "bg": "Това е кратко изречение и аз пиша на български.",
    "bn": "এটি একটি ছোট বাক্য।",
    "de": "Das ist ein kurzer Satz und ich schreibe auf Deutsch.",
    "en": "This is a short sentence and I am writing it in English.",
    "es": "Esta es una frase corta y la escribo en español.",
    "fa": "این یک جمله کوتاه است و من به فارسی می‌نویسم.",
    "fi": "Tämä on lyhyt lause ja kirjoitan sen suomeksi.",
    "fr": "C'est une phrase courte et je l'écris en français.",
    "gu": "આ એક નાનું વાક્ય છે.",
    "hi": "यह एक छोटा सा वाक्य है और मैं हिंदी में लिख रहा हूँ।",
    "it": "Questa è una frase breve e sto scrivendo in italiano.",
    "ja": "これは短い文です。",
    "kn": "ಇದು ಒಂದು ಸಣ್ಣ ವಾಕ್ಯ.",
    "ko": "이것은 짧은 문장입니다.",
    "mr": "हे एक छोटे वाक्य आहे आणि मी मराठीत लिहित आहे.",
    "ne": "यो एउटा सानो वाक्य हो र म नेपालीमा लेख्दैछु।",
    "pa": "ਇਹ ਇੱਕ ਛੋਟਾ ਵਾਕ ਹੈ।",
    "pl": "To jest krótkie zdanie i piszę je po polsku.",
    "pt": "Esta é uma frase curta e eu estou escrevendo em português.",
    "ru": "Это короткое предложение, и я пишу по-русски.",
    "sw": "Hii ni sentensi fupi kwa Kiswahili na ninaandika kwa ajili yako.",
    "ta": "இது ஒரு சிறிய வாக்கியம்.",
    "te": "ఇది ఒక చిన్న వాక్యం.",
    "th": "นี่คือประโยคสั้นๆ",
    "uk": "Це коротке речення, і я пишу українською.",
    "ur": "یہ ایک چھوٹا سا جملہ ہے اور میں اردو میں لکھ رہا ہوں۔",
    "vi": "Đây là một câu ngắn bằng tiếng Việt.",
    "zh": "这是一个短句子。",
}


@pytest.mark.parametrize("language", sorted(LANGUAGE_SAMPLES))
def test_detect_language(language: str) -> None:
    text = LANGUAGE_SAMPLES[language]
    assert detect_language(text) == language
    assert detect_language(text.upper()) == language
    # A few English words in a longer answer do not change its language.
    assert detect_language(f"{text} OK, AI. {text}") == language


def test_undetermined_language_counts_as_followed() -> None:
    for text in ("12345 !!!", "😀 ✓", "—"):
        assert detect_language(text) is None
        assert check_instruction("language:response_language", text, {"language": "ko"})
    assert not check_instruction("change_case:english_capital", "12345", {})  # nothing upper


# --------------------------------------------------------------------------- the real data


def _items() -> list[dict[str, Any]]:
    if not IFEVAL_DATA.is_file():
        pytest.skip(f"IFEval data not found at {IFEVAL_DATA} (shared/benchmarks beside the repo)")
    with IFEVAL_DATA.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def items() -> list[dict[str, Any]]:
    return _items()


def test_every_instruction_and_argument_of_the_data_is_supported(
    items: list[dict[str, Any]],
) -> None:
    assert len(items) == 541
    seen: set[str] = set()
    for item in items:
        for instruction_id, kwargs in zip(item["instruction_id_list"], item["kwargs"], strict=True):
            assert instruction_id in INSTRUCTIONS, instruction_id
            present = {k for k, v in kwargs.items() if v is not None}
            assert present == set(INSTRUCTIONS[instruction_id].params), (instruction_id, kwargs)
            seen.add(instruction_id)
    assert seen == EXPECTED_IDS


def test_every_item_evaluates(items: list[dict[str, Any]]) -> None:
    all_params = {p for instruction in INSTRUCTIONS.values() for p in instruction.params}
    synthetic = "Sure! Here it is:\n*Title*\n\nA short answer, in English. P.S. done\n***\nEnd."
    for item in items:
        ids, kwargs, prompt = item["instruction_id_list"], item["kwargs"], item["prompt"]
        padded = [{p: None for p in all_params} | k for k in kwargs]
        for response in ("", prompt, synthetic):
            result = evaluate_item(prompt, response, ids, kwargs)
            assert len(result.instructions) == len(ids)
            assert all(not s or lo for s, lo in zip(result.strict, result.loose, strict=True))
            assert evaluate_item(prompt, response, ids, padded) == result
        assert not evaluate_item(prompt, "", ids, kwargs).prompt_loose


# Arbitrary text, salted with the markup the checks look for.
_FRAGMENTS = ["*", "**", "***", "******", "- ", "\n", "\n\n", "[x]", "<<t>>", '"', "```json"]
_FRAGMENTS += ["P.S.", "p. p. s", "SECTION 1", "Section 2", ". ", "! ", "{", "}", ",", "..."]
_TEXT = st.lists(st.one_of(st.text(max_size=12), st.sampled_from(_FRAGMENTS)), max_size=25).map(
    "".join
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), text=_TEXT)
def test_checks_are_total_on_arbitrary_text(
    items: list[dict[str, Any]], data: st.DataObject, text: str
) -> None:
    item = items[data.draw(st.integers(0, len(items) - 1), label="item")]
    for instruction_id, kwargs in zip(item["instruction_id_list"], item["kwargs"], strict=True):
        outcome = check_instruction(instruction_id, text, kwargs, item["prompt"])
        assert isinstance(outcome, bool)
    result = evaluate_item(item["prompt"], text, item["instruction_id_list"], item["kwargs"])
    assert all(isinstance(b, bool) for b in (*result.strict, *result.loose))
