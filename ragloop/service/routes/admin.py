"""The admin console's read routes: views over tables other routes write, for the pages at `/admin`.

- `GET /v1/admin/audit`: the improvement audit log, paged and filtered by action type, each entry
  with its improvement action's status so the timeline can offer a revert;
- `GET /v1/admin/evaluations`: filtered by tier, failure mode, score and experiment;
- `GET /v1/admin/evaluations/agreement`: tier 1 vs tier 2 vs human, each with n and a 95% interval;
- `GET /v1/admin/experiments/{id}/sequence`: the always-valid confidence sequence over time.

Regression runs have their own route (`GET /v1/regression/runs`). All admin-only: they show every
user's questions and answers.
"""

from __future__ import annotations

import asyncio
import re
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query

from ragloop.evaluation.stats import Estimate, bootstrap_ci, cohen_kappa, proportion_ci
from ragloop.experiments.sequence import confidence_sequence
from ragloop.service.admin_schemas import (
    AgreementPairPublic,
    AgreementPublic,
    AuditEntryPublic,
    AuditPagePublic,
    ConfidenceSequencePublic,
    EstimatePublic,
    EvaluationRowPublic,
    EvaluationsPagePublic,
)
from ragloop.service.deps import AdminDep, ServiceDep
from ragloop.service.routes._common import ID_PATTERN
from ragloop.store import Store
from ragloop.store.vocabulary import EVALUATION_TIERS, Tier

