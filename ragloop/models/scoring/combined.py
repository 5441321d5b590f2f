"""`combined:` scorer: the features of several scorers -> a logistic model fitted on labelled pairs.

The components are named by feature prefix (`emb` -> `embedding:minilm`, `lex` -> `lexical`,
optionally `llm` -> `llm:...`); a row's features are the components' `Judgement.features`
under those prefixes (`emb.max_cos`, `lex.cov`, ...). `fit_combined(components, relevance=(pairs,
labels), support=(pairs, labels))` returns `CombinedWeights` (feature names, standardisation,
weights, thresholds, training description and AUC); `save()` writes them as JSON whose `id`
hashes the parameters, so a pipeline version names the exact weights (`combined:<id>`).
`combined:default` loads the shipped `weights/combined-default.json`.

`fit_weights` is the same machinery for one scorer's own calibration (Platt for `embedding:`,
a logistic model over its features for `lexical:`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from ragloop.models.scoring.base import Judgement, Scorer
from ragloop.models.scoring.calibration import (
    LogisticModel,
    ScorerWeights,
    best_threshold,
    fit_platt,
    roc_auc,
)

CombinedWeights = ScorerWeights
Task = Literal["relevance", "support"]
Pairs = Sequence[tuple[str, str]]
LabelledPairs = tuple[Pairs, Sequence[int]]

# Bookkeeping features that describe the run, not the pair: never model inputs.
EXCLUDED_FEATURES = frozenset({"llm_failed", "llm_verdict", "p_yes_raw"})


def _key(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


async def component_judgements(
    components: Mapping[str, Scorer], task: Task, pairs: Pairs, *, batch: int = 64
) -> list[tuple[dict[str, float], str]]:
    """Each pair's merged, prefixed features and the first component's evidence.

    Relevance pairs are grouped by query (one `relevance()` call per distinct query, in first-seen
    order); support pairs go `batch` at a time. Components run concurrently.
    """
    if not components:
        raise ValueError("no components")
    names = list(components)
    out: list[tuple[dict[str, float], str]] = [({}, "")] * len(pairs)
    groups: list[list[int]] = []
    if task == "relevance":
        by_query: dict[str, list[int]] = {}
        for i, (q, _) in enumerate(pairs):
            by_query.setdefault(q, []).append(i)
        groups = list(by_query.values())
    else:
        groups = [list(range(s, min(s + batch, len(pairs)))) for s in range(0, len(pairs), batch)]
    for idx in groups:
        if task == "relevance":
            query = pairs[idx[0]][0]
            passages = [pairs[i][1] for i in idx]
            results = await asyncio.gather(*(components[n].relevance(query, passages) for n in names))
        else:
            claims = [pairs[i][0] for i in idx]
            contexts = [pairs[i][1] for i in idx]
            results = await asyncio.gather(*(components[n].support(claims, contexts) for n in names))
        for row, i in enumerate(idx):
            feats: dict[str, float] = {}
            evidence = ""
            for n, judgements in zip(names, results, strict=True):
                j: Judgement = judgements[row]
                feats.update({_key(n, k): float(v) for k, v in j.features.items()})
                evidence = evidence or j.evidence
            out[i] = (feats, evidence)
    return out


def _fit_one(
    rows: list[dict[str, float]],
    labels: Sequence[int],
    features: Sequence[str] | None,
    kind: Literal["logistic", "platt"],
    l2: float,
) -> tuple[LogisticModel, dict[str, Any], float]:
    y = np.asarray(labels, dtype=np.int64)
    if len(rows) != len(y):
        raise ValueError(f"{len(rows)} pairs but {len(y)} labels")
    if len(set(y.tolist())) < 2:
        raise ValueError("labels must contain both classes")
    if features is None:
        names = sorted({k for r in rows for k in r if k.rsplit(".", 1)[-1] not in EXCLUDED_FEATURES})
    else:
        names = list(features)
    if kind == "platt":
        if len(names) != 1:
            raise ValueError(f"Platt scaling takes exactly one feature, got {names}")
        model = fit_platt([r.get(names[0], 0.0) for r in rows], y, names[0])
    else:
        X = np.array([[r.get(n, np.nan) for n in names] for r in rows], dtype=np.float64)
        X[~np.isfinite(X)] = np.nan
        present = ~np.isnan(X)
        col_means = np.where(present, X, 0.0).sum(axis=0) / np.maximum(present.sum(axis=0), 1)
        X = np.where(present, X, col_means)  # a missing feature counts as its mean, as at predict time
        model = LogisticModel.fit(X, y, names, l2=l2)
    p = model.predict_rows(rows)
    threshold, acc = best_threshold(p, y)
    info = {
        "n": len(y),
        "positives": int(y.sum()),
        "auc": round(roc_auc(p, y), 4),
        "accuracy_at_threshold": round(acc, 4),
    }
    return model, info, threshold


Rows = Sequence[Mapping[str, float]]


def fit_weights_from_rows(
    *,
    scorer: str,
    relevance: tuple[Rows, Sequence[int]] | None = None,
    support: tuple[Rows, Sequence[int]] | None = None,
    relevance_features: Sequence[str] | None = None,
    support_features: Sequence[str] | None = None,
    kind: Literal["logistic", "platt"] = "logistic",
    l2: float = 1.0,
    component_names: Mapping[str, str] | None = None,
    training: Mapping[str, Any] | None = None,
) -> ScorerWeights:
    """`fit_weights` on precomputed feature rows (as `component_judgements` returns them)."""
    if relevance is None and support is None:
        raise ValueError("nothing to fit: give relevance and/or support pairs")
    models: dict[str, LogisticModel | None] = {"relevance": None, "support": None}
    thresholds: dict[str, float] = {}
    info: dict[str, Any] = dict(training or {})
    for task, data, feats in (
        ("relevance", relevance, relevance_features),
        ("support", support, support_features),
    ):
        if data is None:
            continue
        rows, labels = data
        model, stats, threshold = _fit_one([dict(r) for r in rows], labels, feats, kind, l2)
        models[task] = model
        thresholds[task] = round(threshold, 6)
        info[f"{task}_fit"] = stats
    return ScorerWeights(
        scorer=scorer,
        relevance=models["relevance"],
        support=models["support"],
        components=dict(component_names or {}),
        thresholds=thresholds,
        training=info,
    )


async def fit_weights(
    components: Mapping[str, Scorer],
    *,
    scorer: str,
    relevance: LabelledPairs | None = None,
    support: LabelledPairs | None = None,
    relevance_features: Sequence[str] | None = None,
    support_features: Sequence[str] | None = None,
    kind: Literal["logistic", "platt"] = "logistic",
    l2: float = 1.0,
    component_names: Mapping[str, str] | None = None,
    training: Mapping[str, Any] | None = None,
) -> ScorerWeights:
    """Fit a scorer's relevance and/or support model on labelled pairs (label 1 = relevant /
    supported), reading the features of `components` (prefix -> scorer; prefix "" for a
    scorer's own features). Features default to every component feature (bookkeeping ones
    excluded). `kind="platt"` fits one feature by Platt scaling."""
    rel_rows = sup_rows = None
    if relevance is not None:
        judged = await component_judgements(components, "relevance", relevance[0])
        rel_rows = ([f for f, _ in judged], relevance[1])
    if support is not None:
        judged = await component_judgements(components, "support", support[0])
        sup_rows = ([f for f, _ in judged], support[1])
    return fit_weights_from_rows(
        scorer=scorer,
        relevance=rel_rows,
        support=sup_rows,
        relevance_features=relevance_features,
        support_features=support_features,
        kind=kind,
        l2=l2,
        component_names=component_names,
        training=training,
    )


async def fit_combined(
    components: Mapping[str, Scorer],
    *,
    relevance: LabelledPairs | None = None,
    support: LabelledPairs | None = None,
    l2: float = 1.0,
    training: Mapping[str, Any] | None = None,
) -> CombinedWeights:
    """Fit the combined scorer: `components` maps feature prefixes to scorers, e.g.
    `{"emb": make_scorer("embedding:minilm"), "lex": make_scorer("lexical")}`."""
    return await fit_weights(
        components,
        scorer="combined",
        relevance=relevance,
        support=support,
        kind="logistic",
        l2=l2,
        component_names={prefix: s.name for prefix, s in components.items()},
        training=training,
    )


class CombinedScorer(Scorer):
    def __init__(self, weights: CombinedWeights, components: Mapping[str, Scorer], *, name: str = "") -> None:
        needed = {
            f.split(".", 1)[0]
            for m in (weights.relevance, weights.support)
            if m is not None
            for f in m.feature_names
            if "." in f
        }
        missing = sorted(needed - set(components))
        if missing:
            raise ValueError(f"the combined weights {weights.id} read components {missing} that were not given")
        self.weights = weights
        self.components = dict(components)
        self.name = name or f"combined:{weights.id}"

    async def _score(self, task: Task, pairs: Pairs) -> list[Judgement]:
        model = self.weights.relevance if task == "relevance" else self.weights.support
        if model is None:
            raise ValueError(f"the combined weights {self.weights.id} have no {task} model")
        judged = await component_judgements(self.components, task, pairs, batch=max(1, len(pairs)))
        ps = model.predict_rows([f for f, _ in judged])
        return [Judgement(float(p), ev, f) for p, (f, ev) in zip(ps, judged, strict=True)]

    async def relevance(self, query: str, passages: Sequence[str]) -> list[Judgement]:
        if not passages:
            return []
        return await self._score("relevance", [(query, p) for p in passages])

    async def support(self, claims: Sequence[str], contexts: Sequence[str]) -> list[Judgement]:
        if len(claims) != len(contexts):
            raise ValueError(f"support() is pairwise: {len(claims)} claims vs {len(contexts)} contexts")
        if not claims:
            return []
        return await self._score("support", list(zip(claims, contexts, strict=True)))
