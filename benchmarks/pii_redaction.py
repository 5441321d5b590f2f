"""Precision and recall of the PII redactor (`ragloop.text.pii`), per type, with 95% Wilson intervals.

The sample is generated deterministically (`benchmarks/pii_sample.py`, seed 16) and written to
`benchmarks/data/pii_sample.jsonl` so it can be read and reviewed; on top of it, every SQuAD 2.0
dev sentence (from `../shared`) that contains a digit is a negative (encyclopedic prose full of
years, counts, prices and ranges), counted but never copied into the repository.

A predicted span is a true positive when it overlaps a labelled span of the same type; precision
is over predicted spans, recall over labelled spans. `any-type recall` counts a labelled span as
covered when any placeholder overlaps it (what matters for privacy); `trap strings redacted` is the
share of strings with no personal data in which anything was redacted.

    .venv/bin/python benchmarks/pii_redaction.py            # sample + SQuAD negatives
    .venv/bin/python benchmarks/pii_redaction.py --quick    # the sample only

Results: `benchmarks/results/pii_redaction.json` and `.md`.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from collections import Counter
from typing import Any

from _common import REPO, machine, print_table, write_results
from pii_sample import generate

from ragloop.text.pii import BUILTIN_TYPES, Redactor

SAMPLE = REPO / "benchmarks" / "data" / "pii_sample.jsonl"
SQUAD = REPO.parent / "shared" / "datasets" / "squad2" / "squad2-dev-12articles.json"


def wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, mid - half), min(1.0, mid + half))


def squad_negatives() -> list[dict[str, Any]]:
    if not SQUAD.exists():
        return []
    data = json.loads(SQUAD.read_text())
    out = []
    for art in data["data"]:
        for para in art["paragraphs"]:
            for sent in re.split(r"(?<=[.!?])\s+", para["context"]):
                if any(ch.isdigit() for ch in sent):
                    out.append(
                        {"id": f"squad{len(out):05d}", "text": sent, "spans": [], "kind": "squad", "hard": False}
                    )
    return out


def prose_throughput(redactor: Redactor) -> int:
    """Characters/s over whole SQuAD paragraphs: what redacting prompts and stored contexts costs."""
    data = json.loads(SQUAD.read_text())
    paras = [p["context"] for art in data["data"] for p in art["paragraphs"]]
    start = time.perf_counter()
    for text in paras:
        redactor.find(text)
    return round(sum(map(len, paras)) / (time.perf_counter() - start))


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def evaluate(records: list[dict[str, Any]], redactor: Redactor) -> dict[str, Any]:
    tp_pred: Counter[str] = Counter()
    n_pred: Counter[str] = Counter()
    tp_gold: Counter[str] = Counter()
    n_gold: Counter[str] = Counter()
    covered = 0
    clean_strings: Counter[str] = Counter()
    redacted_clean: Counter[str] = Counter()
    false_positives: list[dict[str, str]] = []
    missed: list[dict[str, str]] = []
    chars = 0
    start = time.perf_counter()
    found_all = [redactor.find(r["text"]) for r in records]
    seconds = time.perf_counter() - start
    for rec, found in zip(records, found_all, strict=True):
        chars += len(rec["text"])
        gold = [((s["start"], s["end"]), s["type"]) for s in rec["spans"]]
        pred = [((p.start, p.end), p.type) for p in found]
        for span, typ in pred:
            n_pred[typ] += 1
            if any(_overlaps(span, g) and gt == typ for g, gt in gold):
                tp_pred[typ] += 1
            else:
                false_positives.append({"id": rec["id"], "type": typ, "text": rec["text"][span[0] : span[1]]})
        for span, typ in gold:
            n_gold[typ] += 1
            if any(_overlaps(span, p) and pt == typ for p, pt in pred):
                tp_gold[typ] += 1
            else:
                missed.append(
                    {"id": rec["id"], "type": typ, "text": rec["text"][span[0] : span[1]], "hard": rec["hard"]}
                )
            covered += any(_overlaps(span, p) for p, _ in pred)
        if not gold:
            clean_strings[rec["kind"]] += 1
            redacted_clean[rec["kind"]] += bool(pred)
    per_type = {}
    for typ in [*BUILTIN_TYPES]:
        p_lo, p_hi = wilson(tp_pred[typ], n_pred[typ])
        r_lo, r_hi = wilson(tp_gold[typ], n_gold[typ])
        per_type[typ] = {
            "labelled": n_gold[typ],
            "predicted": n_pred[typ],
            "precision": tp_pred[typ] / n_pred[typ] if n_pred[typ] else None,
            "precision_ci95": [round(p_lo, 4), round(p_hi, 4)],
            "recall": tp_gold[typ] / n_gold[typ] if n_gold[typ] else None,
            "recall_ci95": [round(r_lo, 4), round(r_hi, 4)],
        }
    total_pred, total_tp = sum(n_pred.values()), sum(tp_pred.values())
    total_gold, total_hit = sum(n_gold.values()), sum(tp_gold.values())
    fp_strings = {
        kind: {
            "strings": n,
            "redacted": redacted_clean[kind],
            "ci95": [round(x, 4) for x in wilson(redacted_clean[kind], n)],
        }
        for kind, n in clean_strings.items()
    }
    return {
        "strings": len(records),
        "per_type": per_type,
        "overall": {
            "precision": total_tp / total_pred if total_pred else None,
            "precision_ci95": [round(x, 4) for x in wilson(total_tp, total_pred)],
            "recall": total_hit / total_gold if total_gold else None,
            "recall_ci95": [round(x, 4) for x in wilson(total_hit, total_gold)],
            "any_type_recall": covered / total_gold if total_gold else None,
        },
        "trap_strings_redacted": fp_strings,
        "false_positives": false_positives,
        "missed": missed,
        "chars_per_s": round(chars / seconds) if seconds else None,
    }


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.1f}%"


def _ci(ci: list[float]) -> str:
    return f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the generated sample only (no SQuAD negatives)")
    ap.add_argument("--seed", type=int, default=16)
    args = ap.parse_args()
    sample = generate(args.seed)
    SAMPLE.parent.mkdir(parents=True, exist_ok=True)
    SAMPLE.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in sample), encoding="utf-8")
    squad = [] if args.quick else squad_negatives()
    redactor = Redactor()
    res = evaluate(sample + squad, redactor)
    res["prose_chars_per_s"] = prose_throughput(redactor) if squad else None
    rows = [
        [
            t,
            v["labelled"],
            v["predicted"],
            _pct(v["precision"]),
            _ci(v["precision_ci95"]),
            _pct(v["recall"]),
            _ci(v["recall_ci95"]),
        ]
        for t, v in res["per_type"].items()
    ]
    o = res["overall"]
    rows.append(
        [
            "all",
            sum(v["labelled"] for v in res["per_type"].values()),
            sum(v["predicted"] for v in res["per_type"].values()),
            _pct(o["precision"]),
            _ci(o["precision_ci95"]),
            _pct(o["recall"]),
            _ci(o["recall_ci95"]),
        ]
    )
    md = f"## PII redaction: {len(sample)} generated strings (seed {args.seed})"
    md += f" + {len(squad)} SQuAD sentences with digits\n\n"
    md += print_table(
        "Per type (span level, 95% Wilson intervals)",
        ["type", "labelled", "predicted", "precision", "95% CI", "recall", "95% CI"],
        rows,
    )
    fp_rows = [[k, v["strings"], v["redacted"], _ci(v["ci95"])] for k, v in res["trap_strings_redacted"].items()]
    md += "\n" + print_table(
        "Strings without personal data that got a redaction", ["kind", "strings", "redacted", "95% CI"], fp_rows
    )
    md += f"\nAny-type recall (a labelled span covered by any placeholder): {_pct(o['any_type_recall'])}. "
    md += f"Throughput: {res['chars_per_s']:,} characters/s on the sample's short, digit-dense strings"
    if res["prose_chars_per_s"]:
        md += f", {res['prose_chars_per_s']:,} on SQuAD paragraphs"
    md += " (one core, shared machine).\n"
    md += "\nFalse positives:\n\n" + "".join(
        f"- `{fp['text']}` as {fp['type']} ({fp['id']})\n" for fp in res["false_positives"][:30]
    )
    md += "\nMissed:\n\n" + "".join(
        f"- `{m['text']}` ({m['type']}{', hard by design' if m['hard'] else ''})\n"
        for m in sorted(res["missed"], key=lambda m: m["hard"])[:30]
    )
    print(md[md.index("Any-type") :])
    write_results("pii_redaction", {"seed": args.seed, "squad_sentences": len(squad), "machine": machine(), **res}, md)


if __name__ == "__main__":
    main()
