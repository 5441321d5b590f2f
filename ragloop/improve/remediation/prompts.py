"""Answer-graph candidates (generation failures): try the other generation-prompt variants and the
answer graph's knobs (knowledge refinement on/off, the composer's sentence cap) on the golden set and
register the one that makes answers right more often, or more faithful, as a *candidate* pipeline version.

The queue keeps one prompt action per collection and pipeline version (`proposals.spec_for`), and
every further generation failure of that version adds its answer to it while it is proposed; the
action waits until `min_failures` of its answers have a completed diagnosis that blames the answer
graph: a `generation_failure`, or a `retrieval_success` whose answer does not give the ideal answer
(the classifier proposes this action for both). One failure is no reason to change how every
question is answered.

The variants (`variants`): every prompt of `ragloop.agent.prompts.VARIANTS` other than the serving
one, and the knobs `benchmarks/results/loop_knobs.md` found to matter: knowledge refinement toggled
(`agent.refine`: on MTRAG-UN off took end-to-end accuracy 0.25 -> 0.40, `baseline` 0.44), a cap of
8 answer sentences instead of 3, and both. Why these and not τL: lowering τL lost 5 points there.

The trial: every variant answers the working golden set (live, never the held-out 20%:
`experiments.golden.working_set`; answerable entries, the first `golden_limit`) on the action's
collection, and so does the serving config. Each
answer is assessed as the diagnosis assessed the failures (`diagnosis.assess_answer` with the
diagnosis judge, faithfulness at the tree's claim-support threshold with its grounding check), so
"more faithful" means what the classifier meant by "unfaithful". Offline there is no prompt: a
variant's composer rules (support threshold, relevance floor, sentence cap) change the extractive
answers instead, so the trial measures something with or without a chat model.

A variant qualifies, at a Bonferroni-corrected level (0.05 / (2 x variants): two tests each), when
- its **end-to-end correctness** gain (the golden gate's `answer_correct`: refusals count wrong) is
  above `min_gain` (2 points) with the paired bootstrap interval above 0, and its faithfulness does
  not drop (the interval does not lie below 0); or
- its **faithfulness** gain, paired over the entries both answered, is above `min_gain` with the
  interval above 0, and its correctness does not drop: a variant that refuses or truncates its way
  to faithfulness is no improvement.
Correctness, not answer F1: F1 against a one-line reference punishes the longer complete answers
that refinement off gives (it fell 0.275 -> 0.250 while accuracy rose). The qualifying variant with
the largest correctness gain (then faithfulness gain) is registered; the trial's table is its own
audit entry either way. The candidate still has to pass the golden check before it serves; one
chosen by correctness goes current on it (`ragloop.experiments.off_policy.trial_evidence`), one
chosen by faithfulness alone has to win an experiment (`ragloop.experiments.auto`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ragloop.agent.prompts import VARIANTS
from ragloop.config.pipeline import PipelineConfig
from ragloop.evaluation.metrics.answer import token_f1
from ragloop.evaluation.stats import paired_bootstrap
from ragloop.experiments.golden import UNANSWERABLE_TAG, working_set
from ragloop.experiments.regression import answer_is_correct
from ragloop.improve.diagnosis import assess_answer
from ragloop.improve.remediation.base import (
    AppliedChange,
    AuditNote,
    Effect,
    Remediation,
    RemediationContext,
    register_candidate,
)
from ragloop.improve.types import ActionKind, FailureMode, Thresholds
from ragloop.models.chat import run_sync
from ragloop.models.scoring import make_scorer
from ragloop.models.scoring.base import Scorer
from ragloop.store import GoldenSetEntry, Store

TRIAL_ACTION = "prompt_trial"
JUDGE = "lexical"
"""The diagnosis pass's judge (`DiagnosisConfig.scorer`): the one the tree's thresholds were chosen with."""


@dataclass(frozen=True)
class GoldenAnswer:
    """What a pipeline answered to one golden question, and the passages it answered from."""

    answer: str
    contexts: tuple[str, ...]
    refused: bool


Answerer = Callable[[str], GoldenAnswer]
RunnerFactory = Callable[[PipelineConfig], AbstractContextManager[Answerer]]
"""A config -> a context that answers golden questions with it (and cleans up after)."""


@dataclass(frozen=True)
class ItemScore:
    faithfulness: float | None
    """None when the pipeline refused (no claims to check)."""
    f1: float
    """Token F1 against the reference; 0 for a refusal."""
    correct: float = 0.0
    """1 when the answer gives the reference by the golden gate's rule; 0 for a refusal."""


