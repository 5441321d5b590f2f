"""Collection-wide chunking: a version whose chunking differs from the collection's index is served
from its own index variant, which follows the primary; the chunking buffer fits a chunk size on
the pooled failures and registers it as a candidate only when its interval says it gains."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragloop.agent.runtime import Runtime
from ragloop.config import PipelineConfig
from ragloop.improve.clock import ManualClock
from ragloop.improve.remediate import make_context, run_pass
from ragloop.improve.remediation import ActionSpec, ChunkingBufferAction, Effect
from ragloop.improve.remediation.chunking import spent_before
from ragloop.improve.scheduler import Outcome, Policy
from ragloop.improve.types import ActionKind
from ragloop.ingest.registry import DocumentOverride
from ragloop.retrieval.collection import Collection, CollectionError, list_collections
from ragloop.retrieval.rechunk import rechunk_document
from ragloop.retrieval.storage import stored_collection_names
from ragloop.retrieval.variants import IndexVariant, drop_variant, index_for, preview_variant, prune_variants
from ragloop.store import Store
from tests.improve.remediation_support import context
from tests.improve.test_rechunk import DOCS, SENTENCE, SMALL, small_collection

pytestmark = pytest.mark.usefixtures("kb_backend")  # embedded files and PostgreSQL

WIDE = SMALL.with_overrides(chunking={"size": 300, "overlap": 0})
SECOND = (
    "Its tramway, laid along the northern shore in 1908 by the Ostria Traction Company, "
    "carried fishermen from the eastern quay to the market square."
)
"""137 characters: like SENTENCE, cut in two at size 120."""
MORE = {
    **DOCS,
    "tram.md": "# Tram\n\nThe old depot still stands behind the station and is now a small workshop. "
    + SECOND
    + " It closed in 1961, when the last car was sold to a museum in the capital.",
}
POOLED = (
    ("harbour.md", "After the storm, who rebuilt the lighthouse?"),
    ("harbour.md", "Which person rebuilt the lighthouse once the storm was over?"),
    ("harbour.md", "The lighthouse was rebuilt after the storm by whom?"),
    ("tram.md", "Who laid the tramway along the northern shore?"),
    ("tram.md", "Which company laid the tramway on the northern shore?"),
    ("tram.md", "The tramway along the northern shore was laid by whom?"),
    ("tram.md", "By whom was the tramway along the northern shore laid?"),
)
"""Seven more failed questions: with the action's own, four on each sentence."""
QUESTIONS = {
    "harbour.md": ("Who rebuilt the lighthouse after the storm?", SENTENCE),
    "tram.md": ("Who laid the tramway along the northern shore?", SECOND),
}


@pytest.fixture
def coll(tmp_path: Path) -> Iterator[Collection]:
    c = small_collection(tmp_path / "docs", MORE)
    yield c
    c.close()


@pytest.fixture
def store(sqlite_store: Store) -> Store:
    return sqlite_store


def _whole(collection: Collection, sentence: str) -> bool:
    return any(sentence in c.text for c in collection.load().chunks)


def test_a_version_with_other_chunking_is_served_from_its_own_variant(coll: Collection) -> None:
    assert index_for(coll, SMALL) is coll
    assert index_for(coll, SMALL.with_overrides(retrieval={"k": 1})) is coll  # query-time knobs share the index
    runtime = Runtime.build(coll, WIDE)
    variant = runtime.retriever.collection
    assert isinstance(variant, IndexVariant) and variant.primary is coll
    assert _whole(variant, SENTENCE) and _whole(variant, SECOND)
    assert not _whole(coll, SENTENCE) and coll.generation() == 1  # the primary is untouched
    assert variant.registry.get_state("fingerprint") == WIDE.index_fingerprint()
    assert set(variant.registry.files()) == set(coll.registry.files())
    assert list_collections(coll.settings) == ["kb"]  # derived data, not a collection users made
    assert index_for(variant, WIDE) is variant and index_for(variant, SMALL) is coll


