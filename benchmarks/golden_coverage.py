"""Golden-set coverage and its gap clusters on real questions (SQuAD 2.0 dev), with the offline
embedder the demo collections use (MiniLM, `onnx:all-minilm-l6-v2`).

    .venv/bin/python benchmarks/golden_coverage.py [--golden-per-article 20] [--traffic 600] [--seed 0]

A golden set drawn from half of the articles (sorted by title, the first six), production traffic
drawn from all twelve (never a golden question itself). A coverage measure that means something
should (1) cover most traffic from the golden articles and little from the others, and (2) put the
uncovered traffic into clusters that point at the *other* articles: the gaps the adversarial
generator is aimed at. Reported per radius: coverage with n and its Wilson 95% interval, coverage
split by in-domain / out-of-domain traffic, and the purity of the 20 largest gap clusters (share
whose representative comes from an article the golden set lacks), then the template generator's
candidates per kind on the gaps at the default radius (the served answer stands in as the SQuAD gold answer).
Writes benchmarks/results/golden_coverage.{json,md}.
"""

from __future__ import annotations

import argparse
import random
import time
from collections import Counter
from typing import Any

from _common import BENCH_HOME, machine, print_table, write_results

from ragloop.config import Settings
from ragloop.evaluation.datasets import load_squad2
from ragloop.experiments.golden_adversarial import Seed, from_templates
from ragloop.experiments.golden_coverage import DEFAULT_RADIUS, AskedQuestion, measure
from ragloop.experiments.simulation import wilson
from ragloop.models import make_embedder

EMBEDDER = "onnx:all-minilm-l6-v2"
RADII = (0.4, 0.5, 0.6, 0.7, 0.8)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--golden-per-article", type=int, default=20)
    ap.add_argument("--traffic", type=int, default=600)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)

    squad = load_squad2()
    answerable = [q for q in squad.questions if not q.is_impossible and q.answers]
    titles = sorted({q.title for q in answerable})
    golden_titles = set(titles[: len(titles) // 2])
    golden = []
    for t in sorted(golden_titles):
        pool = [q for q in answerable if q.title == t]
        golden += rng.sample(pool, min(args.golden_per_article, len(pool)))
    taken = {q.qid for q in golden}
    traffic = rng.sample([q for q in answerable if q.qid not in taken], args.traffic)
    by_question = {q.question: q for q in traffic}

    emb = make_embedder(EMBEDDER, Settings(home=BENCH_HOME))
    t0 = time.perf_counter()
    emb.embed([q.question for q in golden] + [q.question for q in traffic])  # warm the cache: timed once
    embed_s = time.perf_counter() - t0

    asked = [AskedQuestion(q.question, 1, q.qid) for q in traffic]
    rows: list[list[Any]] = []
    per_radius: dict[str, Any] = {}
    gap_report = None
    for radius in RADII:
        t0 = time.perf_counter()
        rep = measure(asked, [q.question for q in golden], emb, radius=radius, max_clusters=10_000)
        measure_s = time.perf_counter() - t0
        uncovered = {k for c in rep.uncovered_clusters for k in c.question_keys}
        inside = [q for q in traffic if q.title in golden_titles]
        outside = [q for q in traffic if q.title not in golden_titles]
        cov_in = sum(1 for q in inside if q.qid not in uncovered)
        cov_out = sum(1 for q in outside if q.qid not in uncovered)
        top = rep.uncovered_clusters[:20]
        pure = sum(1 for c in top if by_question[c.representative].title not in golden_titles)
        ci = rep.ci95 or (0.0, 0.0)
        rows.append(
            [
                radius,
                f"{rep.covered}/{rep.n}",
                f"{rep.coverage:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]",
                _share(cov_in, len(inside)),
                _share(cov_out, len(outside)),
                len(rep.uncovered_clusters),
                _share(pure, len(top)),
                round(measure_s, 2),
            ]
        )
        per_radius[str(radius)] = {
            "n": rep.n,
            "covered": rep.covered,
            "coverage": rep.coverage,
            "ci95": list(ci),
            "in_domain": {"n": len(inside), "covered": cov_in, "ci95": list(wilson(cov_in, len(inside)))},
            "out_of_domain": {"n": len(outside), "covered": cov_out, "ci95": list(wilson(cov_out, len(outside)))},
            "clusters": len(rep.uncovered_clusters),
            "top20_gap_purity": {"n": len(top), "pure": pure, "ci95": list(wilson(pure, len(top))) if top else None},
            "largest_gaps": [c.to_json() for c in rep.uncovered_clusters[:5]],
            "seconds": measure_s,
        }
        if radius == DEFAULT_RADIUS:
            gap_report = rep

    md = print_table(
        f"Coverage of {args.traffic} SQuAD 2.0 questions by a {len(golden)}-question golden set "
        f"({len(golden_titles)} of {len(titles)} articles), {EMBEDDER}",
        [
            "radius",
            "covered",
            "coverage [95% CI]",
            "in-domain",
            "out-of-domain",
            "gap clusters",
            "top-20 gap purity",
            "s",
        ],
        rows,
    )
    assert gap_report is not None
    seeds = []
    for c in gap_report.uncovered_clusters[:20]:
        q = by_question[c.representative]
        seeds.append(Seed(q.question, q.answers[0] + ".", (q.paragraph_id,), (), c.size))
    proposals = from_templates(seeds, limit=200)
    kinds = Counter(p.generator for p in proposals)
    md += "\n" + print_table(
        f"Template candidates on the 20 largest gaps at the default radius {DEFAULT_RADIUS}",
        ["kind", "candidates"],
        [[k, v] for k, v in sorted(kinds.items())],
    )
    examples = {k: next(p.question for p in proposals if p.generator == k) for k in kinds}
    md += "\nExamples:\n" + "".join(f"- {k}: {q}\n" for k, q in sorted(examples.items()))
    warm = "0 when the cache under benchmarks/.home is warm"
    md += f"\nEmbedding {len(golden) + len(traffic)} questions: {embed_s:.1f} s ({warm}).\n"
    write_results(
        "golden_coverage",
        {
            "machine": machine(),
            "embedder": EMBEDDER,
            "golden": len(golden),
            "golden_articles": sorted(golden_titles),
            "traffic": args.traffic,
            "seed": args.seed,
            "radii": per_radius,
            "candidates_by_kind": dict(kinds),
            "examples": examples,
            "embed_seconds": embed_s,
        },
        md,
    )


def _share(k: int, n: int) -> str:
    if not n:
        return "-"
    lo, hi = wilson(k, n)
    return f"{k}/{n} = {k / n:.2f} [{lo:.2f}, {hi:.2f}]"


if __name__ == "__main__":
    main()
