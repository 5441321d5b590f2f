"""Lexical reading of questions: aspects, entities, numbers, coverage."""

from __future__ import annotations

from ragloop.text.analysis import aspects, coverage, entities, numbers


def test_entities_drop_leading_question_and_function_words() -> None:
    found = entities("Did Krellmark sign the Treaty of Paris? In 1066 William of Normandy invaded.")
    assert found == {"Krellmark", "Treaty of Paris", "William of Normandy"}
    assert entities("What is the capital?") == set()


def test_numbers_normalise_separators_and_ordinals() -> None:
    assert numbers("In 1,024 cases, the 3rd run took 2.5 s (12%).") == {"1024", "3", "2.5", "12%"}


def test_coverage_names_what_is_missing_in_the_questions_words() -> None:
    a = aspects("In what year did Rollo sign the treaty with Charles III?")
    score, missing = coverage(a, "Rollo signed the treaty of Saint-Clair-sur-Epte.")
    assert 0 < score < 1
    assert "Charles III" in missing
    assert a.word("treati") == "treaty"
    full, none = coverage(a, "In 911 Rollo signed a treaty with King Charles III; that year mattered.")
    assert full == 1.0 and none == []
