"""The answer check (refusal errors the gate cannot see): fit `agent.tau_answer` for a configured
reader (`agent.scorers.answer_check`, e.g. an `llm:` scorer) from the collection's labelled traffic,
as a candidate pipeline version.

Why. On-topic unanswerable questions (SQuAD 2.0's adversarial ones) retrieve passages that grade as
well as the answerable ones: the gate score separates them at ROC AUC 0.56 on the simulation's
traffic, so no τL helps. A reader of the drafted answer does (Qwen 1.5B yes/no, AUC ~0.84 on SQuAD 2.0
traffic items, `MODELS.md`), at seconds per answer on a laptop CPU: a cost the loop should pay only
where the labels show it pays.

How. Every labelled answer the service *answered* is read by the check now, exactly as serving would
read it (`finalize.check_text` of the stored answer, against the standalone question; the model's
response cache makes a later serving call on the same draft free). Whether refusing it would have
been right comes from its labels (`gate_labels`, unknowns imputed from neighbours in the check's
score). The threshold is fitted by the τL refit's own rule (`thresholds.fit_tau_lower`: the most
accurate threshold whose paired-bootstrap gain lies above 0 in sample and cross-fitted, refusing at
most `max_false_refusal` more of the answerable ones), with the check off (threshold 0) as the
baseline. Answers the service refused are left out: the check only ever turns answers into
refusals, so they are refused either way. Turning the check on therefore only turns labelled
answers into refusals, whose rightness the labels say: the candidate's evidence is measured, not
imputed (`TauFit.off_policy`), and it may go current on the golden check (`experiments.off_policy`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ragloop.agent.nodes.finalize import check_text
from ragloop.improve.payload import StoredTrace
from ragloop.improve.remediation.base import (
    AppliedChange,
    AuditNote,
    Effect,
    Remediation,
    RemediationContext,
    register_candidate,
)
from ragloop.improve.remediation.gate_labels import Labelled, impute, labelled_answers
from ragloop.improve.remediation.thresholds import GateSample, TauFit, fit_tau_lower
from ragloop.improve.types import ActionKind
from ragloop.models.chat import run_sync
from ragloop.models.scoring import Scorer, make_scorer

FIT_ACTION = "answer_check_fit"


class AnswerCheckPayload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    collection: str
    scorer: str = ""
    """The reader to fit (empty: `RemediationSettings.answer_check`)."""
    max_false_refusal: float = Field(default=0.05, gt=0.0, lt=1.0)
    min_samples: int = Field(default=50, ge=2)
    max_samples: int = Field(default=300, ge=2)
    """At most this many answers are read (the newest labelled ones): a bound on the fit's model calls."""


async def _scores(scorer: Scorer, pairs: list[tuple[str, str]]) -> list[float]:
    out = []
    for question, text in pairs:  # one pair per call: each answer has its own question
        out.append(float((await scorer.relevance(question, [text]))[0].p))
    return out


class AnswerCheckAction(Remediation[AnswerCheckPayload]):
    kind: ClassVar[ActionKind] = ActionKind.ANSWER_CHECK
    effect: ClassVar[Effect] = Effect.CANDIDATE
    cost: ClassVar[float] = 4.0
    payload_type: ClassVar[type[BaseModel]] = AnswerCheckPayload

    def scorer_name(self, ctx: RemediationContext) -> str:
        return self.payload.scorer or ctx.settings.answer_check or ""

    def _answered(self, ctx: RemediationContext) -> list[tuple[Labelled, str, str]]:
        """(labels, question, check text) of the newest labelled answers the service answered."""
        store, out = ctx.store, []
        answered = [i for i in labelled_answers(store, self.payload.collection, lambda _trace: 0.0) if not i.refused]
        found = store.queries.answers_with_questions([i.answer_id for i in answered[: self.payload.max_samples]])
        for item in answered[: self.payload.max_samples]:
            if item.answer_id not in found:
                continue
            answer, asked = found[item.answer_id]
            text = check_text(answer.answer_text or "")
            if text:
                out.append((item, StoredTrace.load(answer.trace).standalone() or asked, text))
        return out

    def ready(self, ctx: RemediationContext) -> str | None:
        if not self.scorer_name(ctx):
            return "no answer-check scorer configured (RAGLOOP_ANSWER_CHECK)"
        n, need = len(self._answered(ctx)), self.payload.min_samples
        return None if n >= need else f"{n}/{need} labelled answers"

    def samples(self, ctx: RemediationContext, scorer: Scorer) -> list[GateSample]:
        answered = self._answered(ctx)
        scores = run_sync(_scores(scorer, [(q, text) for _, q, text in answered]))
        labelled = [replace(item, score=p) for (item, _, _), p in zip(answered, scores, strict=True)]
        return [
            GateSample(
                score=min(1.0, max(0.0, item.score)),
                answerable=rights[1] < 0.5,
                answer_right=rights[0],
                refusal_right=rights[1],
                refused=False,
                label_source="+".join(item.sources),
            )
            for item, rights in zip(labelled, impute(labelled), strict=True)
        ]

    def apply(self, ctx: RemediationContext) -> AppliedChange:
        p = self.payload
        name = self.scorer_name(ctx)
        scorer = ctx.scorers.get(name) or make_scorer(name, ctx.collections(p.collection).settings)
        agent = ctx.config.agent
        current = agent.tau_answer if agent.scorers.answer_check == name else 0.0
        samples = self.samples(ctx, scorer)
        fit = fit_tau_lower(
            samples,
            current,
            max_false_refusal=p.max_false_refusal,
            resamples=ctx.settings.resamples,
            seed=ctx.settings.seed,
        )
        candidate = None
        if fit.off_policy:
            cfg = ctx.config.with_overrides(agent={"tau_answer": fit.fitted, "scorers": {"answer_check": name}})
            cfg = cfg.model_copy(update={"name": f"{ctx.config.name}+check-{p.collection}"})
            candidate = register_candidate(
                ctx,
                cfg,
                self.kind,
                f"answer check {name} at {fit.fitted} for {p.collection} on {fit.n} labelled answers",
            )
        return AppliedChange(
            kind=self.kind,
            effect=Effect.CANDIDATE if candidate else Effect.RECORD,
            summary=f"answer check {name}: {fit.current} -> {fit.fitted} on {fit.n} answers: "
            + (f"candidate {candidate}" if candidate else "no candidate (no raise whose gain interval is above 0)"),
            candidate_version=candidate,
            notes=(self._note(ctx, name, fit, candidate),),
        )

    def _note(self, ctx: RemediationContext, name: str, fit: TauFit, candidate: str | None) -> AuditNote:
        return AuditNote(
            action_type=FIT_ACTION,
            evidence={
                "domain": self.payload.collection,
                "scorer": name,
                "fit": fit.to_json(),
                "candidate_version": candidate,
            },
            pipeline_version_before=ctx.config.version_id,
            pipeline_version_after=candidate,
        )

    def revert(self, ctx: RemediationContext, change: AppliedChange) -> None:
        return None