def test_the_variant_follows_every_change_of_the_primary(coll: Collection, tmp_path: Path) -> None:
    variant = index_for(coll, WIDE)
    assert isinstance(variant, IndexVariant)
    first = variant.load()
    assert variant.sync() == first.manifest.generation  # level with the primary: nothing to do

    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "fair.md").write_text("# Fair\n\nThe autumn fair fills the market square every October with stalls.")
    coll.ingest([extra], SMALL)
    assert any(c.metadata.get("source") == "fair.md" for c in variant.load().chunks)

    # a per-document re-chunk larger than the variant's size carries over; a smaller one would not
    rechunk_document(coll, "harbour.md", DocumentOverride("harbour.md", 400, 0, "test"), SMALL)
    harbour = [c for c in variant.load().chunks if c.metadata.get("source") == "harbour.md"]
    assert len(harbour) == 1 and SENTENCE in harbour[0].text

    coll.delete_documents(["tram.md"])
    assert not any(c.metadata.get("source") == "tram.md" for c in variant.load().chunks)
    assert "tram.md" not in variant.registry.files()
    generation = variant.generation()
    rechunk_document(coll, "other.md", DocumentOverride("other.md", 150, 0, "test"), SMALL)  # moves the primary only
    assert variant.load().manifest.generation == generation  # same chunks: the marker moves, not the generation


def _chunking_failure(store: Store, doc_id: str, version: str, question: str | None = None) -> str:
    """An answer with a completed chunking-failure diagnosis of `doc_id`, as the diagnosis pass leaves it."""
    asked, sentence = QUESTIONS[doc_id]
    question = question or asked
    answer = store.queries.record_answer(session_id="s", question=question, answer_text="?", pipeline_version=version)
    store.diagnoses.open(answer.answer_id, reasons=["correction"], collection="kb")
    evidence = {"kind": "chunking", "doc_id": doc_id, "sentence": sentence, "chunk_ids": ["a", "b"]}
    store.diagnoses.complete(
        answer.answer_id,
        failure_mode="chunking_failure",
        confidence=0.9,
        evidence=evidence,
        actions=[],
        rule="split",
        diagnosis_input={"question": question},
        collection="kb",
        pipeline_version=version,
    )
    return answer.answer_id


