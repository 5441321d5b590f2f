"""The harness's result record of one answered item, built from the typed `Answer` only.

The record is what a run stores (JSON lines) and what the metrics read back (`metrics.agent.ItemView`
parses its trace into the typed `Trace`). Built here, apart from the runner, so a test can compute
the metrics from a live answer and from its stored form and compare them
(`tests/agent/test_typed_answer.py`).
"""

from __future__ import annotations

from typing import Any

from ragloop.agent.answer import Answer
from ragloop.config import PipelineConfig


def passage(doc_id: str, prefix: str) -> str:
    """The dataset's passage id of a document (the collection's doc id without the suite's prefix)."""
    if prefix and doc_id.startswith(prefix):
        return doc_id[len(prefix) :]
    return doc_id


def agent_record(ans: Answer, prefix: str, cfg: PipelineConfig) -> dict[str, Any]:
    """The record's answer part (the runner adds the item, the conversation history and judgements)."""
    chunks: dict[str, dict[str, Any]] = {}
    for c in ans.hits:
        chunks[c.chunk_id] = {
            "doc_id": c.doc_id,
            "passage": passage(c.doc_id, prefix),
            "grade": None if c.grade is None else round(float(c.grade), 4),
            "score": round(float(c.retrieval_score), 4),
            "source": c.source,
            "excerpt": c.text[:240],
        }
    return {
        "mode": "agent",
        "standalone": ans.standalone_question,
        "answer": ans.answer,
        "refused": ans.refused,
        "termination_reason": ans.termination_reason,
        "verdict": ans.verdict,
        "quality_score": ans.quality_score,
        "residual_deficiencies": ans.residual_deficiencies,
        "citations": [
            {"n": c.n, "chunk_id": c.chunk_id, "passage": passage(c.doc_id, prefix), "score": round(c.score, 4)}
            for c in ans.citations
        ],
        "chunks": chunks,
        "kept": [{"chunk_id": s.chunk_id, "text": s.text, "score": round(float(s.score), 4)} for s in ans.kept],
        "deficiencies": [
            {
                "id": d.id,
                "type": str(d.type),
                "status": d.status,
                "severity": d.severity,
                "description": d.description[:300],
                "attempts": d.attempts,
            }
            for d in ans.deficiencies
        ],
        "cycles": [{"cycle": h.cycle, "found": h.found, "resolved": h.resolved, "score": h.score} for h in ans.cycles],
        "trace": ans.trace.to_json(),
        "latency_ms": round(ans.latency_ms, 3),
        "budgets": {
            "tau_lower": cfg.agent.tau_lower,
            "tau_upper": cfg.agent.tau_upper,
            "max_rewrites": cfg.agent.budgets.max_rewrites,
            "rewrite": cfg.agent.rewrite,
            "k": cfg.retrieval.k,
        },
    }
