"""Which judge may decide: the standing of a judge pin, the judges behind recent tier-2 scores, and
the drift status the admin route and `ragloop drift status` show.

**The rule** (`judge_standing`), the issue's "a new judge version must reach >= 85% agreement with
stored human labels before it replaces the old one (else refused)", made enforceable:

1. a pin refused by `drift.qualify` (its latest verdict is a refusal) is unqualified;
2. with an accepted pin (the latest `judge_version_accepted` entry), only that pin qualifies: a
   different model, version or prompt (a drifted prompt is a new sha) is unqualified;
3. with none accepted yet, the *incumbent* qualifies: the judge of the oldest counted tier-2 score
   (the judge a store started with is grandfathered; there were no human labels to qualify it
   against). A store without any tier-2 score takes the first judge that scores.

The evaluation worker (`ragloop.improve.evaluate`) asks this before it commits a tier-2 score: an
unqualified judge's score is written with status `unqualified`, which no consumer of tier-2 scores
reads (experiment aggregation, diagnosis candidates and ideal answers, tier-1 recalibration labels,
golden nomination, the rubric check all read `completed` rows), so it is visible and auditable but
drives no promotion, rollback, remediation or experiment metric. It does not route to human review
either: its disagreement with tier 1 is no evidence.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from ragloop.experiments.drift import ACCEPTED, REFUSED, Pin, RubricStatus, accepted_pin, latest_check
from ragloop.store.vocabulary import EvaluationStatus, Tier

if TYPE_CHECKING:
    from ragloop.store import Store

COUNTED = (EvaluationStatus.COMPLETED,)
RECORDED = (EvaluationStatus.COMPLETED, EvaluationStatus.UNQUALIFIED)


@dataclass(frozen=True)
class JudgeStanding:
    """Whether a judge's tier-2 scores may count, and why (stored with each score it writes)."""

    pin: Pin
    qualified: bool
    reason: str
    accepted: Pin | None = None
    incumbent: Pin | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "pin": asdict(self.pin),
            "qualified": self.qualified,
            "reason": self.reason,
            "accepted": asdict(self.accepted) if self.accepted else None,
            "incumbent": asdict(self.incumbent) if self.incumbent else None,
        }


def _last_verdict(store: Store, pin: Pin) -> str | None:
    """ACCEPTED or REFUSED: the newest qualification entry about `pin` (None: never qualified)."""
    rows = [
        *store.audit.timeline(action_type=ACCEPTED, limit=200),
        *store.audit.timeline(action_type=REFUSED, limit=200),
    ]
    mine = [r for r in rows if Pin.of(r.evidence.get("pin") or {"model": "", "version": "", "prompt_sha": ""}) == pin]
    return max(mine, key=lambda r: r.created_at).action_type if mine else None


def incumbent_pin(store: Store) -> Pin | None:
    """The judge of the oldest counted tier-2 score that carries a pin."""
    from ragloop.store.models import Evaluation

    with store.db.transaction(write=False) as s:
        row = s.execute(
            select(Evaluation.evaluator_model, Evaluation.evaluator_version, Evaluation.evaluator_prompt_sha)
            .where(
                Evaluation.evaluation_tier == Tier.LLM_JUDGE,
                Evaluation.status.in_(COUNTED),
                Evaluation.evaluator_version.is_not(None),
            )
            .order_by(Evaluation.evaluated_at, Evaluation.eval_id)
            .limit(1)
        ).first()
    return Pin(str(row[0] or ""), str(row[1] or ""), str(row[2] or "")) if row else None


def judge_standing(store: Store, pin: Pin) -> JudgeStanding:
    """May `pin`'s tier-2 scores count (the module's rule)?"""
    accepted = accepted_pin(store)
    if _last_verdict(store, pin) == REFUSED:
        return JudgeStanding(pin, False, "refused by qualification against the human labels", accepted)
    if accepted is not None:
        if accepted == pin:
            return JudgeStanding(pin, True, "the accepted judge", accepted)
        return JudgeStanding(
            pin, False, f"not the accepted judge ({accepted.model} {accepted.version}); run `ragloop drift qualify`",
            accepted,
        )  # fmt: skip
    incumbent = incumbent_pin(store)
    if incumbent is None or incumbent == pin:
        return JudgeStanding(pin, True, "the incumbent judge (none qualified yet)", None, incumbent or pin)
    return JudgeStanding(
        pin, False,
        f"replaces the incumbent judge ({incumbent.model} {incumbent.version}) without qualifying; "
        "run `ragloop drift qualify`",
        None, incumbent,
    )  # fmt: skip


def judges_in_use(store: Store, limit: int = 500) -> list[dict[str, Any]]:
    """The pins behind the latest `limit` recorded tier-2 scores (counted or not), with counts."""
    from ragloop.store.models import Evaluation

    with store.db.transaction(write=False) as s:
        rows = s.execute(
            select(
                Evaluation.evaluator_model,
                Evaluation.evaluator_version,
                Evaluation.evaluator_prompt_sha,
                Evaluation.status,
            )
            .where(Evaluation.evaluation_tier == Tier.LLM_JUDGE, Evaluation.status.in_(RECORDED))
            .order_by(Evaluation.evaluated_at.desc())
            .limit(limit)
        ).all()
    counts: dict[tuple[str, str, str], dict[str, int]] = {}
    for model, version, sha, status in rows:
        key = (str(model or ""), str(version or ""), str(sha or ""))
        c = counts.setdefault(key, {"scores": 0, "not_counted": 0})
        c["scores"] += 1
        c["not_counted"] += status == EvaluationStatus.UNQUALIFIED
    return [{"model": m, "version": v, "prompt_sha": p, **c} for (m, v, p), c in counts.items()]


def drift_status(store: Store) -> dict[str, Any]:
    """What the admin route and `ragloop drift status` show. `unqualified_in_use`: recent tier-2
    scores from a judge whose standing is unqualified (the worker records them as `unqualified`,
    and they count for nothing: `not_counted`)."""
    pin = accepted_pin(store)
    in_use = judges_in_use(store)
    refused = store.audit.timeline(action_type=REFUSED, limit=5)
    check = latest_check(store)
    unqualified = [
        j | {"reason": st.reason}
        for j in in_use
        if not (st := judge_standing(store, Pin(j["model"], j["version"], j["prompt_sha"]))).qualified
    ]
    return {
        "accepted_judge": asdict(pin) if pin else None,
        "incumbent_judge": asdict(inc) if (inc := incumbent_pin(store)) else None,
        "refused_judges": [
            {
                "pin": r.evidence.get("pin"),
                "reason": (r.evidence.get("result") or {}).get("reason"),
                "at": r.created_at.isoformat(),
            }
            for r in refused
        ],
        "judges_in_use": in_use,
        "unqualified_in_use": unqualified,
        "rubric": check.to_json() if check else None,
        "rubric_flagged": bool(check and check.status is RubricStatus.FLAGGED),
    }
