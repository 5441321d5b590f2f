"""Test-wide fixtures: every test gets its own RAGLOOP_HOME; shared data is read from ../shared."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("RAGLOOP_SHARED", REPO.parent / "shared"))
DATASETS = SHARED / "datasets"


@pytest.fixture(autouse=True)
def ragloop_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "ragloop-home"
    monkeypatch.setenv("RAGLOOP_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return home


def write_squad_docs(dest: Path, articles: int = 1, paragraphs: int | None = None) -> list[tuple[str, str]]:
    """SQuAD 2.0 paragraphs as one Markdown file each (as the contract checks do);
    returns (question, gold file stem) for the answerable questions."""
    data = json.loads((DATASETS / "squad2" / "squad2-dev-12articles.json").read_text())
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for a in data["data"][:articles]:
        for i, p in enumerate(a["paragraphs"][:paragraphs]):
            stem = f"{a['title']}_p{i:03d}"
            (dest / f"{stem}.md").write_text(f"# {a['title'].replace('_', ' ')} ({i})\n\n{p['context']}\n")
            out += [(q["question"], stem) for q in p["qas"] if not q["is_impossible"]]
    return out
