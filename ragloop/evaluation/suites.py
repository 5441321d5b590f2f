"""Evaluation suites: a dataset turned into `EvalItem`s plus the collection they run against.

- `squad`: SQuAD 2.0 dev (12 articles). Every question; gold = its own paragraph; unanswerable
  questions should be refused (their paragraph is kept as `topic_docs`, not as gold).
- `mtrag`: MTRAG-UN dev. The last user turn is the question; the thread is seeded with the
  reference conversation before it (user and agent turns, `history` + `history_replies`); gold = the task's
  contexts; UNANSWERABLE tasks should be refused; UNDERSPECIFIED tasks are kept apart (the right
  reply is a clarifying question: their refusal rate is reported, they count in no accuracy).
- `cacm`: CACM topics and qrels, retrieval only (no agent).
- `golden`: a golden-set JSONL against a named collection.

A dataset's collection is built on first use and cached under RAGLOOP_HOME: its corpus is
written to `corpora/<name>/` and ingested into `eval-<name>` (incremental: an unchanged corpus
is not re-embedded).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from ragloop.config import PipelineConfig, Settings
from ragloop.evaluation.datasets import (
    MtragDataset,
    RetrievalDataset,
    SquadDataset,
    load_cacm,
    load_mtrag,
    load_squad2,
)
from ragloop.retrieval.collection import Collection

DatasetName = Literal["squad", "mtrag", "cacm", "golden"]
DATASETS: tuple[str, ...] = ("squad", "mtrag", "cacm", "golden")


@dataclass(frozen=True)
class EvalItem:
    id: str
    question: str
    kind: str
    """answerable | unanswerable | partial | underspecified | vague."""
    should_refuse: bool
    history: tuple[str, ...] = ()
    """Earlier user turns, oldest first."""
    history_replies: tuple[str, ...] = ()
    """The reference conversation's replies to `history`, aligned (MTRAG). When present the
    thread is seeded with the reference conversation and only the last turn is answered (MTRAG's
    own protocol: each task tests one turn, not how our earlier answers steered the conversation,
    and a task costs one graph run instead of ~4.3); when absent (golden sets) the earlier turns
    are asked first and answered by the agent."""
    gold_docs: tuple[str, ...] = ()
    """Relevant passage ids (doc ids for a golden set); empty when the item should be refused."""
    gold_chunks: tuple[str, ...] = ()
    answers: tuple[str, ...] = ()
    """Short gold answer spans (SQuAD); scored by EM/F1/contains."""
    reference: str = ""
    """A reference answer in words (MTRAG, golden sets); scored by token F1 and the judge."""
    topic_docs: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EvalItem:
        tup = ("history", "history_replies", "gold_docs", "gold_chunks", "answers", "topic_docs")
        fields: dict[str, Any] = {k: tuple(v) if k in tup else v for k, v in d.items()}
        return cls(**fields)


@dataclass
class Suite:
    name: str
    items: list[EvalItem]
    dataset: RetrievalDataset | None = None
    collection_name: str = ""
    doc_prefix: str = ""
    """Prefix of a hit's doc id to strip to get the passage id (`squad2.jsonl#`)."""
    description: str = ""

    def prepare(self, settings: Settings, config: PipelineConfig) -> Collection:
        """The suite's collection, built (incrementally) on first use."""
        coll = Collection(self.collection_name, settings)
        if self.dataset is not None:
            corpus_dir = settings.home / "corpora" / self.dataset.name
            self.dataset.write_corpus(corpus_dir)
            coll.ingest([corpus_dir], config)
        elif not coll.exists():
            raise ValueError(f"collection {self.collection_name!r} does not exist under {settings.home}")
        return coll


def squad_suite(datasets_dir: str | Path | None = None, articles: Sequence[str] | None = None) -> Suite:
    """All of SQuAD 2.0 dev, or only the paragraphs and questions of the named `articles` (a
    smaller corpus and collection of its own, for the CI gate)."""
    ds = load_squad2(datasets_dir)
    if articles:
        keep = set(articles)
        unknown = keep - {q.title for q in ds.questions}
        if unknown:
            raise ValueError(f"unknown SQuAD articles: {', '.join(sorted(unknown))}")
        tag = hashlib.sha256("|".join(sorted(keep)).encode()).hexdigest()[:6]
        ds = SquadDataset(
            tuple(p for p in ds.passages if p.doc_id.rsplit("_p", 1)[0] in keep),
            tuple(q for q in ds.questions if q.title in keep),
            name=f"squad2-{len(keep)}a-{tag}",
        )
    return squad_suite_from(ds)


def squad_suite_from(ds: SquadDataset) -> Suite:
    """The suite of a loaded SQuAD 2.0 data set (any file in that format, or a slice of one)."""
    items = [
        EvalItem(
            id=q.qid,
            question=q.question,
            kind="unanswerable" if q.is_impossible else "answerable",
            should_refuse=q.is_impossible,
            gold_docs=() if q.is_impossible else (q.paragraph_id,),
            answers=q.answers,
            reference=q.answers[0] if q.answers else "",
            topic_docs=(q.paragraph_id,),
            meta={"title": q.title},
        )
        for q in ds.questions
    ]
    n_imp = sum(i.should_refuse for i in items)
    return Suite(
        "squad",
        items,
        ds,
        f"eval-{ds.name}",
        f"{ds.corpus_filename}#",
        f"SQuAD 2.0 dev, 12 articles: {len(ds.passages)} paragraphs, {len(items)} questions "
        f"({len(items) - n_imp} answerable, {n_imp} unanswerable)",
    )


