"""The prompt remediation's trial, measured offline: every generation-prompt variant against the
serving one on SQuAD 2.0 dev questions, faithfulness as the diagnosis measures it.

The SQuAD 2.0 dev collection `diag-squad2` (`benchmarks/.home`, the diagnosis benchmark's); a
seeded sample of `--n` answerable questions becomes the working golden set of a temporary store
(gold answer as the reference; the held-out 20% by the golden set's own stable hash stays out, as
in production), and `ragloop.improve.remediation.prompts.run_trial` runs exactly what the
remediation runs: the serving config (`v1`) and each other variant through the offline answer graph
(`agent_runner`), each answer assessed with the diagnosis judge (`lexical`, claim support 0.8 with
the grounding check), paired bootstrap per variant at alpha 0.05/3, answer F1 as the guard.
Offline the variants differ only by their composer rules (support threshold, relevance floor,
sentence cap: `ragloop.agent.prompts`).

    .venv/bin/python benchmarks/prompt_variants.py [--n 150] [--seed 11]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import BENCH_HOME, machine, markdown_table, print_table, write_results

from ragloop.config import PipelineConfig, Settings
from ragloop.evaluation.datasets import load_squad2
from ragloop.experiments.golden import GoldenLine, import_lines
from ragloop.improve.clock import SYSTEM_CLOCK
from ragloop.improve.remediation import RemediationContext
from ragloop.improve.remediation.prompts import agent_runner, answerable_entries, run_trial
from ragloop.models.scoring import make_scorer
from ragloop.retrieval.collection import Collection
from ragloop.store import Store

COLLECTION = "diag-squad2"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=150, help="answerable questions to import as the golden set")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--resamples", type=int, default=2000)
    args = ap.parse_args()

    settings = Settings(home=BENCH_HOME)
    coll = Collection(COLLECTION, settings)
    if not coll.exists():
        raise SystemExit(f"no collection {COLLECTION!r} in {BENCH_HOME}: run benchmarks/diagnosis_accuracy.py first")
    answerable = [q for q in load_squad2().questions if not q.is_impossible and q.answers]
    sample = random.Random(args.seed).sample(answerable, args.n)
    config = PipelineConfig()
    with tempfile.TemporaryDirectory(prefix="prompt-bench-") as tmp:
        store = Store.open(f"sqlite:///{Path(tmp) / 'ragloop.db'}")
        try:
            imported = import_lines(
                store,
                [GoldenLine(question=q.question, expected_answer=q.answers[0], source="imported") for q in sample],
                created_by="benchmark",
            )
            entries = answerable_entries(store, args.n)
            ctx = RemediationContext(
                store=store,
                config=config,
                collections=lambda _name: coll,
                expansion_backend=lambda _name: None,
                clock=SYSTEM_CLOCK,
            )
            started = time.perf_counter()
            trial = run_trial(
                entries,
                config,
                agent_runner(ctx, COLLECTION),
                make_scorer("lexical", settings),
                resamples=args.resamples,
            )
            seconds = time.perf_counter() - started
        finally:
            store.close()
    headers = [
        "variant",
        "paired",
        "refused",
        "faithfulness v1",
        "faithfulness variant",
        "gain",
        f"{1 - trial.alpha:.4f} CI",
        "answer F1 diff",
        "F1 CI",
        "candidate?",
    ]
    rows: list[list[Any]] = [
        [
            v.version,
            v.paired,
            v.refused,
            v.baseline_faithfulness,
            v.faithfulness,
            v.gain,
            f"[{v.lo:+.3f}, {v.hi:+.3f}]",
            v.f1_diff,
            f"[{v.f1_lo:+.3f}, {v.f1_hi:+.3f}]",
            "yes" if v.qualifies(trial.min_gain) else "no",
        ]
        for v in trial.variants
    ]
    print_table("Prompt variants vs v1 on the working golden set", headers, rows)
    chosen = trial.chosen
    print(f"candidate: {chosen.version if chosen else 'none'}; {trial.entries} entries, {seconds:.0f} s")
    result = {
        "args": vars(args),
        "machine": machine(),
        "imported": imported.to_json(),
        "seconds": round(seconds, 1),
        "trial": trial.to_json(),
    }
    md = "\n".join(
        [
            "# Prompt variants on SQuAD 2.0 dev (the prompt remediation's trial, offline)",
            "",
            f"`.venv/bin/python benchmarks/prompt_variants.py --n {args.n} --seed {args.seed}`: "
            f"{imported.added} answerable questions imported, {imported.held_out} held out by the golden set's "
            f"hash, {trial.entries} in the trial; {seconds:.0f} s for the four configs "
            f"(load average {result['machine']['load_average_1_5_15']}).",
            "",
            markdown_table(headers, rows),
            "",
            f"Candidate: **{chosen.version if chosen else 'none'}** (rule: gain > {trial.min_gain} with the "
            f"interval's lower bound > 0 at alpha {trial.alpha:.4f}, F1 interval not below 0).",
            "",
            "## How",
            "",
            (__doc__ or "").split("\n\n", 1)[1].split("\n\n    .venv")[0].strip(),
            "",
        ]
    )
    write_results("prompt_variants", result, md)


if __name__ == "__main__":
    main()
