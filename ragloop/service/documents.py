"""Uploaded documents: validation, staging, background ingestion with progress, and deletion.

Uploads live in `RAGLOOP_HOME/uploads/<collection>/`, ingested as one root (document ids are the
file names); on a shared collection backend they live in the collection's storage instead, so any
instance can re-upload or delete them (`ragloop.service.shared_uploads`). An upload is all or
nothing: every file is checked completely before the 202 (name, type, size, then `load_chunks`,
the very load and chunking the ingest runs, which also refuses a lone surrogate, NUL, and markup
too deep or too large to parse quickly); one bad file is a 422 naming it and why, and nothing is
kept, so no file is taken in without the rest. Accepted files are staged in a hidden directory
(ingest skips dot-directories); a job moves them into place and ingests. A file the ingest still
skips is taken out again (or the version it replaced restored) and listed with its reason in
`result.rejected`, the others kept; a failed job keeps nothing and says why in one plain line
(`failure_reason`). Deleting a document drops it from the index as one new generation
(`Collection.delete_documents`), uploaded or not; an uploaded file leaves the upload area too. The
upload area never holds a file the index does not, and readers never see a half state.

Jobs are rows in the store (`document_jobs`), so `GET /v1/jobs/{id}` and the job list answer from
any instance and survive a restart. A job runs on a dedicated thread (one at a time: ingests of one
collection serialise on its lock anyway) of the instance that owns the collection's files, the
row's `owner`; after a restart that instance resumes or fails what it left unfinished
(`ragloop.service.document_recovery`), so nothing is dropped silently. Shutdown lets the running
job finish; queued ones stay queued for the next start.
"""

from __future__ import annotations

import logging
import shutil
import socket
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragloop import tracing
from ragloop.config import PipelineConfig, Settings
from ragloop.ingest.scan import load_chunks
from ragloop.ingest.types import LoaderError
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.storage import shared_backend
from ragloop.service import shared_uploads
from ragloop.service.uploads import StagedFile, UploadError, failure_reason
from ragloop.service.uploads import check_collection_name as check_collection_name
from ragloop.service.uploads import check_filename as check_filename
from ragloop.store import DocumentJob, Store

if TYPE_CHECKING:
    from ragloop.service.document_recovery import HomeLock

log = logging.getLogger("ragloop.service")

INTERRUPTED = "interrupted by a restart; upload again"
PROGRESS_EVERY_S = 0.5
FINISH_RETRY_DELAYS_S = (0.2, 1.0, 3.0)


@dataclass(frozen=True)
class _Job:
    """What the worker thread needs of a job row."""

    job_id: str
    kind: str
    collection: str
    files: tuple[str, ...]
    resumed: bool = False

    @classmethod
    def of(cls, row: DocumentJob, *, resumed: bool = False) -> _Job:
        return cls(row.job_id, row.kind, row.collection, tuple(str(f) for f in row.files), resumed)


def job_public(row: DocumentJob) -> dict[str, Any]:
    """The job as the API shows it (`JobPublic`)."""
    p = row.progress or {}
    done, total = int(p.get("done", 0)), int(p.get("total", 0))
    fraction = 1.0 if row.status == "succeeded" else (min(1.0, done / total) if total else 0.0)
    return {
        "job_id": row.job_id,
        "kind": row.kind,
        "collection": row.collection,
        "status": row.status,
        "documents": list(row.files),
        "progress": {"phase": str(p.get("phase", "")), "done": done, "total": total, "fraction": round(fraction, 3)},
        "result": row.result,
        "error": row.error,
        "created_at": row.created_at,
        "started_at": row.started_at,
        "finished_at": row.finished_at,
    }


def default_owner(settings: Settings) -> str:
    """Host name + `RAGLOOP_HOME`: the instance whose disk holds a job's collection and staged files."""
    owner = f"{socket.gethostname()}:{settings.home.resolve()}"
    return owner if len(owner) <= 255 else f"{socket.gethostname()[:120]}:{sha256(owner.encode()).hexdigest()}"


def uploads_root(settings: Settings, collection: str) -> Path:
    return settings.home / "uploads" / collection


class _Progress:
    """The ingest's progress callback: written to the job row at most every PROGRESS_EVERY_S (and on
    every phase change); best effort, a failed write only delays the next one."""

    def __init__(self, store: Store, job_id: str) -> None:
        self.store, self.job_id = store, job_id
        self.phase, self.done, self.total = "", 0, 0
        self._written = 0.0

    def __call__(self, phase: str, done: int, total: int) -> None:
        changed = phase != self.phase
        self.phase, self.done, self.total = phase, done, total
        now = time.monotonic()
        if changed or now - self._written >= PROGRESS_EVERY_S or (total and done >= total):
            self._written = now
            try:
                self.store.document_jobs.set_progress(self.job_id, phase, done, total)
            except Exception as exc:
                log.debug("progress of document job %s not written: %s", self.job_id, exc)

    def state(self) -> dict[str, Any]:
        return {"phase": self.phase, "done": self.done, "total": self.total}


