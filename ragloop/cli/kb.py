"""Knowledge-base commands: ingest, search, collections (`demo` is in `ragloop.cli.demo`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ragloop.cli.common import (
    CollectionOpt,
    ConfigOpt,
    JsonOpt,
    console,
    fail,
    out,
    pipeline_config,
    print_json,
    progress_bar,
    settings,
)
from ragloop.config import PipelineConfig, Settings
from ragloop.retrieval.collection import Collection, CollectionError, IngestSummary, list_collections
from ragloop.retrieval.retriever import Retriever
from ragloop.retrieval.types import Hit, Mode


def register(app: typer.Typer) -> None:
    app.command()(ingest)
    app.command()(search)
    app.command()(collections)


def _do_ingest(paths: list[Path], name: str, cfg: PipelineConfig, s: Settings, show: bool) -> IngestSummary:
    coll = Collection(name, s)
    try:
        with progress_bar(show) as prog:
            return coll.ingest(paths, cfg, prog)
    except (CollectionError, FileNotFoundError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail("interrupted: nothing was committed, the previous index is intact", code=130)
    finally:
        coll.close()


def _print_summary(summary: IngestSummary) -> None:
    for path, reason in summary.skipped:
        console.print(f"[yellow]skipped[/] {path}: {reason}", highlight=False)
    console.print(
        f"[bold]{summary.collection}[/] generation {summary.generation}: "
        f"{summary.new} new, {summary.changed} changed, {summary.unchanged} unchanged, "
        f"{summary.deleted} deleted, {len(summary.skipped)} skipped, {summary.ignored} ignored files; "
        f"{summary.chunks_total} chunks ({summary.chunks_embedded} embedded) in {summary.seconds:.1f} s",
        highlight=False,
    )


def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files or directories; ids are relative to each.")],
    collection: CollectionOpt = "default",
    config: ConfigOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Ingest documents (md, rst, html, pdf, txt, jsonl) into a collection, incrementally."""
    summary = _do_ingest(paths, collection, pipeline_config(config), settings(), show=not json_)
    if json_:
        print_json(summary.to_json())
    else:
        _print_summary(summary)


def _retrieve(name: str, query: str, k: int, mode: Mode | None, cfg: PipelineConfig, s: Settings) -> list[Hit]:
    coll = Collection(name, s)
    if not coll.exists():
        fail(f"no collection named {name!r}; known: {', '.join(list_collections(s)) or 'none'}")
    try:
        return Retriever(coll, cfg.retrieval).retrieve(query, k=k, mode=mode)
    except CollectionError as exc:
        fail(str(exc))
    finally:
        coll.close()


def _print_hits(query: str, hits: list[Hit]) -> None:
    table = Table(title=query, show_lines=True, title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("score", justify="right")
    table.add_column("source")
    table.add_column("text")
    for h in hits:
        where = h.doc_id + ("\n" + " > ".join(h.heading_path) if h.heading_path else "")
        text = " ".join(h.text.split())
        table.add_row(str(h.rank), f"{h.score:.3f}", where, text[:300] + ("…" if len(text) > 300 else ""))
    out.print(table)


def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    collection: CollectionOpt = "default",
    mode: Annotated[str | None, typer.Option(help="bm25 | dense | hybrid (default from config).")] = None,
    k: Annotated[int, typer.Option("-k", "--k", min=1, max=1000, help="How many hits.")] = 5,
    config: ConfigOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Search a collection and print the hits with their sources and per-stage scores."""
    if mode not in (None, "bm25", "dense", "hybrid"):
        fail(f"--mode must be bm25, dense or hybrid, not {mode!r}")
    cfg = pipeline_config(config)
    hits = _retrieve(collection, query, k, mode, cfg, settings())  # type: ignore[arg-type]
    if json_:
        print_json(
            {
                "query": query,
                "collection": collection,
                "mode": mode or cfg.retrieval.mode,
                "hits": [h.to_json() for h in hits],
            }
        )
    else:
        _print_hits(query, hits)


def _shown(url: str | None) -> str | None:
    """A collections URL fit to print (no password)."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True) if url else None


def collections(json_: JsonOpt = False) -> None:
    """List the collections under RAGLOOP_HOME (or in RAGLOOP_COLLECTIONS_URL's database)."""
    s = settings()
    rows = []
    for name in list_collections(s):
        coll = Collection(name, s)
        try:
            rows.append(coll.stats())
        finally:
            coll.close()
    if json_:
        print_json({"home": str(s.home), "collections_url": _shown(s.collections_url), "collections": rows})
        return
    table = Table(title=f"collections in {_shown(s.collections_url) or s.home}")
    for col in ("name", "files", "chunks", "generation", "dense_backend", "bytes"):
        table.add_column(col)
    for r in rows:
        table.add_row(*(str(r.get(c, "")) for c in ("name", "files", "chunks", "generation", "dense_backend", "bytes")))
    out.print(table)
