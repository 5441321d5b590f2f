"""Answer-graph candidates: the variants' trial on the working golden set (prompt variants and the
refine / sentence-cap knobs; a paired correctness or faithfulness gain above 2 points with its
interval above 0, the other not dropping) and the action that turns accumulated generation failures
into a candidate pipeline version, never the serving one. On SQLite and
PostgreSQL (the `store` fixture of tests/improve/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ragloop.config import PipelineConfig
from ragloop.improve.clock import ManualClock
from ragloop.improve.remediation import prompts
from ragloop.improve.remediation.prompts import GoldenAnswer, answerable_entries, run_trial
from ragloop.improve.scheduler import Outcome, Scheduler
from ragloop.improve.types import ActionKind
from ragloop.models.scoring import LexicalScorer
from ragloop.retrieval.collection import Collection
from ragloop.store import GoldenSetEntry, Store
from tests.agent.conftest import DOCS, HASHED, make_collection
from tests.improve.remediation_support import context

BRIDGE = "The Zorblat Bridge was completed in 1887 by the engineer Marta Quill."
INVENTED = "The Zorblat Bridge was repainted by Hugo Marks in 1999."
"""Names and a number no context holds: unfaithful under the tree's grounding check."""


@pytest.fixture
def coll(tmp_path: Path) -> Iterator[Collection]:
    c = make_collection("kb", DOCS, tmp_path / "docs")
    yield c
    c.close()


def golden(store: Store, n: int, *, held_out: bool = False) -> list[GoldenSetEntry]:
    return [
        store.golden.add_golden_entry(
            f"When was the Zorblat Bridge completed, case {i}?",
            "1887",
            source="human",
            created_by="test",
            held_out=held_out,
        )
        for i in range(n)
    ]


Script = Callable[[str, int], GoldenAnswer]


def scripted(by_version: dict[str, Script]) -> prompts.RunnerFactory:
    """A runner whose answers depend on the prompt version and the question's case number."""

    @contextmanager
    def run(cfg: PipelineConfig) -> Iterator[prompts.Answerer]:
        name = cfg.agent.prompt_version
        if not cfg.agent.refine and cfg.agent.max_answer_sentences == HASHED.agent.max_answer_sentences:
            name = "refine-off"
        script = by_version.get(name, by_version["v1"])
        yield lambda q: script(q, int(q.rsplit(" ", 1)[1].rstrip("?")))

    return run


def faithful(_q: str, _i: int) -> GoldenAnswer:
    return GoldenAnswer(f"{BRIDGE} [1]", (BRIDGE,), False)


def half_invented(_q: str, i: int) -> GoldenAnswer:
    text = f"{BRIDGE} [1] {INVENTED} [1]" if i % 2 else f"{BRIDGE} [1]"
    return GoldenAnswer(text, (BRIDGE,), False)


def refuses(_q: str, _i: int) -> GoldenAnswer:
    return GoldenAnswer("I could not find that.", (), True)


def test_a_variant_that_stops_inventing_facts_is_chosen(store: Store) -> None:
    entries = golden(store, 30)
    trial = run_trial(
        entries,
        HASHED,
        scripted({"v1": half_invented, "v4-context-only": faithful}),
        LexicalScorer(name="lexical"),
    )
    by = {v.version: v for v in trial.variants}
    knobs = {"refine-off", "sentences-8", "refine-off+sentences-8"}
    assert set(by) == {"v2-citations", "v3-negatives", "v4-context-only"} | knobs
    assert trial.alpha == pytest.approx(0.05 / 12)  # two tests for each of 6 variants
    v4 = by["v4-context-only"]
    assert v4.paired == 30 and v4.baseline_faithfulness == pytest.approx(0.75) and v4.faithfulness == 1.0
    assert v4.gain == pytest.approx(0.25) and v4.lo > 0 and v4.f1_diff > 0
    assert by["v2-citations"].gain == 0.0 and not by["v2-citations"].qualifies(0.02)
    assert trial.chosen is v4 and trial.to_json()["chosen"] == "v4-context-only"


def test_refusing_is_not_faithfulness_and_a_small_gain_is_not_enough(store: Store) -> None:
    entries = golden(store, 30)
    trial = run_trial(entries, HASHED, scripted({"v1": half_invented, "v2-citations": refuses}), LexicalScorer())
    v2 = next(v for v in trial.variants if v.version == "v2-citations")
    assert v2.paired == 0 and v2.refused == 30 and v2.f1_hi < 0 and trial.chosen is None

    def one_fixed(q: str, i: int) -> GoldenAnswer:  # only case 1 stops inventing: 1 of 30, under 2 points
        return faithful(q, i) if i == 1 else half_invented(q, i)

    small = run_trial(entries, HASHED, scripted({"v1": half_invented, "v3-negatives": one_fixed}), LexicalScorer())
    v3 = next(v for v in small.variants if v.version == "v3-negatives")
    assert 0 < v3.gain < 0.02 and small.chosen is None


