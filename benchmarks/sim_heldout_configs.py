"""Fixed configs on the self-improvement simulation's own held-out sample, so the loop's day-0 and
final numbers have references measured on the *same* questions (the evaluation harness's `baseline`
figure for MTRAG-UN, 37.5%, is over all 397 tasks, most of which are the simulation's traffic).

    RAGLOOP_HOME=... .venv/bin/python benchmarks/sim_heldout_configs.py --dataset mtrag --heldout 100

Each config runs through `ragloop.improve.optimum.runner_scorer` (the evaluation runner, cached per
version id under RAGLOOP_HOME/optimum/<dataset>, the cache `ragloop improve optimum` uses), on
`sample_heldout(sim_heldout(dataset), N, seed)`, the sample the simulation measures. End-to-end
accuracy with a bootstrap 95% CI; each config against `defaults` by the paired bootstrap.
Nothing here is fitted: it only measures.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any

from _common import RESULTS_DIR, machine

from ragloop.config import PipelineConfig, Settings
from ragloop.evaluation.ablations import load_config
from ragloop.evaluation.stats import bootstrap_ci, paired_test
from ragloop.evaluation.suites import mtrag_suite, squad_suite
from ragloop.improve.optimum import runner_scorer, sim_heldout
from ragloop.improve.simulation.data import sample_heldout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="mtrag", choices=("squad", "mtrag"))
    ap.add_argument("--heldout", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--configs", default="baseline,full", help="shipped ablation names or YAML paths")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()

    suite = mtrag_suite() if args.dataset == "mtrag" else squad_suite()
    items = sample_heldout(sim_heldout(args.dataset), args.heldout, args.seed)
    s = Settings.from_env()
    score = runner_scorer(suite, s, s.home / "optimum" / args.dataset, workers=args.workers)
    configs: list[tuple[str, PipelineConfig]] = [("defaults", PipelineConfig())]
    configs += [load_config(c.strip()) for c in args.configs.split(",") if c.strip()]
    ref = score(configs[0][1], items)
    rows: list[dict[str, Any]] = []
    for name, cfg in configs:
        got = ref if name == "defaults" else score(cfg, items)
        est = bootstrap_ci(list(got.values()))
        common = sorted(set(got) & set(ref))
        row: dict[str, Any] = {"config": name, "version_id": cfg.version_id, "e2e_accuracy": est.to_json()}
        if name != "defaults" and common:
            pt = paired_test([ref[i] for i in common], [got[i] for i in common])
            row["vs_defaults"] = pt.to_json()
        rows.append(row)
    command = "PYTHONPATH=. .venv/bin/python benchmarks/sim_heldout_configs.py " + " ".join(
        shlex.quote(a) for a in sys.argv[1:]
    )
    doc = {"command": command, "machine": machine(), "dataset": args.dataset, "heldout": len(items), "rows": rows}
    out = RESULTS_DIR / "self_improvement" / f"heldout-configs-{args.dataset}"
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1))
    lines = [
        f"# Fixed configs on the simulation's held-out sample ({args.dataset}, n={len(items)})",
        "",
        f"Command: `{command}`",
        "",
        f"- machine: {doc['machine']}",
        "",
        "| config | version | e2e accuracy [95% CI] n | vs defaults (paired Δ [95% CI], p) |",
        "|---|---|---|---|",
    ]
    for r in rows:
        e = r["e2e_accuracy"]
        v = r.get("vs_defaults")
        vs = f"{v['diff']:+.3f} [{v['lo']:+.3f}, {v['hi']:+.3f}], p={v['p_value']:.3g}" if v else "–"
        lines.append(
            f"| {r['config']} | {r['version_id']} | {e['value']:.1%} [{e['lo']:.1%}, {e['hi']:.1%}] n={e['n']} | {vs} |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[6:]), flush=True)


if __name__ == "__main__":
    main()
