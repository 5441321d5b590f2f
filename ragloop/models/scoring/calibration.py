"""Small numpy fitting for scorers: logistic regression (Newton/IRLS, L2), Platt scaling, ROC AUC,
accuracy-maximising thresholds, and the JSON weights files scorers ship with.

No scikit-learn: a scorer's model has a handful of features, and Newton's method converges in
a few iterations on that. A fitted model is a `LogisticModel` (feature names, standardisation,
weights, bias); Platt scaling is the one-feature case without standardisation
(`p = sigmoid(a * x + b)`).

`ScorerWeights` bundles a scorer's two models (relevance and support) with what they were
trained on. Its `id` is a hash of the parameters only (not of the free-text training
description), so a pipeline version can name the exact weights it used, and a file whose
parameters were edited by hand no longer loads under its old id.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = "ragloop.scorer-weights/1"


class WeightsError(ValueError):
    """A weights file is malformed or its content does not match its id."""


# --- elementary functions -------------------------------------------------------------------------


def sigmoid(z: np.ndarray | float) -> np.ndarray:
    """Numerically stable logistic function (no overflow warnings for large |z|)."""
    z = np.asarray(z, dtype=np.float64)
    out = np.empty_like(z)
    pos = z >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
    ez = np.exp(z[~pos])
    out[~pos] = ez / (1.0 + ez)
    return out


def logit(p: np.ndarray | float, eps: float = 1e-6) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), eps, 1.0 - eps)
    return np.log(p) - np.log1p(-p)


def fit_logistic(
    X: np.ndarray,
    y: np.ndarray,
    *,
    l2: float = 1.0,
    sample_weight: np.ndarray | None = None,
    max_iter: int = 100,
    tol: float = 1e-9,
) -> tuple[np.ndarray, float]:
    """Minimise `sum_i w_i * logloss_i + l2/2 * |weights|^2` (the intercept is not penalised)
    by Newton's method (iteratively reweighted least squares) with step halving.

    `y` may hold soft targets in [0, 1] (Platt's smoothed labels). Returns (weights, bias).
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if X.ndim != 2 or len(X) != len(y):
        raise ValueError(f"X must be [n, d] with n == len(y); got {X.shape} and {y.shape}")
    if len(y) == 0:
        raise ValueError("cannot fit on zero examples")
    if np.any((y < 0) | (y > 1)):
        raise ValueError("targets must lie in [0, 1]")
    n, d = X.shape
    w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    A = np.hstack([X, np.ones((n, 1))])
    pen = np.full(d + 1, float(l2))
    pen[-1] = 0.0
    beta = np.zeros(d + 1)

    def loss(b: np.ndarray) -> float:
        z = A @ b
        # logloss = log(1 + e^z) - y z, computed stably
        ll = np.logaddexp(0.0, z) - y * z
        return float(np.sum(w * ll) + 0.5 * np.sum(pen * b * b))

    current = loss(beta)
    for _ in range(max_iter):
        p = sigmoid(A @ beta)
        grad = A.T @ (w * (p - y)) + pen * beta
        h = w * p * (1.0 - p)
        H = (A.T * h) @ A + np.diag(pen) + 1e-10 * np.eye(d + 1)
        try:
            step = np.linalg.solve(H, grad)
        except np.linalg.LinAlgError:
            step = np.linalg.lstsq(H, grad, rcond=None)[0]
        t = 1.0
        while True:
            candidate = beta - t * step
            new = loss(candidate)
            if new <= current + 1e-12 or t < 1e-6:
                break
            t *= 0.5
        beta, previous, current = candidate, current, new
        if np.max(np.abs(t * step)) < tol or abs(previous - current) < tol * max(1.0, abs(current)):
            break
    return beta[:-1].copy(), float(beta[-1])


# --- models -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogisticModel:
    """`p = sigmoid(bias + sum_j weights_j * (x_j - means_j) / stds_j)` over named features.

    A feature missing from a row counts as its training mean (contributes nothing).
    """

    feature_names: tuple[str, ...]
    weights: tuple[float, ...]
    bias: float
    means: tuple[float, ...]
    stds: tuple[float, ...]

    def __post_init__(self) -> None:
        d = len(self.feature_names)
        if not (len(self.weights) == len(self.means) == len(self.stds) == d):
            raise WeightsError("feature_names, weights, means and stds must have the same length")

    @classmethod
    def fit(
        cls,
        X: np.ndarray,
        y: Sequence[int] | np.ndarray,
        feature_names: Sequence[str],
        *,
        l2: float = 1.0,
        standardise: bool = True,
        sample_weight: np.ndarray | None = None,
    ) -> LogisticModel:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != len(feature_names):
            raise ValueError(f"X has shape {X.shape}; expected {len(feature_names)} columns")
        if standardise:
            means = X.mean(axis=0)
            stds = X.std(axis=0)
            stds[stds < 1e-12] = 1.0
        else:
            means = np.zeros(X.shape[1])
            stds = np.ones(X.shape[1])
        coef, bias = fit_logistic((X - means) / stds, np.asarray(y), l2=l2, sample_weight=sample_weight)
        return cls(
            feature_names=tuple(feature_names),
            weights=tuple(float(c) for c in coef),
            bias=bias,
            means=tuple(float(m) for m in means),
            stds=tuple(float(s) for s in stds),
        )

    def matrix(self, rows: Sequence[Mapping[str, float]]) -> np.ndarray:
        X = np.empty((len(rows), len(self.feature_names)))
        for i, row in enumerate(rows):
            for j, name in enumerate(self.feature_names):
                v = row.get(name)
                X[i, j] = self.means[j] if v is None or not math.isfinite(v) else v
        return X

    def decision(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        z = (X - np.asarray(self.means)) / np.asarray(self.stds)
        return np.asarray(z @ np.asarray(self.weights) + self.bias, dtype=np.float64)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return sigmoid(self.decision(X))

    def predict_rows(self, rows: Sequence[Mapping[str, float]]) -> np.ndarray:
        if not rows:
            return np.zeros(0)
        return self.predict_proba(self.matrix(rows))

    def predict(self, row: Mapping[str, float]) -> float:
        return float(self.predict_rows([row])[0])

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "logistic",
            "feature_names": list(self.feature_names),
            "weights": list(self.weights),
            "bias": self.bias,
            "means": list(self.means),
            "stds": list(self.stds),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LogisticModel:
        if d.get("type") != "logistic":
            raise WeightsError(f"not a logistic model: type={d.get('type')!r}")
        try:
            return cls(
                feature_names=tuple(str(f) for f in d["feature_names"]),
                weights=tuple(float(v) for v in d["weights"]),
                bias=float(d["bias"]),
                means=tuple(float(v) for v in d["means"]),
                stds=tuple(float(v) for v in d["stds"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise WeightsError(f"malformed logistic model: {exc}") from exc


def platt(feature: str, a: float, b: float) -> LogisticModel:
    """Platt scaling as a model: `p = sigmoid(a * row[feature] + b)`."""
    return LogisticModel((feature,), (float(a),), float(b), (0.0,), (1.0,))


def fit_platt(
    scores: Sequence[float] | np.ndarray,
    labels: Sequence[int] | np.ndarray,
    feature: str,
    *,
    l2: float = 1e-3,
) -> LogisticModel:
    """Platt (1999): a one-feature logistic fit on smoothed targets (N+ + 1)/(N+ + 2) and
    1/(N- + 2), which keeps the map from saturating on small or separable data."""
    x = np.asarray(scores, dtype=np.float64).reshape(-1, 1)
    y = np.asarray(labels, dtype=np.float64)
    n_pos = float(np.sum(y > 0.5))
    n_neg = float(len(y) - n_pos)
    soft = np.where(y > 0.5, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
    coef, bias = fit_logistic(x, soft, l2=l2)
    return platt(feature, float(coef[0]), bias)


# --- evaluation --------------------------------------------------------------------------------------


def roc_auc(scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray) -> float:
    """Area under the ROC curve = P(score of a random positive > a random negative), ties
    counting one half (Mann-Whitney U with average ranks). NaN when a class is missing."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels).astype(bool)
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    sorted_s = s[order]
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0  # average 1-based rank of the tie group
        i = j + 1
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def accuracy(scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray, threshold: float) -> float:
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels).astype(bool)
    return float(np.mean((s >= threshold) == y)) if len(s) else float("nan")


def best_threshold(scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray) -> tuple[float, float]:
    """The threshold t maximising accuracy of `score >= t`, and that accuracy. t is a midpoint
    between adjacent distinct scores (or just outside the range), so it generalises sensibly."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels).astype(bool)
    if len(s) == 0:
        raise ValueError("no scores")
    uniq = np.unique(s)
    candidates = np.concatenate(
        [[uniq[0] - 1e-6], (uniq[:-1] + uniq[1:]) / 2.0 if len(uniq) > 1 else [], [uniq[-1] + 1e-6]]
    )
    # accuracy(t) = (#pos with s >= t + #neg with s < t) / n, via sorted cumulative counts
    pos_sorted = np.sort(s[y])
    neg_sorted = np.sort(s[~y])
    tp = len(pos_sorted) - np.searchsorted(pos_sorted, candidates, side="left")
    tn = np.searchsorted(neg_sorted, candidates, side="left")
    acc = (tp + tn) / len(s)
    best = int(np.argmax(acc))
    return float(candidates[best]), float(acc[best])


# --- weights files -----------------------------------------------------------------------------------


def content_id(params: Mapping[str, Any], prefix: str = "") -> str:
    """12 hex characters of sha256 over canonical JSON (floats rounded to 12 significant
    digits, so a JSON round trip never changes the id)."""

    def canon(v: Any) -> Any:
        if isinstance(v, float):
            return float(f"{v:.12g}")
        if isinstance(v, Mapping):
            return {str(k): canon(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [canon(x) for x in v]
        return v

    blob = json.dumps(canon(params), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(blob.encode()).hexdigest()[:12]
    return f"{prefix}{digest}"


@dataclass(frozen=True)
class ScorerWeights:
    """A scorer's fitted models for its two questions, plus provenance.

    `components` names the scorers whose features the models read, by feature prefix (the
    combined scorer: {"emb": "embedding:minilm", "lex": "lexical"}). `thresholds` are decision
    thresholds on `p` chosen on the training data (per label set), for callers that need a
    yes/no. `training` describes the data (free text and numbers; not part of the id).
    """

    scorer: str
    relevance: LogisticModel | None = None
    support: LogisticModel | None = None
    components: dict[str, str] = field(default_factory=dict)
    thresholds: dict[str, float] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)

    def params(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "scorer": self.scorer,
            "components": dict(sorted(self.components.items())),
            "relevance": self.relevance.to_dict() if self.relevance else None,
            "support": self.support.to_dict() if self.support else None,
            "thresholds": dict(sorted(self.thresholds.items())),
        }

    @property
    def id(self) -> str:
        return content_id(self.params())

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, **self.params(), "training": self.training}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, verify: bool = True) -> ScorerWeights:
        if d.get("format") != FORMAT:
            raise WeightsError(f"unknown weights format {d.get('format')!r}; expected {FORMAT!r}")
        rel = d.get("relevance")
        sup = d.get("support")
        out = cls(
            scorer=str(d.get("scorer", "")),
            relevance=LogisticModel.from_dict(rel) if rel else None,
            support=LogisticModel.from_dict(sup) if sup else None,
            components={str(k): str(v) for k, v in (d.get("components") or {}).items()},
            thresholds={str(k): float(v) for k, v in (d.get("thresholds") or {}).items()},
            training=dict(d.get("training") or {}),
        )
        stored = d.get("id")
        if verify and stored is not None and stored != out.id:
            raise WeightsError(
                f"weights id mismatch: the file says {stored!r} but its parameters hash to {out.id!r} "
                "(edited by hand? refit and save instead)"
            )
        return out

    def save(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: Path) -> ScorerWeights:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise WeightsError(f"cannot read scorer weights {path}: {exc}") from exc
        return cls.from_dict(data)


def shipped_weights_dir() -> Path:
    return Path(str(resources.files("ragloop.models.scoring") / "weights"))


def shipped_weights(name: str) -> ScorerWeights | None:
    """`weights/<name>.json` from the package, or None when it is not shipped."""
    path = shipped_weights_dir() / f"{name}.json"
    return ScorerWeights.load(path) if path.is_file() else None


def find_weights(ref: str, search: Sequence[Path] = ()) -> ScorerWeights | None:
    """Weights by file stem (`combined-default`), by id, or by path, in the shipped directory
    and then the `search` directories."""
    as_path = Path(ref)
    if ref.endswith(".json") and as_path.is_file():
        return ScorerWeights.load(as_path)
    for folder in (shipped_weights_dir(), *search):
        if not folder.is_dir():
            continue
        direct = folder / f"{ref}.json"
        if direct.is_file():
            return ScorerWeights.load(direct)
        for path in sorted(folder.glob("*.json")):
            try:
                w = ScorerWeights.load(path)
            except WeightsError:
                continue
            if w.id == ref:
                return w
    return None
