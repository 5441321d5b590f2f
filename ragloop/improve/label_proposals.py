"""Proposals from labelled traffic itself, not only from diagnoses.

The τL refit learns from every label a collection's traffic carries (`remediation.gate_labels`), but
the classifier proposes it only when a completed diagnosis shows a gate error, and a diagnosis
needs an ideal answer (a correction, a golden reference or the judge's answer): with few
corrections and an offline judge that writes none, nearly every diagnosis is skipped and the refit
would never run. So once the traffic holds `min_labels` explicit labels (user ratings, reviewer
labels), the remediation pass proposes one threshold recalibration per collection and serving
version itself (the same component and dedupe key the classifier's proposals use, so the two
never duplicate). The refit still registers a candidate only on a gain interval above zero, and
the candidate still needs the golden check and an experiment.

With an answer-check reader configured (`RemediationSettings.answer_check`), the same labels also
propose its fit (`remediation.answer_check`), on the same schedule.

A new epoch (the labels doubled) is not proposed while that kind's earlier proposal for the same
version is still open: the scheduler would run the two back to back on the config the pass began
with, the second refitting from the same baseline (seen in the simulation: an answer-check fit of
~200 reader calls, run twice in one pass, registering the same version twice).
"""

from __future__ import annotations

import math

from sqlalchemy import func, select

from ragloop.config import PipelineConfig
from ragloop.improve.types import ActionKind
from ragloop.store import Store
from ragloop.store.vocabulary import ActionStatus, Tier

MIN_LABELS = 50
CONFIDENCE = 0.75


def explicit_labels(store: Store) -> int:
    from ragloop.store.models import Evaluation, UserFeedback

    with store.db.transaction(write=False) as s:
        ratings = int(s.scalar(select(func.count()).select_from(UserFeedback)) or 0)
        reviews = s.scalar(
            select(func.count()).select_from(Evaluation).where(Evaluation.evaluation_tier == Tier.HUMAN.value)
        )
    return ratings + int(reviews or 0)


def propose_from_labels(
    store: Store,
    config: PipelineConfig,
    collection: str,
    *,
    min_labels: int = MIN_LABELS,
    answer_check: str | None = None,
) -> bool:
    """Propose the collection's τL refit (and, with `answer_check`, that reader's fit) for the serving
    version once enough labels exist; True if proposed."""
    labels = explicit_labels(store)
    if labels < min_labels:
        return False
    epoch = int(math.log2(labels / min_labels))  # refit again each time the labels double
    kinds = [ActionKind.THRESHOLD_RECALIBRATION] + ([ActionKind.ANSWER_CHECK] if answer_check else [])
    prefix = f"{collection}:{config.version_id}:labels-"
    for kind in kinds:
        component = "pipeline" if kind is ActionKind.THRESHOLD_RECALIBRATION else "answer_check"
        open_ = store.improvement_actions.listed(
            status=(ActionStatus.PROPOSED, ActionStatus.SCHEDULED), kind=kind.value, component=component
        )
        if any(a.dedupe_key.startswith(prefix) for a in open_):
            continue  # the open one reads every label there is when it runs (module docstring)
        store.improvement_actions.propose(
            kind.value,
            component,
            f"{prefix}{epoch}",
            domain=collection,
            evidence={"confidence": CONFIDENCE, "reason": "labelled traffic", "explicit_labels": labels},
            payload={
                "collection": collection,
                "pipeline_version": config.version_id,
                "question": "",
                "chunk_ids": [],
                "scorer": answer_check or "",
            },
            priority=CONFIDENCE * 0.5,
        )
    return True