MTRAG_KIND = {"ANSWERABLE": "answerable", "PARTIAL": "partial", "UNANSWERABLE": "unanswerable"}


def mtrag_suite(datasets_dir: str | Path | None = None) -> Suite:
    return mtrag_suite_from(load_mtrag(datasets_dir))


def mtrag_suite_from(ds: MtragDataset) -> Suite:
    """The suite of a loaded MTRAG-UN data set (any file in that format)."""
    items = []
    for t in ds.tasks:
        users = t.user_turns()
        kind = MTRAG_KIND.get(t.answerability, "underspecified")
        items.append(
            EvalItem(
                id=t.task_id,
                question=t.question,
                kind=kind,
                should_refuse=kind == "unanswerable",
                history=tuple(users[:-1]),
                history_replies=tuple(turn.text for turn in t.turns if turn.speaker == "agent"),
                gold_docs=() if kind == "unanswerable" else tuple(t.context_ids),
                reference=t.reference_answer,
                meta={"domain": t.domain, "turn": t.turn, "answerability": t.answerability},
            )
        )
    return Suite(
        "mtrag",
        items,
        ds,
        "eval-mtrag-un",
        f"{ds.corpus_filename}#",
        f"MTRAG-UN dev: {len(ds.passages)} passages, {len(items)} tasks",
    )


def cacm_suite(datasets_dir: str | Path | None = None) -> Suite:
    ds = load_cacm(datasets_dir)
    items = [
        EvalItem(id=q.qid, question=q.text, kind="answerable", should_refuse=False, gold_docs=tuple(q.relevant))
        for q in ds.queries()
    ]
    return Suite(
        "cacm",
        items,
        ds,
        "eval-cacm",
        f"{ds.corpus_filename}#",
        f"CACM: {len(ds.passages)} abstracts, {len(items)} judged topics (retrieval only)",
    )


def golden_suite(path: str | Path, collection: str, verified_only: bool = False) -> Suite:
    from ragloop.evaluation.golden import load_golden, usable

    items = []
    for g in usable(load_golden(path), verified_only):
        items.append(
            EvalItem(
                id=g.id,
                question=g.question,
                kind=g.type,
                should_refuse=g.should_refuse,
                history=tuple(g.user_turns()),
                gold_docs=() if g.should_refuse else tuple(g.relevant_doc_ids),
                gold_chunks=() if g.should_refuse else tuple(g.relevant_chunk_ids),
                reference=g.reference_answer,
                meta={"difficulty": g.difficulty, "verified": g.verified, "source": g.source},
            )
        )
    return Suite("golden", items, None, collection, "", f"golden set {Path(path).name} on collection {collection}")


def load_suite(
    name: str,
    *,
    golden: str | Path | None = None,
    collection: str | None = None,
    datasets_dir: str | Path | None = None,
    verified_only: bool = False,
    articles: Sequence[str] | None = None,
) -> Suite:
    if name == "squad":
        return squad_suite(datasets_dir, articles)
    if name == "mtrag":
        return mtrag_suite(datasets_dir)
    if name == "cacm":
        return cacm_suite(datasets_dir)
    if name == "golden":
        if golden is None or collection is None:
            raise ValueError("--dataset golden needs --golden FILE and --collection NAME")
        return golden_suite(golden, collection, verified_only)
    raise ValueError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")


def sample_items(
    items: Sequence[EvalItem],
    *,
    limit: int | None = None,
    sample: int | None = None,
    seed: int = 0,
    ids: Sequence[str] | None = None,
) -> list[EvalItem]:
    """Select items: `ids` (in that order), else a stratified random `sample` (by kind,
    proportional, fixed seed, then in file order), else the first `limit`."""
    chosen = list(items)
    if ids is not None:
        by_id = {i.id: i for i in items}
        missing = [x for x in ids if x not in by_id]
        if missing:
            raise ValueError(f"unknown item ids: {', '.join(missing[:5])}")
        chosen = [by_id[x] for x in ids]
    elif sample is not None and sample < len(chosen):
        rng = random.Random(seed)
        by_kind: dict[str, list[int]] = {}
        for idx, it in enumerate(chosen):
            by_kind.setdefault(it.kind, []).append(idx)
        picked: list[int] = []
        kinds = sorted(by_kind)
        quotas = {k: round(sample * len(by_kind[k]) / len(chosen)) for k in kinds}
        while sum(quotas.values()) > sample:
            quotas[max(quotas, key=lambda k: quotas[k])] -= 1
        while sum(quotas.values()) < sample:
            quotas[max(kinds, key=lambda k: len(by_kind[k]) - quotas[k])] += 1
        for k in kinds:
            picked += rng.sample(by_kind[k], min(quotas[k], len(by_kind[k])))
        chosen = [chosen[i] for i in sorted(picked)]
    if limit is not None:
        chosen = chosen[:limit]
    return chosen
