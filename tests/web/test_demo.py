"""`ragloop demo` end to end on a small slice of its corpus (three standard-library modules, the
hashed embedder and lexical scorers, so it runs in seconds): it ingests with progress lines, answers
through the answer graph with cited sources, follows up in one conversation, refuses the question
the documents cannot answer, and says how to open the chat page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ragloop.cli import app
from ragloop.cli.demo import QUESTIONS
from ragloop.ingest import pydoc_corpus
from ragloop.ingest.pydoc_corpus import module_markdown
from tests.web.conftest import WEB_CFG

MODULES = ("statistics", "secrets", "subprocess")


@pytest.fixture
def small_corpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    full = pydoc_corpus.write_corpus
    monkeypatch.setattr(pydoc_corpus, "write_corpus", lambda dest: full(dest, MODULES))
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(yaml.safe_dump(WEB_CFG.model_dump(mode="json", by_alias=True)))
    return cfg


def test_demo_answers_follows_up_and_refuses(small_corpus: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["demo", "--config", str(small_corpus), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ingest"]["files"]["new"] == len(MODULES) and data["ingest"]["chunks_total"] > 0
    answers = data["answers"]
    assert [a["question"] for a in answers] == [q for _, q, _ in QUESTIONS]
    *answerable, out_of_corpus = answers
    assert out_of_corpus["refused"] and "I searched for" in out_of_corpus["answer"]
    assert not out_of_corpus["citations"]
    for a in answerable:
        assert not a["refused"], a
        assert a["citations"] and all(c["doc_id"].endswith(".md") for c in a["citations"])
        assert f"[{a['citations'][0]['n']}]" in a["answer"]
    follow = answers[3]
    assert follow["thread_id"] == answers[2]["thread_id"] == data["thread_id"]
    assert answers[0]["thread_id"] is None
    assert "TimeoutExpired" in follow["answer"]  # read with the turn before it: the command's timeout
    assert data["next"]["url"] == "http://127.0.0.1:8000/"

    again = runner.invoke(app, ["demo", "--config", str(small_corpus)])
    assert again.exit_code == 0, again.output
    text = again.output
    assert "0 new, 0 changed; 0 chunks embedded" in text  # the second run re-reads nothing
    assert "refused · no_grounded_context" in text and "follow-up in the same conversation" in text
    assert "ragloop serve --collection demo" in text and "http://127.0.0.1:8000/" in text
    assert "\x1b[" not in text  # not a terminal: no progress bar, no colour codes


def test_first_run_progress_is_a_few_plain_lines(small_corpus: Path) -> None:
    result = CliRunner().invoke(app, ["demo", "--config", str(small_corpus)])
    assert result.exit_code == 0, result.output
    lines = [ln for ln in result.output.splitlines() if ln.startswith("  embed: ")]
    assert 1 <= len(lines) <= 5 and lines[-1].split()[1].split("/")[0] == lines[-1].split()[1].split("/")[1]


def test_corpus_text_is_the_same_in_every_process() -> None:
    """Default values' reprs carry memory addresses (`<function f at 0x7f…>`); they would make every
    demo run re-ingest the modules that have them."""
    assert " at 0x" not in module_markdown("difflib") + module_markdown("dataclasses")
