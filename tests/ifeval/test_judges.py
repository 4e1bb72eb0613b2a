"""IFEval's reference judges: seeded langdetect, and the choice of judges per evaluation."""

from __future__ import annotations

import pytest

from pytest_llmeval.ifeval import HEURISTIC, evaluate_item, text_judges

langdetect = pytest.importorskip("langdetect")

from pytest_llmeval.ifeval import langdetect_language  # noqa: E402


def test_langdetect_is_deterministic() -> None:
    # "Hello" is short enough that unseeded langdetect answers differently across calls
    # (measured: 'fi' or 'no'); seeded, every call gives one answer.
    answers = {langdetect_language("Hello") for _ in range(30)}
    assert len(answers) == 1


def test_langdetect_leaves_the_global_factory_unseeded() -> None:
    langdetect_language("Bonjour tout le monde, comment allez-vous aujourd'hui ?")
    assert langdetect.DetectorFactory.seed is None


def test_langdetect_languages_and_undetermined_text() -> None:
    assert langdetect_language("Das ist ein Satz, der auf Deutsch geschrieben ist.") == "de"
    assert langdetect_language("This sentence is written in plain English.") == "en"
    assert langdetect_language("12345 !!!") is None


def test_judges_are_chosen_per_evaluation() -> None:
    ids, kwargs = ["language:response_language"], [{"language": "de"}]
    german = "Das ist eine kurze Antwort, die ganz und gar auf Deutsch geschrieben ist."
    for judges in (HEURISTIC, text_judges("langdetect", "heuristic")):
        assert evaluate_item("p", german, ids, kwargs, judges).prompt_strict
        assert not evaluate_item("p", "In English.", ids, kwargs, judges).prompt_strict


def test_text_judges_labels_and_unknown_names() -> None:
    judges = text_judges("langdetect", "heuristic", {"language": "langdetect 1.0.9"})
    assert judges.labels == {"language": "langdetect 1.0.9", "sentences": "heuristic"}
    with pytest.raises(ValueError, match="language judge"):
        text_judges("fasttext", "heuristic")
    with pytest.raises(ValueError, match="sentence judge"):
        text_judges("langdetect", "spacy")
