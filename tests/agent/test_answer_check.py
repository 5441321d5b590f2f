"""The answer check: a reader of the drafted answer refuses it below `tau_answer`, reads exactly what
the user would see (no citation marks, no notes), and costs nothing while off."""

from __future__ import annotations

from ragloop.agent.api import Agent
from ragloop.agent.nodes.finalize import check_text
from ragloop.agent.runtime import Runtime
from ragloop.models.scoring import FunctionScorer
from ragloop.retrieval.collection import Collection
from tests.agent.conftest import cfg, fixed, records

QUESTION = "When was the Zorblat Bridge completed?"


def _agent(coll: Collection, tau: float, check: FunctionScorer, name: str | None = "test:check") -> Agent:
    config = cfg(tau_answer=tau, scorers={"answer_check": name})
    rt = Runtime.build(
        coll,
        config,
        scorers={"grade": fixed(0.9), "refine": fixed(0.9), "support": fixed(0.9), "answer_check": check},
    )
    return Agent(coll, config, runtime=rt)


def _reader(p_of: dict[str, float]) -> FunctionScorer:
    """P(answers) by a word the draft holds (0.5 otherwise)."""
    return FunctionScorer(lambda q, text: next((p for w, p in p_of.items() if w in text), 0.5))


def test_a_draft_the_check_reads_as_unanswered_is_refused_and_traced(coll: Collection) -> None:
    check = _reader({"1887": 0.2})
    ans = _agent(coll, 0.4, check).answer(QUESTION)
    assert ans.refused and ans.termination_reason == "not_answered"
    [final] = records(ans, "finalize")
    assert final.decision == "refused (not_answered)" and final.detail.answer_check == 0.2  # type: ignore[union-attr]
    [(task, question, text)] = check.calls
    assert task == "relevance" and question == QUESTION
    assert "1887" in text and "[" not in text  # the answer as shown, without its citation marks


def test_a_draft_scoring_at_the_threshold_is_shown_with_its_score(coll: Collection) -> None:
    ans = _agent(coll, 0.4, _reader({"1887": 0.4})).answer(QUESTION)
    assert not ans.refused and "1887" in (ans.answer or "")
    [final] = records(ans, "finalize")
    assert final.detail.answer_check == 0.4  # type: ignore[union-attr]


def test_the_check_costs_nothing_while_off(coll: Collection) -> None:
    for tau, name in ((0.0, "test:check"), (0.9, None)):
        check = _reader({"1887": 0.0})
        ans = _agent(coll, tau, check, name).answer(QUESTION)
        assert not ans.refused and check.calls == []
        [final] = records(ans, "finalize")
        assert final.detail.answer_check is None  # type: ignore[union-attr]


def test_the_check_reads_the_answer_without_marks_or_notes() -> None:
    shown = "It opened in 1887 [1].  It spans 420 m [2].\n\nNote: Not fully resolved: the span [3]."
    assert check_text(shown) == "It opened in 1887 . It spans 420 m ."


def test_the_check_reads_a_long_answer_s_lead_up_to_a_sentence_end() -> None:
    first, second = "It opened in 1887 [1].", "It spans 420 m and carries two tracks [2]."
    assert check_text(f"{first} {second}", limit=40) == "It opened in 1887 ."
    whole = check_text(f"{first} {second}")
    assert check_text(f"{first} {second}", limit=len(whole)) == whole
    one_sentence = "word " * 30
    assert check_text(one_sentence, limit=22) == "word word word word"
    # serving and the fit read at most the documented 600 characters of a 1,900-character answer
    assert 500 < len(check_text("It spans 420 m [1]. " * 100)) <= 600
