"""Scorers: "does this passage answer this query?" and "is this claim supported by this context?",
each a calibrated probability with the evidence, batch-first. Built by name:

    from ragloop.models.scoring import make_scorer
    scorer = make_scorer("combined:default", settings)
    judgements = await scorer.relevance(query, passages)    # one call for the whole list

Names (`"provider:name"`):
- `embedding:minilm` (= `embedding:onnx:all-minilm-l6-v2`), or `embedding:<embedder name>`:
  sentence-level max cosine, Platt-calibrated (shipped calibration for MiniLM only).
- `lexical` / `lexical:default` (shipped weights), `lexical:<weights id or .json path>`.
- `llm:<chat model name>`, e.g. `llm:local:qwen2.5-coder-1.5b` (or pass `chat_model=`, e.g. a
  wrapped/cached one): calibrated P(yes); failures fall back to lexical, counted.
- `combined:default` (shipped), `combined:<weights id>` (shipped or under
  `RAGLOOP_HOME/scorers/`), `combined:<path.json>`.
- `test:fixed-<p>`: always `p`; `FunctionScorer(fn)` for tests of the layers above.

`p` is calibrated (Platt / logistic on labelled SQuAD 2.0 pairs, `benchmarks/scorers.py --fit`),
so 0.5 is a sensible default boundary; `scorer.weights.thresholds` holds the accuracy-maximising
threshold per benchmark label set (`relevance`, `refine`, `answerability`, `support-*`) for
callers that want the measured one.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from ragloop.config.settings import Settings
from ragloop.models.chat.base import ChatModel
from ragloop.models.chat.calllog import CallSink
from ragloop.models.errors import UnknownModelError
from ragloop.models.scoring.base import Judgement, Scorer
from ragloop.models.scoring.calibration import (
    LogisticModel,
    ScorerWeights,
    WeightsError,
    accuracy,
    best_threshold,
    find_weights,
    fit_logistic,
    fit_platt,
    platt,
    roc_auc,
    shipped_weights,
    shipped_weights_dir,
)
from ragloop.models.scoring.combined import (
    CombinedScorer,
    CombinedWeights,
    component_judgements,
    fit_combined,
    fit_weights,
    fit_weights_from_rows,
)
from ragloop.models.scoring.embedding import EmbeddingScorer, passage_strips
from ragloop.models.scoring.lexical import LexicalScorer
from ragloop.models.scoring.llm import LLMScorer, Verdict, llm_scorer_stats, reset_llm_scorer_stats
from ragloop.models.scoring.reader import SHIPPED as READER_SHIPPED
from ragloop.models.scoring.reader import ReaderScorer, chunk_strips

SCORERS = (
    "embedding:minilm",
    "embedding:<embedder name>",
    "lexical",
    "llm:<chat model name>",
    "combined:default",
    "combined:<weights id>",
    "reader:default",
    "reader:<weights id or .json path>",
    "test:fixed-<p>",
)
MINILM = "onnx:all-minilm-l6-v2"
_MINILM_ALIASES = {"", "minilm", "all-minilm-l6-v2", MINILM}


# --- test doubles ---------------------------------------------------------------------------------


class FixedScorer(Scorer):
    """Always `p` (evidence: the passage/context itself); counts its calls."""

    def __init__(self, p: float, *, name: str = "") -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must lie in [0, 1], got {p}")
        self.p = p
        self.name = name or f"test:fixed-{p:g}"
        self.calls = 0

    async def relevance(self, query: str, passages: Sequence[str]) -> list[Judgement]:
        self.calls += 1
        return [Judgement(self.p, p) for p in passages]

    async def support(self, claims: Sequence[str], contexts: Sequence[str]) -> list[Judgement]:
        if len(claims) != len(contexts):
            raise ValueError(f"support() is pairwise: {len(claims)} claims vs {len(contexts)} contexts")
        self.calls += 1
        return [Judgement(self.p, c) for c in contexts]


ScoreFn = Callable[[str, str], "float | Judgement | Awaitable[float | Judgement]"]


class FunctionScorer(Scorer):
    """Scores each pair with `fn(query, passage)` (and `support_fn(claim, context)`, default
    `fn`): a float or a `Judgement`, sync or async. Records every pair it saw in `calls`
    (`("relevance" | "support", a, b)`) and the number of batch calls in `batches`."""

    def __init__(self, fn: ScoreFn, support_fn: ScoreFn | None = None, *, name: str = "test:function") -> None:
        self.fn = fn
        self.support_fn = support_fn or fn
        self.name = name
        self.calls: list[tuple[str, str, str]] = []
        self.batches = 0

    async def _one(self, fn: ScoreFn, task: str, a: str, b: str) -> Judgement:
        self.calls.append((task, a, b))
        out = fn(a, b)
        if inspect.isawaitable(out):
            out = await out
        if isinstance(out, Judgement):
            return out
        return Judgement(float(out), b)

    async def relevance(self, query: str, passages: Sequence[str]) -> list[Judgement]:
        self.batches += 1
        return [await self._one(self.fn, "relevance", query, p) for p in passages]

    async def support(self, claims: Sequence[str], contexts: Sequence[str]) -> list[Judgement]:
        if len(claims) != len(contexts):
            raise ValueError(f"support() is pairwise: {len(claims)} claims vs {len(contexts)} contexts")
        self.batches += 1
        return [await self._one(self.support_fn, "support", c, x) for c, x in zip(claims, contexts, strict=True)]


# --- registry -------------------------------------------------------------------------------------


def user_weights_dir(settings: Settings) -> Path:
    """Where fitted weights a user saves are found by id: `RAGLOOP_HOME/scorers/`."""
    return settings.home / "scorers"


def _weights(ref: str, settings: Settings, kind: str) -> ScorerWeights:
    found = find_weights(ref, [user_weights_dir(settings)])
    if found is None:
        raise UnknownModelError(
            f"no {kind} scorer weights {ref!r} (looked for a file stem or id in {shipped_weights_dir()} "
            f"and {user_weights_dir(settings)}, or a .json path)"
        )
    return found


def passage_embed_texts(text: str) -> list[str]:
    """Every text the offline scorers embed for one passage: its sentences and the whole passage
    (embedding and combined scorers, the sentence reranker) and its strips (reader). Embedding
    them when the passage is ingested keeps document text off the query path's embedder."""
    whole = text.strip()
    return list(dict.fromkeys([*passage_strips(text), *chunk_strips(text), *([whole] if whole else [])]))