def test_refinement_off_is_chosen_when_it_makes_answers_right(store: Store) -> None:
    """The MTRAG-UN case (`loop_knobs.md`): the refined answer is faithful but drops the sentence with
    the answer; unrefined, it is longer, as faithful, and right. Correctness decides, not F1."""
    entries = golden(store, 30)
    short = "The Zorblat Bridge was completed by the engineer Marta Quill."

    def refined(_q: str, _i: int) -> GoldenAnswer:
        return GoldenAnswer(f"{short} [1]", (BRIDGE,), False)

    def unrefined(_q: str, i: int) -> GoldenAnswer:
        return faithful(_q, i) if i % 3 else refined(_q, i)  # right on two thirds

    trial = run_trial(entries, HASHED, scripted({"v1": refined, "refine-off": unrefined}), LexicalScorer())
    off = next(v for v in trial.variants if v.version == "refine-off")
    assert off.baseline_correct == 0.0 and off.correct == pytest.approx(20 / 30) and off.correct_lo > 0
    assert off.overrides == {"agent": {"refine": False}} and off.qualifies(0.02)
    assert trial.chosen is off and trial.to_json()["chosen"] == "refine-off"


def _generation_failure(store: Store) -> str:
    answer = store.queries.record_answer(session_id="s", question="q?", answer_text="a", pipeline_version="pv-x")
    store.diagnoses.open(answer.answer_id, reasons=["low_heuristic_score"], collection="kb")
    store.diagnoses.complete(
        answer.answer_id,
        failure_mode="generation_failure",
        confidence=0.9,
        evidence={"kind": "generation"},
        actions=[],
        rule="faithfulness low",
        diagnosis_input=None,
    )
    return answer.answer_id


def test_failures_accumulate_then_the_trial_registers_a_candidate(
    store: Store, coll: Collection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        prompts, "agent_runner", lambda _ctx, _c: scripted({"v1": half_invented, "v4-context-only": faithful})
    )
    ctx = context(store, coll, ManualClock(), config=HASHED)
    store.pipelines.register_config(HASHED, description="serving")
    store.pipelines.activate(HASHED.version_id, actor="test")
    golden(store, 5, held_out=True)  # never read by the trial
    sched = Scheduler(ctx)

    def fail(n: int) -> None:
        store.improvement_actions.propose(
            ActionKind.PROMPT_CANDIDATE.value,
            "pipeline",
            f"kb:{HASHED.version_id}",
            domain="kb",
            answer_ids=[_generation_failure(store) for _ in range(n)],
            evidence={"confidence": 0.8, "failure_mode": "generation_failure"},
            payload={"collection": "kb", "min_failures": 3, "min_entries": 10},
        )

    fail(2)
    [waiting] = sched.run()
    assert waiting.outcome is Outcome.NOT_READY and waiting.detail == "2/3 generation failures"
    fail(1)
    [waiting] = sched.run()
    assert waiting.detail == "0/10 answerable working golden entries"
    golden(store, 12)
    assert len(answerable_entries(store, 100)) == 12
    [result] = sched.run()
    assert result.outcome is Outcome.APPLIED and result.candidate_version is not None
    row = store.pipelines.get(result.candidate_version)
    assert row is not None and row.status == "candidate" and row.config["agent"]["prompt_version"] == "v4-context-only"
    assert store.pipelines.current().version_id == HASHED.version_id  # never applied directly
    [note] = store.audit.timeline(action_type=prompts.TRIAL_ACTION)
    assert note.evidence["trial"]["entries"] == 12 and note.evidence["generation_failures"] == 3
    assert note.pipeline_version_after == result.candidate_version


def test_the_real_answer_graph_runs_every_variant(store: Store, coll: Collection) -> None:
    """The default runner: the offline graph on the collection, each variant under its composer rules."""
    for q, ref in [
        ("When was the Zorblat Bridge completed?", "1887"),
        ("How tall is the Quill Tower?", "96 metres"),
        ("When did the ferry service end?", "1890"),
        ("When did the Ostria tram network open?", "1901"),
    ]:
        store.golden.add_golden_entry(q, ref, source="human", created_by="test")
    ctx = context(store, coll, ManualClock(), config=HASHED)
    trial = run_trial(
        answerable_entries(store, 10), HASHED, prompts.agent_runner(ctx, "kb"), LexicalScorer(), resamples=200
    )
    assert trial.entries == 4 and [v.version for v in trial.variants] == list(prompts.variants(HASHED))
    assert len(trial.variants) == 6 and {v.version for v in trial.variants} >= {"refine-off", "sentences-8"}
    for v in trial.variants:
        assert v.paired + v.refused <= 4 and 0.0 <= v.faithfulness <= 1.0
    assert not list(coll.settings.home.glob("checkpoints*"))  # the trial's threads stayed in its temp dir