router = APIRouter(tags=["admin"])
Limit = Annotated[int, Query(ge=1, le=500)]
Offset = Annotated[int, Query(ge=0, le=1_000_000)]
Name = Annotated[str | None, Query(max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
Score = Annotated[float | None, Query(ge=0.0, le=1.0)]
ERRORS: dict[int | str, dict[str, str]] = {401: {"description": "No (valid) key."}, 403: {"description": "Not admin."}}
REVERTIBLE = ("applied", "kept")
ACTION_TYPE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
"""`remediation:knowledge_gap_log`, `pipeline_rollback`, `evidence_threshold`…"""


def _audit_page(store: Store, types: list[str] | None, limit: int, offset: int) -> AuditPagePublic:
    rows, total = store.audit.listed(action_types=types, limit=limit, offset=offset)
    entries = []
    statuses: dict[str, str | None] = {}
    for row in rows:
        entry = AuditEntryPublic.model_validate(row)
        action_id = (row.evidence or {}).get("action_id")
        if isinstance(action_id, str):
            if action_id not in statuses:
                action = store.improvement_actions.get(action_id)
                statuses[action_id] = action.status if action is not None else None
            status = statuses[action_id]
            entry = entry.model_copy(
                update={"action_id": action_id, "action_status": status, "revertible": status in REVERTIBLE}
            )
        entries.append(entry)
    return AuditPagePublic(entries=entries, total=total, limit=limit, offset=offset, action_types=store.audit.counts())


@router.get("/v1/admin/audit", response_model=AuditPagePublic, responses=ERRORS, summary="The audit log (admin)")
async def audit_log(
    svc: ServiceDep,
    _admin: AdminDep,
    action_type: Annotated[list[str] | None, Query(description="Any of these action types; all when absent")] = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> AuditPagePublic:
    """Every change the loop (or an admin) made, newest first: remediations, their audits and reverts,
    promotions, rollbacks, recalibrations, experiment halts; evidence, expected and actual deltas."""
    for t in action_type or ():
        if not ACTION_TYPE.fullmatch(t):
            raise HTTPException(422, f"action_type {t[:64]!r} is not an action type name")
    return await asyncio.to_thread(_audit_page, svc.store, action_type, limit, offset)


@router.get(
    "/v1/admin/evaluations", response_model=EvaluationsPagePublic, responses=ERRORS, summary="Evaluations (admin)"
)
async def evaluations(
    svc: ServiceDep,
    _admin: AdminDep,
    tier: Annotated[Tier | None, Query(description="heuristic | llm_judge | human")] = None,
    failure_mode: Name = None,
    experiment_id: Annotated[str | None, Query(pattern=ID_PATTERN)] = None,
    min_score: Score = None,
    max_score: Score = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> EvaluationsPagePublic:
    """Evaluations newest first with the question and answer they judged; `min_score`/`max_score`
    bound the `overall` score (tier 1's score, else the mean of the answer metrics given)."""
    if min_score is not None and max_score is not None and min_score > max_score:
        raise HTTPException(422, "min_score is above max_score")

    def load() -> EvaluationsPagePublic:
        rows, total = svc.store.evaluations.listed(
            tier=tier.value if tier else None,
            failure_mode=failure_mode,
            experiment_id=experiment_id,
            min_score=min_score,
            max_score=max_score,
            limit=limit,
            offset=offset,
        )
        out = [
            EvaluationRowPublic(
                eval_id=r.evaluation.eval_id,
                answer_id=r.evaluation.answer_id,
                evaluation_tier=r.evaluation.evaluation_tier,
                status=r.evaluation.status,
                overall=r.overall,
                scores=dict(r.evaluation.scores or {}),
                failure_mode=r.evaluation.failure_mode,
                evaluator_model=r.evaluation.evaluator_model,
                error=r.evaluation.error,
                evaluated_at=r.evaluation.evaluated_at,
                question=r.question,
                answer=r.answer,
                experiment_id=r.experiment_id,
                variant=r.variant,
                pipeline_version=r.pipeline_version,
            )
            for r in rows
        ]
        return EvaluationsPagePublic(evaluations=out, total=total, limit=limit, offset=offset)

    return await asyncio.to_thread(load)


def _est(e: Estimate) -> EstimatePublic:
    j = e.to_json()
    return EstimatePublic(value=j["value"], lo=j["lo"], hi=j["hi"], n=e.n)


def _none(n: int) -> EstimatePublic:
    return EstimatePublic(value=None, lo=None, hi=None, n=n)


def agreement(by_answer: dict[str, dict[str, float]], threshold: float) -> list[AgreementPairPublic]:
    """Each pair of tiers over the answers both scored: pass/fail agreement (Wilson), Cohen's kappa
    (bootstrap) and the mean absolute score difference (bootstrap)."""
    tiers = [str(t) for t in EVALUATION_TIERS]
    pairs = []
    for i, a in enumerate(tiers):
        for b in tiers[i + 1 :]:
            both = [(s[a], s[b]) for s in by_answer.values() if a in s and b in s]
            pa = [x >= threshold for x, _ in both]
            pb = [y >= threshold for _, y in both]
            same = sum(1 for x, y in zip(pa, pb, strict=True) if x == y)
            pairs.append(
                AgreementPairPublic(
                    a=a,
                    b=b,
                    n=len(both),
                    agreement=_est(proportion_ci(same, len(both))),
                    # one item has no chance agreement to correct for: no kappa below two
                    kappa=_est(cohen_kappa(pa, pb, resamples=500)) if len(both) >= 2 else _none(len(both)),
                    mean_abs_difference=_est(bootstrap_ci([abs(x - y) for x, y in both], resamples=500)),
                )
            )
    return pairs


@router.get(
    "/v1/admin/evaluations/agreement",
    response_model=AgreementPublic,
    responses=ERRORS,
    summary="Tier 1 vs tier 2 vs human (admin)",
)
async def evaluation_agreement(
    svc: ServiceDep,
    _admin: AdminDep,
    threshold: Annotated[float, Query(ge=0.0, le=1.0)] = 0.5,
    limit: Annotated[int, Query(ge=1, le=20_000)] = 5000,
) -> AgreementPublic:
    """How often the tiers agree on the answers more than one of them scored (latest evaluation per
    tier; the `limit` answers most recently given a second opinion)."""

    def load() -> AgreementPublic:
        by_answer = svc.store.evaluations.overall_by_answer(limit=limit)
        return AgreementPublic(threshold=threshold, answers=len(by_answer), pairs=agreement(by_answer, threshold))

    return await asyncio.to_thread(load)


@router.get(
    "/v1/admin/experiments/{experiment_id}/sequence",
    response_model=ConfidenceSequencePublic,
    responses=ERRORS | {404: {"description": "No such experiment."}, 422: {"description": "Unknown metric."}},
    summary="An experiment's confidence sequence over time (admin)",
)
async def experiment_sequence(
    experiment_id: Annotated[str, Path(pattern=ID_PATTERN)],
    svc: ServiceDep,
    _admin: AdminDep,
    metric: Name = None,
    points: Annotated[int, Query(ge=2, le=200)] = 60,
) -> ConfidenceSequencePublic:
    """The difference treatment − control with its always-valid 95% interval (and Welch's, for
    reference) at up to `points` moments as the scores arrived: the sequential boundary drawn over time."""
    try:
        seq = await asyncio.to_thread(confidence_sequence, svc.store, experiment_id, metric, points=points)
    except LookupError as exc:
        raise HTTPException(404, str(exc)) from None
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    return ConfidenceSequencePublic.model_validate(seq)