def make_scorer(
    name: str,
    settings: Settings | None = None,
    chat_model: ChatModel | None = None,
    *,
    calls: CallSink | None = None,
    cache: bool = True,
) -> Scorer:
    """A scorer by `"provider:name"` (see the module docstring). `chat_model` is the model an
    `llm:` scorer (or a combined scorer with an `llm` component) uses instead of building one
    from the name; one built from the name gets the production wrappers (the response cache unless
    `cache=False`), and with `calls` (the store's `model_calls`) the call log."""
    from ragloop.models import make_embedder

    settings = settings or Settings.from_env()
    provider, _, rest = name.strip().partition(":")
    if provider == "embedding":
        embedder_name = MINILM if rest in _MINILM_ALIASES else rest
        embedder = make_embedder(embedder_name, settings)
        if embedder_name == MINILM:
            return EmbeddingScorer(embedder, shipped_weights("embedding-minilm"), name="embedding:minilm")
        return EmbeddingScorer(embedder, name=f"embedding:{embedder_name}")
    if provider == "lexical":
        if rest in ("", "default"):
            return LexicalScorer(name="lexical")
        return LexicalScorer(_weights(rest, settings, "lexical"), name=f"lexical:{rest}")
    if provider == "llm":
        if chat_model is None:
            if not rest:
                raise UnknownModelError("name the chat model after llm:, e.g. llm:local:qwen2.5-coder-1.5b")
            from ragloop.models.chat.registry import make_wrapped

            chat_model = make_wrapped(rest, settings, sink=calls, cache=cache)
        return LLMScorer(chat_model, name=f"llm:{rest or chat_model.name}")
    if provider == "combined":
        ref = "combined-default" if rest in ("", "default") else rest
        weights = _weights(ref, settings, "combined")
        components = {
            prefix: make_scorer(component, settings, chat_model, calls=calls, cache=cache)
            for prefix, component in weights.components.items()
        }
        return CombinedScorer(weights, components, name=f"combined:{rest or 'default'}")
    if provider == "reader":
        return ReaderScorer.from_weights(READER_SHIPPED if rest in ("", "default") else rest, settings)
    if provider == "test" and rest.startswith("fixed-"):
        try:
            p = float(rest.removeprefix("fixed-"))
        except ValueError:
            p = -1.0
        if 0.0 <= p <= 1.0:
            return FixedScorer(p, name=name.strip())
        raise UnknownModelError(f"test:fixed-<p> needs p in [0, 1], got {name!r}")
    raise UnknownModelError(f"unknown scorer {name!r}; known: {', '.join(SCORERS)}")


__all__ = [
    "SCORERS",
    "CombinedScorer",
    "CombinedWeights",
    "EmbeddingScorer",
    "FixedScorer",
    "FunctionScorer",
    "Judgement",
    "LLMScorer",
    "LexicalScorer",
    "LogisticModel",
    "ReaderScorer",
    "Scorer",
    "ScorerWeights",
    "Verdict",
    "WeightsError",
    "accuracy",
    "best_threshold",
    "component_judgements",
    "find_weights",
    "fit_combined",
    "fit_logistic",
    "fit_platt",
    "fit_weights",
    "fit_weights_from_rows",
    "llm_scorer_stats",
    "make_scorer",
    "passage_embed_texts",
    "platt",
    "reset_llm_scorer_stats",
    "roc_auc",
    "shipped_weights",
    "shipped_weights_dir",
    "user_weights_dir",
]
