"""The admin console in headless Chromium against a real `ragloop serve` (its own server: this module
changes what serves). Feedback given on the chat page is found among the evaluations and in the
review queue, scored by a reviewer and then counted in the tiers' agreement; an improvement the loop
applied is on the timeline and reverted from it; an experiment started from its form has results per
variant and a confidence sequence; regression runs show their trend with the failing metric
highlighted; knowledge gaps, and the golden set with its review queue (approve with an edited
answer, reject; no machine score shown); markup in questions and answers shows as text;
phone width. `RAGLOOP_UI_SCREENSHOTS=1` saves each page under benchmarks/results/ui/."""

from __future__ import annotations

import asyncio
import math
import random
import re
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest

from ragloop.config import Settings
from ragloop.experiments.auto import REFUSED, golden_verdict
from ragloop.experiments.off_policy import TRIAL_ACTION
from ragloop.experiments.regression import Answered, compare_paired, run_regression
from ragloop.improve import recalibration as rc
from ragloop.improve.clock import ManualClock
from ragloop.improve.engine import DiagnosisConfig, DiagnosisEngine
from ragloop.improve.remediate import run_pass
from ragloop.improve.remediation.chunking import REFIT_ACTION, fit_sizes
from ragloop.improve.remediation.prompts import PromptTrial, VariantResult
from ragloop.improve.remediation.ranking import REFIT_ACTION as RANKING_REFIT
from ragloop.improve.remediation.ranking import RankingTuple, fit_fusion
from ragloop.improve.remediation.thresholds import GateSample, fit_tau_lower
from ragloop.improve.remediation.tier1 import refit as tier1_refit
from ragloop.improve.remediation.topk import fit_top_k
from ragloop.improve.scheduler import Policy
from ragloop.improve.tier1 import FEATURES, PRIOR
from ragloop.models.scoring import LexicalScorer
from ragloop.retrieval.collection import Collection
from ragloop.store import Store
from tests.improve.remediation_support import K1, chunk_of, context, propose_expansion
from tests.web.conftest import WEB_CFG, Served, shot
from tests.web.test_browser import ask, sign_in

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips these tests (under CI=true it fails them)
    expect = None  # type: ignore[assignment]

BRIDGE = "When was the Zorblat Bridge completed?"
FESTIVAL = "When is the lantern festival held?"
GAP_Q = "What is the boiling point of liquid nitrogen at sea level?"
GAP_FIX = "Liquid nitrogen boils at about minus 196 degrees Celsius (77 kelvin) at atmospheric pressure."
GOLDEN = [
    ("When was the Zorblat Bridge completed?", "It was completed in 1887."),
    ("Who designed the Quill Tower?", "Marta Quill designed the tower."),
    ("How tall is the Quill Tower?", "The tower is 96 metres tall."),
    ("What does the ferry carry?", "The ferry carries passengers and bicycles."),
    ("When do the trams run?", "The trams run every ten minutes."),
    ("Who built the harbour lighthouse?", "The harbour board built it."),
    ("How long is the bridge?", "The bridge is 300 metres long."),
    ("Where is the lantern festival held?", "In the harbour of Ostria."),
]


