"""Start-up recovery of document jobs: nothing an instance accepted is dropped silently by a restart.

At start-up the service takes up the jobs it (its `owner`: host name + `RAGLOOP_HOME`, or
`ServiceConfig.instance`) left `queued` or `running` — a crash, a kill, or a shutdown that did not
wait for the queue:

- an upload runs again when every file is still staged, or, for the job that was running, already
  moved into place (the incremental ingest makes a repeated run harmless); on a shared collection
  backend the files stay staged until the outcome is recorded, and a job whose ingest committed
  finds its marker and succeeds without ingesting again (`ragloop.service.shared_uploads`), so
  a document deleted meanwhile on another instance is not brought back;
- a deletion runs again; if the index no longer has the document, the interrupted run got that far
  and the job succeeds;
- anything else is marked failed, "interrupted by a restart; upload again", after putting back any
  version of a file the upload had set aside.

Jobs of other owners are left alone: another instance sharing the database may be running them.
Two processes on one home are kept apart by an advisory lock on `uploads/.jobs.lock`: the one that
holds it takes up the home's jobs; the other does not (its neighbour's jobs are alive).
"""

from __future__ import annotations

import logging
import shutil
from typing import IO

from ragloop.service.documents import INTERRUPTED, DocumentJobs, uploads_root
from ragloop.store import DocumentJob

log = logging.getLogger("ragloop.service")


class HomeLock:
    """An exclusive, non-blocking advisory lock on a file; released by `release()` or when the process
    dies. Where the platform has no `fcntl` (Windows) it always succeeds: one process per home."""

    def __init__(self, handle: IO[str] | None) -> None:
        self._handle = handle

    @classmethod
    def acquire(cls, jobs: DocumentJobs) -> HomeLock | None:
        try:
            import fcntl
        except ImportError:
            return cls(None)
        path = jobs.settings.home / "uploads" / ".jobs.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = path.open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            return None
        return cls(handle)

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing the file drops the lock
            self._handle = None


def recover_document_jobs(jobs: DocumentJobs) -> dict[str, str]:
    """Resume or fail what this instance left unfinished; returns {job_id: "resumed" | "failed"}."""
    if jobs.home_lock is None:
        jobs.home_lock = HomeLock.acquire(jobs)
        if jobs.home_lock is None:
            log.warning("another process runs the document jobs of %s; leaving them to it", jobs.settings.home)
            return {}
    outcome: dict[str, str] = {}
    for row in jobs.store.document_jobs.pending(jobs.owner):
        if row.kind == "delete" or _resumable(jobs, row):
            jobs.resume(row)
            outcome[row.job_id] = "resumed"
            continue
        _restore_replaced(jobs, row)
        jobs.discard_staging(row.collection, row.job_id)
        try:
            jobs.store.document_jobs.finish(row.job_id, "failed", error=INTERRUPTED)
        except Exception as exc:  # stays pending: the next start-up tries again
            log.error("document job %s could not be marked failed: %s", row.job_id, exc)
            continue
        outcome[row.job_id] = "failed"
    if outcome:
        log.warning("document jobs left unfinished by the last run: %s", outcome)
    return outcome


def _resumable(jobs: DocumentJobs, row: DocumentJob) -> bool:
    stage = jobs.staging_dir(row.collection, row.job_id)
    root = uploads_root(jobs.settings, row.collection)
    running = row.status == "running"
    return all((stage / n).is_file() or (running and (root / n).is_file()) for n in row.files)


def _restore_replaced(jobs: DocumentJobs, row: DocumentJob) -> None:
    backups = jobs.staging_dir(row.collection, row.job_id) / ".replaced"
    root = uploads_root(jobs.settings, row.collection)
    for name in row.files:
        if (backups / name).is_file() and not (root / name).exists():
            shutil.move(str(backups / name), root / name)
