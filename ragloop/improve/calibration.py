"""The oracle threshold calibrated per collection: how well does a chunk that does *not* hold an
answer score here?

Why: the oracle score (`oracle.score_texts`) is the scorer's relevance to "question + answer"
times the answer's coverage, and what a non-supporting chunk scores depends on the collection.
In SQuAD's encyclopaedia paragraphs a chunk of another article rarely names a span's words; in
the Python docs sibling sections share most of their vocabulary, so once the section holding the
answer is gone another one still covers a three-word span of technical terms ("handling is
performed" in "the transaction handling performed by sqlite3") and clears the absolute
threshold 0.25 chosen on SQuAD: measured on the injected sets, the best chunk left for a
removed-gold question scores 0.24 at the 90th percentile on SQuAD and 0.49 on the docs
(benchmarks/results/diagnosis_accuracy_pydocs.md). A single global threshold is either too low
for the docs or too high for SQuAD.

So each collection measures its own background, from its own text, with no labels: `probes`
sentences drawn from its chunks (seeded), each turned into a cloze probe (a span of its words is
the answer, the sentence with the span replaced by "what" is the question); the oracle's
ideal-answer retrieval runs for it, and the chunks found that are *not* its source (another
document, not holding the span as words) are scored exactly as the oracle scores candidates. The
best such impostor per probe is the "knowledge gap" situation simulated: what the best remaining
chunk scores when the one that states the answer is absent. The calibration keeps quantiles of
that distribution; the classifier's floor is max(`Thresholds.oracle`, the quantile
`Thresholds.background_quantile` of it), so a collection whose background is low keeps the
absolute threshold and one whose background is high raises it.

Caveats, stated: the probes are clozes of the collection's own sentences, the form the docs'
derived questions have (`ragloop.evaluation.pydocs`); SQuAD's questions are not clozes. The
spans are 1 to 4 words, as reference spans are; a sentence-long ideal answer is not what they
simulate.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ragloop.evaluation.metrics.answer import contains_gold
from ragloop.improve.types import BackgroundCalibration
from ragloop.ingest.types import Chunk
from ragloop.text.analysis import content_terms
from ragloop.text.sentences import split_strips

QUANTILES = (0.5, 0.75, 0.8, 0.85, 0.9, 0.95, 0.99)
MIN_WORDS, MAX_WORDS = 8, 40
_PLAIN = re.compile(r"^[A-Za-z0-9][\w'’-]*$")


def probes(chunks: Sequence[Chunk], n: int, seed: int) -> list[tuple[int, str, str]]:
    """Up to `n` (chunk position, question, answer) cloze probes, deterministic for a seed: a
    chunk drawn at random, a prose sentence of it of 8 to 40 words, a span of 1 to 4 plain words
    (at least one content term) replaced by "what"."""
    rng = np.random.default_rng(seed)
    out: list[tuple[int, str, str]] = []
    if not chunks:
        return out
    for pos in rng.permutation(len(chunks)):
        if len(out) >= n:
            break
        sentences = [s.text.strip() for s in split_strips(chunks[int(pos)].text) if s.kind == "sentence"]
        sentences = [s for s in sentences if MIN_WORDS <= len(s.split()) <= MAX_WORDS]
        if not sentences:
            continue
        words = sentences[int(rng.integers(len(sentences)))].rstrip(".?!").split()
        length = int(rng.integers(1, 5))
        start = int(rng.integers(0, len(words) - length + 1))
        span = words[start : start + length]
        answer = " ".join(span)
        if not all(_PLAIN.match(w) for w in span) or not content_terms(answer):
            continue
        question = " ".join([*words[:start], "what", *words[start + length :]]) + "?"
        out.append((int(pos), question, answer))
    return out


def summarise(best: Sequence[float], seed: int) -> BackgroundCalibration:
    """Quantiles of the per-probe best impostor scores."""
    arr = np.asarray(best, dtype=np.float64)
    qs = {f"{q:.2f}": round(float(np.quantile(arr, q)), 6) if len(arr) else 0.0 for q in QUANTILES}
    return BackgroundCalibration(probes=len(arr), seed=seed, quantiles=qs)


def impostors(chunks: Sequence[Chunk], source: int, answer: str, found: Sequence[int]) -> list[int]:
    """The found positions that are not the probe's source: another document, not holding the
    span as words (a restatement elsewhere would be a real match, not background)."""
    doc = chunks[source].doc_id
    return [p for p in found if chunks[p].doc_id != doc and not contains_gold(chunks[p].text, [answer])]