class DocumentJobs:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        config_for: Callable[[], PipelineConfig],
        *,
        owner: str | None = None,
        on_done: Callable[[DocumentJob], None] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.config_for = config_for
        self.owner = owner or default_owner(settings)
        self.on_done = on_done
        self.shared = shared_backend(settings)
        """Collections shared with other instances: uploads are kept by the storage, not this home."""
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragloop-ingest")
        self.home_lock: HomeLock | None = None
        """Held (by `recover_document_jobs`) while this instance runs the home's jobs."""

    # ------------------------------------------------------------------ reading

    def get(self, job_id: str) -> DocumentJob | None:
        return self.store.document_jobs.get(job_id)

    def recent(
        self, *, collection: str | None = None, status: str | None = None, limit: int = 50, offset: int = 0
    ) -> list[DocumentJob]:
        return self.store.document_jobs.recent(collection=collection, status=status, limit=limit, offset=offset)

    # ------------------------------------------------------------------ uploads

    def staging_dir(self, collection: str, job_id: str) -> Path:
        return uploads_root(self.settings, collection) / ".staging" / job_id

    def validate_staged(self, collection: str, staged: list[StagedFile]) -> None:
        """Load and chunk every staged file as the ingest will and check its id is free; raises
        UploadError naming the first file refused and why."""
        registered, chunking = self._registered(collection), self.config_for().chunking
        for f in staged:
            try:
                load_chunks(f.path, f.path.parent, f.name, chunking, self.settings.max_file_bytes)
            except LoaderError as exc:
                raise UploadError(f"{f.name}: {exc}") from None
            rec = registered.get(f.name)
            if rec is not None and not self._uploaded(collection, rec):
                raise UploadError(
                    f"{f.name}: a document with this id was ingested from {rec} (not uploaded); rename the file",
                    409,
                )

    def _uploaded(self, collection: str, root: str) -> bool:
        """Whether a document registered under `root` was uploaded (so an upload may replace it)."""
        if root == shared_uploads.shared_upload_root(collection):
            return True
        return Path(root).resolve() == uploads_root(self.settings, collection).resolve()

    def _registered(self, collection: str) -> dict[str, str]:
        coll = Collection(collection, self.settings)
        try:
            return {rel: rec.root for rel, rec in coll.registry.files().items()} if coll.exists() else {}
        finally:
            coll.close()

    def submit_upload(self, collection: str, job_id: str, staged: list[StagedFile]) -> DocumentJob:
        """Record the job (`queued`) and queue it; the files are already staged under `job_id`."""
        row = self.store.document_jobs.create(
            job_id, owner=self.owner, collection=collection, kind="ingest", files=[f.name for f in staged]
        )
        self._submit(_Job.of(row))
        return row

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
        if rel not in files:
            raise LookupError(f"collection {collection!r} has no document {doc_id!r}")
        if rel != doc_id:
            raise UploadError(f"{doc_id!r} is a record of {rel!r}: delete the whole file {rel!r}", 409)
        row = self.store.document_jobs.create(
            uuid.uuid4().hex, owner=self.owner, collection=collection, kind="delete", files=[rel]
        )
        self._submit(_Job.of(row))
        return row

    # ------------------------------------------------------------------ running

    def _submit(self, job: _Job) -> None:
        self._pool.submit(self._run, job)

    def _run(self, job: _Job) -> None:
        attrs: tracing.Attributes = {"ragloop.job.id": job.job_id, "ragloop.job.kind": job.kind}
        with tracing.span(f"ragloop.document_job {job.kind}", attrs, kind="consumer") as sp:
            status = self._run_job(job)
            tracing.set_attributes(sp, {"ragloop.job.status": status or "not_started"})

    def _run_job(self, job: _Job) -> str | None:
        try:
            attempt = self.store.document_jobs.start(job.job_id).attempts
        except Exception as exc:  # finished meanwhile, or the store is down: left for a restart to take up
            log.error("document job %s cannot start: %s", job.job_id, exc)
            return None
        progress = _Progress(self.store, job.job_id)
        result: dict[str, Any] | None = None
        error: str | None = None
        try:
            if job.kind == "ingest":
                result = self._ingest_upload(job, progress)
            else:
                result = self._delete(job, progress, ran_before=attempt > 1)
            if job.resumed:
                result["resumed_after_restart"] = True
        except Exception as exc:
            error = failure_reason(exc)
            log.warning("document job %s (%s) failed: %s", job.job_id, job.kind, error[:300])
        status = "failed" if error is not None else "succeeded"
        if self._finish(job, status, result, error, progress.state()) and self.shared and job.kind == "ingest":
            shared_uploads.forget(
                self.settings, job.collection, job.job_id, self.staging_dir(job.collection, job.job_id)
            )
        return status

    def _finish(
        self, job: _Job, status: str, result: dict[str, Any] | None, error: str | None, progress: dict[str, Any]
    ) -> bool:
        for delay in (*FINISH_RETRY_DELAYS_S, None):
            try:
                row = self.store.document_jobs.finish(job.job_id, status, result=result, error=error, progress=progress)
            except Exception as exc:
                if delay is None:  # stays `running`: the next start-up takes it up again
                    log.error("the outcome of document job %s (%s) was not recorded: %s", job.job_id, status, exc)
                    return False
                time.sleep(delay)
                continue
            if self.on_done is not None:
                self.on_done(row)
            return True
        return False

    def _ingest(self, job: _Job, root: Path, progress: _Progress) -> dict[str, Any]:
        coll = Collection(job.collection, self.settings)
        try:
            return coll.ingest([root], self.config_for(), progress=progress).to_json()
        finally:
            coll.close()

    def _ingest_upload(self, job: _Job, progress: _Progress) -> dict[str, Any]:
        """Move the staged files into place (keeping any version they replace aside) and ingest. Run
        again after a restart, a file already moved into place counts as moved. On a shared backend the
        storage keeps the sources instead (`shared_uploads.ingest_staged`)."""
        if self.shared:
            stage = self.staging_dir(job.collection, job.job_id)
            return shared_uploads.ingest_staged(
                Collection(job.collection, self.settings),
                stage,
                job.files,
                self.config_for(),
                progress,
                job_id=job.job_id,
                interrupted=INTERRUPTED,
            )
        root = uploads_root(self.settings, job.collection)
        stage = self.staging_dir(job.collection, job.job_id)
        backups = stage / ".replaced"
        moved: list[Path] = []
        replaced: list[tuple[Path, Path]] = []
        try:
            for name in job.files:
                staged, target, backup = stage / name, root / name, backups / name
                if staged.exists():
                    if target.exists():
                        backups.mkdir(parents=True, exist_ok=True)
                        shutil.move(str(target), backup)
                    shutil.move(str(staged), target)
                elif not target.exists():
                    raise UploadError(f"{name}: the staged file is gone; {INTERRUPTED}")
                moved.append(target)
                if backup.exists():
                    replaced.append((backup, target))
            summary = self._ingest(job, root, progress)
        except Exception:
            self._undo(moved, replaced)
            shutil.rmtree(stage, ignore_errors=True)
            raise
        skipped = {s["path"]: s["reason"] for s in summary.get("skipped", [])}
        bad = [n for n in job.files if n in skipped]
        if bad:
            self._undo([root / n for n in bad], [(b, t) for b, t in replaced if t.name in bad])
            if len(bad) == len(job.files):
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

    def _delete(self, job: _Job, progress: _Progress, *, ran_before: bool) -> dict[str, Any]:
        """Drop the document from the index (one new generation). An uploaded file is removed too (it
        is held aside until the index no longer has it, and put back if that fails); a file ingested
        from elsewhere stays where it is, and re-ingesting its root would add it again. Run again after
        a restart, a document the index no longer has was deleted by the interrupted run."""
        rel = job.files[0]
        progress("delete", 0, 1)
        target = uploads_root(self.settings, job.collection) / rel
        trash = self.staging_dir(job.collection, job.job_id)
        held = trash / Path(rel).name
        coll = Collection(job.collection, self.settings)
        try:
            rec = coll.registry.files().get(rel) if coll.exists() else None
            if rec is None:
                if not ran_before:
                    raise LookupError(f"collection {job.collection!r} has no document {rel!r}")
                shutil.rmtree(trash, ignore_errors=True)
                progress("delete", 1, 1)
                return {"collection": job.collection, "deleted": [rel], "note": "deleted before the restart"}
            if held.exists() and not target.exists():  # held aside by the interrupted run
                shutil.move(str(held), target)
            uploaded = self._uploaded(job.collection, rec.root)
            if uploaded and target.exists():
                trash.mkdir(parents=True, exist_ok=True)
                shutil.move(str(target), held)
            try:
                summary = coll.delete_documents([rel]).to_json()
            except Exception:
                if held.exists():
                    shutil.move(str(held), target)
                raise
        finally:
            coll.close()
        shutil.rmtree(trash, ignore_errors=True)
        progress("delete", 1, 1)
        if not uploaded:
            summary["note"] = (
                f"{rel} was ingested from {rec.root}; the file is still there, "
                f"and `ragloop ingest {rec.root}` would add it again"
            )
        return summary

    def discard_staging(self, collection: str, job_id: str) -> None:
        shutil.rmtree(self.staging_dir(collection, job_id), ignore_errors=True)

    # ------------------------------------------------------------------ restart and shutdown

    def resume(self, row: DocumentJob) -> None:
        """Queue a job left unfinished by an earlier run of this instance (see `document_recovery`)."""
        self._submit(_Job.of(row, resumed=True))

    def shutdown(self, wait: bool = True, *, drain: bool = False) -> None:
        """Stop taking jobs. The running job finishes (with `wait`); queued ones finish too with `drain`,
        else they stay `queued` in the store and the next start-up takes them up."""
        self._pool.shutdown(wait=wait, cancel_futures=not drain)
        if self.home_lock is not None:
            self.home_lock.release()
            self.home_lock = None
