"""Typed loaders for the shared evaluation sets under `../shared/datasets`.

Every set is a `RetrievalDataset`: a corpus of `Passage`s (each with the set's own id) and a
list of `RetrievalQuery`s whose `relevant` map names passages by those same ids. A dataset
writes its corpus as one JSON-lines file (`write_corpus`) so it can be ingested through the
real pipeline; a retrieved hit's doc id (`"<file>#<record id>"`) maps back to a passage id
with `passage_id`.

- SQuAD 2.0 dev (12 articles): the corpus is the paragraphs (`<Title>_p<NNN>`, NNN the
  paragraph's position in its article); a question's gold passage is its own paragraph.
- MTRAG-UN dev: the corpus is the union of every task's `contexts` (by `document_id`); a
  task's question is its last user turn and its gold passages are its own contexts.
- CACM: the corpus is `cacm.json`; topics come from the TREC-style `topics.cacm.txt` and
  judgements from `qrels.cacm.txt`, whose ids are unpadded (`CACM-115` for the corpus's
  `CACM-0115`): they are matched by number and stored under the corpus's spelling.

Nothing here imports the retrieval stack: loading a set is plain file parsing.
"""

from __future__ import annotations

import json
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = [
    "CacmDataset",
    "CacmTopic",
    "MtragDataset",
    "MtragTask",
    "Passage",
    "RetrievalDataset",
    "RetrievalQuery",
    "SquadDataset",
    "SquadQuestion",
    "Turn",
    "default_datasets_dir",
    "load_cacm",
    "load_mtrag",
    "load_squad2",
]

_REPO = Path(__file__).resolve().parents[2]

SQUAD_FILE = Path("squad2") / "squad2-dev-12articles.json"
MTRAG_FILE = Path("mtrag-un") / "mtragun-generation-dev.jsonl"
CACM_DIR = Path("cacm")


class DatasetError(Exception):
    """A shared data file is missing or not in the expected shape."""


def default_datasets_dir() -> Path:
    """`$RAGLOOP_DATASETS` if set, else `<repo>/../shared/datasets`."""
    raw = os.environ.get("RAGLOOP_DATASETS")
    return Path(raw).expanduser() if raw else _REPO.parent / "shared" / "datasets"


def _resolve(datasets_dir: str | Path | None, rel: Path) -> Path:
    """`datasets_dir / rel`; a `datasets_dir` that is itself a file is taken as the data set's file
    (the same format, from anywhere: the simulation's `--squad FILE`)."""
    path = Path(datasets_dir).expanduser() if datasets_dir is not None else default_datasets_dir()
    if path.is_file():
        return path
    full = path / rel
    if not full.exists():
        raise DatasetError(f"dataset file not found: {full} (set RAGLOOP_DATASETS or pass datasets_dir)")
    return full


# -- shared types ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Passage:
    """One corpus entry, under the dataset's own id."""

    doc_id: str
    text: str
    title: str = ""

    def to_record(self) -> dict[str, str]:
        """The JSON-lines record the ingest loader reads (`id`, `title`, `text`).

        An empty title is left out: the loader would otherwise fall back to the id, which is
        what it does anyway when the key is absent.
        """
        rec = {"id": self.doc_id, "text": self.text}
        if self.title:
            rec["title"] = self.title
        return rec


@dataclass(frozen=True)
class RetrievalQuery:
    """A query with its judged passages: `relevant` maps passage id -> grade (> 0)."""

    qid: str
    text: str
    relevant: Mapping[str, int] = field(hash=False)


class RetrievalDataset(ABC):
    """A corpus plus judged queries. Subclasses set `name` and `passages`."""

    name: str
    passages: tuple[Passage, ...]

    @property
    def corpus_filename(self) -> str:
        return f"{self.name}.jsonl"

    @abstractmethod
    def queries(self) -> list[RetrievalQuery]:
        """The queries this set is normally evaluated on, in file order."""

    def passage_ids(self) -> set[str]:
        return {p.doc_id for p in self.passages}

    def corpus_jsonl(self) -> str:
        return "".join(json.dumps(p.to_record(), ensure_ascii=False) + "\n" for p in self.passages)

    def write_corpus(self, dest_dir: str | Path) -> Path:
        """Write the corpus as `dest_dir/<name>.jsonl` and return its path.

        Idempotent: an existing file with identical content is left untouched (same mtime), so
        re-ingesting the directory is a no-op. A changed file is replaced atomically.
        """
        dest = Path(dest_dir)
        dest.mkdir(parents=True, exist_ok=True)
        path = dest / self.corpus_filename
        data = self.corpus_jsonl().encode("utf-8")
        try:
            if path.read_bytes() == data:
                return path
        except FileNotFoundError:
            pass
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        return path

    def passage_id(self, hit_doc_id: str) -> str:
        """A retrieved hit's doc id (`"<file rel path>#<record id>"`) as a passage id."""
        prefix = f"{self.corpus_filename}#"
        if hit_doc_id.startswith(prefix):
            return hit_doc_id[len(prefix) :]
        _, sep, rest = hit_doc_id.partition("#")
        return rest if sep else hit_doc_id