def variants(config: PipelineConfig) -> dict[str, dict[str, Any]]:
    """The trial's variants of `config`, by name: their overrides (see the module docstring)."""
    out: dict[str, dict[str, Any]] = {
        v: {"agent": {"prompt_version": v}} for v in VARIANTS if v != config.agent.prompt_version
    }
    refine = not config.agent.refine
    out[f"refine-{'on' if refine else 'off'}"] = {"agent": {"refine": refine}}
    if config.agent.max_answer_sentences < LONG_ANSWER:
        out[f"sentences-{LONG_ANSWER}"] = {"agent": {"max_answer_sentences": LONG_ANSWER}}
        if config.agent.refine:
            out[f"refine-off+sentences-{LONG_ANSWER}"] = {
                "agent": {"refine": False, "max_answer_sentences": LONG_ANSWER}
            }
    return out


LONG_ANSWER = 8
"""The sentence cap of the longer-answer variant (`loop_knobs.md`'s `sent8`)."""


@dataclass(frozen=True)
class VariantResult:
    version: str
    """The variant's name: a prompt version, or a knob setting such as `refine-off`."""
    paired: int
    """Entries both the serving prompt and this variant answered (the faithfulness pairs)."""
    faithfulness: float
    baseline_faithfulness: float
    gain: float
    lo: float
    hi: float
    f1_diff: float
    f1_lo: float
    f1_hi: float
    refused: int
    correct: float = 0.0
    baseline_correct: float = 0.0
    correct_gain: float = 0.0
    correct_lo: float = 0.0
    correct_hi: float = 0.0
    overrides: dict[str, Any] = field(default_factory=dict)

    def qualifies(self, min_gain: float) -> bool:
        by_correct = self.correct_gain > min_gain and self.correct_lo > 0.0 and not (self.paired > 1 and self.hi < 0.0)
        by_faith = self.paired > 1 and self.gain > min_gain and self.lo > 0.0 and not self.correct_hi < 0.0
        return by_correct or by_faith

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class PromptTrial:
    serving: str
    entries: int
    alpha: float
    min_gain: float
    variants: list[VariantResult] = field(default_factory=list)

    @property
    def chosen(self) -> VariantResult | None:
        ok = [v for v in self.variants if v.qualifies(self.min_gain)]
        return max(ok, key=lambda v: (v.correct_gain, v.gain, v.lo)) if ok else None

    def to_json(self) -> dict[str, Any]:
        chosen = self.chosen
        return {
            "serving": self.serving,
            "entries": self.entries,
            "alpha": round(self.alpha, 6),
            "min_gain": self.min_gain,
            "variants": [{**v.to_json(), "qualifies": v.qualifies(self.min_gain)} for v in self.variants],
            "chosen": chosen.version if chosen else None,
        }


def score_item(judge: Scorer, entry: GoldenSetEntry, got: GoldenAnswer, thresholds: Thresholds) -> ItemScore:
    f1 = 0.0 if got.refused else float(token_f1(got.answer, entry.expected_answer))
    if got.refused:
        return ItemScore(None, f1)
    assessment = run_sync(
        assess_answer(judge, entry.question, got.answer, got.contexts, reference=entry.expected_answer)
    )
    faith, _ = assessment.faithfulness_at(thresholds.claim_support, thresholds.grounding)
    return ItemScore(faith, f1, float(answer_is_correct(got.answer, entry.expected_answer, entry.question)))


