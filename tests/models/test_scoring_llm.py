"""The `llm:` scorer: P(yes) from first-token log-probabilities, the structured-verdict fallback,
failures routed to the fallback scorer and counted; one real smoke test with SmolLM2-135M."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragloop.config.settings import Settings
from ragloop.models.chat import ChatRequest, ChatResponse, FunctionModel, TestModel, TokenLogprob, TopLogprob
from ragloop.models.chat.local import LoadedModel, LocalChatModel
from ragloop.models.errors import (
    ModelRequestError,
    QuotaExhaustedError,
    RealCallsBlockedError,
    StructuredOutputError,
)
from ragloop.models.scoring import (
    FixedScorer,
    LexicalScorer,
    LLMScorer,
    Scorer,
    ScorerWeights,
    Verdict,
    fit_combined,
    llm_scorer_stats,
    make_scorer,
    platt,
    reset_llm_scorer_stats,
)
from ragloop.models.scoring.calibration import sigmoid
from ragloop.models.scoring.llm import PRIOR, weights_name, yes_probability

run = asyncio.run
PASSAGE = "The Normans gave their name to Normandy, a region in France. Their leader was Rollo."
OTHER = "The quarterback threw three touchdown passes in the final quarter."
IDENTITY = ScorerWeights(
    scorer="test", relevance=platt("logit_p_yes", 1.0, 0.0), support=platt("logit_p_yes", 1.0, 0.0)
)


@pytest.fixture(autouse=True)
def _fresh_stats() -> Iterator[None]:
    reset_llm_scorer_stats()
    yield
    reset_llm_scorer_stats()


def _logprobs(probs: dict[str, float]) -> list[TokenLogprob]:
    alts = [TopLogprob(token=t, logprob=math.log(p)) for t, p in sorted(probs.items(), key=lambda kv: -kv[1])]
    return [TokenLogprob(token=alts[0].token, logprob=alts[0].logprob, top_logprobs=alts)]


def test_p_yes_sums_yes_like_tokens_against_no_like_ones() -> None:
    resp = ChatResponse(
        text="Yes", model="m", logprobs=_logprobs({"Yes": 0.5, " yes": 0.2, "YES": 0.05, "No": 0.15, "The": 0.1})
    )
    assert yes_probability(resp) == pytest.approx(0.75 / 0.9)
    only_yes = ChatResponse(text="Yes", model="m", logprobs=_logprobs({"Yes": 0.9, "Sure": 0.01}))
    assert yes_probability(only_yes) == pytest.approx(0.9 / 0.91)  # "no" bounded by the smallest listed
    assert yes_probability(ChatResponse(text="Hm", model="m", logprobs=_logprobs({"Hm": 0.9}))) is None
    assert yes_probability(ChatResponse(text="yes", model="m")) is None


def test_logprob_scoring_with_test_model_and_calibration() -> None:
    model = TestModel(first_token_logprobs={"Yes": math.log(0.6), "No": math.log(0.2), "yes": math.log(0.2)})
    scorer = LLMScorer(model, weights=ScorerWeights("t", platt("logit_p_yes", 2.0, -3.0), platt("logit_p_yes", 1, 0)))
    js = run(scorer.relevance("What was the name of their leader?", [PASSAGE]))
    z = math.log(0.8 / 0.2)
    assert js[0].features["p_yes_raw"] == pytest.approx(0.8)
    assert js[0].p == pytest.approx(float(sigmoid(2.0 * z - 3.0)))
    assert "Rollo" in js[0].evidence
    req = model.requests[0]
    assert req.max_tokens == 1 and req.top_logprobs == 10 and req.output_type is None
    assert PASSAGE in req.prompt_text() and "What was the name of their leader?" in req.prompt_text()
    assert "yes or no" in req.prompt_text()
    assert llm_scorer_stats()["test:scripted"] == {"requested": 1, "logprobs": 1}


def test_uncalibrated_model_gets_a_prior_with_the_boundary_at_0_9() -> None:
    scorer = LLMScorer(TestModel(name="test:nobody-fitted-this"))
    assert scorer.weights is None and scorer._rel is PRIOR
    assert PRIOR.predict({"logit_p_yes": math.log(0.9 / 0.1)}) == pytest.approx(0.5)
    assert PRIOR.predict({"logit_p_yes": 0.0}) < 0.15  # a raw 0.5 is a clear "no"
    assert weights_name("local:qwen2.5-coder-1.5b") == "llm-local-qwen2.5-coder-1.5b"


def test_function_model_ranks_by_the_prompt_and_batches_one_request_per_pair() -> None:
    seen: list[ChatRequest] = []

    def answer(req: ChatRequest) -> ChatResponse:
        seen.append(req)
        yes = 0.95 if "Normandy" in req.prompt_text() and "Normans" in req.messages[-1].content else 0.1
        return ChatResponse(text="x", model="f", logprobs=_logprobs({"yes": yes, "no": 1 - yes}))

    scorer = LLMScorer(FunctionModel(answer), weights=IDENTITY, concurrency=2)
    js = run(scorer.relevance("Who led the Normans?", [OTHER, PASSAGE, OTHER]))
    assert len(seen) == 3 and js[1].p > 0.9 > 0.2 > js[0].p == js[2].p
    sup = run(scorer.support(["Rollo led the Normans.", "Rollo led the Normans."], [PASSAGE, OTHER]))
    assert len(seen) == 5 and "Claim: Rollo led the Normans." in seen[-1].messages[-1].content
    assert sup[0].p > sup[1].p
    with pytest.raises(ValueError, match="pairwise"):
        run(scorer.support(["a", "b"], ["c"]))


def test_structured_verdict_when_the_backend_has_no_logprobs() -> None:
    model = TestModel(["yes", Verdict(supported=True, confidence=0.8), Verdict(supported=False, confidence=0.9)])
    scorer = LLMScorer(model, weights=IDENTITY)
    js = run(scorer.support(["Rollo led the Normans.", "Rollo led the Danes."], [PASSAGE, PASSAGE]))
    assert [j.p for j in js] == pytest.approx([0.8, 0.1])
    assert all(j.features["llm_verdict"] == 1.0 for j in js)
    # the first request asked for log-probabilities; then the scorer switched to verdicts for good
    assert model.requests[0].top_logprobs and model.requests[1].output_type is Verdict
    assert len(model.requests) == 3 and scorer.mode == "verdict"
    assert llm_scorer_stats()["test:scripted"] == {"requested": 2, "verdict": 2}


def test_failures_fall_back_to_the_lexical_scorer_and_are_counted() -> None:
    lexical = LexicalScorer()
    model = TestModel(
        [ModelRequestError("boom"), "not json", "still not json"],
        first_token_logprobs={"yes": math.log(0.9), "no": math.log(0.1)},
    )
    scorer = LLMScorer(model, weights=IDENTITY)
    js = run(scorer.relevance("Who led the Normans?", [PASSAGE, OTHER]))
    want = run(lexical.relevance("Who led the Normans?", [PASSAGE]))[0]
    assert js[0].p == want.p and js[0].features["llm_failed"] == 1.0 and js[0].features["cov"] == want.features["cov"]
    assert "llm_failed" not in js[1].features and js[1].features["p_yes_raw"] == pytest.approx(0.9)
    # invalid structured output, twice (the repair attempt fails too): a StructuredOutputError inside
    verdicts = LLMScorer(TestModel(["not json", "still not json"]), weights=IDENTITY, mode="verdict")
    out = run(verdicts.support(["Rollo led the Normans."], [PASSAGE]))
    assert out[0].features["llm_failed"] == 1.0
    # no yes/no among the alternatives at all
    odd = LLMScorer(TestModel(first_token_logprobs={"Maybe": math.log(0.9)}), fallback=FixedScorer(0.42))
    assert run(odd.support(["c"], ["x"]))[0].p == 0.42
    stats = llm_scorer_stats()["test:scripted"]
    assert stats["failed"] == 3 and stats["requested"] == 4


def test_structured_output_error_is_what_the_verdict_path_raises_inside() -> None:
    async def call() -> None:
        await TestModel(["nope", "nope"]).request(ChatRequest.user("x", output_type=Verdict))

    with pytest.raises(StructuredOutputError):
        run(call())


def test_blocked_calls_and_exhausted_quota_propagate() -> None:
    scorer = make_scorer("llm:local:smollm2-135m", Settings(threads=1))
    with pytest.raises(RealCallsBlockedError):  # unit tests block real calls (conftest)
        run(scorer.relevance("q", ["p"]))
    quota = LLMScorer(TestModel([QuotaExhaustedError("spent")]))
    with pytest.raises(QuotaExhaustedError):
        run(quota.relevance("q", ["p"]))


def test_real_smollm_gives_p_yes_from_real_logprobs(smol: LoadedModel, smol_settings: Settings, real: None) -> None:
    scorer = LLMScorer(LocalChatModel("smollm2-135m", smol_settings))
    js = run(scorer.relevance("Who led the Normans?", [PASSAGE, OTHER]))
    for j in js:
        assert "llm_failed" not in j.features, j.features  # answered through the log-probability path
        assert 0.0 <= j.features["p_yes_raw"] <= 1.0 and 0.0 <= j.p <= 1.0
    assert llm_scorer_stats()["local:smollm2-135m"]["logprobs"] == 2


def test_combined_scorer_with_an_llm_component(tmp_path: Path) -> None:
    def answer(req: ChatRequest) -> ChatResponse:
        yes = 0.9 if "Normandy" in req.messages[-1].content and "France" in req.messages[-1].content else 0.2
        return ChatResponse(text="x", model="f", logprobs=_logprobs({"yes": yes, "no": 1 - yes}))

    chat = FunctionModel(answer, name="test:function")
    components: dict[str, Scorer] = {"lex": LexicalScorer(), "llm": LLMScorer(chat, weights=IDENTITY)}
    pairs = [("Where is Normandy?", PASSAGE), ("Where is Normandy?", OTHER)] * 3
    weights = run(fit_combined(components, relevance=(pairs, [1, 0] * 3), l2=10.0))
    assert weights.components == {"lex": "lexical", "llm": "llm:test:function"}
    assert "llm.logit_p_yes" in weights.relevance.feature_names  # type: ignore[union-attr]
    assert "llm.p_yes_raw" not in weights.relevance.feature_names  # type: ignore[union-attr]
    path = weights.save(tmp_path / "with-llm.json")
    scorer = make_scorer(f"combined:{path}", Settings(threads=1), chat_model=chat)
    js = run(scorer.relevance("Where is Normandy?", [PASSAGE, OTHER]))
    assert js[0].p > js[1].p and js[0].features["llm.logit_p_yes"] > 0
