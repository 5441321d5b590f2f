"""One conformance suite, run against every VectorIndex backend."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from ragloop.retrieval.dense import (
    ExactIndex,
    FaissIndex,
    USearchIndex,
    VectorIndex,
    load_vector_index,
    make_vector_index,
)

DIM = 64
BACKENDS = ["exact", "usearch", "faiss", "pgvector"]  # pgvector: a real server (tests/conftest.py)


def unit(rows: int, dim: int = DIM, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def true_top(data: np.ndarray, queries: np.ndarray, n: int) -> np.ndarray:
    """Brute force with a stable sort: independent of every backend."""
    sims = queries.astype(np.float64) @ data.astype(np.float64).T
    return np.argsort(-sims, axis=1, kind="stable")[:, :n]


@pytest.fixture(params=BACKENDS)
def make(request: pytest.FixtureRequest) -> Iterator[Callable[[int], VectorIndex]]:
    backend = request.param
    made: list[VectorIndex] = []
    if backend == "pgvector":
        request.getfixturevalue("pgvector_url")  # sets RAGLOOP_PGVECTOR_URL, skips without a server

    def factory(dim: int = DIM) -> VectorIndex:
        made.append(make_vector_index(backend, dim))
        return made[-1]

    yield factory
    for index in made:  # a server table outlives the test otherwise
        drop = getattr(index, "drop", None)
        if drop is not None:
            drop()


@pytest.fixture(scope="module")
def corpus() -> tuple[np.ndarray, np.ndarray]:
    return unit(5000, seed=1), unit(50, seed=2)


def test_two_batches_give_sequential_ids_and_true_neighbours(
    make: Callable[..., VectorIndex], corpus: tuple[np.ndarray, np.ndarray]
) -> None:
    data, queries = corpus
    index = make()
    index.add(data[:3000])
    index.add(data[3000:])
    assert len(index) == len(data)
    truth = true_top(data, queries, 10)
    ids, scores = index.search_many(queries, 10)
    assert ids.shape == scores.shape == (len(queries), 10)
    assert ids.dtype == np.int64 and scores.dtype == np.float32
    recall = np.mean([len(set(a) & set(t)) / 10 for a, t in zip(ids.tolist(), truth.tolist(), strict=True)])
    assert recall >= (1.0 if index.name == "exact" else 0.95)
    # returned scores are the cosines of the returned ids, best first
    np.testing.assert_allclose(scores, np.einsum("qd,qnd->qn", queries, data[ids]), atol=1e-5)
    assert np.all(np.diff(scores, axis=1) <= 1e-7)
    # a stored vector finds itself, including one from the second batch
    for row in (7, 4321):
        got, sc = index.search(data[row], 1)
        assert got.tolist() == [row] and sc[0] == pytest.approx(1.0, abs=1e-5)


def test_single_search_matches_batch(make: Callable[..., VectorIndex]) -> None:
    data, queries = unit(300, seed=3), unit(3, seed=4)
    index = make()
    index.add(data)
    many_ids, many_scores = index.search_many(queries, 5)
    for q, ids_row, sc_row in zip(queries, many_ids, many_scores, strict=True):
        ids, scores = index.search(q, 5)
        np.testing.assert_array_equal(ids, ids_row)
        np.testing.assert_allclose(scores, sc_row, rtol=1e-6)
    # raw (unnormalised) queries rank the same and still report cosines
    ids, scores = index.search(queries[0] * 7.5, 5)
    np.testing.assert_array_equal(ids, many_ids[0])
    np.testing.assert_allclose(scores, many_scores[0], rtol=1e-5)


def test_padding_when_fewer_vectors_than_asked(make: Callable[..., VectorIndex]) -> None:
    data = unit(4, seed=5)
    index = make()
    ids, scores = index.search_many(unit(2, seed=6), 3)  # empty index
    assert ids.shape == (2, 3) and (ids == -1).all() and np.isneginf(scores).all()
    assert index.search(data[0], 3)[0].size == 0
    index.add(data)
    ids, scores = index.search_many(data[:2], 6)
    assert ids.shape == scores.shape == (2, 6)
    assert (ids[:, 4:] == -1).all() and np.isneginf(scores[:, 4:]).all()
    assert sorted(ids[0, :4].tolist()) == [0, 1, 2, 3] and ids[:, 0].tolist() == [0, 1]
    assert index.search(data[0], 6)[0].size == 4


def test_save_load_round_trip(make: Callable[..., VectorIndex], tmp_path: Path) -> None:
    data, queries = unit(1000, seed=7), unit(20, seed=8)
    index = make()
    index.add(data)
    index.save(tmp_path)
    assert json.loads((tmp_path / "vectors.json").read_text())["backend"] == index.name
    loaded = load_vector_index(tmp_path)
    assert type(loaded) is type(index) and len(loaded) == len(index)
    expected = index.search_many(queries, 10)
    for a, b in zip(expected, loaded.search_many(queries, 10), strict=True):
        np.testing.assert_array_equal(a, b)
    # saving a memory-mapped index over its own files must not corrupt them
    loaded.save(tmp_path)
    for a, b in zip(expected, load_vector_index(tmp_path).search_many(queries, 10), strict=True):
        np.testing.assert_array_equal(a, b)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("tmp-")) == []
    # a loaded index (memory-mapped where the backend can) still accepts rows
    extra = unit(5, seed=9)
    loaded.add(extra)
    assert len(loaded) == len(data) + 5
    assert loaded.search(extra[2], 1)[0].tolist() == [len(data) + 2]


def test_empty_index_round_trip(make: Callable[..., VectorIndex], tmp_path: Path) -> None:
    make().save(tmp_path)
    loaded = load_vector_index(tmp_path)
    assert len(loaded) == 0
    assert loaded.search(unit(1)[0], 3)[0].size == 0


def test_bad_inputs_raise(make: Callable[..., VectorIndex]) -> None:
    index = make()
    with pytest.raises(ValueError, match="shape"):
        index.add(unit(3, dim=DIM + 1))
    with pytest.raises(ValueError, match="shape"):
        index.add(unit(1)[0])  # 1-D rows
    bad = unit(3)
    bad[1, 5] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        index.add(bad)
    with pytest.raises(ValueError, match="normalised"):
        index.add(unit(2) * 3)
    assert len(index) == 0  # nothing half-added
    index.add(unit(10))
    with pytest.raises(ValueError, match="shape"):
        index.search(unit(1, dim=DIM - 1)[0], 3)
    with pytest.raises(ValueError, match="shape"):
        index.search_many(unit(2, dim=DIM - 1), 3)
    with pytest.raises(ValueError, match="zero length"):
        index.search(np.zeros(DIM, dtype=np.float32), 3)
    with pytest.raises(ValueError, match="NaN"):
        index.search(np.full(DIM, np.inf, dtype=np.float32), 3)


def test_exact_ties_prefer_lower_id() -> None:
    v = unit(1)[0]
    index = ExactIndex(DIM)
    index.add(np.stack([unit(1, seed=3)[0], v, v, v]))
    assert index.search(v, 2)[0].tolist() == [1, 2]
    assert index.search_many(v[None, :], 3)[0].tolist() == [[1, 2, 3]]


def test_auto_picks_exact_below_threshold_and_usearch_above() -> None:
    assert isinstance(make_vector_index("auto", 8, expected_size=999, ann_threshold=1000), ExactIndex)
    assert isinstance(make_vector_index("auto", 8, expected_size=1001, ann_threshold=1000), USearchIndex)
    assert isinstance(make_vector_index("auto", 8), ExactIndex)
    assert isinstance(make_vector_index("faiss", 8), FaissIndex)
    with pytest.raises(ValueError, match="backend"):
        make_vector_index("annoy", 8)  # type: ignore[arg-type]


def test_load_without_manifest_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no readable vector index"):
        load_vector_index(tmp_path)


@pytest.mark.parametrize(
    ("modules", "backend", "extra"),
    [(("usearch", "usearch.index"), "usearch", "ann"), (("faiss",), "faiss", "faiss")],
)
def test_missing_optional_library_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, modules: tuple[str, ...], backend: str, extra: str
) -> None:
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)  # makes `import name` raise ImportError
    with pytest.raises(ImportError, match=rf"ragloop\[{extra}\]"):
        make_vector_index(backend, 8)  # type: ignore[arg-type]
    if backend == "usearch":  # auto degrades to exact instead of failing a default install
        assert isinstance(make_vector_index("auto", 8, expected_size=10**6), ExactIndex)