def wait_for(check: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


def feedback(served: Served, answer_id: str, correction: str) -> None:
    body = {"rating": "negative", "issues": ["wrong_answer"], "corrected_answer": correction}
    r = served.api("POST", f"/v1/answers/{answer_id}/feedback", served.user, json=body)
    assert r.status_code == 201, r.text


def no_markup_ran(page: Any) -> None:
    assert page.evaluate("window.__pwned") is None
    assert page.locator("main img").count() == 0 and page.locator("main b").count() == 0


def test_feedback_reaches_evaluations_and_is_reviewed(page: Any, served: Served) -> None:
    sign_in(page, served.user)
    bridge = ask(page, BRIDGE)
    bridge_id = bridge.get_attribute("data-answer-id")
    bridge.get_by_role("button", name="Bad answer…").click()
    form = bridge.locator("form.feedback-form")
    form.get_by_label("Wrong source").check()
    form.get_by_label("Suggest a correction").fill("It was completed in 1888.")
    form.get_by_role("button", name="Send feedback").click()
    expect(bridge.locator(".feedback-status")).to_contain_text("sent for a closer evaluation")
    festival = ask(page, FESTIVAL)
    festival_id = festival.get_attribute("data-answer-id")
    feedback(served, str(festival_id), "Every May, in the harbour of Ostria <b>really</b>.")
    # tier 1 scores every answer in the server's worker
    wait_for(
        lambda: served.api("GET", "/v1/admin/evaluations?tier=heuristic", served.admin).json()["total"] >= 2,
        "tier-1 evaluations",
    )

    sign_in(page, served.admin, "/admin#evaluations")
    expect(page.locator("#page-evaluations")).to_be_visible()
    expect(page.locator(".tabs a[aria-current=page]")).to_have_text("Evaluations")
    rows = page.locator("#evals tr")
    expect(rows.filter(has_text=BRIDGE).first).to_be_visible()
    expect(rows.filter(has_text="<script>window.__pwned = 1</script>").first).to_be_visible()
    page.locator("#f-tier").select_option("heuristic")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator('#evals tr:not([data-tier="heuristic"])')).to_have_count(0)
    expect(page.locator('#evals tr[data-tier="heuristic"]')).not_to_have_count(0)
    no_markup_ran(page)

    page.get_by_role("link", name="Human review").click()
    item = page.locator(f'li.review-item[data-answer-id="{bridge_id}"]')
    expect(item).to_contain_text(BRIDGE)
    expect(item).to_contain_text("detailed_feedback")
    assert "tier 1" not in item.inner_text()  # blind: no machine score before the reviewer's
    hostile = page.locator(f'li.review-item[data-answer-id="{festival_id}"]')
    expect(hostile).to_contain_text("<script>window.__pwned = 1</script> is held every May")
    no_markup_ran(page)
    item.get_by_label(re.compile("^Faithfulness")).select_option("0.25")
    item.get_by_label(re.compile("^Relevance")).select_option("0.5")
    item.get_by_label("Failure mode").select_option("generation_failure")
    item.get_by_label("hallucination").check()
    item.get_by_label("Correct answer (optional)").fill("It was completed in 1888.")
    shot(page, "12-admin-review", full_page=True)
    item.get_by_role("button", name=re.compile("^Submit review")).click()
    expect(item.locator(".reviewed")).to_contain_text("Reviewed")
    expect(item.locator(".reviewed")).to_contain_text("tier 1:")
    human = served.api("GET", f"/v1/evaluations/{bridge_id}", served.admin).json()
    assert any(e["evaluation_tier"] == "human" for e in human["evaluations"]), human

    page.get_by_role("link", name="Evaluations").click()
    page.locator("#f-tier").select_option("human")
    page.locator("#f-mode").select_option("generation_failure")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator('#evals tr[data-tier="heuristic"]')).to_have_count(0)
    reviewed = page.locator(f'#evals tr[data-answer-id="{bridge_id}"]')
    expect(reviewed).to_have_count(1)
    expect(reviewed).to_contain_text("tier 3")
    expect(reviewed).to_contain_text("0.38")  # the mean of the two metrics scored
    expect(page.locator("#agreement svg")).to_have_count(3)
    expect(page.locator("#agreement")).to_contain_text("n=1")
    page.locator("#f-tier").select_option("")
    page.locator("#f-mode").select_option("")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator('#evals tr[data-tier="human"]')).to_have_count(1)
    expect(page.locator('#evals tr[data-tier="heuristic"]')).not_to_have_count(0)
    shot(page, "11-admin-evaluations", full_page=True)


def measure_an_expansion(served: Served) -> str:
    """A query-expansion improvement applied and then audited two days later on a fast-forwarded clock
    (the auditor's real rule: kept or reverted on the interval of the measured change), so the
    timeline has an expected and a measured delta to draw. Its action id."""
    settings = Settings(home=served.home)
    coll = Collection("default", settings)
    clock = ManualClock(datetime.now(UTC))
    config = WEB_CFG.with_overrides(retrieval={"k": 1})  # k=1 does not serve the ferry for the question
    try:
        with Store.open(served.db_url) as st:
            action = propose_expansion(st, coll, BRIDGE, [chunk_of(coll, "ferry.md")], confidence=0.8)
            ctx = context(st, coll, clock, config=config)
            run_pass(st, config, clock=clock, policy=Policy(audit_window_s=5.0), context=ctx)
            wait_for(lambda: st.improvement_actions.get(action.action_id).applied_at, "the expansion to apply")
            clock.advance(days=2)
            run_pass(st, config, clock=clock, policy=Policy(audit_window_s=5.0), context=ctx)
            row = st.improvement_actions.get(action.action_id)
            assert row is not None and row.actual_delta is not None, row
            return action.action_id
    finally:
        coll.close()


