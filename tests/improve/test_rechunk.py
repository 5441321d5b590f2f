"""Per-document re-chunking: only the affected document changes, as a new generation; revert
restores its chunks, ids, vectors and override; a later ingest keeps the override; a failure
half-way leaves the previous generation serving."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ragloop.config import Settings
from ragloop.improve.auditor import Verdict
from ragloop.improve.clock import ManualClock
from ragloop.improve.remediate import run_pass
from ragloop.improve.remediation import ActionSpec, RechunkAction
from ragloop.improve.scheduler import Outcome, Policy
from ragloop.improve.types import ActionKind
from ragloop.ingest.registry import DocumentOverride, RegistryTxn
from ragloop.retrieval import rechunk as rechunk_module
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.rechunk import rechunk_document
from ragloop.store import ImprovementAction, Store
from tests.agent.conftest import HASHED
from tests.improve.remediation_support import context

pytestmark = pytest.mark.usefixtures("kb_backend")  # embedded files and PostgreSQL

SMALL = HASHED.with_overrides(chunking={"size": 120, "overlap": 0, "min_size": 10})
SENTENCE = (
    "Its lighthouse, rebuilt after the great storm of 1930 by the engineer Marta Quill, "
    "shows a white light every six seconds across the bay."
)
"""136 characters: at size 120 it is split across two chunks (a chunking failure)."""
LONG = (
    "# Harbour\n\n"
    "The harbour of Ostria was dredged in 1921 to admit larger steamers. "
    + SENTENCE
    + " The harbour master keeps the tide tables in the old customs house by the pier. "
    "Ferries to the islands leave from the eastern quay twice a day in summer."
)
DOCS = {"harbour.md": LONG, "other.md": "# Other\n\nThe Ostria museum opened in 1950 with a gallery of maps."}


def small_collection(root: Path, files: dict[str, str]) -> Collection:
    """Collection `kb` over `files` (relative path -> text) written under `root`, chunked `SMALL`."""
    root.mkdir()
    for rel, text in files.items():
        (root / rel).write_text(text)
    c = Collection("kb", Settings())
    c.ingest([root], SMALL)
    return c


@pytest.fixture
def coll(tmp_path: Path) -> Iterator[Collection]:
    c = small_collection(tmp_path / "docs", DOCS)
    yield c
    c.close()


@pytest.fixture
def store(sqlite_store: Store) -> Store:
    return sqlite_store


def _state(coll: Collection, rel: str) -> tuple[list[tuple[str, str]], np.ndarray, dict[str, DocumentOverride]]:
    gen = coll.load()
    idx = [i for i, c in enumerate(gen.chunks) if c.metadata.get("source") == rel]
    return (
        [(gen.chunks[i].chunk_id, gen.chunks[i].text) for i in idx],
        np.asarray(gen.vectors)[idx].copy(),
        coll.registry.document_overrides(),
    )


def test_apply_and_revert_round_trip(coll: Collection, store: Store) -> None:
    before, vec_before, ov_before = _state(coll, "harbour.md")
    other_before, other_vec, _ = _state(coll, "other.md")
    gen0 = coll.generation()
    assert len(before) >= 3 and ov_before == {}
    spec = ActionSpec(
        action_id="act1",
        kind=ActionKind.RECHUNK_DOCUMENT,
        component="doc:kb/harbour.md",
        domain="kb",
        # as the diagnosis pass proposes it: the straddling sentence is in the chunking evidence
        evidence={"confidence": 0.8, "diagnosis": {"kind": "chunking", "sentence": SENTENCE}},
        payload={"collection": "kb", "question": "How often does the lighthouse flash?", "doc_id": "harbour.md"},
    )
    action = RechunkAction(spec)
    ctx = context(store, coll, ManualClock(), config=SMALL, paraphrases=False)
    group = action.group(ctx)
    assert group.questions == ("How often does the lighthouse flash?",) and group.passages == (SENTENCE,)
    assert not any(SENTENCE in t for _, t in before)  # it straddles a boundary now
    change = action.apply(ctx)
    assert any(SENTENCE in t for _, t in _state(coll, "harbour.md")[0])  # whole in one chunk after
    after, _, ov_after = _state(coll, "harbour.md")
    assert coll.generation() == gen0 + 1
    assert ov_after["harbour.md"].size == 192 and ov_after["harbour.md"].overlap == 48  # 120 x 1.6, a quarter
    assert after != before and SENTENCE in after[1][1]
    assert _state(coll, "other.md")[0] == other_before  # only the affected document changed
    assert change.revert["generation_before"] == gen0 and change.revert["override_before"] is None

    action.revert(ctx, change)
    restored, vec_restored, ov_restored = _state(coll, "harbour.md")
    assert restored == before and np.array_equal(vec_restored, vec_before)
    assert ov_restored == {} and coll.generation() == gen0 + 2  # pointers only move forward
    other, vec_other, _ = _state(coll, "other.md")
    assert other == other_before and np.array_equal(vec_other, other_vec)
    assert [c.chunk_id for c in coll.load().chunks][: len(before)] == [c for c, _ in before]  # order kept


def test_a_later_ingest_keeps_the_override(coll: Collection, tmp_path: Path) -> None:
    rechunk_document(coll, "harbour.md", DocumentOverride("harbour.md", 300, 60, "test"), SMALL)
    after, _, _ = _state(coll, "harbour.md")
    summary = coll.ingest([tmp_path / "docs"], SMALL)
    assert summary.changed == 0 and summary.unchanged == 2  # the file's fingerprint matches its override
    assert _state(coll, "harbour.md")[0] == after
    (tmp_path / "docs" / "harbour.md").write_text(LONG + " A new quay opened in 1990.")
    coll.ingest([tmp_path / "docs"], SMALL)  # a real change is chunked with the override too
    texts = [t for _, t in _state(coll, "harbour.md")[0]]
    assert max(len(t) for t in texts) > 120


@pytest.mark.parametrize("where", ["embed", "commit"])
def test_a_failure_half_way_leaves_the_previous_generation(
    coll: Collection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    before, vec_before, _ = _state(coll, "harbour.md")
    gen0 = coll.generation()

    def boom(*_a: object, **_k: object) -> None:
        raise RuntimeError(f"injected failure at {where}")

    if where == "embed":
        monkeypatch.setattr(rechunk_module, "make_embedder", boom)
    else:
        monkeypatch.setattr(RegistryTxn, "set_state", boom)
    with pytest.raises(RuntimeError, match="injected"):
        rechunk_document(coll, "harbour.md", DocumentOverride("harbour.md", 300, 60, "test"), SMALL)
    monkeypatch.undo()
    assert coll.generation() == gen0
    chunks, vectors, overrides = _state(coll, "harbour.md")
    assert chunks == before and np.array_equal(vectors, vec_before) and overrides == {}
    assert coll.storage.rows(gen0 + 1) is None  # nothing staged is left behind
    r = rechunk_document(coll, "harbour.md", DocumentOverride("harbour.md", 300, 60, "test"), SMALL)  # works after
    assert r.generation_after == gen0 + 1


def test_a_document_changed_on_disk_is_not_rechunked(coll: Collection, tmp_path: Path) -> None:
    (tmp_path / "docs" / "harbour.md").write_text(LONG + " Edited.")
    with pytest.raises(Exception, match="changed on disk"):
        rechunk_document(coll, "harbour.md", DocumentOverride("harbour.md", 300, 60, "test"), SMALL)


def _propose_lighthouse(store: Store, coll: Collection, key: str | None = None, **sizes: int) -> ImprovementAction:
    """The chunking failure on harbour.md as the diagnosis pass proposes it (`sizes`: the payload's
    size/overlap instead of the remediation's growth rule; `key`: another dedupe key than the
    generation's, to propose it again)."""
    return store.improvement_actions.propose(
        ActionKind.RECHUNK_DOCUMENT.value,
        "doc:kb/harbour.md",
        key or f"generation:{coll.generation()}",
        domain="kb",
        answer_ids=["a1"],
        evidence={"confidence": 0.8, "diagnosis": {"kind": "chunking", "sentence": SENTENCE}},
        payload={
            "collection": "kb",
            "question": "Who rebuilt the lighthouse after the storm?",
            "doc_id": "harbour.md",
            **sizes,
        },
    ).action


def test_a_rechunk_that_joins_the_sentence_is_kept_by_the_auditor(coll: Collection, store: Store) -> None:
    clock = ManualClock()
    _propose_lighthouse(store, coll)
    ctx = context(store, coll, clock, config=SMALL.with_overrides(retrieval={"k": 2}))
    policy = Policy(audit_window_s=3600)
    [applied] = run_pass(store, SMALL, clock=clock, policy=policy, context=ctx).scheduled
    assert applied.outcome is Outcome.APPLIED
    row = store.improvement_actions.get(applied.action_id)
    assert row is not None and row.expected_delta is not None
    assert row.expected_delta["from"] == "preview" and row.expected_delta["value"] == 1.0  # measured, not promised
    clock.advance(3601)
    [audit] = run_pass(store, SMALL, clock=clock, policy=policy, context=ctx).audited
    assert audit.verdict is Verdict.KEPT and audit.delta is not None
    assert audit.delta.before == 0.0 and audit.delta.lo > 0
    assert audit.delta.diff == row.expected_delta["value"]  # the preview was the index it then wrote
    assert "harbour.md" in coll.registry.document_overrides()


def test_a_rechunk_whose_preview_cannot_gain_is_rejected_before_it_is_written(coll: Collection, store: Store) -> None:
    """Size 125 still cuts the 136-character sentence: the in-memory preview finds it in no top-2
    hit, so nothing is re-chunked, no generation is written and nothing waits for an audit."""
    clock = ManualClock()
    action = _propose_lighthouse(store, coll, size=125, overlap=0)
    generation, before = coll.generation(), _state(coll, "harbour.md")
    ctx = context(store, coll, clock, config=SMALL.with_overrides(retrieval={"k": 2}))
    [result] = run_pass(store, SMALL, clock=clock, policy=Policy(audit_window_s=3600), context=ctx).scheduled
    assert result.outcome is Outcome.REJECTED and result.detail.startswith("preview: target recall 0.000 -> 0.000")
    row = store.improvement_actions.get(action.action_id)
    assert row is not None and row.status == "rejected"
    assert coll.generation() == generation
    after = _state(coll, "harbour.md")
    assert after[0] == before[0] and after[2] == before[2]


def test_the_preview_tries_larger_sizes_and_applies_the_smallest_that_gains(coll: Collection, store: Store) -> None:
    """Growth x1.25 from 120: size 150 (overlap 38) still cuts the sentence, 188 (overlap 47) holds
    it whole. With one step the action is rejected; with three, 188 is written (not 234)."""
    clock = ManualClock()
    k2 = SMALL.with_overrides(retrieval={"k": 2})
    one = _propose_lighthouse(store, coll)
    ctx = context(store, coll, clock, config=k2, rechunk_growth=1.25, rechunk_steps=1)
    [rejected] = run_pass(store, SMALL, clock=clock, policy=Policy(audit_window_s=3600), context=ctx).scheduled
    assert rejected.action_id == one.action_id and rejected.outcome is Outcome.REJECTED
    generation = coll.generation()

    _propose_lighthouse(store, coll, key="retry")
    ctx = context(store, coll, clock, config=k2, rechunk_growth=1.25, rechunk_steps=3)
    [applied] = run_pass(store, SMALL, clock=clock, policy=Policy(audit_window_s=3600), context=ctx).scheduled
    assert applied.outcome is Outcome.APPLIED and "at size 188/overlap 47" in applied.detail
    assert coll.generation() == generation + 1
    override = coll.registry.document_overrides()["harbour.md"]
    assert (override.size, override.overlap) == (188, 47)
