from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from ragloop.config.pipeline import LexicalConfig
from ragloop.retrieval.lexical import BM25Index
from ragloop.text.tokenize import Tokenizer

DOCS = [
    "To list a directory tree recursively, call os.walk on the root.",  # 0: the identifier
    "The os module wraps the operating system. Take a walk in the park.",  # 1: both words apart
    "Set the memory limit with --memory or in daemon.json.",
    "Cats sleep most of the day.",
    "Walking is healthy; the os is an operating system.",
]


def _index(docs: list[str] = DOCS, **cfg: object) -> BM25Index:
    index = BM25Index(LexicalConfig.model_validate(cfg))
    index.build(docs)
    return index


def test_identifier_query_prefers_the_identifier() -> None:
    index = _index()
    ids, scores = index.top("os.walk", 5)
    assert ids[0] == 0
    assert set(ids.tolist()) >= {0, 1}
    assert np.all(np.diff(scores) <= 0)


def test_prose_query_reaches_identifier_parts() -> None:
    ids, _ = _index().top("memory limit", 3)
    assert ids[0] == 2


def test_scores_match_the_lucene_formula() -> None:
    """An independent BM25 (Lucene idf) over the same tokens must give the same numbers."""
    k1, b = 1.2, 0.75
    docs = Tokenizer().tokenize_many(DOCS)
    n, avg = len(docs), sum(map(len, docs)) / len(docs)
    df = Counter(t for d in docs for t in set(d))
    query = "os.walk operating system walk"
    expected = np.zeros(n)
    for term in Tokenizer().tokenize(query):
        if term not in df:
            continue
        idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
        for i, d in enumerate(docs):
            tf = d.count(term)
            expected[i] += idf * tf / (tf + k1 * (1 - b + b * len(d) / avg))
    got = _index(k1=k1, b=b).scores(query)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_top_filters_zero_scores_limits_and_breaks_ties_by_index() -> None:
    docs = ["apple pie", "banana", "apple pie", "cherry", "apple pie"]
    index = _index(docs)
    ids, scores = index.top("apple", 10)
    assert ids.tolist() == [0, 2, 4]  # identical docs tie: lower index first, no zero scores
    assert scores[0] == scores[1] == scores[2] > 0
    assert ids.dtype == np.int64 and scores.dtype == np.float32
    assert index.top("apple", 2)[0].tolist() == [0, 2]
    assert index.top("apple", 0)[0].size == 0


@pytest.mark.parametrize("method", ["bm25l", "bm25+"])
def test_floor_methods_only_return_matching_docs(method: str) -> None:
    index = _index(method=method)
    assert (index.scores("cats") > 0).all()  # BM25L/+ give every doc a floor...
    assert index.top("cats", 5)[0].tolist() == [3]  # ...but only a matching doc is a hit


def test_unknown_terms_and_empty_queries() -> None:
    index = _index()
    assert not index.scores("zyxwv qqq").any()
    assert index.top("zyxwv", 3)[0].size == 0
    assert not index.scores("").any() and index.scores("").shape == (len(DOCS),)
    assert not index.scores("the of and").any()  # only stopwords
    np.testing.assert_array_equal(index.scores("cats zyxwv"), index.scores("cats"))


@pytest.mark.parametrize("method", ["lucene", "bm25+"])
def test_save_load_round_trip(tmp_path: Path, method: str) -> None:
    index = _index(method=method)
    index.save(tmp_path)
    loaded = BM25Index.load(tmp_path, LexicalConfig(method=method))  # type: ignore[arg-type]
    assert len(loaded) == len(index)
    for q in ["os.walk", "memory limit", "operating system walk", "nothing here"]:
        np.testing.assert_array_equal(loaded.scores(q), index.scores(q))
        np.testing.assert_array_equal(loaded.top(q, 3)[0], index.top(q, 3)[0])
    loaded.save(tmp_path)  # over its own memory-mapped files
    again = BM25Index.load(tmp_path, LexicalConfig(method=method))  # type: ignore[arg-type]
    np.testing.assert_array_equal(again.scores("os.walk memory"), index.scores("os.walk memory"))


def test_load_rejects_other_config(tmp_path: Path) -> None:
    _index().save(tmp_path)
    with pytest.raises(ValueError, match="rebuild"):
        BM25Index.load(tmp_path, LexicalConfig(k1=2.0))
    with pytest.raises(ValueError, match="no readable"):
        BM25Index.load(tmp_path / "missing", LexicalConfig())


@pytest.mark.parametrize("docs", [[], [""], ["", "the of"]])
def test_degenerate_collections(tmp_path: Path, docs: list[str]) -> None:
    index = _index(docs)
    assert len(index) == len(docs)
    assert index.scores("anything").shape == (len(docs),)
    assert index.top("anything", 5)[0].size == 0
    index.save(tmp_path)
    loaded = BM25Index.load(tmp_path, LexicalConfig())
    assert len(loaded) == len(docs)
    assert loaded.scores("anything").shape == (len(docs),)


def test_rebuild_replaces_previous_collection() -> None:
    index = _index()
    index.build(["only cats here"])
    assert len(index) == 1
    assert index.top("os.walk", 5)[0].size == 0
    assert index.top("cats", 5)[0].tolist() == [0]
