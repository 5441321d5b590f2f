"""The evaluation runner: one suite x one config -> one JSON line per item, resumable.

    run_suite(suite, "full", config, out_dir, settings=...)

- Output: `<out_dir>/items.jsonl` (one record per item, appended as each finishes, with the
  item's whole trace) and `<out_dir>/run.json` (what ran: suite, config and its version id,
  judge, seed, item ids, wall time).
- Resumable: a restarted run reads `items.jsonl`, keeps every item whose last record has no
  error, and runs only the rest; a torn last line (a kill mid-write) is cut off. A run directory
  that holds results of a different pipeline version is refused unless `fresh=True`.
- Parallel within the machine: `workers` processes (spawned, each with one ONNX thread), each
  building the agent once; the parent is the only writer. `workers=1` runs in-process.
- Deterministic: seeds are fixed (Python's and numpy's, per item from the run seed and item id);
  the offline pipeline has no sampling.
- Multi-turn items go through the conversation path: with reference replies (MTRAG) the thread is
  seeded with the reference conversation, otherwise the earlier user turns are asked first (same
  thread id, our own answers); then the last turn is asked and the thread deleted.
- Judged answer metrics (faithfulness, relevancy, context precision/recall, citations, judged
  correctness) are computed right after the answer, through the judge scorer, `judge_repeats`
  times (the spread is recorded). Everything else is recomputed from the record at report time.
- Logged: with `call_log=True` (the CLI's `ragloop eval run`) every model call of the run, the
  pipeline's and the judge's, goes to the default store's `model_calls` (each worker process opens
  its own `StoreCallLog`) under one run id per invocation (`call_run_id` in the result and in
  `run.json`'s `call_run_ids`; `ragloop models calls --run ID`), purpose `eval_run`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragloop.config import PipelineConfig, Settings
from ragloop.evaluation.records import agent_record
from ragloop.evaluation.records import passage as _passage
from ragloop.evaluation.suites import EvalItem, Suite

if TYPE_CHECKING:
    from ragloop.agent.answer import Answer
    from ragloop.store.call_log import StoreCallLog

RECORD_VERSION = 1
DEFAULT_JUDGE = "lexical"
"""The offline judge. Not `combined:default`: the default pipeline grades and validates with that
scorer, and a judge must not be the model whose decisions it scores (self-preference)."""
RETRIEVAL_DEPTH = 1000
"""Ranking depth for retrieval-only suites (CACM): MAP over a TREC-depth ranking."""


class RunError(Exception):
    pass


# -- reading and writing results ---------------------------------------------------------------------


def read_records(path: Path, repair: bool = False) -> list[dict[str, Any]]:
    """Every complete record in an items file (the last one per item id wins). With `repair`, a
    torn trailing line is cut off the file."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    good_end = 0
    by_id: dict[str, dict[str, Any]] = {}
    pos = 0
    for line in raw.splitlines(keepends=True):
        pos += len(line)
        if not line.endswith(b"\n"):
            break
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            break
        by_id[str(rec["id"])] = rec
        good_end = pos
    if repair and good_end < len(raw):
        with path.open("r+b") as fh:
            fh.truncate(good_end)
    return list(by_id.values())


def done_ids(records: Iterable[dict[str, Any]]) -> set[str]:
    return {str(r["id"]) for r in records if not r.get("error")}


# -- the per-process item runner ----------------------------------------------------------------------


@dataclass
class WorkerSpec:
    home: str
    collection: str
    config_json: dict[str, Any]
    doc_prefix: str
    run_dir: str
    mode: str  # "agent" | "retrieval"
    judge: str | None = DEFAULT_JUDGE
    judge_repeats: int = 1
    seed: int = 0
    threads: int | None = None
    suite: str = ""
    call_log: bool = False
    """Log model calls to the default store (`ragloop.store.call_log.StoreCallLog`)."""
    call_run_id: str = ""


def judge_question(item: EvalItem) -> str:
    """What the judge is asked about: the last turn, preceded by the previous user turn when
    the item is a follow-up (the judge must not depend on the system's own condensation)."""
    return f"{item.history[-1]} {item.question}" if item.history else item.question