def compare(
    version: str, base: Sequence[ItemScore], var: Sequence[ItemScore], *, alpha: float, resamples: int, seed: int
) -> VariantResult:
    pairs = [(b.faithfulness, v.faithfulness) for b, v in zip(base, var, strict=True)]
    both = [(b, v) for b, v in pairs if b is not None and v is not None]
    if both:
        fb, fv = [b for b, _ in both], [v for _, v in both]
        gain, lo, hi = paired_bootstrap(fb, fv, resamples=resamples, seed=seed, alpha=alpha)
    else:
        fb, fv, gain, lo, hi = [], [], 0.0, 0.0, 0.0
    f1_diff, f1_lo, f1_hi = paired_bootstrap(
        [b.f1 for b in base], [v.f1 for v in var], resamples=resamples, seed=seed, alpha=alpha
    )
    cb, cv = [b.correct for b in base], [v.correct for v in var]
    c_diff, c_lo, c_hi = paired_bootstrap(cb, cv, resamples=resamples, seed=seed, alpha=alpha)
    return VariantResult(
        version=version,
        paired=len(both),
        faithfulness=float(np.mean(fv)) if fv else 0.0,
        baseline_faithfulness=float(np.mean(fb)) if fb else 0.0,
        gain=float(gain),
        lo=float(lo),
        hi=float(hi),
        f1_diff=float(f1_diff),
        f1_lo=float(f1_lo),
        f1_hi=float(f1_hi),
        refused=sum(v.faithfulness is None for v in var),
        correct=float(np.mean(cv)) if cv else 0.0,
        baseline_correct=float(np.mean(cb)) if cb else 0.0,
        correct_gain=float(c_diff),
        correct_lo=float(c_lo),
        correct_hi=float(c_hi),
    )


def run_trial(
    entries: Sequence[GoldenSetEntry],
    config: PipelineConfig,
    runner: RunnerFactory,
    judge: Scorer,
    *,
    min_gain: float = 0.02,
    thresholds: Thresholds | None = None,
    resamples: int = 1000,
    seed: int = 20240601,
) -> PromptTrial:
    """The serving config and each other prompt variant over `entries`; see the module docstring."""
    t = thresholds or Thresholds()
    serving = config.agent.prompt_version
    others = variants(config)
    alpha = 0.05 / max(1, 2 * len(others))

    def scores(cfg: PipelineConfig) -> list[ItemScore]:
        with runner(cfg) as answer:
            return [score_item(judge, e, answer(e.question), t) for e in entries]

    base = scores(config)
    results = []
    for name, over in others.items():
        var = scores(config.with_overrides(**over))
        result = compare(name, base, var, alpha=alpha, resamples=resamples, seed=seed)
        results.append(replace(result, overrides=over))
    return PromptTrial(serving, len(entries), alpha, min_gain, results)


def answerable_entries(store: Store, limit: int) -> list[GoldenSetEntry]:
    """The working golden set's answerable entries with a reference (never the held-out share)."""
    out = [e for e in working_set(store) if e.expected_answer and UNANSWERABLE_TAG not in (e.domain_tags or [])]
    return out[:limit]


def generation_failures(store: Store, answer_ids: Sequence[str]) -> int:
    """Completed diagnoses among `answer_ids` that blame the answer graph: a generation failure, or
    any mode whose diagnosis proposed this action (a retrieval success that missed the ideal answer)."""
    n = 0
    for answer_id in answer_ids:
        row = store.diagnoses.get(answer_id)
        if row is None or row.status != "completed":
            continue
        proposed = any(isinstance(a, dict) and a.get("kind") == ActionKind.PROMPT_CANDIDATE for a in row.actions or [])
        n += row.failure_mode == FailureMode.GENERATION_FAILURE or proposed
    return n


def agent_runner(ctx: RemediationContext, collection: str) -> RunnerFactory:
    """Golden questions through the offline (or configured) answer graph on `collection`, each in a
    fresh thread, with conversation memory in a temporary directory (a trial leaves no threads)."""

    @contextmanager
    def run(cfg: PipelineConfig) -> Iterator[Answerer]:
        from ragloop.agent.build import build_agent
        from ragloop.models.chat import CallPurpose, call_scope

        coll = ctx.collections(collection)
        with tempfile.TemporaryDirectory(prefix="ragloop-prompt-trial-") as tmp:
            d = Path(tmp)
            agent = build_agent(
                coll,
                cfg,
                checkpointer_url=f"sqlite:///{d / 'cp.sqlite'}",
                log_url=f"sqlite:///{d / 'log.sqlite'}",
                calls=ctx.store.model_calls,
            )
            try:

                def answer(question: str) -> GoldenAnswer:
                    with call_scope(purpose=CallPurpose.GOLDEN_RUN):
                        ans = agent.answer(question)
                    return GoldenAnswer(ans.answer, tuple(text for _, text in ans.sources()), bool(ans.refused))

                yield answer
            finally:
                agent.memory.close()

    return run


