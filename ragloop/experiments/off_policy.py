"""Candidates whose gain was measured on the traffic itself: a τL raise goes current on the golden
check, without a live experiment.

Why. At a few dozen rated answers a day (the simulation's 60 turns, 30% rated) a 50/50 experiment
sees about 9 ratings per arm per day; after its 3-day maximum the always-valid interval on
`user_rating` is still about ±0.4, so no realistic gain of a gate threshold can ever win one, and
every such candidate ends inconclusive. For a *raise* of the gate's τL the experiment's question is
already answered by the traffic: each answer's gate score is stored in its trace, so what the
candidate would have done with every labelled answer is known (refuse it when its score is below
the new τL, else answer as before), and whether refusing was right depends on the question alone
(answerable or not), which its labels say. The refit's paired-bootstrap gain interval over those
answers (`ragloop.improve.remediation.thresholds.fit_tau_lower`, `TauFit.off_policy`) is the
evidence an experiment would gather, on all labelled traffic rather than half of it. LOOP.md: a
global change must win an experiment *or pass the golden set* before it is current; such a
candidate therefore faces the golden check (independent gold labels, never the held-out 20%; the
gates include `answer_correct` and `refusal_correct`, so a raise that refuses answerable golden
questions is refused), then is activated in the maintenance window (`via=remediation`), audited
with both pieces of evidence; the nightly regression watches it like every current version.

Not off-policy: lowering τL (it would serve answers nobody has seen: their correctness is only
imputed), and any candidate that changes more than the gate's two thresholds (a raise also drops
chunks graded below the new τL from the context of answers that still pass; the golden check
answers with the candidate itself, so that part is measured there). Those take the experiment path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

if TYPE_CHECKING:
    from ragloop.store import PipelineVersion, Store

REFIT_ACTION = "threshold_refit"
"""The audit entry the τL refit writes (`ragloop.improve.remediation.thresholds`), evidence `fit`."""
GATE_KEYS = frozenset({("agent", "tau_lower"), ("agent", "tau_upper")})


def _paths(data: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for k, v in data.items():
        out |= _paths(v, (*prefix, str(k))) if isinstance(v, Mapping) else {(*prefix, str(k))}
    return out


def off_policy_evidence(
    store: Store, current: PipelineVersion, candidate: PipelineVersion, diff: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The refit evidence that lets `candidate` skip the live experiment, or None. `diff`: the
    candidate's changes against `current` (`auto.changes`). Needs: the candidate was built on
    `current`, changes only τL / τU, raises τL, and its refit says the gain's 95% lower bound is above
    0 on outcomes the labels give (`fit.off_policy`)."""
    from ragloop.store.models import ImprovementAuditLog

    if candidate.parent_version_id != current.version_id or not diff or _paths(diff) - GATE_KEYS:
        return None
    stmt = (
        select(ImprovementAuditLog)
        .where(
            ImprovementAuditLog.action_type == REFIT_ACTION,
            ImprovementAuditLog.pipeline_version_after == candidate.version_id,
        )
        .order_by(ImprovementAuditLog.created_at.desc())
        .limit(1)
    )
    with store.db.transaction(write=False) as s:
        row = s.scalar(stmt)
        if row is None:
            return None
        log_id, evidence = row.log_id, dict(row.evidence or {})
    fit = evidence.get("fit") or {}
    tau_now = ((current.config or {}).get("agent") or {}).get("tau_lower", math.nan)
    try:
        raised = float(fit["fitted"]) > float(fit["current"]) and float(fit["current"]) == float(tau_now)
        gained = float(fit["lo"]) > 0.0
    except (KeyError, TypeError, ValueError):
        return None
    if not (fit.get("off_policy") and raised and gained):
        return None
    return {"refit_log_id": log_id, "fit": fit}