def test_an_improvement_on_the_timeline_is_reverted_there(page: Any, served: Served) -> None:
    r = served.api("POST", "/v1/query", served.user, json={"question": GAP_Q, "session_id": "gap-1"})
    assert r.status_code == 200, r.text
    feedback(served, r.json()["answer_id"], GAP_FIX)
    settings = Settings(home=served.home)
    with Store.open(served.db_url) as st:
        engine = DiagnosisEngine(st, settings, DiagnosisConfig(), scorer=LexicalScorer(name="lexical"))
        try:  # Playwright's sync API holds this thread's event loop: diagnose on another thread
            with ThreadPoolExecutor(1) as pool:
                pool.submit(asyncio.run, engine.run_pass("web-test")).result()
        finally:
            engine.close()
        run_pass(st, WEB_CFG, settings=settings)
    applied = served.api("GET", "/v1/improvements?status=applied", served.admin).json()["actions"]
    assert applied, "the remediation pass applied nothing"
    action_id = applied[0]["action_id"]
    measured = measure_an_expansion(served)
    rolled = served.api("POST", "/v1/pipeline/rollback", served.admin, json={"reason": "timeline test"})
    assert rolled.status_code == 200, rolled.text
    back = served.api("POST", "/v1/pipeline/rollback", served.admin, json={"target_version": WEB_CFG.version_id})
    assert back.status_code == 200, back.text

    sign_in(page, served.admin, "/admin#timeline")
    entries = page.locator("#timeline > li")
    expect(entries.filter(has_text="pipeline_rollback").first).to_be_visible()
    change = entries.filter(has=page.get_by_role("button", name=f"Revert improvement {action_id}"))
    expect(change).to_have_count(1)
    expect(change).to_contain_text("remediation:")
    expect(change).to_contain_text(f"improvement {action_id} is applied")
    expect(page.locator("#tl-chart svg circle").first).to_be_visible()
    audited = entries.filter(has_text=f"audit:{measured}")
    expect(audited.first).to_contain_text("target_recall_at_k: expected")
    expect(audited.first).to_contain_text(re.compile(r"measured -?\d\.\d+ \(95% \[.*\], n=\d+\)"))
    expect(audited.first.locator("svg circle.actual")).to_have_count(1)
    shot(page, "10-admin-timeline", full_page=True)

    change.get_by_role("button", name=re.compile("^Revert")).click()
    expect(page.locator("#confirm-title")).to_have_text("Revert this improvement?")
    page.locator("#confirm-yes").click()
    expect(page.locator("#tl-status")).to_contain_text(f"improvement {action_id} is reverted")
    expect(entries.first).to_contain_text("remediation_revert")
    assert served.api("GET", f"/v1/improvements/{action_id}", served.admin).json()["status"] == "reverted"
    page.locator("#tl-type").select_option("pipeline_rollback")
    expect(entries).to_have_count(2)


def fixed4(x: float) -> str:
    """JavaScript's x.toFixed(4) (half up; Python's format rounds 0.03125 to even)."""
    return str(Decimal(str(x)).quantize(Decimal("0.0001"), ROUND_HALF_UP))


