"""Candidates whose gain was already measured go current on the golden check, without a live
experiment: a τL raise and a retrieval refit measured on the traffic itself, an answer-graph variant
measured by its golden trial.

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
gates include `answer_correct`, `refusal_correct` and `correct_refusal`, so a raise that refuses
answerable golden questions is refused, and so is a refit that answers unanswerable ones), then is
activated in the maintenance window (`via=remediation`), audited with both pieces of evidence; the
nightly regression watches it like every current version.

**The answer check** (`ragloop.improve.remediation.answer_check`: a reader of the drafted answer
and its threshold `tau_answer`) is the τL raise's case again: it only turns answers into refusals,
and its fit read every labelled answer the service gave exactly as serving would, so the candidate's
gain is measured on outcomes the labels give (`fit.off_policy`, in sample and cross-fitted). It goes
current on the golden check when it changes only the check's reader and threshold, was built on the
current version, and raises the threshold from the one serving (0: off) for that reader.

Not off-policy: lowering τL (it would serve answers nobody has seen: their correctness is only
imputed), and any candidate that changes more than the gate's two thresholds (a raise also drops
chunks graded below the new τL from the context of answers that still pass; the golden check
answers with the candidate itself, so that part is measured there). Those take the experiment path.

**Retrieval refits** (`ragloop.improve.remediation.ranking`: retrieval mode, fusion / rerank weight,
a larger top k) are the same case for the retrieval stage. Retrieval is deterministic given the
index, so what the candidate retrieves for every diagnosed query is replayed exactly; the refit
measured, cross-fitted (weights chosen on one fold, gain taken on the other) with a bootstrap
interval and the exact sign-flip test (`stats.sign_flip_gain_p`: on 5-35 items the interval alone
over-states certainty), whether the oracle chunks of the ranking failures come into reach. An experiment at the
simulation's traffic could not resolve that (see above), and from a degraded start (top-k 2) every
such candidate ended inconclusive. The refit sees failures only, so its gain says nothing about the
answers that were right; that is exactly what the golden check measures end to end (document recall
and answer correctness gates, the candidate answering). Such a candidate goes current on the golden
check when it changes only retrieval's mode, fusion, rerank weight or k, was built on the current
version, every changed part's interval in its `ranking_refit` entry lies above 0, and k only rises.

**Chunking candidates** (`ragloop.improve.remediation.chunking`: a larger chunk size for a whole
collection) are the retrieval refit's case on the index: the fit re-chunked the collection in memory
and replayed every pooled chunking failure against it with the serving retriever, and the chosen
size's paired bootstrap gain interval (whether a top-k hit now holds the failure's supporting
sentence whole) lies above 0 at 95% Bonferroni-corrected for the sizes tried, and its exact
sign-flip p, family-wise over those sizes by the max statistic, is at most 0.025. It sees failures only;
what a larger chunk does to the questions that were answered right, and to those that should be
refused, is what the golden check measures end to end, answering from the candidate's own index
variant. Such a candidate goes current on the golden check when it changes only the chunk size and
overlap, was built on the current version, the size grows, and the fit that registered it qualified
that size.

**Answer-graph candidates** (`ragloop.improve.remediation.prompts`: a prompt variant, knowledge
refinement on/off, the answer's sentence cap) were measured end to end by their trial: every variant
and the serving config answered the same working golden entries, and the chosen variant's paired
correctness gain has a bootstrap interval above 0 at a Bonferroni-corrected level (0.05 over two
tests per variant tried), so picking the best of several variants is paid for. At the simulation's
traffic an experiment on `user_rating` cannot resolve the 10-15 point gains at stake (MTRAG-UN:
refinement off, `benchmarks/results/loop_knobs.md`), so such a candidate goes current on the golden
check when it changes only those knobs, was built on the current version, and its trial entry says
it qualified by correctness (not by faithfulness alone). Said plainly: the golden check then runs on
the same working entries the trial used; it is a second look at the gates the trial does not test
(refusals of unanswerable entries, document recall), not an independent replication; the nightly
regression watches the version afterwards like every current one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from ragloop.evaluation.stats import ONE_SIDED

if TYPE_CHECKING:
    from ragloop.store import PipelineVersion, Store

REFIT_ACTION = "threshold_refit"
"""The audit entry the τL refit writes (`ragloop.improve.remediation.thresholds`), evidence `fit`."""
GATE_KEYS = frozenset({("agent", "tau_lower"), ("agent", "tau_upper")})
RETRIEVAL_REFIT_ACTION = "ranking_refit"
"""The audit entry of the retrieval refit (`ragloop.improve.remediation.ranking`), evidence `fit`
(mode / fusion / rerank, `held_out_gain`) and `top_k` (`gain`)."""
FUSION_KEYS = frozenset(
    {("retrieval", "mode"), ("retrieval", "fusion", "method"), ("retrieval", "fusion", "dense_weight")}
    | {("retrieval", "rerank", "weight")}
)
K_KEY = ("retrieval", "k")
RETRIEVAL_KEYS = FUSION_KEYS | {K_KEY}
TRIAL_ACTION = "prompt_trial"
"""The audit entry of the answer-graph trial (`ragloop.improve.remediation.prompts`), evidence `trial`."""
ANSWER_KEYS = frozenset({("agent", "prompt_version"), ("agent", "refine"), ("agent", "max_answer_sentences")})
CHECK_ACTION = "answer_check_fit"
"""The audit entry of the answer-check fit (`ragloop.improve.remediation.answer_check`), evidence `fit`."""
CHECK_KEYS = frozenset({("agent", "tau_answer"), ("agent", "scorers", "answer_check")})
CHUNKING_ACTION = "chunking_refit"
"""The audit entry of the chunking fit (`ragloop.improve.remediation.chunking`), evidence `trials`."""
CHUNKING_KEYS = frozenset({("chunking", "size"), ("chunking", "overlap")})


def _paths(data: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for k, v in data.items():
        out |= _paths(v, (*prefix, str(k))) if isinstance(v, Mapping) else {(*prefix, str(k))}
    return out


def _refit_entry(store: Store, action: str, candidate: str) -> tuple[str, dict[str, Any]] | None:
    """The latest refit audit entry of `action` that registered `candidate`: (log id, evidence)."""
    from ragloop.store.models import ImprovementAuditLog

    stmt = (
        select(ImprovementAuditLog)
        .where(ImprovementAuditLog.action_type == action, ImprovementAuditLog.pipeline_version_after == candidate)
        .order_by(ImprovementAuditLog.created_at.desc())
        .limit(1)
    )
    with store.db.transaction(write=False) as s:
        row = s.scalar(stmt)
        return None if row is None else (row.log_id, dict(row.evidence or {}))


def _entry_for(
    store: Store,
    current: PipelineVersion,
    candidate: PipelineVersion,
    paths: set[tuple[str, ...]],
    allowed: frozenset[tuple[str, ...]],
    action: str,
) -> tuple[str, dict[str, Any]] | None:
    """The `action` audit entry (log id, evidence) that registered `candidate`, when the candidate was
    built on `current` and changes something, only within `allowed`."""
    if candidate.parent_version_id != current.version_id or not paths or paths - allowed:
        return None
    return _refit_entry(store, action, candidate.version_id)


def _lower_bound(fit: Any, key: str) -> float:
    value = fit.get(key) if isinstance(fit, Mapping) else None
    lo = value.get("lo") if isinstance(value, Mapping) else None
    return float(lo) if isinstance(lo, int | float) else math.nan


def _shown(fit: Any, key: str) -> bool:
    """The gain's 95% interval lies above 0 and its exact one-sided p agrees (`stats.ONE_SIDED`)."""
    value = fit.get(key) if isinstance(fit, Mapping) else None
    p = value.get("p") if isinstance(value, Mapping) else None
    return _lower_bound(fit, key) > 0.0 and isinstance(p, int | float) and p <= ONE_SIDED


