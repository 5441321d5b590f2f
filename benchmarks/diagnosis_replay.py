"""Replay a store's stored diagnoses through today's decision tree: what would a change to the tree
have said about past traffic?

    PYTHONPATH=. .venv/bin/python benchmarks/diagnosis_replay.py --db HOME/ragloop.db [--db ...] [--name N]

Why: a diagnosis stores its whole input (`diagnoses.diagnosis_input`: the retrieval, the oracle's
candidates and splits, the answer's assessment), so the tree (`ragloop.improve.classifier`) can be
rerun on it without a model call. Each `--db` (a SQLite file or a database URL; read only) is read
on its own; per store: the failure modes stored (what the tree said when the loop ran) against the
modes replayed with the shipped thresholds (`Thresholds()`), a row per stored mode. Where the
re-chunk remediation was applied, the auditor's verdicts per replayed mode say whether the change
moved diagnoses the auditor had found wrong. Writes benchmarks/results/<name>.{json,md}.

Used so far: (1) with the shipped tree on the six stores of `self_improvement-whole-claims`, all 250
diagnoses replay to the mode stored (the committed results). (2) To weigh a rule that was then not
shipped: "a split whose inside sentence already reaches the oracle floor is no chunking failure".
It moved 18 of the MTRAG-UN degraded start's 61 diagnoses (31 chunking failures -> 13 chunking,
15 ranking, 2 success, 1 embedding) and 12 of SQuAD 2.0's degraded 39, but the auditor's verdicts
did not separate (re-chunks replayed as ranking: 1 kept, 6 reverted; still chunking: 1 kept,
5 reverted), and on the injected set (`diagnosis_accuracy.py`, test part) chunking recall fell
0.938 -> 0.287: a cut SQuAD sentence leaves the answer span inside one fragment.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from _common import machine, print_table, write_results
from sqlalchemy import create_engine, text

from ragloop.improve.classifier import classify
from ragloop.improve.types import DiagnosisInput, Thresholds


def _url(db: str) -> str:
    return db if "://" in db else f"sqlite:///file:{Path(db).resolve()}?mode=ro&uri=true"


def replay(db: str, t: Thresholds) -> dict[str, Any]:
    engine = create_engine(_url(db))
    with engine.connect() as c:
        rows = c.execute(
            text(
                "select answer_id, failure_mode, diagnosis_input from diagnoses "
                "where status = 'completed' and diagnosis_input is not null"
            )
        ).all()
        audits = c.execute(
            text("select status, answer_ids from improvement_actions where kind = 'rechunk_document'")
        ).all()
    engine.dispose()
    verdict_of: dict[str, str] = {}
    for status, answer_ids in audits:
        for a in answer_ids if isinstance(answer_ids, list) else json.loads(answer_ids or "[]"):
            verdict_of[a] = status
    table: dict[str, Counter[str]] = defaultdict(Counter)
    verdicts: dict[str, Counter[str]] = defaultdict(Counter)
    for answer_id, stored, raw in rows:
        inp = DiagnosisInput.model_validate(raw if isinstance(raw, dict) else json.loads(raw))
        now = classify(inp, t).mode.value
        table[stored][now] += 1
        if answer_id in verdict_of and stored == "chunking_failure":
            verdicts[now][verdict_of[answer_id]] += 1
    return {
        "db": db,
        "diagnoses": len(rows),
        "changed": sum(n for s, row in table.items() for m, n in row.items() if m != s),
        "stored_to_replayed": {s: dict(row) for s, row in sorted(table.items())},
        "rechunk_verdicts_by_replayed_mode": {m: dict(v) for m, v in sorted(verdicts.items())},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", action="append", required=True, help="a store: SQLite file or database URL")
    ap.add_argument("--name", default="diagnosis_replay")
    args = ap.parse_args()
    t = Thresholds()
    results = [replay(db, t) for db in args.db]
    command = " ".join(["benchmarks/diagnosis_replay.py", *(f"--db {d}" for d in args.db)])
    md = [f"# Stored diagnoses replayed through today's tree\n\nCommand: `{command}`\n"]
    md.append(f"Thresholds: `{t.model_dump(mode='json')}`; machine: {machine()}\n")
    for r in results:
        modes = sorted({m for row in r["stored_to_replayed"].values() for m in row} | set(r["stored_to_replayed"]))
        rows = [[s, sum(row.values()), *(row.get(m, 0) for m in modes)] for s, row in r["stored_to_replayed"].items()]
        md.append(
            print_table(
                f"{r['db']}: {r['diagnoses']} diagnoses, {r['changed']} change mode (rows stored, columns replayed)",
                ["stored", "n", *modes],
                rows,
            )
        )
        if r["rechunk_verdicts_by_replayed_mode"]:
            v = r["rechunk_verdicts_by_replayed_mode"]
            statuses = sorted({s for c in v.values() for s in c})
            md.append(
                print_table(
                    "chunking failures whose re-chunk was applied: the action's status, by replayed mode",
                    ["replayed mode", *statuses],
                    [[m, *(c.get(s, 0) for s in statuses)] for m, c in v.items()],
                )
            )
    write_results(args.name, {"thresholds": t.model_dump(mode="json"), "stores": results}, "\n".join(md))


if __name__ == "__main__":
    main()