def _one_space(text: str) -> str:
    return " ".join(text.split())


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


# -- SQuAD 2.0 ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SquadQuestion:
    qid: str
    question: str
    paragraph_id: str
    title: str
    is_impossible: bool
    answers: tuple[str, ...]
    """Distinct gold answer texts (empty for unanswerable questions)."""
    plausible_answers: tuple[str, ...] = ()
    """For unanswerable questions: the distractor spans the annotators wrote."""


@dataclass(frozen=True, eq=False)
class SquadDataset(RetrievalDataset):
    passages: tuple[Passage, ...]
    questions: tuple[SquadQuestion, ...]
    name: str = "squad2"

    def answerable(self) -> list[SquadQuestion]:
        return [q for q in self.questions if not q.is_impossible]

    def queries(self, include_impossible: bool = False) -> list[RetrievalQuery]:
        """Answerable questions (all of them with `include_impossible`), gold = own paragraph."""
        return [
            RetrievalQuery(q.qid, q.question, {q.paragraph_id: 1})
            for q in self.questions
            if include_impossible or not q.is_impossible
        ]


def squad_paragraph_id(title: str, index: int) -> str:
    return f"{title}_p{index:03d}"


def load_squad2(datasets_dir: str | Path | None = None) -> SquadDataset:
    """SQuAD 2.0 dev, 12 articles. Passage titles read as words (`European Union law`)."""
    path = _resolve(datasets_dir, SQUAD_FILE)
    raw = json.loads(path.read_text(encoding="utf-8"))
    passages: list[Passage] = []
    questions: list[SquadQuestion] = []
    for article in raw["data"]:
        title = str(article["title"])
        for i, para in enumerate(article["paragraphs"]):
            pid = squad_paragraph_id(title, i)
            passages.append(Passage(pid, str(para["context"]), title.replace("_", " ")))
            for qa in para["qas"]:
                questions.append(
                    SquadQuestion(
                        qid=str(qa["id"]),
                        question=str(qa["question"]).strip(),
                        paragraph_id=pid,
                        title=title,
                        is_impossible=bool(qa.get("is_impossible", False)),
                        answers=_unique(str(a["text"]) for a in qa.get("answers", [])),
                        plausible_answers=_unique(str(a["text"]) for a in qa.get("plausible_answers", [])),
                    )
                )
    return SquadDataset(tuple(passages), tuple(questions))


# -- MTRAG-UN ----------------------------------------------------------------------------------

Answerability = Literal["ANSWERABLE", "PARTIAL", "UNANSWERABLE", "UNDERSPECIFIED"]
ANSWERABILITY: tuple[str, ...] = ("ANSWERABLE", "PARTIAL", "UNANSWERABLE", "UNDERSPECIFIED")


@dataclass(frozen=True)
class Turn:
    speaker: Literal["user", "agent"]
    text: str


@dataclass(frozen=True)
class MtragTask:
    task_id: str
    conversation_id: str
    turn: int
    turns: tuple[Turn, ...]
    """The conversation so far, oldest first, ending with the user turn being answered."""
    context_ids: tuple[str, ...]
    """The task's reference passages (its relevant set); empty for unanswerable tasks."""
    answerability: Answerability
    domain: str
    """The source collection: govt, clapnq, ibmcloud or fiqa."""
    reference_answer: str
    question_types: tuple[str, ...] = ()
    multi_turn: tuple[str, ...] = ()

    @property
    def question(self) -> str:
        """The last user turn: what this task asks."""
        for t in reversed(self.turns):
            if t.speaker == "user":
                return t.text
        raise DatasetError(f"task {self.task_id} has no user turn")

    def user_turns(self) -> list[str]:
        return [t.text for t in self.turns if t.speaker == "user"]

    def history_query(self, speakers: Iterable[str] = ("user",), latest_first: bool = True) -> str:
        """The conversation's turns of `speakers` joined into one query, newest first by default
        (so a model that truncates long inputs keeps the question being asked)."""
        wanted = set(speakers)
        texts = [t.text.strip() for t in self.turns if t.speaker in wanted and t.text.strip()]
        if latest_first:
            texts.reverse()
        return "\n".join(texts)


@dataclass(frozen=True, eq=False)
class MtragDataset(RetrievalDataset):
    passages: tuple[Passage, ...]
    tasks: tuple[MtragTask, ...]
    name: str = "mtrag-un"

    def retrieval_tasks(self, answerability: Iterable[str] = ("ANSWERABLE", "PARTIAL")) -> list[MtragTask]:
        """Tasks of the given answerability that have reference contexts to find."""
        keep = set(answerability)
        return [t for t in self.tasks if t.answerability in keep and t.context_ids]

    def queries(
        self,
        answerability: Iterable[str] = ("ANSWERABLE", "PARTIAL"),
        query: Literal["last_turn", "user_turns_latest_first", "all_turns_latest_first"] = "last_turn",
    ) -> list[RetrievalQuery]:
        """One query per retrieval task; the query text is the last user turn by default."""
        out = []
        for t in self.retrieval_tasks(answerability):
            if query == "last_turn":
                text = t.question
            elif query == "user_turns_latest_first":
                text = t.history_query(("user",))
            else:
                text = t.history_query(("user", "agent"))
            out.append(RetrievalQuery(t.task_id, text, dict.fromkeys(t.context_ids, 1)))
        return out


