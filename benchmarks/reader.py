"""Answer-sentence reader benchmark: does the strip that CONTAINS the answer come first?
`--fit` also fits the shipped `ragloop/models/scoring/weights/reader-default.json`.

    python benchmarks/reader.py --fit     # fit on articles 3-11, report on 0-2
    python benchmarks/reader.py           # report with the shipped weights

Data: `../shared/datasets/squad2/squad2-dev-12articles.json`. Articles 3-11 are the FIT articles
(weights, L2 strength, the `refine` threshold; cross-validated numbers are leave-one-article-out
over them). Articles 0-2 are the contract check's articles: REPORT only, never fitted on, never
used to choose anything.

Items: each ANSWERABLE question with its own paragraph and the 2 other paragraphs of the same
article ranked best for the question by reciprocal rank fusion of BM25 (our Tokenizer) and
MiniLM cosine (what retrieval would bring), skipping paragraphs that contain a gold answer text
(so their strips are true negatives). The three paragraphs are the chunks of one batch, in a
seeded random order; their strips (`split_strips`) are the candidates. A strip is positive when
it is in the own paragraph and contains a gold answer text (case-insensitive); questions whose
answer crosses a strip boundary have no positive strip (they count as misses in the top-k rates
and are left out of the fit).

Metrics, per question, over the strips of its batch ranked by each scorer (ties broken at
random, seeded):
- top-1 / top-3: a positive strip is ranked first / among the first three;
- answer in top-3 text: a gold answer text (case-insensitive) is in the concatenation of the
  three best strips: what an extractive 3-sentence answer would contain;
- composer rule: the answer graph's path with the scorer's p: strips with p >= the refine
  threshold (the scorer's own `thresholds["refine"]`), best first, a strip below 0.6 x the best
  p ends the answer, near-duplicates skipped, at most 3 (as `generate.compose`); then a gold
  answer text in the composed strips; `composer @0.35` the same at the pipeline's default
  `refine_threshold` (0.35).

Scorers: `cosine` (MiniLM cosine of question and strip), `lexical coverage` (share of the
question's content terms in the strip), `combined:default` (make_scorer; each strip a passage,
as refine calls it today: NB fitted on articles 0-5, which include the report articles, for
paragraph relevance), `reader` (`ReaderScorer.score_strips` over the three chunks) and
`reader, isolated strips` (`ReaderScorer.relevance` with each strip as its own passage: what the
reader gives if refine keeps calling `relevance` on single strips; no neighbours, no chunk).

strips/s: end to end per question (query + its ~20 strips) with an UNCACHED embedder
(`--threads` ONNX threads), on the first `--timing-questions` report questions; the reader's
feature+model cost alone is also given.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from _common import BENCH_HOME, REPO, machine, peak_rss_mb, print_table, write_results
from _scorer_sets import bm25

from ragloop.config.settings import Settings
from ragloop.models import make_embedder
from ragloop.models.embedding import OnnxMiniLMEmbedder
from ragloop.models.scoring import CombinedScorer, EmbeddingScorer, LexicalScorer, make_scorer
from ragloop.models.scoring.calibration import (
    LogisticModel,
    ScorerWeights,
    best_threshold,
    fit_platt,
    roc_auc,
    shipped_weights,
)
from ragloop.models.scoring.reader import FEATURES, SHIPPED, ReaderScorer, batch_features, chunk_strips
from ragloop.text.analysis import content_terms
from ragloop.text.tokenize import Tokenizer

SQUAD = REPO.parent / "shared" / "datasets" / "squad2" / "squad2-dev-12articles.json"
WEIGHTS_PATH = REPO / "ragloop" / "models" / "scoring" / "weights" / f"{SHIPPED}.json"
FIT_ARTICLES = range(3, 12)
REPORT_ARTICLES = range(0, 3)
MINILM = "onnx:all-minilm-l6-v2"
SEED = 17
L2_GRID = (0.1, 1.0, 10.0, 100.0, 300.0)
PIPELINE_REFINE_THRESHOLD = 0.35  # AgentConfig.refine_threshold's default
GROUPS = {
    "neighbours (cos_prev/next)": ("cos_prev", "cos_next"),
    "ranks and gaps": ("cos_gap_chunk", "cos_gap_batch", "rank_chunk", "rank_batch", "chunk_cos"),
    "coverage (cov*)": ("cov", "cov_prev", "cov_next", "cov_win"),
    "idf coverage (idf*)": ("idf_cov", "idf_win", "idf_gap_batch"),
    "batch bests (best_cos/idf, after_best_cos)": ("best_cos", "best_idf", "after_best_cos"),
    "reading (novelty, names, kind)": ("novelty", "new_entities", "kind_match", "kind_missing"),
    "anaphora (anaphor*)": ("anaphor", "anaphor_cos_prev", "anaphor_idf_prev"),
    "shape (length, position)": ("length", "position", "first"),
}


@dataclass
class Item:
    article: int
    question: str
    answers: list[str]  # lowercased gold answer texts
    chunks: list[str]  # paragraph texts of the batch (own + 2 distractors, shuffled)
    strips: list[list[str]]
    labels: list[list[int]]

    @property
    def flat(self) -> list[str]:
        return [s for ss in self.strips for s in ss]

    @property
    def flat_labels(self) -> list[int]:
        return [y for ys in self.labels for y in ys]

    @property
    def answerable_strip(self) -> bool:
        return any(self.flat_labels)


# --- items ------------------------------------------------------------------------------------------

_tok = Tokenizer()


def build_items(articles: list[dict[str, Any]], indices: range, vec: dict[str, np.ndarray]) -> list[Item]:
    items: list[Item] = []
    for ai in indices:
        rng = random.Random(f"{SEED}-{ai}")
        paras = [p["context"] for p in articles[ai]["paragraphs"]]
        para_terms = [_tok.tokenize(p) for p in paras]
        para_vecs = np.stack([vec[p] for p in paras])
        para_low = [p.lower() for p in paras]
        for pi, para in enumerate(articles[ai]["paragraphs"]):
            for q in para["qas"]:
                if q.get("is_impossible") or not q["answers"]:
                    continue
                answers = sorted({a["text"].strip().lower() for a in q["answers"] if a["text"].strip()})
                lex = bm25(_tok.tokenize(q["question"]), para_terms)
                cos = para_vecs @ vec[q["question"]]
                rank_lex = np.argsort(np.argsort(-lex, kind="stable"), kind="stable")
                rank_cos = np.argsort(np.argsort(-cos, kind="stable"), kind="stable")
                rrf = 1.0 / (60 + rank_lex) + 1.0 / (60 + rank_cos)
                others = [
                    int(j)
                    for j in np.argsort(-rrf, kind="stable")
                    if int(j) != pi and not any(a in para_low[int(j)] for a in answers)
                ][:2]
                chosen = [pi, *others]
                rng.shuffle(chosen)
                strips = [chunk_strips(paras[j]) for j in chosen]
                labels = [
                    [int(j == pi and any(a in s.lower() for a in answers)) for s in ss]
                    for j, ss in zip(chosen, strips, strict=True)
                ]
                items.append(Item(ai, q["question"], answers, [paras[j] for j in chosen], strips, labels))
    return items


# --- metrics ----------------------------------------------------------------------------------------


def _order(scores: np.ndarray, rng: random.Random) -> np.ndarray:
    """Indices best first; ties broken at random."""
    jitter = np.array([rng.random() for _ in range(len(scores))])
    return np.lexsort((jitter, -np.asarray(scores, dtype=np.float64)))


def _similar(a: str, b: str) -> bool:  # generate._similar
    ta, tb = content_terms(a), content_terms(b)
    return bool(ta and tb) and len(ta & tb) / len(ta | tb) >= 0.7


def compose_hit(item: Item, p: np.ndarray, threshold: float) -> bool:
    flat = item.flat
    ranked = [i for i in np.argsort(-p, kind="stable") if p[i] >= threshold]
    if not ranked:
        return False
    floor = 0.6 * p[ranked[0]]
    chosen: list[str] = []
    for i in ranked:
        if len(chosen) >= 3 or p[i] < floor:
            break
        if any(_similar(flat[i], c) for c in chosen):
            continue
        chosen.append(flat[i])
    text = " ".join(chosen).lower()
    return any(a in text for a in item.answers)


def rank_metrics(items: Sequence[Item], scores: Sequence[np.ndarray], threshold: float | None = None) -> dict[str, Any]:
    rng = random.Random(SEED)
    top1 = top3 = text3 = composed = composed_default = 0
    for item, s in zip(items, scores, strict=True):
        order = _order(s, rng)
        labels = np.asarray(item.flat_labels)
        top1 += int(labels[order[0]])
        top3 += int(labels[order[:3]].any())
        text = " ".join(item.flat[i] for i in order[:3]).lower()
        text3 += int(any(a in text for a in item.answers))
        if threshold is not None:
            composed += int(compose_hit(item, np.asarray(s), threshold))
            composed_default += int(compose_hit(item, np.asarray(s), PIPELINE_REFINE_THRESHOLD))
    n = len(items)
    out: dict[str, Any] = {
        "n": n,
        "top1": round(top1 / n, 4),
        "top3": round(top3 / n, 4),
        "answer_in_top3_text": round(text3 / n, 4),
    }
    if threshold is not None:
        out["composer_rule"] = round(composed / n, 4)
        out["composer_rule_at_0.35"] = round(composed_default / n, 4)
        out["refine_threshold"] = round(threshold, 4)
    return out


# --- fitting ---------------------------------------------------------------------------------------


def matrix(rows: Sequence[dict[str, float]], names: Sequence[str]) -> np.ndarray:
    return np.array([[r[f] for f in names] for r in rows], dtype=np.float64)


def fit_rows(
    items: Sequence[Item], feats: Sequence[list[dict[str, float]]], names: Sequence[str], l2: float
) -> LogisticModel:
    rows = [r for it, fs in zip(items, feats, strict=True) if it.answerable_strip for r in fs]
    ys = [y for it in items if it.answerable_strip for y in it.flat_labels]
    return LogisticModel.fit(matrix(rows, names), ys, names, l2=l2)


def cross_validated(
    items: Sequence[Item], feats: Sequence[list[dict[str, float]]], names: Sequence[str], l2: float
) -> list[np.ndarray]:
    """Leave-one-article-out predictions for every item."""
    out: list[np.ndarray | None] = [None] * len(items)
    for held in sorted({it.article for it in items}):
        train = [i for i, it in enumerate(items) if it.article != held]
        model = fit_rows([items[i] for i in train], [feats[i] for i in train], names, l2)
        for i, it in enumerate(items):
            if it.article == held:
                out[i] = model.predict_proba(matrix(feats[i], names))
    return [o for o in out if o is not None]


def quality(m: dict[str, Any]) -> float:
    """What model choices maximise (cross-validated, fit articles): top-1 + top-3."""
    return float(m["top1"] + m["top3"])


def choose_refine_threshold(items: Sequence[Item], scores: Sequence[np.ndarray]) -> float:
    """The refine threshold maximising the composer-rule hit rate (ties: the highest)."""
    best_t, best = 0.0, -1.0
    for t in np.round(np.arange(0.02, 0.62, 0.02), 2):
        hit = np.mean([compose_hit(it, s, float(t)) for it, s in zip(items, scores, strict=True)])
        if hit >= best:
            best_t, best = float(t), float(hit)
    return best_t


def support_platt(items: Sequence[Item], vec: dict[str, np.ndarray]) -> tuple[LogisticModel, float, float]:
    """Support: an answer-bearing strip vs its own paragraph (1) and vs a distractor paragraph of
    the batch (0); feature = best strip cosine. Returns (Platt model, threshold, AUC)."""
    seen: set[str] = set()
    xs: list[float] = []
    ys: list[int] = []
    for it in items:
        own = next(k for k, ys_ in enumerate(it.labels) if any(ys_)) if it.answerable_strip else -1
        if own < 0:
            continue
        claim = next(s for s, y in zip(it.strips[own], it.labels[own], strict=True) if y)
        if claim in seen:
            continue
        seen.add(claim)
        for k, ss in enumerate(it.strips):
            if k != own and ss:
                xs.append(max(float(vec[s] @ vec[claim]) for s in ss))
                ys.append(0)
                break
        xs.append(max(float(vec[s] @ vec[claim]) for s in it.strips[own]))
        ys.append(1)
    model = fit_platt(xs, ys, "max_cos")
    ps = model.predict_proba(np.array(xs).reshape(-1, 1))
    t, _ = best_threshold(ps, ys)
    return model, t, roc_auc(xs, ys)


# --- main -------------------------------------------------------------------------------------------


async def per_item(items: Sequence[Item], fn: Callable[[Item], Any]) -> list[np.ndarray]:
    return [np.asarray([j.p for j in await fn(it)], dtype=np.float64) for it in items]


async def run(args: argparse.Namespace) -> None:
    settings = Settings(home=BENCH_HOME, threads=args.threads)
    articles = json.loads(SQUAD.read_text())["data"]
    embedder = make_embedder(MINILM, settings)
    t0 = time.perf_counter()
    texts: list[str] = []
    for a in articles:
        for p in a["paragraphs"]:
            texts.append(p["context"])
            texts.extend(chunk_strips(p["context"]))
            texts.extend(q["question"] for q in p["qas"])
    unique = list(dict.fromkeys(texts))
    vec = dict(zip(unique, embedder.embed(unique), strict=True))
    fit_items = build_items(articles, FIT_ARTICLES, vec)
    rep_items = build_items(articles, REPORT_ARTICLES, vec)
    print(
        f"{len(fit_items)} fit / {len(rep_items)} report questions, {len(unique)} texts embedded "
        f"in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    fit_feats = [[r for rows in batch_features(it.question, it.strips, vec) for r in rows] for it in fit_items]
    rep_feats = [[r for rows in batch_features(it.question, it.strips, vec) for r in rows] for it in rep_items]

    # model selection on the fit articles only (leave-one-article-out)
    names = list(FEATURES)
    cv_by_l2 = {}
    for l2 in L2_GRID:
        cv_by_l2[l2] = rank_metrics(fit_items, cross_validated(fit_items, fit_feats, names, l2))
        print(f"CV l2={l2}: {cv_by_l2[l2]}", flush=True)
    l2 = max(L2_GRID, key=lambda v: (quality(cv_by_l2[v]), v))
    ablation: dict[str, dict[str, Any]] = {"all features": cv_by_l2[l2]}
    for group, drop in GROUPS.items():
        kept = [f for f in names if f not in drop]
        ablation[f"without {group}"] = rank_metrics(fit_items, cross_validated(fit_items, fit_feats, kept, l2))
        print(f"CV without {group}: {ablation[f'without {group}']}", flush=True)
    for single in ("cos", "cov", "idf_cov"):
        ablation[f"only {single}"] = rank_metrics(fit_items, cross_validated(fit_items, fit_feats, [single], l2))

    # the shipped model leaves out the groups whose removal cost nothing (top-1 + top-3, CV), if
    # leaving them all out together costs nothing either
    base = ablation["all features"]
    useless = [g for g in GROUPS if quality(ablation[f"without {g}"]) >= quality(base)]
    pruned = [f for f in names if not any(f in GROUPS[g] for g in useless)]
    if useless:
        ablation["shipped: without " + " + ".join(useless)] = pruned_cv = rank_metrics(
            fit_items, cross_validated(fit_items, fit_feats, pruned, l2)
        )
        if quality(pruned_cv) >= quality(base):
            names = pruned
    print(f"shipped model features: {names}", flush=True)
    cv_scores = cross_validated(fit_items, fit_feats, names, l2)
    cv_final = rank_metrics(fit_items, cv_scores)

    if args.fit:
        fitted = fit_rows(fit_items, fit_feats, names, l2)
        fit_scores = [fitted.predict_proba(matrix(f, names)) for f in fit_feats]
        rows_y = [y for it in fit_items if it.answerable_strip for y in it.flat_labels]
        rows_p = np.concatenate([s for it, s in zip(fit_items, fit_scores, strict=True) if it.answerable_strip])
        t_rel, acc = best_threshold(rows_p, rows_y)
        t_refine = choose_refine_threshold(fit_items, cv_scores)
        sup, t_sup, sup_auc = support_platt(fit_items, vec)
        weights = ScorerWeights(
            scorer="reader:default",
            relevance=fitted,
            support=sup,
            thresholds={"relevance": round(t_rel, 4), "refine": t_refine, "support": round(t_sup, 4)},
            training={
                "dataset": "SQuAD 2.0 dev, 12-article split (shared/datasets/squad2/squad2-dev-12articles.json)",
                "articles": [articles[i]["title"] for i in FIT_ARTICLES],
                "held_out_articles": [articles[i]["title"] for i in REPORT_ARTICLES],
                "relevance_rows": "per answerable question: the strips of its own paragraph (1 = contains a gold "
                "answer text) + the strips of the 2 other paragraphs of the article ranked best by RRF(BM25, "
                "MiniLM) that contain no gold answer text (0)",
                "support_rows": "answer-bearing strip vs its own paragraph (1) / a distractor paragraph (0), "
                "Platt on max strip cosine",
                "built_by": "benchmarks/reader.py --fit",
                "l2": l2,
                "relevance_fit": {
                    "questions": sum(it.answerable_strip for it in fit_items),
                    "strips": len(rows_y),
                    "positives": int(sum(rows_y)),
                    "auc": round(roc_auc(rows_p, rows_y), 4),
                    "accuracy_at_threshold": round(acc, 4),
                    "cv_top1": cv_final["top1"],
                    "cv_top3": cv_final["top3"],
                },
                "support_fit": {"auc": round(sup_auc, 4)},
            },
        )
        weights.save(WEIGHTS_PATH)
        print(f"wrote {WEIGHTS_PATH.relative_to(REPO)} id {weights.id}", flush=True)
    loaded = shipped_weights(SHIPPED)
    if loaded is None:
        raise SystemExit(f"no {WEIGHTS_PATH}: run with --fit first")
    reader = ReaderScorer(embedder, loaded, name="reader:default")
    model = loaded.relevance
    assert model is not None
    # the scorer's own path agrees with the features above
    for it in rep_items[:20]:
        got = [j.p for js in await reader.score_strips(it.question, it.chunks) for j in js]
        want = model.predict_rows([r for rows in batch_features(it.question, it.strips, vec) for r in rows])
        assert np.allclose(got, want, atol=1e-9), (it.question, got, want)

    combined = make_scorer("combined:default", settings)
    emb_scorer = make_scorer("embedding:minilm", settings)
    assert isinstance(combined, CombinedScorer) and isinstance(emb_scorer, EmbeddingScorer)
    emb_t = emb_scorer.weights.thresholds.get("refine", 0.35) if emb_scorer.weights else 0.35
    comb_t = combined.weights.thresholds.get("refine", 0.35)
    reader_t = loaded.thresholds.get("refine", 0.35)

    def col(feats: Sequence[list[dict[str, float]]], name: str) -> list[np.ndarray]:
        return [np.array([r[name] for r in rows]) for rows in feats]

    report: dict[str, dict[str, Any]] = {}
    t1 = time.perf_counter()
    report["cosine"] = rank_metrics(rep_items, col(rep_feats, "cos"))
    report["lexical coverage"] = rank_metrics(rep_items, col(rep_feats, "cov"))
    report["embedding:minilm (p)"] = rank_metrics(
        rep_items, await per_item(rep_items, lambda it: emb_scorer.relevance(it.question, it.flat)), emb_t
    )
    report["combined:default"] = rank_metrics(
        rep_items, await per_item(rep_items, lambda it: combined.relevance(it.question, it.flat)), comb_t
    )
    report["reader:default"] = rank_metrics(rep_items, [model.predict_rows(f) for f in rep_feats], reader_t)
    report["reader, isolated strips"] = rank_metrics(
        rep_items, await per_item(rep_items, lambda it: reader.relevance(it.question, it.flat)), reader_t
    )
    print(f"report scored in {time.perf_counter() - t1:.1f} s", flush=True)
    for k, v in report.items():
        print(f"{k}: {v}", flush=True)
    cv_report = {
        "cosine": rank_metrics(fit_items, col(fit_feats, "cos")),
        "lexical coverage": rank_metrics(fit_items, col(fit_feats, "cov")),
        "reader (leave-one-article-out)": rank_metrics(fit_items, cv_scores, reader_t),
    }
    by_article = {
        articles[ai]["title"]: {
            k: rank_metrics(
                [it for it in rep_items if it.article == ai],
                [s for it, s in zip(rep_items, sc, strict=True) if it.article == ai],
            )
            for k, sc in (
                ("cosine", col(rep_feats, "cos")),
                ("reader:default", [model.predict_rows(f) for f in rep_feats]),
            )
        }
        for ai in REPORT_ARTICLES
    }

    # speed: uncached embedder, one call per question
    raw = OnnxMiniLMEmbedder(threads=args.threads)
    timing_items = rep_items[: args.timing_questions]
    n_strips = sum(len(it.flat) for it in timing_items)
    speed: dict[str, float] = {}
    timed = {
        "reader:default": ReaderScorer(raw, loaded),
        "combined:default": CombinedScorer(
            combined.weights, {"emb": EmbeddingScorer(raw, emb_scorer.weights), "lex": LexicalScorer()}
        ),
        "embedding:minilm": EmbeddingScorer(raw, emb_scorer.weights),
    }
    for key, scorer in timed.items():
        start = time.perf_counter()
        for it in timing_items:
            if isinstance(scorer, ReaderScorer):
                await scorer.score_strips(it.question, it.chunks)
            else:
                await scorer.relevance(it.question, it.flat)
        speed[key] = round(n_strips / (time.perf_counter() - start), 1)
    start = time.perf_counter()
    for it in rep_items:
        model.predict_rows([r for rows in batch_features(it.question, it.strips, vec) for r in rows])
    speed["reader features + model only"] = round(
        sum(len(it.flat) for it in rep_items) / (time.perf_counter() - start), 1
    )
    print(f"speed (strips/s): {speed}", flush=True)

    # --- tables ---
    md = [
        "# Answer-sentence reader on SQuAD 2.0 dev (report articles 0-2; fitted on articles 3-11)\n",
        f"Command: `{args.command}`  ",
        f"Threads: {args.threads}; machine: {machine()}  ",
        f"Weights: `{SHIPPED}` id `{loaded.id}` (l2 {loaded.training.get('l2')}); "
        f"report: {len(rep_items)} answerable questions, "
        f"{sum(len(it.flat) for it in rep_items)} candidate strips "
        f"({np.mean([len(it.flat) for it in rep_items]):.1f} per question), "
        f"{sum(not it.answerable_strip for it in rep_items)} with the answer across a strip boundary\n",
    ]
    headers = [
        "scorer",
        "top-1",
        "top-3",
        "answer in top-3 text",
        "composer rule",
        "refine threshold",
        "composer @0.35",
    ]
    md.append(
        print_table(
            "Report articles 0-2 (Normans, Computational complexity theory, Huguenot)",
            headers,
            [
                [
                    k,
                    v["top1"],
                    v["top3"],
                    v["answer_in_top3_text"],
                    v.get("composer_rule"),
                    v.get("refine_threshold"),
                    v.get("composer_rule_at_0.35"),
                ]
                for k, v in report.items()
            ],
        )
    )
    md.append(
        print_table(
            "Fit articles 3-11, reader cross-validated (leave one article out)",
            headers,
            [
                [
                    k,
                    v["top1"],
                    v["top3"],
                    v["answer_in_top3_text"],
                    v.get("composer_rule"),
                    v.get("refine_threshold"),
                    v.get("composer_rule_at_0.35"),
                ]
                for k, v in cv_report.items()
            ],
        )
    )
    md.append(
        print_table(
            f"Feature ablation (cross-validated on articles 3-11, l2 {l2})",
            ["features", "top-1", "top-3", "answer in top-3 text"],
            [[k, v["top1"], v["top3"], v["answer_in_top3_text"]] for k, v in ablation.items()],
        )
    )
    md.append(
        print_table(
            "Per report article",
            ["article", "scorer", "n", "top-1", "top-3", "answer in top-3 text"],
            [
                [a, k, v["n"], v["top1"], v["top3"], v["answer_in_top3_text"]]
                for a, d in by_article.items()
                for k, v in d.items()
            ],
        )
    )
    md.append(
        print_table(
            f"Speed (strips/s; uncached MiniLM, {args.threads} thread(s), one call per question, "
            f"{len(timing_items)} questions)",
            ["scorer", "strips/s"],
            [[k, v] for k, v in speed.items()],
            digits=1,
        )
    )
    if model is not None:
        md.append(
            print_table(
                "Shipped model (standardised weights)",
                ["feature", "weight", "mean", "std"],
                [
                    [f, w, m, s]
                    for f, w, m, s in sorted(
                        zip(model.feature_names, model.weights, model.means, model.stds, strict=True),
                        key=lambda r: -abs(r[1]),
                    )
                ],
            )
        )
    md.append(
        "Definitions: see the docstring of `benchmarks/reader.py`. The composer rule uses each scorer's own "
        "`thresholds['refine']` (the reader's is chosen on the fit articles), `composer @0.35` the pipeline "
        "default; `combined:default` and `embedding:minilm` were fitted on articles 0-5, which "
        "include the report articles."
    )
    payload = {
        "command": args.command,
        "threads": args.threads,
        "machine": machine(),
        "weights_id": loaded.id,
        "l2": l2,
        "report_articles": [articles[i]["title"] for i in REPORT_ARTICLES],
        "fit_articles": [articles[i]["title"] for i in FIT_ARTICLES],
        "report": report,
        "report_by_article": by_article,
        "cross_validated_fit_articles": cv_report,
        "cv_by_l2": {str(k): v for k, v in cv_by_l2.items()},
        "ablation": ablation,
        "strips_per_s": speed,
        "peak_rss_mb": peak_rss_mb(),
    }
    write_results("reader", payload, "\n".join(md))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit", action="store_true", help="fit and write the shipped reader weights")
    ap.add_argument("--timing-questions", type=int, default=60)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("RAGLOOP_THREADS", "1")))
    args = ap.parse_args()
    args.command = " ".join(["python benchmarks/reader.py", *sys.argv[1:]])
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
