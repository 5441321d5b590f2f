from __future__ import annotations

import time

import pytest
import Stemmer

from ragloop.text.tokenize import ENGLISH_STOPWORDS, Tokenizer

STEM = Stemmer.Stemmer("english").stemWord


@pytest.fixture
def raw() -> Tokenizer:
    """No stemming, no stopwords: the surface forms the spec lists, unchanged."""
    return Tokenizer(stemmer="none", stopwords=False)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("os.walk", ["os.walk", "os", "walk"]),
        ("daemon.json", ["daemon.json", "daemon", "json"]),
        ("--memory", ["--memory", "memory"]),
        ("snake_case_name", ["snake_case_name", "snake", "case", "name"]),
        ("CamelCase", ["camelcase", "camel", "case"]),
        ("__init__", ["__init__", "init"]),
        ("3.11", ["3.11"]),
        ("1.2.3", ["1.2.3"]),
        ("C++", ["c++"]),
        ("C#", ["c#"]),
        ("std::vector", ["std::vector", "std", "vector"]),
        (".env", [".env", "env"]),
    ],
)
def test_identifiers_kept_whole_and_split(raw: Tokenizer, text: str, expected: list[str]) -> None:
    assert raw.tokenize(text) == expected


@pytest.mark.parametrize(
    ("text", "whole"),
    [
        ("Call os.walk.", "os.walk"),
        ("Edit daemon.json, then restart.", "daemon.json"),
        ("Requires Python 3.11.", "3.11"),
        ("Pass --memory!", "--memory"),
        ("Written in C++.", "c++"),
        ("(see __init__)", "__init__"),
    ],
)
def test_sentence_punctuation_is_not_part_of_a_token(raw: Tokenizer, text: str, whole: str) -> None:
    tokens = raw.tokenize(text)
    assert whole in tokens
    assert not any(t.endswith((".", ",", "!", ")")) or t.startswith("(") for t in tokens)


def test_punctuation_runs_do_not_make_flags_or_dotfiles(raw: Tokenizer) -> None:
    assert raw.tokenize("wait...and ---x -- y") == ["wait", "and", "x", "y"]


def test_lowercases_plain_words(raw: Tokenizer) -> None:
    assert raw.tokenize("Hello WORLD") == ["hello", "world"]


def test_stems_words_but_not_whole_identifiers() -> None:
    tok = Tokenizer()
    assert tok.tokenize("running files") == [STEM("running"), STEM("files")]
    assert STEM("running") != "running"  # the check above would be vacuous otherwise
    # the whole identifier keeps its surface form; its parts are analysed like words so
    # that the prose query "memory settings" meets `--memory` and `user_settings`
    assert tok.tokenize("--memory user_settings") == [
        "--memory",
        STEM("memory"),
        "user_settings",
        STEM("user"),
        STEM("settings"),
    ]
    assert set(tok.tokenize("memory settings")) <= set(tok.tokenize("--memory user_settings"))


def test_stopwords_removed_from_words_only() -> None:
    tok = Tokenizer(stemmer="none")
    assert {"the", "is", "of"} <= ENGLISH_STOPWORDS
    assert tok.tokenize("the value of is_valid") == ["value", "is_valid", "valid"]
    assert Tokenizer(stemmer="none", stopwords=False).tokenize("the value") == ["the", "value"]


def test_rejects_unknown_stemmer() -> None:
    with pytest.raises(ValueError, match="stemmer"):
        Tokenizer(stemmer="klingon")  # type: ignore[arg-type]


def test_deterministic_and_cache_transparent() -> None:
    text = "Use os.walk and CamelCase with --memory in 3.11. " * 3
    a, b = Tokenizer(), Tokenizer()
    first = a.tokenize(text)
    assert a.tokenize(text) == first == b.tokenize(text)
    assert a.tokenize_many([text, "", text]) == [first, [], first]


def test_tokenizing_megabytes_is_fast() -> None:
    words = ["alpha", "os.walk", "Running", "CamelCase", "the", "--flag", "v1.2.3", "daemon.json"]
    text = " ".join(f"{w}{i % 5000}" if i % 3 else w for i, w in enumerate(words * 40_000))
    assert len(text) > 2_000_000
    start = time.perf_counter()
    Tokenizer().tokenize(text)
    assert time.perf_counter() - start < 5.0
