"""The golden set's review queue: nightly auto-nomination of production answers, and the human
decision that alone lets a machine-made question in.

Nomination rule (the seed's): an answer whose tier-1 heuristic score is > 0.92, whose tier-2 judge
score is > 0.90, with >= 3 positive ratings and no negative feedback, not a refusal. Such an answer
becomes a *candidate*, never an entry. Anti-gaming, and why each part exists:
- **approval is required**: nothing machine-made enters the golden set unapproved (`approve` is
  the only path from a candidate to an entry, and it records the reviewer);
- **the reviewer sees question and answer, never the scores** (`review_json` has no score field):
  a reviewer shown "judge 0.97" confirms what the machine already believes, and a golden set that
  agrees with the pipeline under test measures nothing;
- **the expected answer is the reviewer's**: they confirm the proposed text or edit it
  (`expected_answer`), and the candidate records whether they edited it.
The scores stay on the candidate (`evidence`) for the audit and for measuring the rule itself.

The nightly run reads the loop's one clock (a `ragloop.improve.clock` clock, taken as the
zero-argument callable it also is, like the store's repositories take it: this package sits below
`improve`): `NightlyNomination.tick()` nominates at most once per UTC day, at or after `hour_utc`,
so a simulation compresses nights into seconds through this same code. The service calls `tick`
from its periodic tasks when `golden_nomination_check_s` > 0; `ragloop golden nominate` runs one pass by hand.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ragloop.experiments.golden import UNANSWERABLE_TAG, entry_json, is_held_out, without_citations
from ragloop.store.repositories.golden_candidates import NominationFacts, Proposal
from ragloop.store.vocabulary import GoldenSource

if TYPE_CHECKING:
    from ragloop.store import Evaluation, GoldenCandidate, Store

NOMINATION_ACTION = "golden_nomination"
REVIEW_ACTION = "golden_review"
_JUDGE_PARTS = ("faithfulness", "answer_relevance", "context_precision")


Clock = Callable[[], datetime]
"""Timezone-aware UTC now; `ragloop.improve.clock`'s clocks are such callables."""


def system_clock() -> datetime:
    """The process clock (`RAGLOOP_CLOCK`, the system's by default): the one the store stamps rows by."""
    from ragloop.store import utcnow

    return utcnow()


def _day(when: datetime) -> datetime:
    return when.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


class ReviewError(ValueError):
    """A review decision that cannot be taken as given (an approval with no expected answer)."""


@dataclass(frozen=True)
class NominationRule:
    heuristic_min: float = 0.92
    judge_min: float = 0.90
    min_positive: int = 3
    lookback_days: float = 7.0
    """Answers this recent are considered: ratings arrive days after an answer, and a question
    proposed once is never proposed again, so re-reading a week each night costs nothing."""

    def verdict(self, f: NominationFacts) -> str | None:
        """None when `f` is nominated, else the first reason it is not."""
        if f.refused:
            return "refused"
        if f.negative > 0:
            return "negative_feedback"
        if f.positive < self.min_positive:
            return "too_few_positive"
        h = f.heuristic.heuristic_score if f.heuristic is not None else None
        if h is None:
            return "no_heuristic_score"
        if h <= self.heuristic_min:
            return "heuristic_too_low"
        j = judge_score(f.judge)
        if j is None:
            return "no_judge_score"
        if j <= self.judge_min:
            return "judge_too_low"
        return None


def judge_score(e: Evaluation | None) -> float | None:
    """The judge's one number: the `overall` it recorded, else the mean of its answer metrics."""
    if e is None:
        return None
    overall = (e.failure_evidence or {}).get("overall")
    if isinstance(overall, int | float):
        return float(overall)
    vals = [v for k, v in (e.scores or {}).items() if k in _JUDGE_PARTS and isinstance(v, int | float)]
    return sum(vals) / len(vals) if vals else None


@dataclass
class NominationReport:
    ran_at: datetime
    considered: int = 0
    nominated: list[str] = field(default_factory=list)
    already_proposed: int = 0
    not_nominated: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "ran_at": self.ran_at.isoformat(),
            "considered": self.considered,
            "nominated": len(self.nominated),
            "candidate_ids": self.nominated,
            "already_proposed": self.already_proposed,
            "not_nominated": dict(sorted(self.not_nominated.items())),
        }


def nominate(
    store: Store, *, clock: Clock = system_clock, rule: NominationRule | None = None, actor: str = "nightly"
) -> NominationReport:
    """One nomination pass over the answers of the last `lookback_days` (by `clock`); audited."""
    rule = rule or NominationRule()
    now = clock()
    # no upper bound: answers are stamped by the database's wall clock, which a simulated clock
    # may run behind; the window's start is what bounds the work
    facts = store.golden_candidates.nomination_facts(since=now - timedelta(days=rule.lookback_days), min_positive=1)
    report = NominationReport(ran_at=now, considered=len(facts))
    reasons: Counter[str] = Counter()
    proposals = []
    for f in facts:
        why = rule.verdict(f)
        if why is not None:
            reasons[why] += 1
            continue
        standalone = _standalone(store, f.answer_id)
        proposals.append(
            Proposal(
                question=standalone or f.question,
                proposed_answer=without_citations(f.answer_text),
                source=GoldenSource.AUTO_NOMINATED,
                generator="nightly",
                answer_id=f.answer_id,
                required_doc_ids=f.doc_ids,
                required_chunk_ids=f.chunk_ids,
                evidence={
                    "heuristic_score": f.heuristic.heuristic_score if f.heuristic else None,
                    "judge_score": judge_score(f.judge),
                    "judge_model": f.judge.evaluator_model if f.judge else None,
                    "asked_as": f.question,
                    "positive_ratings": f.positive,
                    "negative_ratings": f.negative,
                    "rule": vars(rule),
                },
            )
        )
    rows = store.golden_candidates.propose(proposals)
    report.nominated = [r.candidate_id for r in rows]
    report.already_proposed = len(proposals) - len(rows)
    report.not_nominated = dict(reasons)
    store.audit.record(NOMINATION_ACTION, triggered_by="golden nomination", actor=actor, evidence=report.to_json())
    return report