def test_a_chunking_fit_on_the_timeline_shows_every_size_it_tried(page: Any, served: Served) -> None:
    """The fit's evidence as the chunking action writes it (`fit_sizes`, `SizeFit.to_json`), drawn as a
    table: each size's gain with its interval and both p values, the candidate marked, the level
    this look was held to after what earlier looks at the pool spent."""
    sizes = [(640, 160), (819, 205), (1049, 262), (1310, 328)]
    before = [0.0] * 12
    afters = [[0.0] * 12, [1.0] * 3 + [0.0] * 9, [1.0] * 5 + [0.0] * 7, [1.0] * 7 + [0.0] * 5]
    fit = fit_sizes(sizes, before, afters, spent_before=0.002)  # 7 differ: 7/16 of 0.025 less 0.002 left
    trials = fit.trials
    assert [t.qualifies for t in trials] == [False, False, False, True] and fit.spent == pytest.approx(1 / 128)
    with Store.open(served.db_url) as st:
        st.audit.record(
            REFIT_ACTION,
            triggered_by="action:web-chunking-fit",
            evidence={
                "domain": "default",
                "items": 12,
                "documents": 9,
                "serving": {"size": 512, "overlap": 128},
                **fit.to_json(),
            },
        )
    sign_in(page, served.admin, "/admin#timeline")
    table = page.locator("#timeline > li").filter(has_text="action:web-chunking-fit").locator("table.trials")
    expect(table.locator("tbody tr")).to_have_count(4)
    caption = table.locator("caption")
    expect(caption).to_contain_text("12 pooled chunking failures (9 documents); serving chunk size 512")
    expect(caption).to_contain_text("98.8%, Bonferroni over the sizes")
    expect(caption).to_contain_text("family-wise one-sided p ≤ 0.0089: this look's allowance of the pool's")
    expect(caption).to_contain_text("0.025 budget (0.0109, 7 of 16 items differing) less what earlier looks")
    expect(caption).to_contain_text("spent (0.0020); it spent 0.0078.")
    chosen_row = table.locator('tr[data-size="1310"]')
    expect(chosen_row).to_have_class(re.compile(r"\bchosen\b"))
    expect(chosen_row).to_contain_text("0.0% → 58.3%")
    expect(chosen_row).to_contain_text(fixed4(trials[3].p_family))
    expect(chosen_row.locator("td").last).to_have_text("yes: the candidate")
    expect(table.locator('tr[data-size="1049"] td').last).to_have_text("no")
    expect(table.locator('tr[data-size="1049"]')).to_contain_text(fixed4(trials[2].delta.p))


def test_an_answer_trial_and_a_golden_check_on_the_timeline_show_what_they_measured(page: Any, served: Served) -> None:
    """A prompt trial's variants and a refused candidate's golden check, as their writers build them
    (`PromptTrial.to_json`, `golden_verdict`), drawn as tables: each try's gain with its interval, the
    rule from the entry's own evidence, the candidate marked and the gate that refused it named."""
    common = {"paired": 80, "faithfulness": 0.98, "baseline_faithfulness": 0.98, "f1_diff": 0.0, "f1_lo": 0.0}
    variants = [
        VariantResult("v2-citations", lo=0.0, hi=0.0, gain=0.0, f1_hi=0.0, refused=15, **common),
        VariantResult(
            "refine-off",
            lo=-0.03,
            hi=0.04,
            gain=-0.01,
            f1_hi=0.0,
            refused=16,
            correct=0.34,
            baseline_correct=0.19,
            correct_gain=0.15,
            correct_lo=0.04,
            correct_hi=0.28,
            overrides={"agent": {"refine": False}},
            **common,
        ),
        VariantResult(
            "sentences-8",
            lo=-0.01,
            hi=0.01,
            gain=0.0,
            f1_hi=0.0,
            refused=15,
            correct=0.22,
            baseline_correct=0.19,
            correct_gain=0.03,
            correct_lo=-0.02,
            correct_hi=0.1,
            overrides={"agent": {"max_answer_sentences": 8}},
            **common,
        ),
    ]
    trial = PromptTrial("v1", 100, 0.05 / 6, 0.02, variants)
    assert trial.chosen is variants[1]
    # 20 answerable entries, 5 more right (15 -> 20); 12 unanswerable, 6 now answered and 1 now refused
    right = {f"a{i}": (float(i < 15), 1.0) for i in range(20)}
    refused = {f"u{i}": (1.0, 0.0 if i < 6 else 1.0) if i < 11 else (0.0, 1.0) for i in range(12)}
    comparisons = [
        compare_paired(metric, {k: b for k, (b, _) in pairs.items()}, {k: a for k, (_, a) in pairs.items()})
        for metric, pairs in (("answer_correct", right), ("correct_refusal", refused))
    ]
    verdict = golden_verdict(32, [c for c in comparisons if c is not None])
    assert not verdict.passed and verdict.detail["likely_worse"] == ["correct_refusal"]
    with Store.open(served.db_url) as st:
        st.audit.record(
            TRIAL_ACTION,
            triggered_by="action:web-answer-trial",
            evidence={"domain": "default", "trial": trial.to_json()},
        )
        st.audit.record(
            REFUSED,
            triggered_by="golden-set check failed: action:web-golden-check",
            evidence={"candidate": "pv-web-candidate", "golden": verdict.detail},
        )
    sign_in(page, served.admin, "/admin#timeline")
    entries = page.locator("#timeline > li")
    variants_table = entries.filter(has_text="action:web-answer-trial").locator("table.variants")
    expect(variants_table.locator("tbody tr")).to_have_count(3)
    caption = variants_table.locator("caption")
    expect(caption).to_contain_text("100 golden entries, against the serving prompt v1")
    expect(caption).to_contain_text("by more than 2.0 pt")
    expect(caption).to_contain_text("99.2%, Bonferroni over two tests a variant")
    picked = variants_table.locator('tr[data-variant="refine-off"]')
    expect(picked).to_have_class(re.compile(r"\bchosen\b"))
    expect(picked).to_contain_text("agent.refine = false")
    expect(picked).to_contain_text("19.0% → 34.0%")
    expect(picked).to_contain_text("+15.0 pt [+4.0 pt, +28.0 pt]")
    expect(picked.locator("td").last).to_have_text("yes: the candidate")
    expect(variants_table.locator('tr[data-variant="sentences-8"] td').last).to_have_text("no")

    golden = entries.filter(has_text="action:web-golden-check").locator("table.golden")
    expect(golden.locator("tbody tr")).to_have_count(2)
    expect(golden.locator("caption")).to_contain_text("32 working golden entries")
    expect(golden.locator("caption")).to_contain_text(
        "more than 2% lower), and correct_refusal when likely worse (its one-sided 90.0% upper bound below 0)"
    )
    refusal = golden.locator('tr[data-metric="correct_refusal"]')
    expect(refusal).to_have_class(re.compile(r"\brefused\b"))
    expect(refusal).to_contain_text("91.7% → 50.0%")
    expect(refusal.locator("td").last).to_have_text("likely worse")
    accuracy = golden.locator('tr[data-metric="answer_correct"]')
    expect(accuracy).to_contain_text("75.0% → 100.0%")
    expect(accuracy.locator("td").last).to_have_text("passes")
    shot(page, "10b-admin-answer-trial", element=entries.filter(has_text="action:web-answer-trial"))
    shot(page, "10c-admin-golden-check", element=entries.filter(has_text="action:web-golden-check"))


