"""Uploads on a shared collection backend (`RAGLOOP_COLLECTIONS_URL`): sources live with the index.

With collections in PostgreSQL every instance serves the same documents, so an uploaded file
cannot live in the home of the instance that happened to receive it: another instance could not
re-upload the name (the registry would point at a folder it does not have), and a delete there
would leave the file on the first instance, whose next ingest of its upload folder would bring
the document back. So on a shared backend an upload job:

- ingests only its own staged files, as file arguments (`plan_ingest` then deletes nothing and
  no local folder is scanned); the incremental ingest carries every other document over from the
  current generation, which is exactly what the registry holds;
- registers them under one root every instance agrees on (`shared_upload_root`), not a path;
- hands their bytes to the storage (`CollectionStorage.write_sources`), written in the registry
  transaction that switches the generation, with a marker of the job (`job_marker`): index,
  registry rows and sources change together or not at all. A delete drops the source in its own
  generation switch (`Collection.delete_documents`), so nothing is left anywhere to resurrect it.

Crash recovery keeps the guarantees of `ragloop.service.document_recovery`: the staging folder is
removed only after the job's outcome is recorded, so a restarted job still finds its files; and a
job whose ingest committed before the crash finds its marker and does not ingest again (which
could bring back a document deleted meanwhile on another instance).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from ragloop.config import PipelineConfig, Settings
from ragloop.retrieval.collection import Collection, Progress
from ragloop.service.uploads import UploadError

log = logging.getLogger("ragloop.service")

UPLOAD_ROOT_PREFIX = "ragloop-uploads:"


def shared_upload_root(collection: str) -> str:
    """The registry `root` of a document uploaded to a shared backend (the same on every instance)."""
    return f"{UPLOAD_ROOT_PREFIX}{collection}"


def job_marker(job_id: str) -> str:
    """Registry state key an upload job sets in the transaction that commits its ingest."""
    return f"upload_job:{job_id}"


def ingest_staged(
    coll: Collection,
    stage: Path,
    files: tuple[str, ...],
    config: PipelineConfig,
    progress: Progress,
    *,
    job_id: str,
    interrupted: str,
) -> dict[str, Any]:
    """Ingest the staged `files` of job `job_id` into `coll` (see the module docstring); files the
    ingest skips are listed in `rejected`, all of them skipped is an UploadError. Closes `coll`."""
    try:
        marker = job_marker(job_id)
        if coll.exists() and coll.registry.get_state(marker):
            return {"collection": coll.name, "generation": coll.generation(), "note": "ingested before the restart"}
        for name in files:
            if not (stage / name).is_file():
                raise UploadError(f"{name}: the staged file is gone; {interrupted}")
        sources = {name: (stage / name).read_bytes() for name in files}
        summary: dict[str, Any] = coll.ingest(
            [stage / name for name in files],
            config,
            progress,
            root=shared_upload_root(coll.name),
            sources=sources,
            marker=marker,
        ).to_json()
        skipped = {s["path"]: s["reason"] for s in summary.get("skipped", [])}
        bad = [n for n in files if n in skipped]
        if bad and len(bad) == len(files):
            raise UploadError("; ".join(f"{n}: {skipped[n]}" for n in bad))
        if bad:
            summary["rejected"] = [{"document": n, "reason": skipped[n]} for n in bad]
        return summary

    finally:
        coll.close()


def forget(settings: Settings, collection: str, job_id: str, stage: Path) -> None:
    """Once a job's outcome is recorded it is never resumed: its staged files and marker can go."""
    shutil.rmtree(stage, ignore_errors=True)
    coll = Collection(collection, settings)
    try:
        if coll.exists():
            with coll.registry.transaction() as txn:
                txn.delete_state(job_marker(job_id))
    except Exception as exc:  # a stale marker only costs a registry row
        log.debug("marker of document job %s not cleared: %s", job_id, exc)
    finally:
        coll.close()
