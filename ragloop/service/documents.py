"""Uploaded documents: validation, staging, background ingestion with progress, and deletion.

Uploads live in `RAGLOOP_HOME/uploads/<collection>/` and that directory is ingested as one root
(document ids are the file names). The request handler validates every file completely (name,
type, size, and a full parse with the same loader ingest uses) before anything is kept: a
rejected upload leaves nothing behind. Accepted files are staged in a hidden directory (ingest
skips dot-directories) and a job moves them into place and runs the incremental ingest. If the
ingest fails, or skips a file, the file is removed again (or the version it replaced restored),
so the upload area never holds a file the index does not. Deleting a document drops it from the
index as one new generation (`Collection.delete_documents`): any document, uploaded or ingested
from the command line; an uploaded file is removed from the upload area too. Readers never see a
half state.

Jobs run one at a time on a dedicated thread (ingests of one collection serialise on its lock
anyway) and are kept in memory: a restart forgets finished jobs (the documents stay ingested).
"""

from __future__ import annotations

import logging
import re
import shutil
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from ragloop.config import PipelineConfig, Settings
from ragloop.ingest.loaders import load_file
from ragloop.ingest.types import LoaderError
from ragloop.retrieval.collection import NAME_RE, Collection

log = logging.getLogger("ragloop.service")

FILENAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.()+-]{0,150}$")
MAX_JOBS_KEPT = 1000


