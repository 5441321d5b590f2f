"""Golden-set schema and tools (draft, pool, review) and judge calibration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragloop.cli import app
from ragloop.config import PipelineConfig
from ragloop.evaluation.golden import (
    GoldenError,
    GoldenItem,
    draft_offline,
    load_golden,
    pool,
    review,
    save_golden,
    validate,
)
from ragloop.evaluation.judge import LabelError, calibrate, judge_warning, parse_labels
from ragloop.models.chat import run_sync
from ragloop.models.scoring import FunctionScorer
from ragloop.retrieval.collection import Collection

runner = CliRunner()


def test_schema_rules(golden_path: Path) -> None:
    items = load_golden(golden_path)
    assert [i.type for i in items].count("unanswerable") == 1
    bad = [
        GoldenItem(id="a", question="q", type="unanswerable", should_refuse=False),
        GoldenItem(id="a", question="q", verified=True, status="accepted", relevant_doc_ids=["x"]),
        GoldenItem(id="b", question="q", type="unanswerable", should_refuse=True, relevant_chunk_ids=["c"]),
        GoldenItem(id="c", question="q", status="accepted"),
    ]
    problems = validate(bad)
    assert any("should_refuse" in p for p in problems)
    assert any("duplicate id" in p for p in problems)
    assert any("verified without a reviewer" in p for p in problems)
    assert any("unanswerable item names relevant ids" in p for p in problems)
    assert any("names no relevant" in p for p in problems)
    path = golden_path.parent / "bad.jsonl"
    save_golden(bad, path)
    with pytest.raises(GoldenError, match="invalid"):
        load_golden(path)
    path.write_text('{"id": "x", "question": "q", "colour": "red"}\n')
    with pytest.raises(GoldenError, match=r"bad\.jsonl:1"):
        load_golden(path)
    res = runner.invoke(app, ["eval", "golden", "validate", str(golden_path), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["items"] == 6


def test_draft_pool_and_review(kb: Collection, tiny_config: PipelineConfig) -> None:
    drafts = draft_offline(kb, n=6, seed=1)
    assert drafts and all(not d.verified and d.source.startswith("drafted:offline") for d in drafts)
    assert any(d.question.startswith("What is ") or "documentation say about" in d.question for d in drafts)
    assert all(d.relevant_chunk_ids for d in drafts)
    assert draft_offline(kb, n=6, seed=1) == drafts  # deterministic for a seed
    pooled = pool(drafts[:2], kb, tiny_config, k=2)
    assert all(1 <= len(p.candidates) <= 4 for p in pooled)

    items = [
        *pooled,
        GoldenItem(id="u", question="Kubernetes?", type="unanswerable", should_refuse=True),
    ]
    replies = iter(["a", "e", "Edited question?", "answerable", "new ref", "1", "r"])
    shown: list[str] = []
    out, counts = review(items, "alice", lambda _p, _d: next(replies), show=shown.append)
    assert counts == {"accept": 1, "edit": 1, "reject": 1, "skip": 0}
    assert out[0].verified and out[0].reviewer == "alice" and out[0].reviewed_at and out[0].review_action == "accept"
    assert out[1].question == "Edited question?" and out[1].relevant_chunk_ids == [pooled[1].candidates[0]]
    assert out[1].verified and out[1].reference_answer == "new ref"
    assert out[2].status == "rejected" and not out[2].verified
    assert not validate(out)
    with pytest.raises(GoldenError):
        review(items, " ", lambda _p, _d: "a")


def test_llm_drafting_uses_the_chat_model(kb: Collection) -> None:
    from ragloop.evaluation.golden import draft_llm
    from ragloop.models.chat import FunctionModel

    def reply(req: object) -> str:
        return json.dumps({"question": "What does the passage describe?", "answer": "A bridge or a tower."})

    drafts = run_sync(draft_llm(kb, FunctionModel(reply), n=2))
    assert len(drafts) == 2 and all(d.source.startswith("drafted:llm:") for d in drafts)
    assert all(d.relevant_chunk_ids and not d.verified for d in drafts)


def test_review_command_records_the_reviewer(kb: Collection, tmp_path: Path) -> None:
    path = tmp_path / "g.jsonl"
    res = runner.invoke(app, ["eval", "golden", "draft", "-c", "kb", "--n", "2", "--out", str(path), "--json"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["eval", "golden", "pool", str(path), "-c", "kb", "--k", "2"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["eval", "golden", "review", str(path), "--reviewer", "bob", "-c", "kb"], input="a\nq\n")
    assert res.exit_code == 0, res.output
    items = load_golden(path)
    assert items[0].verified and items[0].reviewer == "bob" and not items[1].verified


def test_judge_calibration_accuracy_and_kappa(tmp_path: Path) -> None:
    csv_text = "id,question,answer,reference,label\n" + "".join(
        f"{i},q,{'1887' if i % 2 else 'no idea'},It was 1887,{'correct' if i % 2 else 'incorrect'}\n" for i in range(40)
    )
    labels = parse_labels(csv_text, "csv")
    assert len(labels) == 40 and labels[1].correct and not labels[0].correct
    judge = FunctionScorer(lambda claim, ctx: 0.9 if "1887" in claim and "1887" in ctx else 0.1, name="test:judge")
    cal = run_sync(calibrate(labels, judge))
    assert cal.n == 40 and cal.accuracy[0] == 1.0 and cal.kappa[0] == pytest.approx(1.0)
    assert judge_warning("test:judge", {}) is not None
    assert judge_warning("test:judge", {"test:judge": cal.to_json()}) is None
    with pytest.raises(LabelError, match="not correct/incorrect"):
        parse_labels('{"answer": "a", "label": "maybe"}\n', "jsonl")

    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps({"answer": "x", "reference": "y", "label": "yes"}) + "\n" for _ in range(3)))
    res = runner.invoke(app, ["eval", "calibrate", str(path), "--judge", "lexical", "--json"])
    assert res.exit_code == 0, res.output
    stored = json.loads(res.stdout)
    assert stored["n"] == 3 and Path(stored["saved"]).exists()
    warning = judge_warning("lexical", {"lexical": stored})
    assert warning is not None and "only 3 human labels" in warning