def test_a_retrieval_refit_on_the_timeline_shows_its_grid_and_its_top_k(page: Any, served: Served) -> None:
    """The refit's evidence as the ranking action writes it (`FusionFit.to_json`, `TopKFit.to_json`):
    every mode and weight with its MRR, the fitted one marked, the held-out gain with its p and
    whether it is shown; the top-k curve with the serving and the fitted k."""
    tuples = [RankingTuple(query=f"q{i}", chunk_id=f"c{i}", rank=7, score=0.8) for i in range(30)]

    def dense_helps(cfg: Any, query: str, chunk_ids: Any) -> list[float]:
        w = cfg.fusion.dense_weight
        return [1.0 if w >= 0.8 else (0.5 if int(query[1:]) % 3 else 0.1) for _ in chunk_ids]

    def third_for_odd(cfg: Any, query: str, chunk_ids: Any) -> list[float]:
        return [1 / 3 if int(query[1:]) % 2 else 1.0 for _ in chunk_ids]

    fit = fit_fusion(tuples, K1.retrieval, dense_helps)
    k_fit = fit_top_k(tuples, K1.retrieval.model_copy(update={"k": 2}), third_for_odd)
    assert fit.improves and fit.dense_weight == 0.8 and k_fit.improves and k_fit.fitted == 3
    with Store.open(served.db_url) as st:
        st.audit.record(
            RANKING_REFIT,
            triggered_by="action:web-retrieval-refit",
            evidence={"domain": "default", "tuples": 30, "fit": fit.to_json(), "top_k": k_fit.to_json()},
        )
    sign_in(page, served.admin, "/admin#timeline")
    entry = page.locator("#timeline > li").filter(has_text="action:web-retrieval-refit")
    grid = entry.locator("table.retrieval")
    expect(grid.locator("tbody tr")).to_have_count(13)  # 11 fusion weights, dense, BM25
    expect(grid.locator("caption")).to_contain_text("30 diagnosed queries (30 failures)")
    g = fit.to_json()["held_out_gain"]
    assert 0 < g["p"] < 0.0001  # 30 queries that all gain: shown as a bound, not as 0.0000
    gain = f"+{g['value']:.3f} [+{g['lo']:.3f}, +{g['hi']:.3f}], one-sided p < 0.0001"
    expect(grid.locator("caption")).to_contain_text(f"Held-out gain in reciprocal rank {gain}")
    expect(grid.locator("caption")).to_contain_text("above 0 and p ≤ 0.025: shown.")
    fitted = grid.locator('tr[data-mode="hybrid"][data-weight="0.8"]')
    expect(fitted).to_have_class(re.compile(r"\bchosen\b"))
    expect(fitted).to_contain_text("1.000")
    expect(grid.locator("tr.chosen")).to_have_count(1)
    top_k = entry.locator("table.top-k")
    expect(top_k.locator("caption")).to_contain_text("serving k 2, fitted k 3")
    expect(top_k.locator('tr[data-k="2"]')).to_contain_text("50.0%")
    expect(top_k.locator('tr[data-k="2"] td').last).to_have_text("serving")
    expect(top_k.locator('tr[data-k="3"]')).to_have_class(re.compile(r"\bchosen\b"))
    expect(top_k.locator('tr[data-k="3"]')).to_contain_text("100.0%")
    shot(page, "10d-admin-retrieval-refit", element=entry)