def test_the_chunking_fit_registers_the_size_that_joins_the_sentences(coll: Collection, store: Store) -> None:
    """From 120, growth x1.6, four failed questions on each of two sentences: at 192 one sentence
    is found whole in a top-2 hit (4 of 8 questions gain: the bootstrap interval is above 0, but the
    exact one-sided p is 1/16, 42/256 for the family of both sizes: not shown), at 307 both are (8 of
    8: p = 1/256): the candidate is 307. The action names one failure; the others join from the
    version's pool. Nothing is written to the collection's index."""
    clock = ManualClock()
    k2 = SMALL.with_overrides(retrieval={"k": 2})
    mine = _chunking_failure(store, "harbour.md", k2.version_id)
    for doc_id, asked in POOLED:
        _chunking_failure(store, doc_id, k2.version_id, question=asked)
    action = store.improvement_actions.propose(
        ActionKind.CHUNKING_BUFFER.value,
        "chunking_buffer:kb",
        f"{k2.version_id}:generation:{coll.generation()}",
        domain="kb",
        answer_ids=[mine],
        payload={"collection": "kb"},
        priority=0.5,
    ).action
    generation = coll.generation()
    ctx = context(store, coll, clock, config=k2, chunking_buffer_size=2, chunking_steps=2, paraphrases=False)
    [result] = run_pass(store, k2, clock=clock, policy=Policy(audit_window_s=3600), context=ctx).scheduled
    assert result.action_id == action.action_id and result.outcome is Outcome.APPLIED
    row = store.improvement_actions.get(action.action_id)
    assert row is not None and row.status == "applied"
    [candidate] = [v for v in store.pipelines.list_versions() if v.created_by == "remediation:chunking_buffer"]
    [note] = store.audit.listed(action_types=["chunking_refit"])[0]
    trials = note.evidence["trials"]
    assert candidate.config["chunking"]["size"] == 307 and candidate.parent_version_id == k2.version_id
    assert coll.generation() == generation and not _whole(coll, SENTENCE)
    variant = index_for(coll, PipelineConfig.model_validate(candidate.config))
    assert isinstance(variant, IndexVariant) and variant.exists() and not variant.behind()  # built at once
    assert _whole(variant, SENTENCE) and _whole(variant, SECOND)
    assert [(t["size"], t["qualifies"]) for t in trials] == [(192, False), (307, True)]
    assert note.evidence["alpha"] == 0.025  # two sizes tried: each at 97.5%
    # 8 of 16 items of full information differ: this look may spend half the 0.025 budget
    assert note.evidence["allowance"] == 0.0125 == note.evidence["p_family_level"]
    assert note.evidence["chosen_size"] == 307
    assert note.evidence["focus"] == {"documents": 3, "of": 3}  # 20 hits a question reach every document here
    again = ActionSpec(
        action_id="y", kind=ActionKind.CHUNKING_BUFFER, component="chunking_buffer:kb", payload={"collection": "kb"}
    )
    assert ChunkingBufferAction(again).ready(ctx) == "no new chunking failure since the last fit on 8"
    _chunking_failure(store, "tram.md", k2.version_id, question="Which company built the tramway?")
    assert ChunkingBufferAction(again).ready(ctx) is None
    assert [(t["gain"]["before"], t["gain"]["after"], t["gain"]["p"], t["p_family"]) for t in trials] == [
        (0.0, 0.5, 0.0625, 0.164062),  # 42/256: P(192 gains 4 or 307 gains 4+ net)
        (0.0, 1.0, 0.003906, 0.003906),
    ]
    assert trials[0]["gain"]["lo"] > 0.0  # what the percentile interval alone would have let through
    # the look spent its exact test's attained size (1/256: only 8 of 8 gaining reaches 0.0125); the
    # next look at this version's pool is held to its allowance less that, and spends from there
    assert note.evidence["spent_before"] == 0.0 and note.evidence["spent"] == pytest.approx(1 / 256, abs=1e-6)
    assert spent_before(store, "kb", k2.version_id) == pytest.approx(1 / 256, abs=1e-6)
    second = ChunkingBufferAction(again).apply(ctx).notes[0].evidence
    assert second["items"] == 9 and second["spent_before"] == pytest.approx(1 / 256, abs=1e-6)
    assert second["allowance"] == pytest.approx(0.025 * 9 / 16, abs=1e-6)
    assert second["p_family_level"] == pytest.approx(0.025 * 9 / 16 - 1 / 256, abs=1e-6)
    assert 0.0 < second["spent"] <= second["p_family_level"]
    assert spent_before(store, "kb", SMALL.version_id) == 0.0  # another version's pool: a budget of its own
    # once the looks have spent it all, a grown pool is no reason to look again
    evidence = {**second, "spent": 0.025 - 1 / 256}
    store.audit.record("chunking_refit", triggered_by="test", evidence=evidence, pipeline_version_before=k2.version_id)
    _chunking_failure(store, "harbour.md", k2.version_id, question="Who drew the harbour plans?")
    assert ChunkingBufferAction(again).ready(ctx) == "the error budget of this version's pool is spent"


