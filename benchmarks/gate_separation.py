"""Why the τL refit finds no raise on SQuAD 2.0: how well the gate's score separates questions that
should be refused from answerable ones, on a finished simulation arm's TRAFFIC (never its held-out
part), with the full gold of the traffic items.

    .venv/bin/python benchmarks/gate_separation.py --arm squad-defaults

Reads the arm's store under `benchmarks/.home/self_improvement/<arm>/home` (left by
`benchmarks/self_improvement.py`) and prints / writes (`results/self_improvement/gate_separation.*`):
- AUC of the first gate score (the one τL is compared to), answerable above unanswerable, bootstrap CI;
- per τL ≥ the serving 0.3: the share of unanswerable and of answerable traffic questions refused, and
  end-to-end accuracy on the traffic (a refusal is right iff the question is unanswerable; an answer
  keeps its served verdict), paired bootstrap against τL 0.3. Answers refused by a later step (gate
  score ≥ 0.3) stay refused, as in the refit;
- the refit's own view: `fit_tau_lower`'s trials on the arm's labelled answers (what the loop sees).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from _common import BENCH_HOME, RESULTS_DIR, machine
from sqlalchemy import select

from ragloop.evaluation.suites import EvalItem
from ragloop.improve.remediation.thresholds import _trials, first_gate_score, gate_samples
from ragloop.improve.simulation.data import load_squad_sim
from ragloop.improve.simulation.users import served_right
from ragloop.store import Store
from ragloop.store.models import Answer, Query

TAUS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
CURRENT = 0.3


def _auc(unanswerable: np.ndarray, score: np.ndarray) -> float:
    pos, neg = score[~unanswerable], score[unanswerable]
    return float(np.mean((pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arm", default="squad-defaults")
    ap.add_argument("--work", type=Path, default=BENCH_HOME / "self_improvement")
    ap.add_argument("--resamples", type=int, default=1000)
    args = ap.parse_args()
    gold: dict[str, EvalItem] = {}
    for sess in load_squad_sim(None).traffic:
        for t in sess.turns:
            if t.item is not None:
                gold.setdefault(t.question.strip(), t.item)
    store = Store.open(f"sqlite:///{args.work / args.arm / 'home' / 'ragloop.db'}")
    rows = []
    with store.db.transaction(write=False) as s:
        for a in s.scalars(select(Answer)):
            q = s.get(Query, a.query_id)
            item = gold.get((q.question_text if q else "").strip())
            gs = first_gate_score(a.trace or {})
            if item is not None and gs is not None:
                right = served_right(item, {"refused": a.refused, "answer": a.answer_text})
                rows.append((item.should_refuse, bool(a.refused), gs, right))
    unans = np.array([r[0] for r in rows])
    refused = np.array([r[1] for r in rows])
    score = np.array([r[2] for r in rows])
    served = np.array([r[3] for r in rows], dtype=np.float64)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(rows), size=(args.resamples, len(rows)))
    aucs = [_auc(unans[i], score[i]) for i in idx[:300]]
    auc_ci = [float(x) for x in np.quantile(aucs, [0.025, 0.975])]
    auc: dict[str, Any] = {"value": _auc(unans, score), "ci95": auc_ci}
    later = refused & (score >= CURRENT)

    def correct(tau: float) -> np.ndarray:
        return np.where((score < tau) | later, unans.astype(np.float64), served)

    base = correct(CURRENT)
    curve: list[dict[str, Any]] = []
    for tau in TAUS:
        ref = (score < tau) | later
        c = correct(tau)
        d = (c - base)[idx].mean(1)
        curve.append(
            {
                "tau": tau,
                "unanswerable_refused": round(float(ref[unans].mean()), 4),
                "answerable_refused": round(float(ref[~unans].mean()), 4),
                "accuracy": round(float(c.mean()), 4),
                "gain_vs_0.3": round(float((c - base).mean()), 4),
                "gain_ci95": [round(float(x), 4) for x in np.quantile(d, [0.025, 0.975])],
            }
        )
    samples = gate_samples(store, "sim")
    s_scores = np.array([-1.0 if x.refused and x.score >= CURRENT else x.score for x in samples])
    s_rights = np.array([x.rights for x in samples]).reshape(-1, 2)
    s_idx = np.random.default_rng(20240601).integers(0, len(samples), size=(args.resamples, len(samples)))
    labelled: list[dict[str, Any]] = [
        {
            "tau": t.tau,
            "accuracy": round(t.accuracy, 4),
            "gain": round(t.gain, 4),
            "gain_ci95": [round(t.lo, 4), round(t.hi, 4)],
            "false_refusal_increase": round(t.fr_increase, 4),
        }
        for t in _trials(s_scores, s_rights, CURRENT, TAUS, s_idx)
    ]
    mach: dict[str, Any] = dict(machine())
    out: dict[str, Any] = {
        "arm": args.arm,
        "command": "PYTHONPATH=. .venv/bin/python " + " ".join(sys.argv),
        "machine": mach,
        "traffic_answers": len(rows),
        "unanswerable": int(unans.sum()),
        "answerable": int((~unans).sum()),
        "auc_answerable_above_unanswerable": auc,
        "traffic_curve": curve,
        "labelled_samples": len(samples),
        "labelled_trials": labelled,
    }
    dest = RESULTS_DIR / "self_improvement"
    (dest / "gate_separation.json").write_text(json.dumps(out, indent=1), encoding="utf-8")
    md = [
        f"# Gate separation on the {args.arm} arm's traffic (never its held-out part)",
        "",
        f"Command: `{out['command']}`; load average {mach.get('load_average_1_5_15')}",
        "",
        f"{len(rows)} traffic answers with their gold ({out['unanswerable']} unanswerable, {out['answerable']} "
        f"answerable). AUC of the first gate score (answerable above unanswerable): "
        f"**{auc['value']:.3f}** [{auc['ci95'][0]:.3f}, {auc['ci95'][1]:.3f}] (bootstrap).",
        "",
        "| τL | unanswerable refused | answerable refused | traffic e2e accuracy | gain vs 0.3 [95% CI] |",
        "|---|---|---|---|---|",
        *(
            f"| {c['tau']} | {c['unanswerable_refused']:.1%} | {c['answerable_refused']:.1%} | {c['accuracy']:.1%} | "
            f"{c['gain_vs_0.3']:+.1%} [{c['gain_ci95'][0]:+.1%}, {c['gain_ci95'][1]:+.1%}] |"
            for c in curve
        ),
        "",
        f"What the refit sees: {len(samples)} labelled answers (ratings, reviews, diagnoses; imputed where a label "
        "leaves a fact open), paired bootstrap against τL 0.3:",
        "",
        "| τL | expected accuracy | gain [95% CI] | false-refusal increase |",
        "|---|---|---|---|",
        *(
            f"| {t['tau']} | {t['accuracy']:.1%} | {t['gain']:+.1%} "
            f"[{t['gain_ci95'][0]:+.1%}, {t['gain_ci95'][1]:+.1%}] | {t['false_refusal_increase']:+.1%} |"
            for t in labelled
        ),
        "",
    ]
    (dest / "gate_separation.md").write_text("\n".join(md), encoding="utf-8")
    print("\n".join(md))


if __name__ == "__main__":
    main()