def test_a_threshold_refit_and_a_tier1_refit_on_the_timeline_show_what_they_chose_from(
    page: Any, served: Served
) -> None:
    """A τL refit's evidence as the threshold action writes it (`TauFit.to_json`): the grid as τ
    ranges, every 0.1 shown with its gain and false-refusal increase, the serving and fitted τ marked;
    a tier-1 refit's (`tier1.refit`): both models' held-out agreement and routing share."""
    samples = [GateSample(score=0.30 + 0.2 * i / 15, answer_right=0.0, refusal_right=1.0) for i in range(15)]
    samples += [
        GateSample(score=0.60 + 0.35 * i / 15, answer_right=float(i % 5 != 0), refusal_right=0.0) for i in range(15)
    ]
    fit = fit_tau_lower(samples, current=0.3)
    assert fit.improves and 0.48 < fit.fitted <= 0.6
    rng = random.Random(3)
    at = datetime(2026, 3, 2, tzinfo=UTC)
    labels = []
    for i in range(300):
        f: dict[str, float | None] = {k: round(rng.random(), 4) for k in FEATURES}
        f["refused"] = 0.0
        labels.append(rc.Label(f"a{i}", f, float(f["support"] or 0.0), 1.0, rc.LabelSource.JUDGE, at))
    model, tier1 = tier1_refit(labels, PRIOR, resamples=300)
    assert model is not None and tier1["decision"] == "replaced"
    with Store.open(served.db_url) as st:
        st.audit.record(
            "threshold_refit",
            triggered_by="action:web-tau-refit",
            evidence={"domain": "default", "fit": fit.to_json(), "candidate_version": None},
        )
        st.audit.record("tier1_refit", triggered_by="action:web-tier1-refit", evidence=tier1)
    sign_in(page, served.admin, "/admin#timeline")
    entries = page.locator("#timeline > li")
    taus = entries.filter(has_text="action:web-tau-refit").locator("table.taus")
    caption = taus.locator("caption")
    expect(caption).to_contain_text("30 labelled answers, serving τ 0.30")
    expect(caption).to_contain_text("refuses at most 5 pt more of the answerable ones")
    expect(caption).to_contain_text(f"fitted ({fit.fitted:.2f})")
    expect(caption).to_contain_text("above 0 too: a candidate.")
    rows = fit.to_json()["taus"]
    tenths = [r for r in rows if math.floor(r["tau_to"] * 10 + 1e-9) >= math.ceil(r["tau_from"] * 10 - 1e-9)]
    expect(caption).to_contain_text(f"{sum(r['qualifies'] for r in rows)} of {len(rows)} ranges qualify")
    fitted = taus.locator("tr.chosen")
    expect(fitted).to_have_count(1)
    expect(fitted.locator("td").last).to_have_text("fitted")
    expect(fitted.locator("td").nth(4)).to_have_text("yes")
    expect(fitted.locator("td").nth(1)).to_have_text(f"{100 * fit.accuracy_after:.1f}%")
    serving = taus.locator("tbody tr").filter(has_text="serving")
    expect(serving).to_have_count(1)
    expect(serving.locator("td").nth(4)).to_have_text("no")
    assert taus.locator("tbody tr").count() >= len(tenths) and taus.locator("tbody tr").count() < len(rows)
    top = taus.locator("tbody tr").last  # τ up to 1.0 refuses every answerable answer
    expect(top.locator("td").nth(3)).to_contain_text("+100.0 pt")
    shot(page, "10e-admin-threshold-refit", element=entries.filter(has_text="action:web-tau-refit"))

    t1 = entries.filter(has_text="action:web-tier1-refit").locator("table.tier1")
    expect(t1.locator("caption")).to_contain_text(f"judged on {tier1['held_out']['labels']} labels (")
    expect(t1.locator("caption")).to_contain_text("at least 0.87 and its gain's 95% interval lies above 0")
    expect(t1.locator("caption")).to_contain_text(": replaced.")
    a = tier1["agreement_fitted"]
    expect(t1.locator('tr[data-model="fitted"]')).to_have_class(re.compile(r"\bchosen\b"))
    expect(t1.locator('tr[data-model="fitted"]')).to_contain_text(f"{100 * a['value']:.1f}% [{100 * a['lo']:.1f}%")
    expect(t1.locator('tr[data-model="serving"]')).to_contain_text(PRIOR.version)
    shot(page, "10f-admin-tier1-refit", element=entries.filter(has_text="action:web-tier1-refit"))