class UploadError(ValueError):
    """An upload the service refuses; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class StagedFile:
    name: str
    path: Path


@dataclass
class DocumentJob:
    job_id: str
    kind: Literal["ingest", "delete"]
    collection: str
    documents: list[str]
    status: Literal["queued", "running", "succeeded", "failed"] = "queued"
    phase: str = ""
    done: int = 0
    total: int = 0
    result: dict[str, Any] | None = None
    error: str | None = None
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    finished_at: datetime | None = None

    def progress(self) -> dict[str, Any]:
        if self.status == "succeeded":
            fraction = 1.0
        elif self.total:
            fraction = min(1.0, self.done / self.total)
        else:
            fraction = 0.0
        return {"phase": self.phase, "done": self.done, "total": self.total, "fraction": round(fraction, 3)}

    def public(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "kind": self.kind,
            "collection": self.collection,
            "status": self.status,
            "documents": self.documents,
            "progress": self.progress(),
            "result": self.result,
            "error": self.error,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
        }


def uploads_root(settings: Settings, collection: str) -> Path:
    return settings.home / "uploads" / collection


def check_collection_name(name: str) -> None:
    if not NAME_RE.match(name):
        raise UploadError(f"invalid collection name {name!r}: use letters, digits, '_', '.', '-'", 422)


def check_filename(raw: str | None, extensions: tuple[str, ...]) -> str:
    name = (raw or "").strip()
    if not name:
        raise UploadError("every uploaded file needs a file name")
    if "/" in name or "\\" in name or name.startswith(".") or not FILENAME_RE.match(name):
        raise UploadError(
            f"file name {name!r} is not allowed: use a plain name of letters, digits, spaces and _ . ( ) + -"
        )
    lower = name.lower()
    if not any(lower.endswith(ext) for ext in extensions):
        raise UploadError(f"{name}: unsupported type; allowed: {', '.join(extensions)}", 415)
    return name


class DocumentJobs:
    def __init__(
        self,
        settings: Settings,
        config_for: Callable[[], PipelineConfig],
        *,
        on_done: Callable[[DocumentJob], None] | None = None,
    ) -> None:
        self.settings = settings
        self.config_for = config_for
        self.on_done = on_done
        self._jobs: OrderedDict[str, DocumentJob] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragloop-ingest")

    # ------------------------------------------------------------------ reading

    def get(self, job_id: str) -> DocumentJob | None:
        with self._lock:
            return self._jobs.get(job_id)

    def _add(self, job: DocumentJob) -> None:
        with self._lock:
            self._jobs[job.job_id] = job
            while len(self._jobs) > MAX_JOBS_KEPT:
                self._jobs.popitem(last=False)

    # ------------------------------------------------------------------ uploads

    def staging_dir(self, collection: str, job_id: str) -> Path:
        return uploads_root(self.settings, collection) / ".staging" / job_id

    def validate_staged(self, collection: str, staged: list[StagedFile]) -> None:
        """Parse every staged file with the ingest loader and check its id is free; raises UploadError."""
        root = uploads_root(self.settings, collection).resolve()
        registered = self._registered(collection)
        for f in staged:
            try:
                docs = load_file(f.path, f.path.parent, max_bytes=self.settings.max_file_bytes)
            except LoaderError as exc:
                raise UploadError(f"{f.name}: {exc}") from None
            if not docs or not any(d.text.strip() for d in docs):
                raise UploadError(f"{f.name}: no text to index")
            rec = registered.get(f.name)
            if rec is not None and Path(rec).resolve() != root:
                raise UploadError(
                    f"{f.name}: a document with this id was ingested from {rec} (not uploaded); rename the file",
                    409,
                )

    def _registered(self, collection: str) -> dict[str, str]:
        coll = Collection(collection, self.settings)
        try:
            return {rel: rec.root for rel, rec in coll.registry.files().items()} if coll.exists() else {}
        finally:
            coll.close()

    def submit_upload(self, collection: str, job_id: str, staged: list[StagedFile]) -> DocumentJob:
        job = DocumentJob(job_id, "ingest", collection, [f.name for f in staged])
        self._add(job)
        self._pool.submit(self._run, job, lambda: self._ingest_upload(job, staged))
        return job

    def new_job_id(self) -> str:
        return uuid.uuid4().hex

    # ------------------------------------------------------------------ deletion

    def submit_delete(self, collection: str, doc_id: str) -> DocumentJob:
        """Raises LookupError (unknown collection or document) or UploadError (a record inside a file)."""
        coll = Collection(collection, self.settings)
        try:
            if not coll.exists():
                raise LookupError(f"no collection named {collection!r}")
            files = coll.registry.files()
        finally:
            coll.close()
        rel = doc_id.split("#", 1)[0]
        rec = files.get(rel)
        if rec is None:
            raise LookupError(f"collection {collection!r} has no document {doc_id!r}")
        if rel != doc_id:
            raise UploadError(f"{doc_id!r} is a record of {rel!r}: delete the whole file {rel!r}", 409)
        uploaded = Path(rec.root).resolve() == uploads_root(self.settings, collection).resolve()
        job = DocumentJob(uuid.uuid4().hex, "delete", collection, [doc_id])
        self._add(job)
        self._pool.submit(self._run, job, lambda: self._delete(job, rel, rec.root, uploaded))
        return job

    # ------------------------------------------------------------------ running

    def _run(self, job: DocumentJob, work: Callable[[], dict[str, Any]]) -> None:
        job.status = "running"
        try:
            job.result = work()
            job.status = "succeeded"
        except Exception as exc:
            job.error = str(exc) or type(exc).__name__
            job.status = "failed"
            log.warning("document job %s (%s) failed: %s", job.job_id, job.kind, job.error[:300])
        finally:
            job.finished_at = datetime.now(UTC)
            if self.on_done is not None:
                self.on_done(job)

    def _progress(self, job: DocumentJob) -> Callable[[str, int, int], None]:
        def update(phase: str, done: int, total: int) -> None:
            job.phase, job.done, job.total = phase, done, total

        return update

    def _ingest(self, job: DocumentJob, root: Path) -> dict[str, Any]:
        coll = Collection(job.collection, self.settings)
        try:
            return coll.ingest([root], self.config_for(), progress=self._progress(job)).to_json()
        finally:
            coll.close()

    def _ingest_upload(self, job: DocumentJob, staged: list[StagedFile]) -> dict[str, Any]:
        root = uploads_root(self.settings, job.collection)
        stage = self.staging_dir(job.collection, job.job_id)
        backups = stage / ".replaced"
        moved: list[Path] = []
        replaced: list[tuple[Path, Path]] = []
        try:
            for f in staged:
                target = root / f.name
                if target.exists():
                    backups.mkdir(parents=True, exist_ok=True)
                    backup = backups / f.name
                    shutil.move(str(target), backup)
                    replaced.append((backup, target))
                shutil.move(str(f.path), target)
                moved.append(target)
            summary = self._ingest(job, root)
        except Exception:
            self._undo(moved, replaced)
            shutil.rmtree(stage, ignore_errors=True)
            raise
        skipped = {s["path"]: s["reason"] for s in summary.get("skipped", [])}
        bad = [f.name for f in staged if f.name in skipped]
        if bad:
            self._undo([root / n for n in bad], [(b, t) for b, t in replaced if t.name in bad])
            if len(bad) == len(staged):
                shutil.rmtree(stage, ignore_errors=True)
                raise UploadError("; ".join(f"{n}: {skipped[n]}" for n in bad))
            summary["rejected"] = [{"document": n, "reason": skipped[n]} for n in bad]
        shutil.rmtree(stage, ignore_errors=True)
        return summary

    @staticmethod
    def _undo(moved: list[Path], replaced: list[tuple[Path, Path]]) -> None:
        for path in moved:
            path.unlink(missing_ok=True)
        for backup, target in replaced:
            if backup.exists():
                shutil.move(str(backup), target)

    def _delete(self, job: DocumentJob, rel: str, root: str, uploaded: bool) -> dict[str, Any]:
        """Drop the document from the index (one new generation). An uploaded file is removed too (it
        is held aside until the index no longer has it, and put back if that fails); a file ingested
        from elsewhere stays where it is, and re-ingesting its root would add it again."""
        job.phase, job.total = "delete", 1
        held: Path | None = None
        target = uploads_root(self.settings, job.collection) / rel
        trash = self.staging_dir(job.collection, job.job_id)
        if uploaded and target.exists():
            trash.mkdir(parents=True, exist_ok=True)
            held = trash / Path(rel).name
            shutil.move(str(target), held)
        coll = Collection(job.collection, self.settings)
        try:
            summary = coll.delete_documents([rel]).to_json()
        except Exception:
            if held is not None and held.exists():
                shutil.move(str(held), target)
            raise
        finally:
            coll.close()
        shutil.rmtree(trash, ignore_errors=True)
        job.done = 1
        if not uploaded:
            summary["note"] = (
                f"{rel} was ingested from {root}; the file is still there, "
                f"and `ragloop ingest {root}` would add it again"
            )
        return summary

    def discard_staging(self, collection: str, job_id: str) -> None:
        shutil.rmtree(self.staging_dir(collection, job_id), ignore_errors=True)

    def shutdown(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=False)
