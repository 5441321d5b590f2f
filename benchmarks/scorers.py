"""Scorer benchmark: accuracy, ROC AUC and speed of the `embedding:`, `lexical:`, `combined:` and
`llm:` scorers side by side on labelled pairs built from SQuAD 2.0 dev; `--fit` also fits the
weights shipped in `ragloop/models/scoring/weights/`.

    python benchmarks/scorers.py --fit            # fit + report (+ the LLM on a sample)
    python benchmarks/scorers.py --llm-sample 0   # report only, no LLM

Data: `../shared/datasets/squad2/squad2-dev-12articles.json`. Articles 0-5 are the FIT
articles (weights, Platt maps and decision thresholds are fitted there), articles 6-11 the
REPORT articles (every number in the tables). Nothing is ever reported on a fit article.

Label sets (one row per pair; "own paragraph" = the paragraph the question was written on):
- relevance (scorer.relevance): each answerable question vs its own paragraph (1) and vs a
  hard negative (0): the other paragraph of the same article ranked highest by reciprocal
  rank fusion of BM25 (our Tokenizer) and MiniLM cosine to the question, skipping paragraphs
  that contain a gold answer string (they may well answer it).
- answerability (scorer.relevance): every question vs its own paragraph; 1 = answerable,
  0 = unanswerable (`is_impossible`: on-topic adversarial questions with plausible answers).
- support-swap (scorer.support): claim = an answer-bearing sentence (the strip of the own
  paragraph containing a gold answer start; each sentence once) vs its own paragraph (1)
  and vs the other paragraph of the article most similar to the sentence (0, RRF as above).
- support-perturbed (scorer.support): claim = the answer-bearing clause of that sentence (its
  comma/semicolon/dash-separated segments around the answer, widened to at least 8 words:
  not a verbatim copy of a whole sentence where the sentence has clauses) vs its own paragraph
  (1), and a perturbed copy of the clause vs its own paragraph (0): one number changed (a
  year by 1-12, other numbers by a few or a fraction, never to a number the paragraph
  contains), or one capitalised word replaced by a name from another paragraph of the article
  that the own paragraph lacks, or "not" inserted after the first is/was/are/were/has/had/
  can/will (one kind at random among those possible, seeded). Facts from OUTSIDE the context.
- support-qa (scorer.support): claim = 'The answer to "<question>" is <answer>.' vs its own
  paragraph, with the gold answer (1) or with the gold answer of ANOTHER question on the same
  paragraph (0; same kind - number / name / other - when possible). Every word of both
  claims is in the context: only reading tells them apart (misattributed facts, the hard case
  for citation checks).
  Positives of support-swap are verbatim sentences of the context and those of
  support-perturbed verbatim clauses, so those two sets are upper bounds for paraphrased
  claims: they measure sensitivity to a wrong context and to facts the context lacks.

- refine (scorer.relevance on single strips): each answerable question vs the strip
  (sentence) of its own paragraph holding the answer start (1) and vs the other strip of that
  paragraph ranked highest by RRF(BM25, cosine) that contains no gold answer string (0): the
  refinement step's question, "which sentences of a relevant chunk matter?".

Fitting: relevance models on the relevance set only (fitting on relevance + answerability
cost 0.04 relevance AUC for +0.005 answerability AUC); support models on the three support
sets together. Thresholds per label set are chosen on the fit articles and stored in the
weights files (`thresholds`).

Metrics: ROC AUC; accuracy at the threshold maximising accuracy on the same label set of the
fit articles; accuracy of the calibrated p at 0.5 (calibration check); pairs/s on the first
`--timing-pairs` pairs of each set with a fresh embedding cache holding only the passages /
contexts (retrieved chunks were embedded at ingest), so queries, claims and strips embed cold.
The LLM runs on a balanced random sample per set (`--llm-sample` report pairs,
`--llm-fit-sample` fit pairs for its Platt map and threshold); its pairs/s is from model
latency (responses are cached in the bench home, so a rerun is free and keeps the original
latencies); the other scorers are also scored on the same sample for a like-for-like AUC.
`--llm-limit SET=REPORT/FIT` truncates one set's LLM sample (the LLM took 10-20 s a pair on
the overloaded shared machine).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _common import BENCH_HOME, REPO, machine, peak_rss_mb, print_table, write_results
from _scorer_sets import SEED, SETS, Pair, build_sets

from ragloop.config.settings import Settings
from ragloop.models import make_embedder
from ragloop.models.cache import CachedEmbedder
from ragloop.models.chat.base import ChatModel, ChatRequest, ChatResponse
from ragloop.models.chat.registry import make_chat_model, wrap
from ragloop.models.embedding import OnnxMiniLMEmbedder
from ragloop.models.scoring import (
    CombinedScorer,
    EmbeddingScorer,
    LexicalScorer,
    LLMScorer,
    Scorer,
    ScorerWeights,
    accuracy,
    best_threshold,
    component_judgements,
    fit_platt,
    fit_weights_from_rows,
    llm_scorer_stats,
    roc_auc,
)
from ragloop.models.scoring import lexical as lexmod
from ragloop.models.scoring.llm import weights_name

SQUAD = REPO.parent / "shared" / "datasets" / "squad2" / "squad2-dev-12articles.json"
WEIGHTS_DIR = REPO / "ragloop" / "models" / "scoring" / "weights"
FIT_ARTICLES = range(0, 6)
REPORT_ARTICLES = range(6, 12)
# The shipped models are fitted on these sets: answerability is a different, mostly unreadable-
# offline question, and fitting relevance on relevance + answerability cost 0.04 relevance AUC
# for +0.005 answerability AUC (measured while building this benchmark).
FIT_ON = {"relevance": ("relevance",), "support": ("support-swap", "support-perturbed", "support-qa")}
MINILM = "onnx:all-minilm-l6-v2"


# --- scoring ------------------------------------------------------------------------------------------


def strip_prefix(rows: Sequence[dict[str, float]], prefix: str) -> list[dict[str, float]]:
    cut = len(prefix) + 1
    return [{k[cut:]: v for k, v in r.items() if k.startswith(prefix + ".")} for r in rows]


def scorer_p(name: str, weights: ScorerWeights, task: str, rows: Sequence[dict[str, float]]) -> np.ndarray:
    model = weights.relevance if task == "relevance" else weights.support
    assert model is not None
    if name == "embedding":
        return model.predict_rows(strip_prefix(rows, "emb"))
    if name == "lexical":
        return model.predict_rows(strip_prefix(rows, "lex"))
    return model.predict_rows(rows)


class Recorder(ChatModel):
    """Records each response's latency and whether it came from the cache."""

    def __init__(self, inner: ChatModel) -> None:
        self.inner = inner
        self.name = inner.name
        self.latencies_ms: list[float] = []
        self.cached = 0

    async def request(self, req: ChatRequest) -> ChatResponse:
        resp = await self.inner.request(req)
        self.latencies_ms.append(resp.latency_ms)
        self.cached += int(resp.cached)
        return resp

    async def aclose(self) -> None:
        await self.inner.aclose()