def _standalone(store: Store, answer_id: str) -> str | None:
    """The question as the pipeline condensed it (a follow-up read with the turns before it), from the
    answer's evaluation-job payload: a golden question must stand on its own, and "what if it takes
    too long?" does not. None when no payload kept one."""
    for job in store.queue.for_answer(answer_id):
        text = (job.payload or {}).get("standalone_question")
        if isinstance(text, str) and text.strip():
            return text.strip()
    return None


class NightlyNomination:
    """At most one nomination per UTC day of `clock`, at or after `hour_utc` (the last run is read
    from the audit log, so a restart or a second server does not nominate twice in a day)."""

    def __init__(
        self, store: Store, *, clock: Clock = system_clock, rule: NominationRule | None = None, hour_utc: int = 2
    ) -> None:
        if not 0 <= hour_utc <= 23:
            raise ValueError(f"hour_utc must be 0..23, not {hour_utc}")
        self.store, self.clock, self.rule, self.hour_utc = store, clock, rule or NominationRule(), hour_utc

    def last_run(self) -> datetime | None:
        rows = self.store.audit.timeline(action_type=NOMINATION_ACTION, limit=1)
        raw = (rows[0].evidence or {}).get("ran_at") if rows else None
        return datetime.fromisoformat(raw) if isinstance(raw, str) else None

    def due(self) -> bool:
        now = self.clock()
        if now.astimezone(UTC).hour < self.hour_utc:
            return False
        last = self.last_run()
        return last is None or _day(last) < _day(now)

    def tick(self) -> NominationReport | None:
        return nominate(self.store, clock=self.clock, rule=self.rule) if self.due() else None


# --------------------------------------------------------------------------- the review


REVIEW_FIELDS = (
    "candidate_id",
    "question",
    "proposed_answer",
    "source",
    "required_doc_ids",
    "required_chunk_ids",
    "difficulty",
    "domain_tags",
    "status",
    "created_at",
    "reviewed_by",
    "reviewed_at",
    "review_note",
    "answer_edited",
    "entry_id",
)
"""What a reviewer sees. Deliberately absent: `evidence` (the machine scores and ratings), the
`answer_id` (which leads to the scores) and `generator` (which says how it was made)."""


def review_json(c: GoldenCandidate) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in REVIEW_FIELDS:
        v = getattr(c, name)
        out[name] = v.isoformat() if isinstance(v, datetime) else list(v) if isinstance(v, list | tuple) else v
    return out


def approve(
    store: Store,
    candidate_id: str,
    *,
    reviewer: str,
    expected_answer: str | None = None,
    question: str | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    """The reviewer's approval: confirm the proposed answer (`expected_answer` None) or replace it.
    The entry is held out by the stable hash of its (final) question, like every other entry."""
    cand = store.golden_candidates.get(candidate_id)
    if cand is None:
        from ragloop.store import NotFoundError

        raise NotFoundError(f"no golden candidate {candidate_id!r}")
    final_answer = cand.proposed_answer if expected_answer is None else expected_answer
    if not final_answer.strip() and UNANSWERABLE_TAG not in (cand.domain_tags or []):
        raise ReviewError("this candidate has no proposed answer: approve it with the expected answer you wrote")
    final_question = (question or cand.question).strip()
    if not final_question:
        raise ReviewError("the question must not be empty")
    cand, entry = store.golden_candidates.approve(
        candidate_id,
        reviewer=reviewer,
        expected_answer=expected_answer,
        question=final_question,
        held_out=is_held_out(final_question),
        note=note,
    )
    store.audit.record(
        REVIEW_ACTION,
        triggered_by="golden review",
        actor=reviewer,
        evidence={
            "decision": "approve",
            "candidate_id": candidate_id,
            "entry_id": entry.entry_id,
            "answer_edited": cand.answer_edited,
            "golden_set_version": entry.added_in,
        },
    )
    return {"candidate": review_json(cand), "entry": entry_json(entry)}


def reject(store: Store, candidate_id: str, *, reviewer: str, note: str | None = None) -> dict[str, Any]:
    cand = store.golden_candidates.reject(candidate_id, reviewer=reviewer, note=note)
    store.audit.record(
        REVIEW_ACTION,
        triggered_by="golden review",
        actor=reviewer,
        evidence={"decision": "reject", "candidate_id": candidate_id, "note": note},
    )
    return {"candidate": review_json(cand)}