def load_mtrag(datasets_dir: str | Path | None = None) -> MtragDataset:
    """MTRAG-UN dev tasks; the corpus is the union of all tasks' contexts, in first-seen order."""
    path = _resolve(datasets_dir, MTRAG_FILE)
    passages: dict[str, Passage] = {}
    tasks: list[MtragTask] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        ids: list[str] = []
        for ctx in rec.get("contexts") or []:
            doc_id = str(ctx["document_id"])
            p = Passage(doc_id, str(ctx["text"]).strip(), _one_space(str(ctx.get("title") or "")))
            seen = passages.setdefault(doc_id, p)
            if seen.text != p.text:
                raise DatasetError(f"{path}:{n}: document {doc_id} appears with two different texts")
            ids.append(doc_id)
        turns = tuple(Turn("user" if t["speaker"] == "user" else "agent", str(t["text"])) for t in rec["input"])
        raw_ans = rec.get("answerability") or ["ANSWERABLE"]
        ans = str(raw_ans[0] if isinstance(raw_ans, list) else raw_ans).upper()
        if ans not in ANSWERABILITY:
            raise DatasetError(f"{path}:{n}: unknown answerability {ans!r}")
        targets = rec.get("targets") or []
        tasks.append(
            MtragTask(
                task_id=str(rec["task_id"]),
                conversation_id=str(rec["conversation_id"]),
                turn=int(rec["turn"]),
                turns=turns,
                context_ids=_unique(ids),
                answerability=ans,  # type: ignore[arg-type]
                domain=str(rec.get("Collection", "")),
                reference_answer=str(targets[0]["text"]) if targets else "",
                question_types=tuple(rec.get("Question Type") or ()),
                multi_turn=tuple(rec.get("Multi-Turn") or ()),
            )
        )
    return MtragDataset(tuple(passages.values()), tuple(tasks))


# -- CACM --------------------------------------------------------------------------------------

_CACM_ID = re.compile(r"^CACM-(\d+)$")
_TOPIC = re.compile(r"<DOC>\s*<DOCNO>\s*(\d+)\s*</DOCNO>(.*?)</DOC>", re.S)


def cacm_number(doc_id: str) -> int:
    """`CACM-0115` and `CACM-115` are both document 115."""
    m = _CACM_ID.match(doc_id.strip())
    if not m:
        raise DatasetError(f"not a CACM document id: {doc_id!r}")
    return int(m.group(1))


@dataclass(frozen=True)
class CacmTopic:
    number: int
    text: str
    """The topic's whole statement, whitespace collapsed (some name authors on extra lines)."""


@dataclass(frozen=True, eq=False)
class CacmDataset(RetrievalDataset):
    passages: tuple[Passage, ...]
    topics: tuple[CacmTopic, ...]
    qrels: Mapping[int, frozenset[str]]
    """Topic number -> relevant corpus ids, in the corpus's (padded) spelling."""
    name: str = "cacm"

    def judged_topics(self) -> list[CacmTopic]:
        return [t for t in self.topics if self.qrels.get(t.number)]

    def queries(self) -> list[RetrievalQuery]:
        """The judged topics (52 of 64); the others have no relevant documents to find."""
        return [
            RetrievalQuery(str(t.number), t.text, dict.fromkeys(sorted(self.qrels[t.number]), 1))
            for t in self.judged_topics()
        ]


def parse_cacm_topics(text: str) -> list[CacmTopic]:
    return [CacmTopic(int(num), _one_space(body)) for num, body in _TOPIC.findall(text)]


def load_cacm(datasets_dir: str | Path | None = None) -> CacmDataset:
    base = _resolve(datasets_dir, CACM_DIR)
    passages: list[Passage] = []
    by_number: dict[int, str] = {}
    with (base / "cacm.json").open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            rec = json.loads(line)
            doc_id = str(rec["id"])
            number = cacm_number(doc_id)
            if number in by_number:
                raise DatasetError(f"CACM document number {number} appears twice")
            by_number[number] = doc_id
            passages.append(Passage(doc_id, str(rec["contents"]).strip()))
    topics = parse_cacm_topics((base / "topics.cacm.txt").read_text(encoding="utf-8"))
    qrels: dict[int, set[str]] = {}
    for n, line in enumerate((base / "qrels.cacm.txt").read_text(encoding="utf-8").splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 4:
            raise DatasetError(f"qrels line {n}: expected 4 fields, got {line!r}")
        topic, _, doc, grade = parts
        if int(grade) <= 0:
            continue
        number = cacm_number(doc)
        if number not in by_number:
            raise DatasetError(f"qrels line {n}: {doc} is not in the corpus")
        qrels.setdefault(int(topic), set()).add(by_number[number])
    return CacmDataset(tuple(passages), tuple(topics), {t: frozenset(d) for t, d in sorted(qrels.items())})
