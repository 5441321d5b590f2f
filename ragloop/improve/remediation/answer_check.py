"""The answer check (refusal errors the gate cannot see): fit `agent.tau_answer` for a configured
reader (`agent.scorers.answer_check`, e.g. an `llm:` scorer), as a candidate pipeline version.

Why. On-topic unanswerable questions (SQuAD 2.0's adversarial ones) retrieve passages that grade as
well as the answerable ones: the gate score separates them at ROC AUC 0.56 on the simulation's
traffic, so no τL helps. A reader of the drafted answer does (Qwen 1.5B yes/no: AUC 0.73 against the
gold on 100 answers the simulation served, 0.84 on the gold paragraph's best sentences), at seconds
per answer on a laptop CPU: a cost the loop should pay only where the evidence shows it pays.

The evidence. (1) Every labelled answer the service *answered*, read by the check exactly as serving
would read it (`finalize.check_text` of the stored answer, against the standalone question; the
model's response cache makes a later serving call on the same draft free); whether refusing it would
have been right comes from its labels (`gate_labels`, unknowns imputed from neighbours in the check's
score). (2) The working golden entries (clean labels, never the held-out share), answered by the
serving config and read the same way. Answers refused either way are left out: the check only turns
answers into refusals, and whether refusing is right the labels say, so the gain is measured, not
imputed (`TauFit.off_policy`), and the candidate may go current on the golden check
(`experiments.off_policy`).

The fit is the τL refit's rule (`thresholds.fit_tau_lower`: the most accurate threshold whose
paired-bootstrap gain lies above 0 in sample and cross-fitted) over both sample sets, with the check
off (threshold 0) as the baseline, among the thresholds whose *estimated* false-refusal increase on
the golden answerable entries is at most `max_false_refusal` (2 points: the tolerance the loop is held
to for any held-out metric). The estimate is Laplace's, (k + 1) / (n + 2) for k of n entries newly
refused, not k / n: the fit picks the most accurate threshold the bound admits, so the raw rate of
the one it picks is biased low, the more so the fewer entries there are. Measured: with the raw rate,
the simulation's fit took τ 0.11, refusing 1 of 87 answerable golden entries (1.1%), and held out it
refused 5 of 145 answerable questions never measured before (3.4%) and 2 of 44 in the earlier sample;
at 5 points it took τ 0.25 (4 of 87; 3 of 44 held out). With 87 entries the estimate admits no new
refusal; fewer than 48 admit no raise at all, so a small golden set keeps the check off rather than
certifying a rate it cannot resolve. Why that bound is taken on the golden set: rating
noise sits exactly where the check looks. In the simulation (10% of ratings flipped), 19 of the 20
labelled answers the check scored below 0.2 answered unanswerable questions, but 4 of them carried a
flipped positive rating and no reviewer label, so the labels said the check would refuse 10% of the
answerable questions where the gold says 2%: a bound on traffic labels refused every threshold of a
reader that was nearly always right where it refused.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ragloop.agent.nodes.finalize import check_text
from ragloop.experiments.golden import UNANSWERABLE_TAG, working_set
from ragloop.experiments.regression import answer_is_correct
from ragloop.improve.payload import StoredTrace
from ragloop.improve.remediation.base import (
    AppliedChange,
    AuditNote,
    Effect,
    Remediation,
    RemediationContext,
    register_candidate,
)
from ragloop.improve.remediation.gate_labels import Labelled, labelled_answers
from ragloop.improve.remediation.prompts import RunnerFactory, agent_runner
from ragloop.improve.remediation.thresholds import GRID, GateSample, TauFit, as_gate_samples, fit_tau_lower
from ragloop.improve.types import ActionKind
from ragloop.models.chat import CallPurpose, call_scope, run_sync
from ragloop.models.scoring import Scorer, make_scorer

FIT_ACTION = "answer_check_fit"


class AnswerCheckPayload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    collection: str
    scorer: str = ""
    """The reader to fit (empty: `RemediationSettings.answer_check`)."""
    max_false_refusal: float = Field(default=0.02, gt=0.0, lt=1.0)
    min_samples: int = Field(default=50, ge=2)
    max_samples: int = Field(default=300, ge=2)
    """At most this many answers are read (the newest labelled ones): a bound on the fit's model calls."""
    golden_limit: int = Field(default=200, ge=0)
    """Working golden entries the serving config answers for the fit (clean labels; 0: none)."""


async def _scores(scorer: Scorer, pairs: list[tuple[str, str]]) -> list[float]:
    out = []
    with call_scope(purpose=CallPurpose.REMEDIATION, step=FIT_ACTION):
        for question, text in pairs:  # one pair per call: each answer has its own question
            out.append(float((await scorer.relevance(question, [text]))[0].p))
    return out


