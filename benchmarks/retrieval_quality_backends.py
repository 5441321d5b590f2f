"""Retrieval quality of the PostgreSQL collection backend beside the embedded (folder) one.

    nice -n 5 .venv/bin/python benchmarks/retrieval_quality.py --quick
    nice -n 5 .venv/bin/python benchmarks/retrieval_quality.py --quick --backend postgres --pg-url URL
    .venv/bin/python benchmarks/retrieval_quality_backends.py

Why: issue 16 asks that a shared knowledge base in PostgreSQL answer as well as the embedded one
(target: within 0.01 of the embedded hybrid on every metric, or the reason stated). The two quick
runs above write `retrieval_quality_quick_{files,postgres}.json` with every query's metric
values; this script pairs them query by query (same queries, same order) and reports, for bm25,
dense and the default hybrid on every split of CACM, SQuAD 2.0 and MTRAG-UN: both means with a 95%
CI (normal approximation over queries), the difference (postgres - embedded) with its paired 95%
CI, how many queries scored differently, and the largest |difference|. It also records which
dense index each side searched: on a pgvector server the PostgreSQL collection searches pgvector's
HNSW graph (approximate), the folder collection below 100k chunks searches exactly, so a dense
difference there is HNSW's, not the storage's.

Writes benchmarks/results/retrieval_quality_backends.{json,md}.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
from _common import RESULTS_DIR, machine, print_table, write_results

TARGET = 0.01
SPLITS = ("dev", "test", "all")


def ci95(values: np.ndarray) -> tuple[float, float]:
    """Mean +- 1.96 standard errors (the sample sd over queries)."""
    if len(values) < 2:
        return (float(values.mean()), float(values.mean()))
    half = 1.96 * float(values.std(ddof=1)) / math.sqrt(len(values))
    return (round(float(values.mean()) - half, 4), round(float(values.mean()) + half, 4))


def per_split(pq: dict[str, dict[str, list[float]]], split: str, metric: str) -> np.ndarray:
    if split == "all":
        return np.asarray(pq["dev"][metric] + pq["test"][metric], dtype=np.float64)
    return np.asarray(pq[split][metric], dtype=np.float64)


def compare(files: dict[str, Any], pg: dict[str, Any]) -> tuple[list[dict[str, Any]], list[list[object]]]:
    rows: list[dict[str, Any]] = []
    table: list[list[object]] = []
    for ds, modes in files["per_query"].items():
        if ds not in pg["per_query"]:
            continue
        for mode, pq_files in modes.items():
            pq_pg = pg["per_query"][ds][mode]
            for split in SPLITS:
                for metric in pq_files["dev"]:
                    a, b = per_split(pq_files, split, metric), per_split(pq_pg, split, metric)
                    if len(a) != len(b):
                        raise SystemExit(f"{ds} {mode} {split}: {len(a)} vs {len(b)} queries; not the same run")
                    d = b - a
                    row = {
                        "dataset": ds,
                        "mode": mode,
                        "split": split,
                        "metric": metric,
                        "n": len(a),
                        "embedded": round(float(a.mean()), 4),
                        "embedded_ci95": ci95(a),
                        "postgres": round(float(b.mean()), 4),
                        "postgres_ci95": ci95(b),
                        "difference": round(float(d.mean()), 4),
                        "difference_ci95": ci95(d),
                        "queries_differing": int(np.count_nonzero(np.abs(d) > 1e-9)),
                    }
                    rows.append(row)
                    table.append(
                        [ds, mode, split, metric, row["n"], _ci(row["embedded"], row["embedded_ci95"]),
                         _ci(row["postgres"], row["postgres_ci95"]), f"{row['difference']:+.4f}",
                         f"[{row['difference_ci95'][0]:+.4f}, {row['difference_ci95'][1]:+.4f}]",
                         row["queries_differing"]]
                    )  # fmt: skip
    return rows, table


def _ci(mean: float, ci: tuple[float, float]) -> str:
    return f"{mean:.4f} [{ci[0]:.4f}, {ci[1]:.4f}]"


def main() -> None:
    files = json.loads((RESULTS_DIR / "retrieval_quality_quick_files.json").read_text())
    pg = json.loads((RESULTS_DIR / "retrieval_quality_quick_postgres.json").read_text())
    rows, table = compare(files, pg)
    worst = max(rows, key=lambda r: abs(r["difference"]))
    by_mode = {
        m: max(abs(r["difference"]) for r in rows if r["mode"] == m) for m in dict.fromkeys(r["mode"] for r in rows)
    }
    hybrid_ok = by_mode.get("hybrid (default)", 1.0) <= TARGET
    dense_index = {
        side: {ds: info["headings"].get("dense_index", "?") for ds, info in run["ingest"].items()}
        for side, run in (("embedded", files), ("postgres", pg))
    }
    summary = [
        f"Largest |difference| over every metric, split and mode: {abs(worst['difference']):.4f} "
        f"({worst['dataset']} {worst['mode']} {worst['split']} {worst['metric']}).",
        "Largest |difference| per mode: " + ", ".join(f"{m} {v:.4f}" for m, v in by_mode.items()) + ".",
        f"Target (default hybrid within {TARGET} of the embedded one on every metric): "
        + ("met." if hybrid_ok else "MISSED."),
        f"Dense index searched: embedded {dense_index['embedded']}; postgres {dense_index['postgres']}.",
        f"Embedded run: `{files.get('command', '?')}` at load {files['machine']['load_average_1_5_15']}; "
        f"postgres run: `{pg.get('command', '?')}` at load {pg['machine']['load_average_1_5_15']}.",
    ]
    md = print_table(
        "PostgreSQL collection backend vs embedded (folder) backend, per query pairs; "
        "difference = postgres - embedded; 95% CIs by normal approximation over queries",
        ["data", "mode", "split", "metric", "n", "embedded [95% CI]", "postgres [95% CI]", "difference",
         "difference 95% CI", "queries differing"],
        table,
        4,
    )  # fmt: skip
    print("\n".join(summary))
    write_results(
        "retrieval_quality_backends",
        {
            "target": f"default hybrid within {TARGET} of the embedded hybrid on every metric",
            "target_met": hybrid_ok,
            "max_abs_difference": abs(worst["difference"]),
            "max_abs_difference_per_mode": by_mode,
            "dense_index": dense_index,
            "runs": {
                side: {"command": run.get("command"), "machine": run["machine"], "ingest": run["ingest"]}
                for side, run in (("embedded", files), ("postgres", pg))
            },
            "rows": rows,
            "machine": machine(),
        },
        "# Retrieval quality: PostgreSQL backend beside the embedded one\n\n"
        + "\n".join(f"- {line}" for line in summary)
        + "\n\n"
        + md,
    )


if __name__ == "__main__":
    main()
