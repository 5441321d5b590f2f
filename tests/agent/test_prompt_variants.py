"""`agent.prompt_version` selects a prompt for a chat model and composer rules for the offline
composer and the citation validator; an unknown version is a config error."""

from __future__ import annotations

import pytest

from ragloop.agent import prompts
from ragloop.agent.prompts import VARIANTS, variant
from ragloop.config import PipelineConfig
from ragloop.models.scoring import FixedScorer
from ragloop.retrieval.collection import Collection
from tests.agent.conftest import RoutedChat, ask, build_agent, cfg, records

Q = "When was the Zorblat Bridge completed?"


def test_every_version_has_its_own_prompt_recognisable_as_a_generate_prompt() -> None:
    texts = {v: VARIANTS[v].system_prompt(4) for v in VARIANTS}
    assert len(set(texts.values())) == len(texts) == 4
    for text in texts.values():
        assert text.startswith("You answer questions using ONLY") and "at most 4 sentences" in text.lower()
        assert "untrusted data" in text  # every variant keeps the injection rule
    assert VARIANTS["v1"].system == prompts.GENERATE_SYSTEM
    assert "Wrong answers" in texts["v3-negatives"] and "no background knowledge" in texts["v4-context-only"]


def test_an_unknown_version_is_refused_at_load_and_at_lookup() -> None:
    with pytest.raises(ValueError, match="prompt_version"):
        PipelineConfig().with_overrides(agent={"prompt_version": "v9"})
    with pytest.raises(ValueError, match="unknown prompt version 'v9'"):
        variant("v9")
    a = PipelineConfig().with_overrides(agent={"prompt_version": "v2-citations"})
    assert a.version_id != PipelineConfig().version_id  # a variant is a different pipeline version


@pytest.mark.parametrize("version", sorted(VARIANTS))
def test_the_chat_model_gets_the_configured_prompt(coll: Collection, version: str) -> None:
    chat = RoutedChat()
    ans = ask(build_agent(coll, cfg(prompt_version=version), chat=chat), Q)
    assert not ans.refused
    [prompt] = chat.prompts["generate"]
    rules_cap = VARIANTS[version].max_sentences(cfg().agent.max_answer_sentences)
    assert VARIANTS[version].system_prompt(rules_cap + 2) in prompt


def test_context_only_caps_the_extractive_answer_at_two_sentences(coll: Collection) -> None:
    def sentences(version: str) -> int:
        config = cfg(prompt_version=version, answer_floor=0.0, max_answer_sentences=4)
        ans = ask(build_agent(coll, config), "Zorblat Bridge Marta Quill Vell ferry Ostria tram")
        assert not ans.refused
        return ans.answer.count("[")

    assert sentences("v1") > 2
    assert sentences("v4-context-only") <= 2


def test_a_stricter_variant_cuts_sentences_the_original_accepts(coll: Collection) -> None:
    """Support 0.65: above v1's 0.5, below v4's 0.7. v1 shows the extractive answer; under v4 the
    validator cuts every sentence and the turn refuses rather than show weakly supported text."""
    support = FixedScorer(0.65)
    v1 = ask(build_agent(coll, cfg(), support=support), Q)
    v4 = ask(build_agent(coll, cfg(prompt_version="v4-context-only"), support=support), Q)
    assert not v1.refused and "1887" in v1.answer
    assert v4.refused
    assert records(v4, "validate_citations")[-1].decision.startswith("retries spent: cut")