def test_regression_runs_and_the_golden_set(page: Any, served: Served) -> None:
    for q, a in GOLDEN:
        r = served.api("POST", "/v1/golden", served.admin, json={"question": q, "expected_answer": a})
        assert r.status_code == 201, r.text
    answers = dict(GOLDEN)

    def good(question: str) -> Answered:
        return Answered(answer=answers[question], doc_ids=[], refused=False)

    def worse(question: str) -> Answered:
        return Answered(answer=answers[question].split()[0], doc_ids=[], refused=False)

    with Store.open(served.db_url) as st:
        for answer in (good, good, worse):
            run_regression(st, answer, pipeline_version=WEB_CFG.version_id)

    sign_in(page, served.admin, "/admin#regression")
    expect(page.locator("#reg-charts figure")).not_to_have_count(0)
    expect(page.locator("#reg-charts figcaption.failing")).to_contain_text("answer_correct")
    expect(page.locator("#reg-runs tr")).to_have_count(3)
    expect(page.locator("#reg-runs tr.failing-row")).to_have_count(1)
    expect(page.locator("#reg-runs tr.failing-row li.failing")).to_contain_text("answer_correct")
    # the paired comparison says how many entries moved each way, not only its interval
    expect(page.locator("#reg-runs tr.failing-row li.failing")).to_contain_text(re.compile(r"[1-9]\d* worse, 0 better"))
    expect(page.locator("#reg-charts circle.regressed")).to_have_count(1)
    shot(page, "13-admin-regression", full_page=True)

    # adversarial candidates at the questions no golden entry covers (offline templates) wait for review
    for i, q in enumerate(("Which engineer built the Zorblat Bridge?", "How tall is the tower Marta Quill designed?")):
        r = served.api("POST", "/v1/query", served.user, json={"question": q, "session_id": f"cov-{i}"})
        assert r.status_code == 200 and not r.json()["refused"], r.text
    body = {"generator": "templates", "max_candidates": 4, "radius": 0.99}
    generated = served.api("POST", "/v1/golden/generate", served.admin, json=body)
    assert generated.status_code == 200, generated.text
    candidates = generated.json()["candidates"]
    cov = generated.json()["coverage"]
    assert len(candidates) >= 2, (cov["n"], cov["covered"], cov["uncovered_clusters"])
    version = served.api("GET", "/v1/golden", served.admin).json()["golden_set_version"]

    page.get_by_role("link", name="Gaps & golden set").click()
    expect(page.locator("#gaps")).to_contain_text("nitrogen")
    expect(page.locator("#gaps-chart svg")).to_be_visible()
    expect(page.locator("#golden-summary")).to_contain_text(f"version {version} · 8 live entries")
    expect(page.locator("#golden-difficulty svg")).to_be_visible()
    expect(page.locator("#golden-coverage svg")).to_be_visible()
    expect(page.locator("#golden-versions tbody tr")).not_to_have_count(0)
    queue = page.locator("#golden-queue li.candidate")
    expect(queue).to_have_count(len(candidates))
    assert not re.search(r"score|confidence|rating", page.locator("#golden-queue").inner_text(), re.I)
    expect(page.locator("#golden-queue")).to_contain_text("<script>window.__pwned = 1</script>")  # a served answer
    no_markup_ran(page)
    shot(page, "14-admin-gaps-golden", full_page=True)

    first, second = candidates[0], candidates[1]
    item = page.locator(f'li.candidate[data-candidate-id="{first["candidate_id"]}"]')
    item.get_by_label(re.compile("^Expected answer")).fill("An answer the reviewer wrote.")
    item.get_by_role("button", name=re.compile("^Approve")).click()
    expect(page.locator("#golden-status")).to_contain_text("Approved")
    expect(page.locator("#golden-summary")).to_contain_text(f"version {version + 1} · 9 live entries")
    page.locator(f'li.candidate[data-candidate-id="{second["candidate_id"]}"]').get_by_role(
        "button", name=re.compile("^Reject")
    ).click()
    expect(page.locator("#golden-status")).to_contain_text("Rejected")
    expect(queue).to_have_count(len(candidates) - 2)
    approved = served.api("GET", "/v1/golden/review?status=approved", served.admin).json()["candidates"]
    assert [(c["candidate_id"], c["answer_edited"]) for c in approved] == [(first["candidate_id"], True)]