class PromptPayload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    collection: str
    min_failures: int = Field(default=5, ge=1)
    """Completed generation-failure diagnoses among the action's answers before a trial runs. It only
    decides when a trial is worth its cost (the golden set once per variant): the trial's corrected
    interval is the evidence. 10 was never reached on a simulated MTRAG-UN week (7 such diagnoses)."""
    min_entries: int = Field(default=20, ge=2)
    """Answerable working golden entries a trial needs."""
    golden_limit: int = Field(default=100, ge=2)
    min_gain: float = Field(default=0.02, ge=0.0, le=1.0)


class PromptCandidateAction(Remediation[PromptPayload]):
    kind: ClassVar[ActionKind] = ActionKind.PROMPT_CANDIDATE
    effect: ClassVar[Effect] = Effect.CANDIDATE
    cost: ClassVar[float] = 4.0
    """Answers the golden set once per variant."""
    payload_type: ClassVar[type[BaseModel]] = PromptPayload

    def ready(self, ctx: RemediationContext) -> str | None:
        p = self.payload
        failures = generation_failures(ctx.store, self.spec.answer_ids)
        if failures < p.min_failures:
            return f"{failures}/{p.min_failures} generation failures"
        entries = len(answerable_entries(ctx.store, p.golden_limit))
        if entries < p.min_entries:
            return f"{entries}/{p.min_entries} answerable working golden entries"
        return None

    def apply(self, ctx: RemediationContext) -> AppliedChange:
        p = self.payload
        entries = answerable_entries(ctx.store, p.golden_limit)
        judge = make_scorer(JUDGE, ctx.collections(p.collection).settings)
        trial = run_trial(
            entries,
            ctx.config,
            agent_runner(ctx, p.collection),
            judge,
            min_gain=p.min_gain,
            resamples=ctx.settings.resamples,
            seed=ctx.settings.seed,
        )
        chosen = trial.chosen
        candidate = None
        if chosen is not None:
            cfg = ctx.config.with_overrides(**chosen.overrides)
            cfg = cfg.model_copy(update={"name": f"{ctx.config.name}+{chosen.version}"})
            candidate = register_candidate(
                ctx,
                cfg,
                self.kind,
                f"{chosen.version} (prompt was {trial.serving}): correct {chosen.correct_gain:+.3f} "
                f"[{chosen.correct_lo:+.3f}, {chosen.correct_hi:+.3f}], faithfulness {chosen.gain:+.3f} "
                f"[{chosen.lo:+.3f}, {chosen.hi:+.3f}] on {trial.entries} golden entries (candidate)",
            )
        note = AuditNote(
            action_type=TRIAL_ACTION,
            evidence={
                "domain": p.collection,
                "generation_failures": generation_failures(ctx.store, self.spec.answer_ids),
                "trial": trial.to_json(),
                "candidate_version": candidate,
            },
            pipeline_version_before=ctx.config.version_id,
            pipeline_version_after=candidate,
        )
        verdict = (
            f"candidate {candidate} ({chosen.version})"
            if candidate and chosen
            else f"no candidate (no variant gained > {p.min_gain:g} with an interval above 0)"
        )
        return AppliedChange(
            kind=self.kind,
            effect=Effect.CANDIDATE if candidate else Effect.RECORD,
            summary=f"{len(trial.variants)} answer-graph variants on {trial.entries} golden entries: {verdict}",
            candidate_version=candidate,
            notes=(note,),
        )

    def revert(self, ctx: RemediationContext, change: AppliedChange) -> None:
        return None  # a candidate is never serving; the experiments' path retires it
