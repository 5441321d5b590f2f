"""Documents: upload into a collection (ingested in the background), delete one, follow a job, list jobs."""

from __future__ import annotations

import asyncio
import shutil
from typing import Annotated, Literal

from fastapi import APIRouter, File, HTTPException, Path, Query, UploadFile, status

from ragloop.service.deps import AdminDep, ServiceDep
from ragloop.service.documents import StagedFile, UploadError, check_collection_name, check_filename, job_public
from ragloop.service.schemas import COLLECTION_PATTERN, JobPublic

router = APIRouter(tags=["documents"])
CollectionName = Annotated[
    str, Path(pattern=COLLECTION_PATTERN, description="Collection name (created on first upload).")
]
CHUNK = 1 << 20


@router.post(
    "/v1/collections/{name}/documents",
    response_model=JobPublic,
    status_code=status.HTTP_202_ACCEPTED,
    responses={
        409: {"description": "A file's id belongs to a document ingested from elsewhere."},
        413: {"description": "A file (or the request) is over the size limit."},
        415: {"description": "Unsupported file type."},
        422: {"description": "A file cannot be read as its type, or has no text."},
    },
    summary="Upload documents (admin)",
)
async def upload_documents(
    name: CollectionName,
    files: Annotated[list[UploadFile], File(description="One or more documents (md, txt, rst, html, pdf, jsonl).")],
    svc: ServiceDep,
    _admin: AdminDep,
) -> JobPublic:
    """All or nothing: every file is checked completely before the 202 (name, type, size, then the
    ingest's own load and chunking, which refuses a lone surrogate, NUL, and markup too deep or too
    large to parse quickly); one bad file is a 422 naming it and why, and nothing of the upload is
    kept. Accepted files are ingested by a background job: follow it at `GET /v1/jobs/{job_id}` (a
    file the ingest still skips is listed with its reason in `result.rejected`, the others kept)."""
    cfg = svc.config
    try:
        check_collection_name(name)
        if not files:
            raise UploadError("no files in the upload (send multipart/form-data with `files` parts)")
        if len(files) > cfg.max_upload_files:
            raise UploadError(f"at most {cfg.max_upload_files} files per upload, got {len(files)}", 413)
        names = [check_filename(f.filename, cfg.upload_extensions) for f in files]
        if len(set(names)) != len(names):
            raise UploadError("the upload names the same file twice")
    except UploadError as exc:
        raise HTTPException(exc.status, str(exc)) from None
    jobs = svc.documents
    job_id = jobs.new_job_id()
    stage = jobs.staging_dir(name, job_id)
    try:
        staged = []
        stage.mkdir(parents=True, exist_ok=True)
        for f, fname in zip(files, names, strict=True):
            path = stage / fname
            size = 0
            with path.open("wb") as out:
                while block := await f.read(CHUNK):
                    size += len(block)
                    if size > cfg.max_upload_bytes:
                        raise UploadError(f"{fname} is larger than the {cfg.max_upload_bytes:,} byte limit", 413)
                    out.write(block)
            if size == 0:
                raise UploadError(f"{fname} is empty")
            staged.append(StagedFile(fname, path))
        await asyncio.to_thread(jobs.validate_staged, name, staged)
    except UploadError as exc:
        shutil.rmtree(stage, ignore_errors=True)
        raise HTTPException(exc.status, str(exc)) from None
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    try:
        job = await asyncio.to_thread(jobs.submit_upload, name, job_id, staged)
    except BaseException:  # not recorded (the store is down): keep nothing
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return JobPublic.model_validate(job_public(job))


@router.delete(
    "/v1/collections/{name}/documents/{doc_id:path}",
    response_model=JobPublic,
    status_code=status.HTTP_202_ACCEPTED,
    responses={
        404: {"description": "No such collection or document."},
        409: {"description": "A record inside a file: delete the whole file."},
    },
    summary="Delete a document (admin)",
)
async def delete_document(name: CollectionName, doc_id: str, svc: ServiceDep, _admin: AdminDep) -> JobPublic:
    """Removes a document from the collection's index in the background (follow the job). An uploaded
    file is deleted too; a file ingested from a directory stays there (re-ingesting would add it back)."""
    try:
        check_collection_name(name)
        job = await asyncio.to_thread(svc.documents.submit_delete, name, doc_id)
    except UploadError as exc:
        raise HTTPException(exc.status, str(exc)) from None
    except LookupError as exc:
        raise HTTPException(404, str(exc)) from None
    return JobPublic.model_validate(job_public(job))


@router.get(
    "/v1/jobs/{job_id}",
    response_model=JobPublic,
    responses={404: {"description": "No such job."}},
    summary="A document job's status and progress (admin)",
)
def get_job(job_id: str, svc: ServiceDep, _admin: AdminDep) -> JobPublic:
    """Jobs are kept in the database: any instance answers, and a restart forgets none. Admin only,
    like the uploads and deletions that make jobs and the job list: a user key gets 403 for every
    id, so it learns neither which ids exist nor any file name."""
    job = svc.documents.get(job_id)
    if job is None:
        raise HTTPException(404, f"no job {job_id!r}")
    return JobPublic.model_validate(job_public(job))


@router.get("/v1/jobs", response_model=list[JobPublic], summary="Document jobs, newest first (admin)")
def list_jobs(
    svc: ServiceDep,
    _admin: AdminDep,
    collection: Annotated[str | None, Query(max_length=64)] = None,
    job_status: Annotated[Literal["queued", "running", "succeeded", "failed"] | None, Query(alias="status")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> list[JobPublic]:
    """Uploads and deletions of every instance on this database; after a restart, the jobs it could
    not resume are here as failed ("interrupted by a restart; upload again")."""
    rows = svc.documents.recent(collection=collection, status=job_status, limit=limit, offset=offset)
    return [JobPublic.model_validate(job_public(r)) for r in rows]