def test_the_pool_is_the_serving_versions_and_no_size_that_cannot_gain_is_registered(
    coll: Collection, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another version's failure does not fill the buffer. One growth step (x1.05: 126) still cuts
    both sentences: the fit records its trial, on a preview of its focus, and registers nothing."""
    from ragloop.improve.remediation import chunking

    previewed: list[dict[str, Any]] = []

    def spy(primary: Collection, config: PipelineConfig, **kwargs: Any) -> Collection:
        previewed.append(kwargs)
        return preview_variant(primary, config, **kwargs)

    monkeypatch.setattr(chunking, "preview_variant", spy)
    k2 = SMALL.with_overrides(retrieval={"k": 2})
    question, sentence = QUESTIONS["harbour.md"]
    spec = ActionSpec(
        action_id="x",
        kind=ActionKind.CHUNKING_BUFFER,
        component="chunking_buffer:kb",
        payload={"collection": "kb", "items": [{"question": question, "sentence": sentence, "doc_id": "harbour.md"}]},
    )
    ctx = context(store, coll, ManualClock(), config=k2, chunking_steps=1, rechunk_growth=1.05, chunking_buffer_size=2)
    _chunking_failure(store, "tram.md", "pv-other")
    assert ChunkingBufferAction(spec).ready(ctx) == "chunking buffer 1/2 documents"
    _chunking_failure(store, "tram.md", k2.version_id)
    action = ChunkingBufferAction(spec)
    assert action.ready(ctx) is None
    change = action.apply(ctx)
    assert change.effect is Effect.RECORD and change.candidate_version is None
    [trial] = change.notes[0].evidence["trials"]
    assert trial["size"] == 126 and not trial["qualifies"]
    assert change.notes[0].evidence["chosen_size"] is None
    assert change.summary.endswith("no candidate (no size qualified)")
    assert change.notes[0].evidence["documents"] == 2
    serving, grown = previewed  # the serving size is previewed like the sizes it is compared with
    for kwargs in (serving, grown):
        assert kwargs["focus"] == serving["focus"] and kwargs["document_overrides"] is False
    assert {"harbour.md", "tram.md"} <= kwargs["focus"] and kwargs["rest"] is ctx.collections("kb")
    assert change.notes[0].evidence["focus"] == {"documents": len(kwargs["focus"]), "of": 3}
    assert not any(v.created_by == "remediation:chunking_buffer" for v in store.pipelines.list_versions())


def test_a_document_re_chunked_for_its_own_failure_still_counts_for_the_size(coll: Collection, store: Store) -> None:
    """harbour.md was re-chunked (400) for its failures before the fit ran: on the patched index its
    four questions look fixed at every size, and 307 would gain on tram.md's four alone (p = 1/16,
    nothing qualifies). The fit compares the sizes on the focus without per-document re-chunks, so
    all eight failures say what 307 does for documents no failure has named: the candidate is 307.
    The patch keeps serving."""
    k2 = SMALL.with_overrides(retrieval={"k": 2})
    for doc_id, asked in (("harbour.md", QUESTIONS["harbour.md"][0]), *POOLED):
        _chunking_failure(store, doc_id, k2.version_id, question=asked)
    rechunk_document(coll, "harbour.md", DocumentOverride("harbour.md", 400, 0, "test"), SMALL)
    assert _whole(coll, SENTENCE) and not _whole(coll, SECOND)
    spec = ActionSpec(
        action_id="z", kind=ActionKind.CHUNKING_BUFFER, component="chunking_buffer:kb", payload={"collection": "kb"}
    )
    ctx = context(store, coll, ManualClock(), config=k2, chunking_buffer_size=2, chunking_steps=2, paraphrases=False)
    change = ChunkingBufferAction(spec).apply(ctx)
    trials = change.notes[0].evidence["trials"]
    assert [(t["size"], t["gain"]["before"], t["gain"]["after"]) for t in trials] == [(192, 0.0, 0.5), (307, 0.0, 1.0)]
    assert change.notes[0].evidence["chosen_size"] == 307 and change.candidate_version is not None
    assert _whole(coll, SENTENCE)  # the serving index keeps its re-chunk


def test_a_preview_matches_the_variant_it_would_become(coll: Collection) -> None:
    preview = preview_variant(coll, WIDE)
    variant = index_for(coll, WIDE)
    assert [c.chunk_id for c in preview.load().chunks] == [c.chunk_id for c in variant.load().chunks]
    assert variant.generation() == 1


def test_a_focused_preview_rechunks_only_the_focus(coll: Collection) -> None:
    """A fit re-chunks and embeds the documents its questions' hits come from; every other one is
    read from the serving index as it is, chunks and vectors."""
    full, focused = preview_variant(coll, WIDE), preview_variant(coll, WIDE, focus={"harbour.md"}, rest=coll)
    served = coll.load()

    def of(index: Collection, doc: str) -> list[tuple[str, str]]:
        return [(c.chunk_id, c.text) for c in index.load().chunks if c.doc_id == doc]

    assert of(focused, "harbour.md") == of(full, "harbour.md") and _whole(focused, SENTENCE)
    assert of(focused, "other.md") == of(coll, "other.md") and of(focused, "tram.md") == of(coll, "tram.md")
    assert not _whole(focused, SECOND) and _whole(full, SECOND)  # tram.md kept its serving chunks
    kept = {c.chunk_id: i for i, c in enumerate(served.chunks)}
    mine = focused.load()
    for i, c in enumerate(mine.chunks):
        if c.doc_id != "harbour.md":
            assert (mine.vectors[i] == served.vectors[kept[c.chunk_id]]).all()


def test_the_remediation_context_acts_on_the_serving_index(coll: Collection, store: Store) -> None:
    ctx, resolver = make_context(store, WIDE, settings=coll.settings)
    try:
        served = ctx.collections("kb")
        assert isinstance(served, IndexVariant) and _whole(served, SENTENCE)
        assert ctx.expansion_backend("kb") is not None
    finally:
        resolver.close()


def test_a_variant_that_cannot_catch_up_serves_its_last_index(
    coll: Collection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """harbour.md changes on disk without a re-ingest, then the primary moves (another root's
    ingest): the variant cannot rebuild from that source, so it serves what it has, logs why, and
    does not try again on every read until the primary moves once more."""
    from ragloop.retrieval import variants

    variant = index_for(coll, WIDE)
    assert isinstance(variant, IndexVariant)
    built = variant.load().manifest.generation
    (tmp_path / "docs" / "harbour.md").write_text("# Harbour\n\nRewritten, never re-ingested.")
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "fair.md").write_text("# Fair\n\nThe autumn fair fills the market square every October.")
    coll.ingest([extra], SMALL)
    calls: list[int] = []
    real = variants._rows

    def counted(*args: Any, **kwargs: Any) -> variants.VariantRows:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(variants, "_rows", counted)
    with caplog.at_level("WARNING", logger="ragloop.retrieval"):
        assert variant.load().manifest.generation == built and _whole(variant, SENTENCE)
        assert variant.load().manifest.generation == built
    assert len(calls) == 1 and "harbour.md changed or went missing" in caplog.text
    assert variant.behind()
    other = IndexVariant(coll, WIDE.with_overrides(chunking={"size": 400, "overlap": 0}))  # no index yet: raises
    with pytest.raises(CollectionError, match="changed or went missing"):
        other.load()


def test_a_dropped_variant_is_rebuilt_by_a_process_that_still_holds_it(coll: Collection) -> None:
    """Pruning keeps what a live version serves from; a variant dropped under a handle that loaded
    it (a serving agent) is noticed on that handle's next read and rebuilt, numbered anew."""
    holder = index_for(coll, WIDE)
    assert isinstance(holder, IndexVariant)
    first = [c.chunk_id for c in holder.load().chunks]
    assert prune_variants(coll.settings, "kb", [WIDE, SMALL]) == []
    assert prune_variants(coll.settings, "kb", [SMALL]) == [holder.name]
    assert holder.name not in stored_collection_names(coll.settings)
    again = holder.load()
    assert [c.chunk_id for c in again.chunks] == first and again.manifest.generation == 1
    assert holder.name in stored_collection_names(coll.settings) and coll.generation() == 1
    with pytest.raises(CollectionError, match="not an index variant"):
        drop_variant(coll.settings, "kb")
    assert coll.exists()
