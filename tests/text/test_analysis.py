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


def test_ungrounded_entities_need_every_word_of_a_name_in_one_passage() -> None:
    from ragloop.text.analysis import ungrounded_entities

    marshal = "marshal.version: indicates the format that the module uses."
    assert ungrounded_entities("What was the Marshall Plan?", [marshal]) == ["Marshall Plan"]
    assert ungrounded_entities("What was the Marshall Plan?", ["The Marshall Plan was an aid program."]) == []
    # each word somewhere, but never together in one passage, is not a mention
    assert ungrounded_entities("Where is Port Louis?", ["A port.", "Louis wrote it."]) == ["Port Louis"]
    # stems: a plural name matches its singular; questions without names are never flagged
    assert ungrounded_entities("When did the Normans arrive?", ["The Norman conquest began."]) == []
    assert ungrounded_entities("how do I walk a directory tree?", ["nothing relevant"]) == []


def test_ungrounded_entities_forgive_inflection_and_a_typo_but_not_another_name() -> None:
    from ragloop.text.analysis import ungrounded_entities

    assert ungrounded_entities("How long did Western Europe control Cyprus?", ["western European rule of Cyprus"]) == []
    assert ungrounded_entities("What were the origins of the Raouliii family?", ["The Raoulii family"]) == []
    assert ungrounded_entities("Who wrote for Jackson?", ["json.dumps serialises"]) == ["Jackson"]


def test_api_names_in_a_question_are_not_names_to_ground() -> None:
    from ragloop.text.analysis import ungrounded_entities

    passage = "exception multiprocessing.ProcessError: the base class of all multiprocessing exceptions."
    assert ungrounded_entities("How do I use multiprocessing.ProcessError?", [passage]) == []
    assert ungrounded_entities("What does ipaddress.IPv4Interface.with_prefixlen return?", ["nothing"]) == []


def test_ungrounded_entities_ignore_a_lone_capital_opening_a_sentence() -> None:
    from ragloop.text.analysis import ungrounded_entities

    unrelated = ["A passage about floods and insurance."]
    # a lone capitalised word opening a sentence
    assert ungrounded_entities("Sorry, I want to ask what we do after a flood.", unrelated) == []
    assert ungrounded_entities("That is fine. Anyway, what about floods?", unrelated) == []
    assert ungrounded_entities("Briefly narrate the story of this novel.", unrelated) == []
    # names with company, or inside a sentence, still count
    assert ungrounded_entities("Electoral College rules?", unrelated) == ["Electoral College"]
    assert ungrounded_entities("So, do you have a number for Vanguard?", unrelated) == ["Vanguard"]
    assert ungrounded_entities("Who painted the Golden Gate Bridge?", unrelated) == ["Golden Gate Bridge"]