def test_an_experiment_from_its_form(page: Any, served: Served) -> None:
    sign_in(page, served.admin, "/admin#experiments")
    expect(page.locator("#exp-list")).to_contain_text("No experiments yet")
    page.get_by_label("Name", exact=True).fill("k_minus_one")
    page.get_by_label(re.compile("^Treatment: a version id")).fill('{"retrieval": {"k": 3}}')
    page.get_by_label(re.compile("^Treatment share")).fill("0.5")
    page.get_by_label("Minimum answers per arm").fill("20")
    page.get_by_label("Primary metric").select_option("tier1_score")
    page.get_by_label("refusal_rate").check()
    page.get_by_role("button", name="Start experiment").click()
    expect(page.locator("#exp-create-status")).to_contain_text("Started k_minus_one")
    experiment_id = served.api("GET", "/v1/experiments", served.admin).json()[0]["experiment_id"]
    try:
        for i in range(24):
            q = GOLDEN[i % 3][0]
            r = served.api("POST", "/v1/query", served.user, json={"question": q, "session_id": f"exp-{i}"})
            assert r.status_code == 200, r.text
        wait_for(
            lambda: (
                served.api(
                    "GET", f"/v1/admin/evaluations?tier=heuristic&experiment_id={experiment_id}", served.admin
                ).json()["total"]
                >= 24
            ),
            "tier-1 scores of the experiment's answers",
        )
        page.locator("#exp-refresh").click()
        expect(page.locator("#exp-metrics figure")).to_have_count(4)
        expect(page.locator("#exp-metrics")).to_contain_text(re.compile(r"always-valid 95% \[-?\d"))
        expect(page.locator("#exp-sequence polyline.diff-line")).to_have_count(1)
        expect(page.locator("#exp-sequence polygon.band-av")).to_have_count(1)
        expect(page.locator("#exp-guardrails li")).to_have_count(3)
        shot(page, "15-admin-experiment", full_page=True)
        page.get_by_label("Metric", exact=True).select_option("latency_p99")
        expect(page.locator("#exp-sequence svg")).to_have_attribute("aria-label", re.compile("^latency_p99"))

        page.get_by_role("button", name="Stop…").click()
        page.locator("#confirm-yes").click()
        expect(page.locator("#exp-status")).to_contain_text("Done: stop")
        expect(page.locator("#exp-list")).to_contain_text("stopped")
    finally:
        served.api("POST", f"/v1/experiments/{experiment_id}/stop", served.admin, json={"reason": "test over"})


def test_admin_pages_at_phone_width(browser: Any, served: Served) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844}, base_url=served.base)
    try:
        page = context.new_page()
        sign_in(page, served.admin, "/admin#timeline")
        expect(page.locator("#timeline > li").first).to_be_visible()
        for name in ("timeline", "evaluations", "experiments", "review", "regression", "knowledge"):
            page.goto(f"/admin#{name}")
            expect(page.locator(f"#page-{name}")).to_be_visible()
            page.wait_for_timeout(300)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, (name, width)
        page.goto("/admin#timeline")
        expect(page.locator("#timeline > li").first).to_be_visible()
        page.keyboard.press("Tab")
        shot(page, "16-admin-phone")
    finally:
        context.close()
