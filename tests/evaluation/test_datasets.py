"""Dataset loaders on the real shared files: counts, id normalisation, last-turn extraction."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ragloop.evaluation.datasets import (
    DatasetError,
    cacm_number,
    default_datasets_dir,
    load_cacm,
    load_mtrag,
    load_squad2,
    parse_cacm_topics,
)
from ragloop.ingest.loaders import load_file
from tests.conftest import DATASETS


def test_default_dir_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RAGLOOP_DATASETS", str(tmp_path))
    assert default_datasets_dir() == tmp_path
    monkeypatch.delenv("RAGLOOP_DATASETS")
    assert default_datasets_dir().parts[-2:] == ("shared", "datasets")
    with pytest.raises(DatasetError, match="not found"):
        load_squad2(tmp_path)


def test_squad2_counts_ids_and_gold() -> None:
    ds = load_squad2(DATASETS)
    assert len(ds.passages) == 458
    assert len(ds.questions) == 4313
    assert len(ds.answerable()) == 2036
    assert ds.passages[0].doc_id == "Normans_p000"
    assert len(ds.passage_ids()) == 458
    cc = next(p for p in ds.passages if p.doc_id.startswith("Computational_complexity_theory_p"))
    assert cc.title == "Computational complexity theory"
    q = ds.questions[0]
    assert q.question == "In what country is Normandy located?"
    assert q.paragraph_id == "Normans_p000" and q.answers == ("France",) and not q.is_impossible
    impossible = [q for q in ds.questions if q.is_impossible]
    assert impossible and all(not q.answers and q.plausible_answers for q in impossible)
    queries = ds.queries()
    assert len(queries) == 2036 and dict(queries[0].relevant) == {"Normans_p000": 1}
    assert len(ds.queries(include_impossible=True)) == 4313
    assert all(next(iter(qq.relevant)) in ds.passage_ids() for qq in queries)


def test_mtrag_corpus_is_the_union_of_contexts_and_the_question_is_the_last_user_turn() -> None:
    ds = load_mtrag(DATASETS)
    assert len(ds.tasks) == 397
    assert len(ds.passages) == 858
    ids = ds.passage_ids()
    assert all(set(t.context_ids) <= ids for t in ds.tasks)
    assert {t.answerability for t in ds.tasks} == {"ANSWERABLE", "PARTIAL", "UNANSWERABLE", "UNDERSPECIFIED"}
    assert all(not t.context_ids for t in ds.tasks if t.answerability == "UNANSWERABLE")
    assert len(ds.retrieval_tasks()) == 259
    assert len(ds.retrieval_tasks(["ANSWERABLE"])) == 220

    first = ds.tasks[0]
    assert first.task_id.endswith("<::>7") and first.turn == 7 and first.domain == "fiqa"
    assert first.turns[-1].speaker == "user"
    assert first.question == first.turns[-1].text
    assert first.question.startswith("I mean current EV's battery")
    assert len(first.user_turns()) == 7
    latest_first = first.history_query()
    assert latest_first.startswith(first.question)
    assert latest_first.rstrip().endswith("How to pay with cash when car shopping?")
    assert first.history_query(latest_first=False).startswith("How to pay with cash")
    assert "cashier's" in first.history_query(("user", "agent"))

    q = ds.queries()[0]
    assert q.text == ds.retrieval_tasks()[0].question
    assert set(q.relevant) == set(ds.retrieval_tasks()[0].context_ids)
    variants = ds.queries(query="user_turns_latest_first")
    assert [v.qid for v in variants] == [x.qid for x in ds.queries()]


def test_cacm_ids_compare_as_numbers() -> None:
    assert cacm_number("CACM-0115") == cacm_number("CACM-115") == 115
    with pytest.raises(DatasetError):
        cacm_number("doc-1")
    ds = load_cacm(DATASETS)
    assert len(ds.passages) == 3204
    assert len(ds.topics) == 64
    assert len(ds.judged_topics()) == 52
    assert sum(len(v) for v in ds.qrels.values()) == 796
    ids = ds.passage_ids()
    # qrels say CACM-46 / CACM-756; the loader stores the corpus's padded spelling
    assert all(d in ids for rel in ds.qrels.values() for d in rel)
    assert all(d.startswith("CACM-") and len(d) == 9 for rel in ds.qrels.values() for d in rel)
    raw = (DATASETS / "cacm" / "qrels.cacm.txt").read_text().split()
    assert "CACM-46" in raw and "CACM-0046" in {d for rel in ds.qrels.values() for d in rel}
    queries = ds.queries()
    assert len(queries) == 52
    assert queries[0].text.startswith("What articles exist which deal with TSS")
    two = next(q for q in queries if q.qid == "2")
    assert "Pooch, U." in two.text and "\n" not in two.text


def test_topic_parser() -> None:
    text = "<DOC>\n<DOCNO> 7 </DOCNO>\n\n  line one\nline two\n</DOC>\n<DOC><DOCNO>8</DOCNO>x</DOC>"
    topics = parse_cacm_topics(text)
    assert [(t.number, t.text) for t in topics] == [(7, "line one line two"), (8, "x")]


def test_write_corpus_is_idempotent_and_loads_as_records(tmp_path: Path) -> None:
    ds = load_squad2(DATASETS)
    path = ds.write_corpus(tmp_path)
    assert path == tmp_path / "squad2.jsonl"
    os.utime(path, (1_000_000, 1_000_000))
    assert ds.write_corpus(tmp_path) == path
    assert path.stat().st_mtime == 1_000_000  # identical content is not rewritten
    first = json.loads(path.read_text().splitlines()[0])
    assert first == {"id": "Normans_p000", "text": ds.passages[0].text, "title": "Normans"}
    docs = load_file(path, tmp_path)
    assert len(docs) == 458
    assert docs[0].doc_id == "squad2.jsonl#Normans_p000" and docs[0].title == "Normans"
    assert ds.passage_id(docs[0].doc_id) == "Normans_p000"
    path.write_text("changed\n")
    ds.write_corpus(tmp_path)
    assert path.read_text() == ds.corpus_jsonl()


def test_cacm_corpus_records_have_no_title_key(tmp_path: Path) -> None:
    ds = load_cacm(DATASETS)
    path = ds.write_corpus(tmp_path)
    rec = json.loads(path.read_text().splitlines()[0])
    assert set(rec) == {"id", "text"} and rec["id"].startswith("CACM-")
    assert ds.passage_id(f"cacm.jsonl#{rec['id']}") == rec["id"]
