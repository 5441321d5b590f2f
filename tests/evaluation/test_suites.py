"""Suites built from the shared data: gold, refusal targets, multi-turn history, sampling."""

from __future__ import annotations

from collections import Counter

import pytest

from ragloop.evaluation.ablations import ABLATIONS, load_config
from ragloop.evaluation.suites import load_suite, sample_items


def test_squad_items_and_the_gate_subset() -> None:
    suite = load_suite("squad")
    kinds = Counter(i.kind for i in suite.items)
    assert kinds == {"answerable": 2036, "unanswerable": 2277}
    ans = next(i for i in suite.items if not i.should_refuse)
    imp = next(i for i in suite.items if i.should_refuse)
    assert ans.gold_docs == ans.topic_docs and ans.answers
    assert imp.gold_docs == () and imp.topic_docs  # its paragraph is on topic, not gold
    assert suite.doc_prefix == "squad2.jsonl#"
    sub = load_suite("squad", articles=["Normans", "1973_oil_crisis"])
    assert sub.dataset is not None and len(sub.dataset.passages) == 63
    assert {i.meta["title"] for i in sub.items} == {"Normans", "1973_oil_crisis"}
    assert sub.collection_name != suite.collection_name
    with pytest.raises(ValueError, match="unknown SQuAD articles"):
        load_suite("squad", articles=["Nope"])


def test_mtrag_items_feed_earlier_user_turns() -> None:
    suite = load_suite("mtrag")
    assert len(suite.items) == 397
    kinds = Counter(i.kind for i in suite.items)
    assert kinds == {"answerable": 220, "unanswerable": 74, "underspecified": 64, "partial": 39}
    multi = next(i for i in suite.items if len(i.history) >= 2)
    assert multi.question not in multi.history and multi.reference
    # the reference replies travel with the user turns, aligned, to seed the thread
    assert len(multi.history_replies) == len(multi.history) and multi.history_replies[0] not in multi.history
    assert all(len(i.history_replies) == len(i.history) for i in suite.items)
    assert all(i.gold_docs == () for i in suite.items if i.should_refuse)
    assert all(i.gold_docs for i in suite.items if i.kind in ("answerable", "partial"))


def test_stratified_sampling_is_fixed_by_seed() -> None:
    items = load_suite("squad").items
    s1 = sample_items(items, sample=100, seed=0)
    assert len(s1) == 100 and s1 == sample_items(items, sample=100, seed=0)
    assert s1 != sample_items(items, sample=100, seed=1)
    assert Counter(i.kind for i in s1) == {"unanswerable": 53, "answerable": 47}  # 2277/4313 of 100, rounded
    assert [i.id for i in sample_items(items, limit=3)] == [i.id for i in items[:3]]
    picked = sample_items(items, ids=[items[5].id, items[2].id])
    assert [i.id for i in picked] == [items[5].id, items[2].id]
    with pytest.raises(ValueError, match="unknown item ids"):
        sample_items(items, ids=["nope"])


def test_shipped_ablations_differ_only_where_they_say() -> None:
    configs = {name: load_config(name)[1] for name in ABLATIONS}
    assert len({c.version_id for c in configs.values()}) == len(ABLATIONS)
    base, full = configs["baseline"], configs["full"]
    assert base.retrieval.mode == "dense" and not base.agent.rewrite and base.agent.tau_lower == 0.0
    assert full.retrieval.rerank.enabled and full.agent.critique and full.agent.tau_upper == 0.7
    assert configs["no_refine"].model_copy(update={"name": "full"}).agent.refine is False
    for toggle, knob in (
        ("no_critique", "critique"),
        ("no_rewrite", "rewrite"),
        ("no_citation_validation", "validate_citations"),
    ):
        diff = configs[toggle].agent.model_dump()
        assert diff.pop(knob) is False and full.agent.model_dump() | {knob: False} == configs[toggle].agent.model_dump()
    assert len({c.index_fingerprint() for c in configs.values()}) == 1  # one index serves them all