class ItemRunner:
    """Builds the agent (or the retriever) once; `run(item)` returns the item's record."""

    def __init__(self, spec: WorkerSpec, scorers: dict[str, Any] | None = None, *, expansion: Any = None) -> None:
        """`expansion`: the collection's query-expansion lookup, as the service serves with it (the
        self-improvement simulation measures held-out items on what is served, direct fixes included)."""
        from ragloop.retrieval.collection import Collection

        if spec.threads:
            os.environ["RAGLOOP_THREADS"] = str(spec.threads)
        self.spec = spec
        self.settings = Settings(home=Path(spec.home))
        self.config = PipelineConfig.model_validate(spec.config_json)
        self.collection = Collection(spec.collection, self.settings)
        self.agent: Any = None
        self.retriever: Any = None
        self.judge: Any = None
        self.calls: StoreCallLog | None = None
        if spec.mode == "retrieval":
            from ragloop.retrieval.retriever import Retriever
            from ragloop.retrieval.variants import index_for

            self.retriever = Retriever(index_for(self.collection, self.config), self.config.retrieval)
            return
        from ragloop.agent.build import build_agent

        if spec.call_log:
            from ragloop.store.call_log import StoreCallLog

            self.calls = StoreCallLog()
        run_dir = Path(spec.run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        tag = f"{os.getpid()}"
        self.agent = build_agent(
            self.collection,
            self.config,
            scorers=scorers or None,
            expansion=expansion,
            calls=self.calls,
            checkpointer_url=f"sqlite:///{run_dir / f'.checkpoints-{tag}.sqlite'}",
            # the full conversation log of eval threads stays with the run, not in the user's home
            log_url=f"sqlite:///{run_dir / f'.conversations-{tag}.sqlite'}",
        )
        if spec.judge:
            from ragloop.models.scoring import make_scorer

            self.judge = (scorers or {}).get("judge") or make_scorer(spec.judge, self.settings, calls=self.calls)

    def close(self) -> None:
        if self.agent is not None:
            self.agent.memory.close()
        if self.calls is not None:
            self.calls.close()
        self.collection.close()

    def _seed(self, item: EvalItem) -> None:
        import numpy as np

        s = int(hashlib.sha256(f"{self.spec.seed}:{item.id}".encode()).hexdigest()[:8], 16)
        random.seed(s)
        np.random.seed(s)

    def base_record(self, item: EvalItem) -> dict[str, Any]:
        return {
            "v": RECORD_VERSION,
            "id": item.id,
            "suite": self.spec.suite,
            "kind": item.kind,
            "should_refuse": item.should_refuse,
            "question": item.question,
            "history": list(item.history),
            "gold_docs": list(item.gold_docs),
            "gold_chunks": list(item.gold_chunks),
            "answers": list(item.answers),
            "reference": item.reference,
            "meta": item.meta,
        }

    def run(self, item: EvalItem) -> dict[str, Any]:
        self._seed(item)
        rec = self.base_record(item)
        t0 = time.perf_counter()
        try:
            if self.spec.mode == "retrieval":
                rec |= self._retrieve(item)
            else:
                from ragloop.models.chat import CallPurpose, call_scope, run_sync

                with call_scope(run_id=self.spec.call_run_id or None, purpose=CallPurpose.EVAL_RUN):
                    rec |= run_sync(self._answer(item))
        except Exception as exc:  # an item's failure is recorded; the run goes on
            rec["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        rec["wall_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        return rec

    def _retrieve(self, item: EvalItem) -> dict[str, Any]:
        t0 = time.perf_counter()
        hits = self.retriever.retrieve(item.question, k=RETRIEVAL_DEPTH)
        ms = (time.perf_counter() - t0) * 1000
        return {
            "mode": "retrieval",
            "ranking": [_passage(h.doc_id, self.spec.doc_prefix) for h in hits],
            "latency_ms": round(ms, 3),
        }

    async def _answer(self, item: EvalItem) -> dict[str, Any]:
        agent = self.agent
        thread = f"eval-{item.id}-{uuid.uuid4().hex[:8]}" if item.history else None
        history: list[dict[str, Any]] = []
        history_ms = 0.0
        try:
            if thread and len(item.history_replies) == len(item.history):  # a reference conversation
                pairs = list(zip(item.history, item.history_replies, strict=True))
                await agent.aseed(thread, [turn for q, a in pairs for turn in (("user", q), ("assistant", a))])
                history = [{"question": q, "answer": a[:300], "reference": True} for q, a in pairs]
            else:
                for q in item.history:
                    a = await agent.aanswer(q, thread)
                    history_ms += a.latency_ms
                    history.append(
                        {
                            "question": q,
                            "standalone": a.standalone_question,
                            "refused": a.refused,
                            "termination_reason": a.termination_reason,
                            "answer": a.answer[:300],
                        }
                    )
            ans: Answer = await agent.aanswer(item.question, thread)
        finally:
            if thread:
                await agent.forget(thread)
        rec = agent_record(ans, self.spec.doc_prefix, self.config)
        rec |= {"history_turns": history, "history_latency_ms": round(history_ms, 3)}
        chunk_text = {c.chunk_id: c.text for c in ans.hits}
        if self.judge is not None:
            from ragloop.models.chat import call_scope

            with call_scope(step="judge"):
                rec |= await self._judge(item, rec, chunk_text)
        return rec

    async def _judge(self, item: EvalItem, rec: dict[str, Any], chunk_text: dict[str, str]) -> dict[str, Any]:
        from ragloop.evaluation.metrics import answer as am
        from ragloop.evaluation.metrics.agent import ItemView

        view = ItemView(rec)
        question = judge_question(item)
        answer = view.rec.answer
        refused = view.rec.refused
        first = [chunk_text[c] for c in view.first_retrieval() if c in chunk_text]
        final = [chunk_text[c] for c in view.final_context() if c in chunk_text]
        generator_context = [k.text for k in view.rec.kept] or final
        cited = {c.n: chunk_text.get(c.chunk_id, "") for c in view.rec.citations}
        runs: list[dict[str, float | None]] = []
        for _ in range(max(1, self.spec.judge_repeats)):
            j = self.judge
            out: dict[str, float | None] = {}
            out["faithfulness"] = None if refused else await am.faithfulness(j, answer, generator_context)
            out["answer_relevancy"] = None if refused else await am.answer_relevancy(j, question, answer)
            out["context_precision@k"] = await am.context_precision(j, question, first, None, item.reference)
            out["context_recall"] = (
                await am.context_recall(j, item.reference, final, question)
                if item.reference and not item.should_refuse
                else None
            )
            if refused:
                out["citation_precision"] = out["citation_recall"] = None
            else:
                cs = await am.citation_scores(j, answer, cited)
                out["citation_precision"], out["citation_recall"] = cs.precision, cs.recall
            out["context_sufficiency"] = await am.context_sufficiency(j, question, final)
            corr = (
                None
                if refused or item.should_refuse or not item.reference or item.answers
                else await am.correctness(j, answer, item.reference, question)
            )
            out["judge_correct_p"] = None if corr is None else corr.recall
            out["answer_correctness"] = None if corr is None else corr.f1
            runs.append(out)
        judged: dict[str, float | None] = {}
        spread: dict[str, float] = {}
        for key in runs[0]:
            vals = [r[key] for r in runs if r[key] is not None]
            judged[key] = None if not vals else round(sum(vals) / len(vals), 6)  # type: ignore[arg-type]
            if len(vals) > 1:
                spread[key] = round(max(vals) - min(vals), 6)  # type: ignore[type-var,operator]
        return {"judge": self.spec.judge, "judged": judged, "judge_spread": spread}


_WORKER: ItemRunner | None = None


def _exit_with_parent(parent: int) -> None:
    """A worker whose parent was killed exits instead of lingering."""
    while True:
        time.sleep(2.0)
        if os.getppid() != parent:
            os._exit(1)


def _init_worker(spec: WorkerSpec, parent: int) -> None:
    global _WORKER
    os.environ["OMP_NUM_THREADS"] = "1"
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    _WORKER = ItemRunner(spec)


def _run_in_worker(item_json: dict[str, Any]) -> dict[str, Any]:
    assert _WORKER is not None
    return _WORKER.run(EvalItem.from_json(item_json))


# -- a run --------------------------------------------------------------------------------------------


@dataclass
class RunResult:
    out_dir: Path
    total: int
    skipped: int
    ran: int
    errors: int
    wall_s: float
    records: list[dict[str, Any]] = field(default_factory=list, repr=False)
    call_run_id: str | None = None
    """The run id this invocation's model calls are logged under (None: not logged)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "out_dir": str(self.out_dir),
            "total": self.total,
            "skipped": self.skipped,
            "ran": self.ran,
            "errors": self.errors,
            "wall_s": round(self.wall_s, 2),
            "call_run_id": self.call_run_id,
        }


OnItem = Callable[[dict[str, Any], int, int], None]


def _write_meta(path: Path, meta: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def run_suite(
    suite: Suite,
    config_name: str,
    config: PipelineConfig,
    out_dir: Path,
    *,
    settings: Settings,
    items: Sequence[EvalItem] | None = None,
    workers: int = 2,
    judge: str | None = DEFAULT_JUDGE,
    judge_repeats: int = 1,
    seed: int = 0,
    fresh: bool = False,
    on_item: OnItem | None = None,
    scorers: dict[str, Any] | None = None,
    call_log: bool = False,
) -> RunResult:
    """Run (or resume) `config` on the suite's items; see the module docstring."""
    items = list(suite.items if items is None else items)
    out_dir.mkdir(parents=True, exist_ok=True)
    items_path = out_dir / "items.jsonl"
    meta_path = out_dir / "run.json"
    meta: dict[str, Any] = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    if meta and meta.get("version_id") != config.version_id and not fresh:
        raise RunError(
            f"{out_dir} holds results of pipeline version {meta.get('version_id')}, not {config.version_id}: "
            "use a new --out directory or --fresh"
        )
    if fresh:
        items_path.unlink(missing_ok=True)
        meta = {}
    mode = "retrieval" if suite.name == "cacm" else "agent"
    call_run_id = f"eval-{uuid.uuid4().hex[:20]}" if call_log and mode == "agent" else None
    coll = suite.prepare(settings, config)
    coll.close()
    existing = read_records(items_path, repair=True)
    wanted = {i.id for i in items}
    finished = done_ids(existing) & wanted
    todo = [i for i in items if i.id not in finished]
    meta = {
        "suite": suite.name,
        "description": suite.description,
        "config_name": config_name,
        "version_id": config.version_id,
        "config": config.model_dump(mode="json", by_alias=True),
        "mode": mode,
        "judge": judge if mode == "agent" else None,
        "judge_repeats": judge_repeats,
        "seed": seed,
        "workers": workers,
        "collection": suite.collection_name,
        "item_ids": [i.id for i in items],
        "started_at": meta.get("started_at") or time.strftime("%Y-%m-%dT%H:%M:%S"),
        "wall_s": float(meta.get("wall_s") or 0.0),
        "sessions": int(meta.get("sessions") or 0) + 1,
        "call_run_ids": [*(meta.get("call_run_ids") or []), *([call_run_id] if call_run_id else [])],
        "finished": False,
    }
    _write_meta(meta_path, meta)
    spec = WorkerSpec(
        home=str(settings.home),
        collection=suite.collection_name,
        config_json=config.model_dump(mode="json", by_alias=True),
        doc_prefix=suite.doc_prefix,
        run_dir=str(out_dir),
        mode=mode,
        judge=judge,
        judge_repeats=judge_repeats,
        seed=seed,
        suite=suite.name,
        call_log=call_run_id is not None,
        call_run_id=call_run_id or "",
    )
    t0 = time.perf_counter()
    ran = errors = 0
    new_records: list[dict[str, Any]] = []

    def emit(rec: dict[str, Any], fh: Any) -> None:
        nonlocal ran, errors
        fh.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
        fh.flush()
        ran += 1
        errors += bool(rec.get("error"))
        new_records.append(rec)
        if on_item is not None:
            on_item(rec, ran, len(todo))

    try:
        with items_path.open("a", encoding="utf-8") as fh:
            if not todo:
                pass
            elif workers <= 1 or len(todo) == 1:
                runner = ItemRunner(spec, scorers=scorers)
                try:
                    for it in todo:
                        emit(runner.run(it), fh)
                finally:
                    runner.close()
            else:
                if scorers:
                    raise RunError("scripted scorers only work in-process (workers=1)")
                spec.threads = 1
                with ProcessPoolExecutor(
                    max_workers=min(workers, len(todo)),
                    mp_context=get_context("spawn"),
                    initializer=_init_worker,
                    initargs=(spec, os.getpid()),
                ) as pool:
                    pending: set[Future[dict[str, Any]]] = set()
                    queue = list(todo)
                    try:
                        while queue or pending:
                            while queue and len(pending) < workers * 4:
                                pending.add(pool.submit(_run_in_worker, queue.pop(0).to_json()))
                            finished_now, pending = wait(pending, return_when=FIRST_COMPLETED)
                            for fut in finished_now:
                                emit(fut.result(), fh)
                    except BaseException:
                        for fut in pending:
                            fut.cancel()
                        raise
    finally:
        meta["wall_s"] = round(meta["wall_s"] + time.perf_counter() - t0, 3)
        all_records = read_records(items_path)
        meta["done"] = len(done_ids(all_records) & wanted)
        meta["finished"] = meta["done"] == len(wanted)
        meta["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        _write_meta(meta_path, meta)
    return RunResult(out_dir, len(items), len(items) - len(todo), ran, errors, meta["wall_s"], new_records, call_run_id)