@dataclass(frozen=True)
class GoldenCheck:
    samples: list[GateSample]
    """The answered golden entries (refused ones are refused either way)."""
    n_answerable: int
    """Answerable entries in all, answered or not: the false-refusal rate's denominator."""

    def newly_refused(self, tau: float, current: float) -> int:
        """Answerable golden entries the check would refuse at `tau` but not at `current`."""
        return sum(1 for s in self.samples if s.refusal_right == 0.0 and current <= s.score < tau)

    def false_refusal_increase(self, tau: float, current: float) -> float:
        return self.newly_refused(tau, current) / self.n_answerable if self.n_answerable else 0.0

    def false_refusal_estimate(self, tau: float, current: float) -> float:
        """Laplace's estimate of the increase (module docstring): what the bound is checked against."""
        return (self.newly_refused(tau, current) + 1) / (self.n_answerable + 2)


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
        return as_gate_samples([replace(item, score=p) for (item, _, _), p in zip(answered, scores, strict=True)])

    def golden(self, ctx: RemediationContext, scorer: Scorer, runner: RunnerFactory | None = None) -> GoldenCheck:
        """The serving config's answers to the working golden entries (never the held-out share), read by
        the check, with their clean labels."""
        entries = working_set(ctx.store)[: self.payload.golden_limit]
        pairs: list[tuple[str, str]] = []
        rights: list[tuple[float, float]] = []
        n_answerable = 0
        with (runner or agent_runner(ctx, self.payload.collection))(ctx.config) as answer:
            for e in entries:
                unanswerable = UNANSWERABLE_TAG in (e.domain_tags or [])
                n_answerable += not unanswerable
                got = answer(e.question)
                if got.refused or (not unanswerable and not e.expected_answer):
                    continue  # refused either way / nothing to tell a right answer by
                right = (
                    0.0 if unanswerable else float(answer_is_correct(got.answer, e.expected_answer or "", e.question))
                )
                pairs.append((e.question, check_text(got.answer)))
                rights.append((right, float(unanswerable)))
        scores = run_sync(_scores(scorer, pairs))
        samples = [
            GateSample(
                score=min(1.0, max(0.0, p)), answer_right=a, refusal_right=r, refused=False, label_source="golden"
            )
            for p, (a, r) in zip(scores, rights, strict=True)
        ]
        return GoldenCheck(samples, n_answerable)

    def apply(self, ctx: RemediationContext) -> AppliedChange:
        p = self.payload
        name = self.scorer_name(ctx)
        scorer = ctx.scorers.get(name) or make_scorer(
            name, ctx.collections(p.collection).settings, calls=ctx.store.model_calls
        )
        agent = ctx.config.agent
        current = agent.tau_answer if agent.scorers.answer_check == name else 0.0
        golden = self.golden(ctx, scorer) if p.golden_limit else GoldenCheck([], 0)
        samples = golden.samples + self.samples(ctx, scorer)
        # the false-refusal bound on the golden entries' clean labels when there are any (module docstring)
        bound = golden.n_answerable > 0
        grid = [
            t
            for t in GRID
            if not bound or t <= current or golden.false_refusal_estimate(t, current) <= p.max_false_refusal
        ]
        fit = fit_tau_lower(
            samples,
            current,
            max_false_refusal=1.0 if bound else p.max_false_refusal,
            resamples=ctx.settings.resamples,
            seed=ctx.settings.seed,
            grid=grid,
        )
        candidate = None
        if fit.off_policy:
            cfg = ctx.config.with_overrides(agent={"tau_answer": fit.fitted, "scorers": {"answer_check": name}})
            cfg = cfg.model_copy(update={"name": f"{ctx.config.name}+check-{p.collection}"})
            candidate = register_candidate(
                ctx,
                cfg,
                self.kind,
                f"answer check {name} at {fit.fitted} for {p.collection} on {fit.n} answers "
                f"({len(golden.samples)} golden, {fit.n - len(golden.samples)} labelled traffic)",
            )
        return AppliedChange(
            kind=self.kind,
            effect=Effect.CANDIDATE if candidate else Effect.RECORD,
            summary=f"answer check {name}: {fit.current} -> {fit.fitted} on {fit.n} answers: "
            + (f"candidate {candidate}" if candidate else "no candidate (no raise whose gain interval is above 0)"),
            candidate_version=candidate,
            notes=(self._note(ctx, name, fit, golden, candidate),),
        )

    def _note(
        self, ctx: RemediationContext, name: str, fit: TauFit, golden: GoldenCheck, candidate: str | None
    ) -> AuditNote:
        clean = {
            "answered": len(golden.samples),
            "answerable": golden.n_answerable,
            "false_refusal_increase": round(golden.false_refusal_increase(fit.fitted, fit.current), 6),
            "false_refusal_estimate": round(golden.false_refusal_estimate(fit.fitted, fit.current), 6),
        }
        return AuditNote(
            action_type=FIT_ACTION,
            evidence={
                "domain": self.payload.collection,
                "scorer": name,
                "fit": fit.to_json(),
                "golden": clean,
                "candidate_version": candidate,
            },
            pipeline_version_before=ctx.config.version_id,
            pipeline_version_after=candidate,
        )

    def revert(self, ctx: RemediationContext, change: AppliedChange) -> None:
        return None