def retrieval_evidence(
    store: Store, current: PipelineVersion, candidate: PipelineVersion, diff: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The retrieval refit's evidence that lets `candidate` skip the live experiment, or None: it
    changes only retrieval's mode / fusion / rerank weight / k, was built on `current`, k (if changed)
    rises, and each changed part's gain (fusion: `fit.held_out_gain`, k: `top_k.gain`) has its interval
    above 0 and its exact one-sided p at most `ONE_SIDED`."""
    paths = _paths(diff) if diff else set()
    entry = _entry_for(store, current, candidate, paths, RETRIEVAL_KEYS, RETRIEVAL_REFIT_ACTION)
    if entry is None:
        return None
    log_id, evidence = entry
    fit, top_k = evidence.get("fit") or {}, evidence.get("top_k") or {}
    if paths & FUSION_KEYS and not _shown(fit, "held_out_gain"):
        return None
    if K_KEY in paths:
        k_now = ((current.config or {}).get("retrieval") or {}).get("k")
        k_new = (diff.get("retrieval") or {}).get("k")
        if not (isinstance(k_now, int) and isinstance(k_new, int) and k_new > k_now):
            return None
        if not (_shown(top_k, "gain") and top_k.get("current") == k_now):
            return None
    return {"route": "retrieval_refit", "refit_log_id": log_id, "fit": fit, "top_k": top_k}


def trial_evidence(
    store: Store, current: PipelineVersion, candidate: PipelineVersion, diff: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The answer-graph trial's evidence that lets `candidate` skip the live experiment, or None: it
    changes only the prompt variant / refinement / sentence cap, was built on `current`, and the trial
    that registered it chose a variant whose correctness gain exceeds the trial's `min_gain` with its
    (corrected) interval above 0, with exactly the overrides the candidate carries."""
    entry = _entry_for(store, current, candidate, _paths(diff) if diff else set(), ANSWER_KEYS, TRIAL_ACTION)
    if entry is None:
        return None
    log_id, evidence = entry
    trial = evidence.get("trial") or {}
    chosen = next((v for v in trial.get("variants") or [] if v.get("version") == trial.get("chosen")), None)
    if not isinstance(chosen, Mapping) or _paths(chosen.get("overrides") or {}) != _paths(diff):
        return None
    try:
        gained = float(chosen["correct_lo"]) > 0.0 and float(chosen["correct_gain"]) > float(trial["min_gain"])
    except (KeyError, TypeError, ValueError):
        return None
    if not gained:
        return None
    keep = ("version", "correct", "baseline_correct", "correct_gain", "correct_lo", "correct_hi", "gain", "lo", "hi")
    return {
        "route": "answer_trial",
        "trial_log_id": log_id,
        "entries": trial.get("entries"),
        "alpha": trial.get("alpha"),
        "variant": {k: chosen.get(k) for k in keep},
    }


def chunking_evidence(
    store: Store, current: PipelineVersion, candidate: PipelineVersion, diff: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The chunking fit's evidence that lets `candidate` skip the live experiment, or None: it changes
    only the chunk size (and its overlap), was built on `current`, the size grows, and the fit that
    registered it tried that size with its (Bonferroni-corrected) gain interval above 0 and qualified it
    (the family-wise exact sign-flip test agreeing, `SizeTrial.qualifies`)."""
    entry = _entry_for(store, current, candidate, _paths(diff) if diff else set(), CHUNKING_KEYS, CHUNKING_ACTION)
    if entry is None:
        return None
    log_id, evidence = entry
    size_now = ((current.config or {}).get("chunking") or {}).get("size")
    chunking = diff.get("chunking") or {}
    size_new = chunking.get("size", size_now)
    trial = next((t for t in evidence.get("trials") or [] if t.get("size") == size_new), None)
    if not (isinstance(size_now, int) and isinstance(size_new, int) and size_new > size_now and trial):
        return None
    if "overlap" in chunking and trial.get("overlap") != chunking["overlap"]:
        return None
    if not (_lower_bound(trial, "gain") > 0.0 and trial.get("qualifies") is True):
        return None  # `qualifies`: the fit's exact test agreed with the interval (`SizeTrial.qualifies`)
    keep = ("items", "documents", "alpha", "serving")
    return {"route": "chunking_fit", "refit_log_id": log_id, "trial": trial, **{k: evidence.get(k) for k in keep}}


def off_policy_evidence(
    store: Store, current: PipelineVersion, candidate: PipelineVersion, diff: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The measured evidence that lets `candidate` skip the live experiment, or None. `diff`: the
    candidate's changes against `current` (`auto.changes`). A τL candidate needs: built on `current`,
    changes only τL / τU, raises τL, and its refit says the gain's 95% lower bound is above 0 on
    outcomes the labels give, in sample and cross-fitted (`fit.off_policy`, `fit.cv_lo`); retrieval,
    chunking and answer-graph candidates: see `retrieval_evidence`, `chunking_evidence` and
    `trial_evidence`."""
    paths = _paths(diff) if diff else set()
    if paths and paths <= ANSWER_KEYS:
        return trial_evidence(store, current, candidate, diff)
    agent = (current.config or {}).get("agent") or {}
    if paths and paths <= CHECK_KEYS:
        # the check's threshold counts as 0 (off) while another reader, or none, serves
        reader = (agent.get("scorers") or {}).get("answer_check")
        serving = {reader: agent.get("tau_answer", 0.0)} if reader else {}
        return _raise_evidence(
            store,
            current,
            candidate,
            paths,
            CHECK_KEYS,
            CHECK_ACTION,
            "answer_check",
            serving=lambda evidence: serving.get(evidence.get("scorer"), 0.0),
        )
    if paths and paths <= CHUNKING_KEYS:
        return chunking_evidence(store, current, candidate, diff)
    if paths and not paths & GATE_KEYS:
        return retrieval_evidence(store, current, candidate, diff)
    tau_lower = agent.get("tau_lower", math.nan)
    return _raise_evidence(
        store, current, candidate, paths, GATE_KEYS, REFIT_ACTION, "tau_raise", serving=lambda _evidence: tau_lower
    )


def _raise_evidence(
    store: Store,
    current: PipelineVersion,
    candidate: PipelineVersion,
    paths: set[tuple[str, ...]],
    allowed: frozenset[tuple[str, ...]],
    action: str,
    route: str,
    *,
    serving: Callable[[Mapping[str, Any]], Any],
) -> dict[str, Any] | None:
    """A refusal threshold raised by a fit (τL, the answer check's): its `action` entry's fit raised the
    threshold the current version serves (`serving(evidence)`), with both gain intervals above 0 on
    outcomes the labels give."""
    entry = _entry_for(store, current, candidate, paths, allowed, action)
    if entry is None:
        return None
    log_id, evidence = entry
    fit = evidence.get("fit") or {}
    try:
        raised = float(fit["fitted"]) > float(fit["current"]) and float(fit["current"]) == float(serving(evidence))
        gained = float(fit["lo"]) > 0.0 and float(fit["cv_lo"]) > 0.0
    except (KeyError, TypeError, ValueError):
        return None
    if not (fit.get("off_policy") and raised and gained):
        return None
    return {"route": route, "refit_log_id": log_id, "fit": fit}
