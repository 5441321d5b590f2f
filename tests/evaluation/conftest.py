"""Fixtures for the evaluation-harness tests: a tiny real collection (hashed embedder, lexical
scorers: no model to load), a golden set over it and a pipeline config YAML for it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ragloop.config import PipelineConfig, Settings, load_pipeline_config
from ragloop.retrieval.collection import Collection

DOCS: dict[str, str] = {
    "bridge.md": (
        "# Zorblat Bridge\n\nThe Zorblat Bridge was completed in 1887 by the engineer Marta Quill. "
        "It spans the river Vell with a main span of 420 metres."
    ),
    "tower.md": (
        "# Quill Tower\n\nThe Quill Tower stands 96 metres tall in the town of Ostria. "
        "Marta Quill designed the tower after finishing the bridge."
    ),
    "ferry.md": (
        "# Vell ferry\n\nBefore the bridge opened, a ferry carried passengers across the Vell. "
        "The ferry service ended in 1890 after three years of competition."
    ),
    "guide/trams.md": (
        "# Ostria trams\n\nThe Ostria tram network opened in 1901 with four lines. "
        "Trams cross the Vell on the Zorblat Bridge every ten minutes."
    ),
}

CONFIG_YAML = {
    "name": "tiny",
    "retrieval": {"k": 3, "dense": {"embedder": "test:hashed"}},
    "agent": {"scorers": {"grade": "lexical", "refine": "lexical", "support": "lexical"}},
}

GOLDEN = [
    {
        "id": "g1",
        "question": "When was the Zorblat Bridge completed?",
        "reference_answer": "The Zorblat Bridge was completed in 1887.",
        "relevant_doc_ids": ["bridge.md"],
    },
    {
        "id": "g2",
        "question": "How tall is the Quill Tower?",
        "reference_answer": "The Quill Tower is 96 metres tall.",
        "relevant_doc_ids": ["tower.md"],
    },
    {
        "id": "g3",
        "question": "When did the Vell ferry service end?",
        "reference_answer": "It ended in 1890.",
        "relevant_doc_ids": ["ferry.md"],
    },
    {
        "id": "g4",
        "question": "When did the Ostria tram network open?",
        "reference_answer": "In 1901, with four lines.",
        "relevant_doc_ids": ["guide/trams.md"],
    },
    {
        "id": "g5",
        "type": "unanswerable",
        "should_refuse": True,
        "question": "How do I configure a Kubernetes ingress controller with TLS?",
    },
    {
        "id": "g6",
        "question": "Who was its engineer?",
        "conversation": [
            {"speaker": "user", "text": "Tell me about the Zorblat Bridge."},
            {"speaker": "agent", "text": "It spans the Vell."},
        ],
        "reference_answer": "Marta Quill.",
        "relevant_doc_ids": ["bridge.md"],
    },
]


@pytest.fixture
def tiny_config_path(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(CONFIG_YAML))
    return path


@pytest.fixture
def tiny_config(tiny_config_path: Path) -> PipelineConfig:
    return load_pipeline_config(tiny_config_path)


@pytest.fixture
def kb(tmp_path: Path, tiny_config: PipelineConfig) -> Iterator[Collection]:
    root = tmp_path / "docs"
    for rel, text in DOCS.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    coll = Collection("kb", Settings())
    coll.ingest([root], tiny_config)
    yield coll
    coll.close()


@pytest.fixture
def golden_path(tmp_path: Path) -> Path:
    path = tmp_path / "golden.jsonl"
    path.write_text("".join(json.dumps(g) + "\n" for g in GOLDEN))
    return path
