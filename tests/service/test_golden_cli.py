"""`ragloop golden ...` with --json (in-process through typer's runner): entries, versions, diff,
the mix, the review queue (no scores), nomination, coverage, generation, and evaluating a past
version with `ragloop eval run --dataset golden --golden-version N`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from ragloop.cli import app
from ragloop.retrieval.collection import Collection
from ragloop.store import Store
from ragloop.store.repositories import GoldenProposal

runner = CliRunner()


def cli(*args: str, code: int = 0) -> Any:
    r = runner.invoke(app, [*args, "--json"] if code == 0 else list(args))
    assert r.exit_code == code, r.output
    return json.loads(r.stdout) if code == 0 else r.output


def _file(tmp_path: Path) -> Path:
    p = tmp_path / "gold.jsonl"
    lines = [
        {
            "question": "When was the Zorblat Bridge completed?",
            "expected_answer": "1887",
            "required_doc_ids": ["bridge.md"],
        },
        {"question": "Who operates the Harbour Ferry?", "expected_answer": "The Tide Company", "difficulty": "hard"},
        {"question": "What is the capital of Atlantis?", "should_refuse": True},
    ]
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return p


def test_entries_versions_diff_and_summary(tmp_path: Path, ragloop_home: Path) -> None:
    imported = cli("golden", "import", str(_file(tmp_path)))
    assert imported["added"] == 3 and imported["golden_set_version"] == 1  # one import, one version
    added = cli("golden", "add", "How tall is the tower?", "--answer", "80 m", "--difficulty", "easy", "--tag", "tower")
    assert added["source"] == "human" and added["added_in"] == 2 and added["domain_tags"] == ["tower"]
    listed = cli("golden", "list")
    assert len(listed) == 4
    gone = cli("golden", "deprecate", listed[0]["entry_id"], "--note", "stale")
    assert gone["deprecated_in"] == 3
    assert "already deprecated" in cli("golden", "deprecate", listed[0]["entry_id"], code=2)
    assert len(cli("golden", "list", "--version", "1")) == 3
    rev = cli("golden", "revise", added["entry_id"], "--answer", "80 metres", "--note", "units")
    assert rev["lineage_id"] == added["entry_id"] and rev["version"] == 2 and rev["added_in"] == 4
    assert "at least one" in cli("golden", "revise", rev["entry_id"], code=2)
    assert "superseded" in cli("golden", "revise", added["entry_id"], "--answer", "x", code=2)

    versions = cli("golden", "versions")
    assert versions["golden_set_version"] == 4
    kinds = [(v["version"], v["kind"]) for v in versions["versions"]]
    assert kinds == [(4, "revise"), (3, "deprecate"), (2, "add"), (1, "import")]
    d = cli("golden", "diff", "1")
    assert [e["question"] for e in d["added"]] == ["How tall is the tower?"]
    assert cli("golden", "diff", "2", "4")["changed"][0]["fields"] == ["expected_answer"]
    assert [e["question"] for e in d["deprecated"]] == ["When was the Zorblat Bridge completed?"]
    assert "no golden-set version 9" in cli("golden", "diff", "1", "9", code=2)

    s = cli("golden", "summary", "--target-mix", "easy=0.2,standard=0.5,hard=0.3")
    assert s["count"] == 3 and s["by_source"] == {"human": 1, "imported": 2}
    assert {m["difficulty"]: m["target"] for m in s["mix"]} == {"easy": 0.2, "standard": 0.5, "hard": 0.3}
    assert "sum to 1" in cli("golden", "summary", "--target-mix", "easy=1,standard=1,hard=1", code=2)

    out = tmp_path / "v1.jsonl"
    assert cli("golden", "export", str(out), "--version", "1")["exported"] == 3
    assert len(out.read_text().splitlines()) == 3


def test_review_queue_on_the_command_line(ragloop_home: Path) -> None:
    with Store.open() as store:
        a, b = store.golden_candidates.propose(
            [
                GoldenProposal("Q one?", "proposed one", source="auto_nominated", evidence={"judge_score": 0.99}),
                GoldenProposal("Q two?", "proposed two", source="adversarial"),
            ]
        )
    pending = cli("golden", "review", "list")
    assert [c["question"] for c in pending] == ["Q one?", "Q two?"]
    assert "0.99" not in json.dumps(pending) and not any("score" in k or "evidence" in k for k in pending[0])
    done = cli("golden", "review", "approve", a.candidate_id, "--answer", "my own answer")
    assert done["entry"]["expected_answer"] == "my own answer" and done["candidate"]["answer_edited"] is True
    assert cli("golden", "review", "reject", b.candidate_id, "--note", "no")["candidate"]["status"] == "rejected"
    assert "already approved" in cli("golden", "review", "approve", a.candidate_id, code=2)
    assert cli("golden", "review", "list") == []
    assert [c["question"] for c in cli("golden", "review", "list", "--status", "approved")] == ["Q one?"]
    nom = cli("golden", "nominate")
    assert nom["considered"] == 0 and nom["nominated"] == 0


def test_coverage_generate_and_evaluating_a_past_version(collection: Collection, tmp_path: Path) -> None:
    with Store.open() as store:
        for q in ("When was the Zorblat Bridge completed?", "Who operates the Harbour Ferry?", "Who built the tower?"):
            store.queries.record_answer(
                session_id="s", question=q, answer_text="It opened in 1887.", pipeline_version="pv"
            )
    cli("golden", "import", str(_file(tmp_path)))
    cov = cli("golden", "coverage", "--radius", "0.95")
    assert cov["n"] == 3 and cov["covered"] == 2 and len(cov["ci95"]) == 2
    assert [c["representative"] for c in cov["uncovered_clusters"]] == ["Who built the tower?"]
    assert "no index" in cli("golden", "coverage", "-c", "missing", code=2)
    gen = cli("golden", "generate", "--radius", "0.95")
    assert gen["generator"] == "templates" and gen["coverage"]["n"] == 3

    cli("golden", "add", "How tall is the tower?", "--answer", "80 m")  # version 2
    runs = tmp_path / "runs"
    common = ["--dataset", "golden", "--collection", "default", "--judge", "none", "--out", str(runs), "--workers", "1"]
    r = runner.invoke(app, ["eval", "run", *common, "--golden-version", "1", "--json"])
    assert r.exit_code == 0, r.output
    assert (runs / "golden").exists() and any(p.name.startswith("v1-") for p in (runs / "golden").iterdir())
    n_items = sum(len((p / "items.jsonl").read_text().splitlines()) for p in (runs / "golden").iterdir())
    assert n_items == 3  # version 1 had three entries, not four
    bad = runner.invoke(app, ["eval", "run", *common, "--golden-version", "9"])
    assert bad.exit_code == 2 and "no golden-set version 9" in bad.output