def parse_limit(text: str) -> tuple[str, tuple[int, int]]:
    """`support-qa=30/20` -> ("support-qa", (30, 20)): report / fit pairs for the LLM."""
    name, _, sizes = text.partition("=")
    rep, _, fit = sizes.partition("/")
    if name not in SETS or not rep.isdigit() or not fit.isdigit():
        raise SystemExit(f"--llm-limit wants NAME=REPORT/FIT with NAME in {list(SETS)}, got {text!r}")
    return name, (int(rep), int(fit))


def balanced_sample(pairs: list[Pair], n: int, rng: random.Random) -> list[Pair]:
    pos = [p for p in pairs if p.label == 1]
    neg = [p for p in pairs if p.label == 0]
    out = rng.sample(pos, min(n // 2, len(pos))) + rng.sample(neg, min(n - n // 2, len(neg)))
    rng.shuffle(out)
    return out


async def llm_scores(scorer: LLMScorer, task: str, pairs: list[Pair], label: str) -> np.ndarray:
    out = []
    start = time.perf_counter()
    for i, p in enumerate(pairs):
        judged = await (scorer.relevance(p.a, [p.b]) if task == "relevance" else scorer.support([p.a], [p.b]))
        out.append(judged[0].features.get("logit_p_yes", float("nan")))
        if (i + 1) % 10 == 0:
            print(f"  llm {label}: {i + 1}/{len(pairs)} ({time.perf_counter() - start:.0f} s)", flush=True)
    return np.asarray(out)


async def timing(scorer: Scorer, task: str, pairs: list[Pair]) -> float:
    """pairs/s: relevance grouped by query (the graph grades a query's passages in one call),
    support 8 claims per call."""
    start = time.perf_counter()
    if task == "relevance":
        groups: dict[str, list[str]] = {}
        for p in pairs:
            groups.setdefault(p.a, []).append(p.b)
        for q, passages in groups.items():
            await scorer.relevance(q, passages)
    else:
        for s in range(0, len(pairs), 8):
            chunk = pairs[s : s + 8]
            await scorer.support([p.a for p in chunk], [p.b for p in chunk])
    return len(pairs) / (time.perf_counter() - start)


def metrics(p_fit: np.ndarray, y_fit: np.ndarray, p_rep: np.ndarray, y_rep: np.ndarray) -> dict[str, float]:
    threshold, fit_acc = best_threshold(p_fit, y_fit)
    return {
        "auc": round(roc_auc(p_rep, y_rep), 4),
        "accuracy": round(accuracy(p_rep, y_rep, threshold), 4),
        "threshold": round(threshold, 4),
        "accuracy_at_0.5": round(accuracy(p_rep, y_rep, 0.5), 4),
        "fit_auc": round(roc_auc(p_fit, y_fit), 4),
        "fit_accuracy": round(fit_acc, 4),
    }


# --- main ----------------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> None:
    settings = Settings(home=BENCH_HOME, threads=args.threads)
    articles = json.loads(SQUAD.read_text())["data"]
    cached_embedder = make_embedder(MINILM, settings)
    t0 = time.perf_counter()
    fit_sets = build_sets(articles, FIT_ARTICLES, cached_embedder)
    rep_sets = build_sets(articles, REPORT_ARTICLES, cached_embedder)
    print(f"label sets built in {time.perf_counter() - t0:.1f} s", flush=True)
    sizes = {
        name: {
            "fit": len(fit_sets[name]),
            "report": len(rep_sets[name]),
            "report_positives": sum(p.label for p in rep_sets[name]),
            "report_kinds": dict(Counter(p.kind for p in rep_sets[name])),
        }
        for name in SETS
    }
    print(json.dumps(sizes, indent=1), flush=True)

    emb = EmbeddingScorer(cached_embedder)
    lex = LexicalScorer()
    components: dict[str, Scorer] = {"emb": emb, "lex": lex}
    rows: dict[tuple[str, str], list[dict[str, float]]] = {}
    for split, sets in (("fit", fit_sets), ("report", rep_sets)):
        for name, task in SETS.items():
            t1 = time.perf_counter()
            judged = await component_judgements(components, task, [(p.a, p.b) for p in sets[name]])
            rows[(split, name)] = [f for f, _ in judged]
            print(f"features {split}/{name}: {len(judged)} pairs in {time.perf_counter() - t1:.1f} s", flush=True)

    def labels(split: str, name: str) -> np.ndarray:
        return np.array([p.label for p in (fit_sets if split == "fit" else rep_sets)[name]])

    def union(split: str, task: str) -> tuple[list[dict[str, float]], list[int]]:
        r: list[dict[str, float]] = []
        y: list[int] = []
        for name in FIT_ON[task]:
            r += rows[(split, name)]
            y += labels(split, name).tolist()
        return r, y

    training = {
        "dataset": "SQuAD 2.0 dev, 12-article split (shared/datasets/squad2/squad2-dev-12articles.json)",
        "articles": [articles[i]["title"] for i in FIT_ARTICLES],
        "relevance_sets": "relevance (question vs own paragraph / hard-negative paragraph of the article)",
        "support_sets": "support-swap (answer sentence vs own / most similar other paragraph) + "
        "support-perturbed (answer clause vs the same with a number/name/negation changed) + "
        "support-qa (question + gold answer vs question + another question's answer)",
        "built_by": "benchmarks/scorers.py --fit",
        "sizes": {name: len(fit_sets[name]) for name in SETS},
    }
    names = {"embedding": "embedding-minilm", "lexical": "lexical-default", "combined": "combined-default"}
    weights: dict[str, ScorerWeights] = {}
    if args.fit:
        rel_rows, rel_y = union("fit", "relevance")
        sup_rows, sup_y = union("fit", "support")
        weights["embedding"] = fit_weights_from_rows(
            scorer="embedding:minilm",
            relevance=(strip_prefix(rel_rows, "emb"), rel_y),
            support=(strip_prefix(sup_rows, "emb"), sup_y),
            relevance_features=["max_cos"],
            support_features=["max_cos"],
            kind="platt",
            training=training,
        )
        weights["lexical"] = fit_weights_from_rows(
            scorer="lexical",
            relevance=(strip_prefix(rel_rows, "lex"), rel_y),
            support=(strip_prefix(sup_rows, "lex"), sup_y),
            relevance_features=lexmod.RELEVANCE_FEATURES,
            support_features=lexmod.SUPPORT_FEATURES,
            l2=args.l2,
            training=training,
        )
        weights["combined"] = fit_weights_from_rows(
            scorer="combined",
            relevance=(rel_rows, rel_y),
            support=(sup_rows, sup_y),
            l2=args.l2,
            component_names={"emb": "embedding:minilm", "lex": "lexical"},
            training=training,
        )
    else:
        for key, stem in names.items():
            weights[key] = ScorerWeights.load(WEIGHTS_DIR / f"{stem}.json")

    # per-label-set thresholds chosen on the fit articles, stored with the weights
    results: dict[str, dict[str, Any]] = {name: {} for name in SETS}
    for key in ("embedding", "lexical", "combined"):
        thresholds = dict(weights[key].thresholds)
        for name, task in SETS.items():
            p_fit = scorer_p(key, weights[key], task, rows[("fit", name)])
            p_rep = scorer_p(key, weights[key], task, rows[("report", name)])
            m = metrics(p_fit, labels("fit", name), p_rep, labels("report", name))
            results[name][key] = {"n": len(p_rep), **m}
            thresholds[name] = m["threshold"]
            if name == "support-perturbed":
                kinds = [p.kind for p in rep_sets[name]]
                y = labels("report", name)
                results[name][key]["auc_by_kind"] = {
                    k: round(
                        roc_auc(
                            p_rep[[i for i, kk in enumerate(kinds) if kk in (k, "own")]],
                            y[[i for i, kk in enumerate(kinds) if kk in (k, "own")]],
                        ),
                        4,
                    )
                    for k in ("number", "entity", "negation")
                }
        weights[key] = dataclasses.replace(weights[key], thresholds=thresholds)
        if args.fit:
            path = weights[key].save(WEIGHTS_DIR / f"{names[key]}.json")
            print(f"wrote {path.relative_to(REPO)} (id {weights[key].id})", flush=True)

    # consistency: the real scorers, loaded from the saved weights, give the same p as above
    if args.fit:
        from ragloop.models.scoring import make_scorer

        check = {
            "embedding": make_scorer("embedding:minilm", settings),
            "lexical": make_scorer("lexical", settings),
            "combined": make_scorer("combined:default", settings),
        }
        for key, scorer in check.items():
            sample = rep_sets["support-perturbed"][:16]
            got = [j.p for j in await scorer.support([p.a for p in sample], [p.b for p in sample])]
            want = scorer_p(key, weights[key], "support", rows[("report", "support-perturbed")][:16])
            assert np.allclose(got, want, atol=1e-9), (key, got, want)

    # speed: a fresh embedding cache holding only the passages/contexts (the graph's chunks were
    # embedded at ingest, so their vectors are cache hits); queries, claims and strips embed cold
    raw_embedder = OnnxMiniLMEmbedder(threads=args.threads)

    def timed_scorer(key: str, embedder: CachedEmbedder) -> Scorer:
        if key == "embedding":
            return EmbeddingScorer(embedder, weights["embedding"])
        if key == "lexical":
            return LexicalScorer(weights["lexical"])
        return CombinedScorer(weights["combined"], {"emb": EmbeddingScorer(embedder), "lex": LexicalScorer()})

    for name, task in SETS.items():
        pairs = rep_sets[name][: args.timing_pairs]
        for key in ("embedding", "lexical", "combined"):
            with tempfile.TemporaryDirectory() as tmp:
                embedder = CachedEmbedder(raw_embedder, Path(tmp) / "embeddings.sqlite")
                embedder.embed(sorted({p.b.strip() for p in pairs}))
                rate = await timing(timed_scorer(key, embedder), task, pairs)
                embedder.close()
            results[name][key]["pairs_per_s"] = round(rate, 1)
            print(f"timing {name}/{key}: {results[name][key]['pairs_per_s']} pairs/s", flush=True)

    # LLM on a sample
    llm_section: dict[str, Any] = {}
    if args.llm_sample > 0:
        rng = random.Random(SEED)
        llm_settings = Settings(home=BENCH_HOME, threads=args.llm_threads)
        inner = make_chat_model(args.llm, llm_settings)
        recorder = Recorder(wrap(inner, settings=llm_settings, cache=True, cache_ttl_s=None, max_attempts=1))
        llm = LLMScorer(recorder, weights=ScorerWeights(scorer="uncalibrated"))
        fit_z: dict[str, np.ndarray] = {}
        rep_z: dict[str, np.ndarray] = {}
        fit_s: dict[str, list[Pair]] = {}
        rep_s: dict[str, list[Pair]] = {}
        limits = dict(parse_limit(v) for v in args.llm_limit)
        for name in SETS:
            fit_s[name] = balanced_sample(fit_sets[name], args.llm_fit_sample, rng)
            rep_s[name] = balanced_sample(rep_sets[name], args.llm_sample, rng)
            if name in limits:  # truncate the (shuffled) draws: the random sequence stays the same
                rep_s[name] = rep_s[name][: limits[name][0]]
                fit_s[name] = fit_s[name][: limits[name][1]]
        t_llm = time.perf_counter()
        for name, task in SETS.items():
            fit_z[name] = await llm_scores(llm, task, fit_s[name], f"fit/{name}")
            rep_z[name] = await llm_scores(llm, task, rep_s[name], f"report/{name}")
        wall = time.perf_counter() - t_llm
        calib: dict[str, Any] = {}
        for task in ("relevance", "support"):
            z = np.concatenate([fit_z[n] for n in FIT_ON[task]])
            y = np.concatenate([[p.label for p in fit_s[n]] for n in FIT_ON[task]])
            ok = np.isfinite(z)
            calib[task] = fit_platt(z[ok], y[ok], "logit_p_yes")
        llm_weights = ScorerWeights(
            scorer=f"llm:{args.llm}",
            relevance=calib["relevance"],
            support=calib["support"],
            training={
                **training,
                "sizes": {n: len(fit_s[n]) for n in SETS},
                "sample": f"balanced random sample of up to {args.llm_fit_sample} pairs per label set (seed {SEED})",
            },
        )
        thresholds = {}
        llm_rows: dict[str, dict[str, Any]] = {}
        for name, task in SETS.items():
            model = llm_weights.relevance if task == "relevance" else llm_weights.support
            assert model is not None
            pf = model.predict_rows([{"logit_p_yes": float(v)} for v in fit_z[name]])
            pr = model.predict_rows([{"logit_p_yes": float(v)} for v in rep_z[name]])
            yf = np.array([p.label for p in fit_s[name]])
            yr = np.array([p.label for p in rep_s[name]])
            m = metrics(pf, yf, pr, yr)
            thresholds[name] = m["threshold"]
            raw_yes = float(np.mean(1 / (1 + np.exp(-rep_z[name])) >= 0.5))
            llm_rows[name] = {"n": len(pr), **m, "raw_yes_rate_at_0.5": round(raw_yes, 4)}
            # the other scorers on exactly the same sample
            same: dict[str, Any] = {}
            idx = {id(p): i for i, p in enumerate(rep_sets[name])}
            fidx = {id(p): i for i, p in enumerate(fit_sets[name])}
            for key in ("embedding", "lexical", "combined"):
                pr_all = scorer_p(key, weights[key], task, [rows[("report", name)][idx[id(p)]] for p in rep_s[name]])
                pf_all = scorer_p(key, weights[key], task, [rows[("fit", name)][fidx[id(p)]] for p in fit_s[name]])
                same[key] = metrics(pf_all, yf, pr_all, yr)
            llm_rows[name]["same_sample"] = same
        for task in ("relevance", "support"):  # one threshold per question, on its fitting sets
            model = llm_weights.relevance if task == "relevance" else llm_weights.support
            assert model is not None
            z = np.concatenate([fit_z[n] for n in FIT_ON[task]])
            y = np.concatenate([[p.label for p in fit_s[n]] for n in FIT_ON[task]])
            ok = np.isfinite(z)
            p_fit = model.predict_rows([{"logit_p_yes": float(v)} for v in z[ok]])
            thresholds[task] = round(best_threshold(p_fit, y[ok])[0], 6)
        llm_weights = dataclasses.replace(llm_weights, thresholds=thresholds)
        lat = np.asarray(recorder.latencies_ms)
        pairs_per_s = round(len(lat) / (lat.sum() / 1000.0), 3) if len(lat) else float("nan")
        for name in SETS:
            llm_rows[name]["pairs_per_s"] = pairs_per_s
            results[name]["llm"] = llm_rows[name]
        llm_section = {
            "model": args.llm,
            "requests": len(lat),
            "cached_responses": recorder.cached,
            "latency_ms": {
                "p50": round(float(np.percentile(lat, 50)), 1),
                "p95": round(float(np.percentile(lat, 95)), 1),
            },
            "wall_s_this_run": round(wall, 1),
            "stats": llm_scorer_stats(),
            "weights_id": llm_weights.id,
        }
        if args.fit:
            path = llm_weights.save(WEIGHTS_DIR / f"{weights_name(args.llm)}.json")
            print(f"wrote {path.relative_to(REPO)} (id {llm_weights.id})", flush=True)
        await recorder.aclose()

    # tables
    md = [
        "# Scorers on SQuAD 2.0 dev (report articles 6-11; fitted on articles 0-5)\n",
        f"Command: `{args.command}`  \n"
        f"Threads: {args.threads} (embedder), {args.llm_threads} (llm); machine: {machine()}\n",
    ]
    headers = ["label set", "scorer", "n", "ROC AUC", "accuracy", "threshold", "acc@p>=0.5", "pairs/s"]
    table = []
    for name in SETS:
        for key in ("embedding", "lexical", "combined", "llm"):
            r = results[name].get(key)
            if r is None:
                continue
            label = key if key != "llm" else f"llm ({args.llm}, sample)"
            table.append(
                [name, label, r["n"], r["auc"], r["accuracy"], r["threshold"], r["accuracy_at_0.5"], r["pairs_per_s"]]
            )
    md.append(print_table("All report pairs (llm: a balanced random sample)", headers, table))
    if args.llm_sample > 0:
        headers2 = [
            "label set",
            "n",
            "embedding AUC",
            "lexical AUC",
            "combined AUC",
            "llm AUC",
            "embedding acc",
            "lexical acc",
            "combined acc",
            "llm acc",
            "llm raw yes-rate@0.5",
        ]
        rows2 = []
        for name in SETS:
            r = results[name]["llm"]
            s = r["same_sample"]
            rows2.append(
                [
                    name,
                    r["n"],
                    s["embedding"]["auc"],
                    s["lexical"]["auc"],
                    s["combined"]["auc"],
                    r["auc"],
                    s["embedding"]["accuracy"],
                    s["lexical"]["accuracy"],
                    s["combined"]["accuracy"],
                    r["accuracy"],
                    r["raw_yes_rate_at_0.5"],
                ]
            )
        md.append(
            print_table(
                "Same LLM sample, like for like (thresholds from the LLM's fit-article sample of each set: "
                + ", ".join(f"{n} {len(fit_s[n])}" for n in SETS)
                + ")",
                headers2,
                rows2,
            )
        )
    kinds_rows = []
    for key in ("embedding", "lexical", "combined"):
        k = results["support-perturbed"][key]["auc_by_kind"]
        kinds_rows.append([key, k["number"], k["entity"], k["negation"]])
    md.append(
        print_table(
            "support-perturbed: ROC AUC by perturbation (own clause vs that kind)",
            ["scorer", "number", "entity", "negation"],
            kinds_rows,
        )
    )
    md.append(
        "Weights: "
        + ", ".join(f"`{names[k]}` id `{weights[k].id}`" for k in names)
        + (f", `{weights_name(args.llm)}` id `{llm_section['weights_id']}`" if llm_section else "")
        + "\n\nLabel sets and metrics: see the docstring of `benchmarks/scorers.py`. Accuracy uses the "
        "threshold that maximised accuracy on the same label set of the fit articles; acc@p>=0.5 checks "
        "the calibration (relevance models are fitted on the relevance set only, support models on the three "
        "support sets together). pairs/s: embedding/combined with the passages already in the "
        "embedding cache (as chunks are after ingest) and queries, claims and strips embedded cold; "
        "relevance 1 query x its passages per call, support 8 pairs per call. The llm from model latency, "
        "1 request per pair, 2 llama.cpp threads on a shared, overloaded 2-core machine (load average "
        "~10): `local_models.md` shows 1 thread is faster there.\n"
    )
    payload = {
        "command": args.command,
        "threads": args.threads,
        "machine": machine(),
        "sizes": sizes,
        "results": results,
        "llm": llm_section,
        "weights": {k: weights[k].to_dict() for k in names},
        "peak_rss_mb": peak_rss_mb(),
    }
    write_results("scorers", payload, "\n".join(md))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit", action="store_true", help="fit and write the shipped weights")
    ap.add_argument("--llm", default="local:qwen2.5-coder-1.5b")
    ap.add_argument("--llm-sample", type=int, default=60, help="report pairs per label set for the LLM (0: skip)")
    ap.add_argument("--llm-fit-sample", type=int, default=40, help="fit-article pairs per label set for the LLM")
    ap.add_argument(
        "--llm-limit",
        action="append",
        default=[],
        metavar="SET=REPORT/FIT",
        help="fewer LLM pairs for one label set (the first of the usual draws), e.g. support-qa=30/20",
    )
    ap.add_argument("--timing-pairs", type=int, default=150)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("RAGLOOP_THREADS", "2")))
    ap.add_argument("--llm-threads", type=int, default=2)
    ap.add_argument("--l2", type=float, default=1.0)
    args = ap.parse_args()
    args.command = " ".join(["python benchmarks/scorers.py", *sys.argv[1:]])
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
