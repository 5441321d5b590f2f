"""Ingest throughput: the embedding path before and after issue 16, on the same subset in one run.

    nice -n 10 .venv/bin/python benchmarks/ingest_throughput.py                 # first ~1 M chars
    nice -n 10 .venv/bin/python benchmarks/ingest_throughput.py --chars 200000  # quick

The first `--chars` characters of the Python 3.11 docs (files in sorted order) are copied to a
temp dir and ingested twice with the default PipelineConfig (chunk vectors plus the precomputed
passage vectors), each time into a FRESH temp `RAGLOOP_HOME` (cold embedding cache, so the
cache cannot fake the speed-up):

- old: the pre-issue-16 path, reproduced here: `embed` on 64-text slices in file order (each
  slice sorted and padded on its own), ONNX intra-op threads spinning (onnxruntime's default);
- new: `Embedder.embed_many` (distinct texts sorted by length across the whole ingest, one cache
  commit per 64-text slice) and a session without spinning.

Reported: wall and process CPU seconds, chars/s, the model's work in tokens (real vs padded:
load-independent), the ratio, the agreement of every vector of both runs (chunk vectors and
the cached passage vectors, by content hash: min cosine), and an EXTRAPOLATION to the 11 M
characters of the whole docs at the measured rate. The machine may be shared: compare ratios.
Writes benchmarks/results/ingest_throughput.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from _common import REPO, machine, print_table, write_results

import ragloop.models as models
from ragloop.config import PipelineConfig, Settings
from ragloop.models import CachedEmbedder, OnnxMiniLMEmbedder
from ragloop.models.scoring import passage_embed_texts
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.store import index_text

DOCS = REPO.parent / "shared" / "datasets" / "python311-docs-rst"
FULL_DOCS_CHARS = 11_000_000


def copy_subset(dst: Path, limit: int) -> int:
    """The first files (sorted paths) until `limit` characters are reached; returns the chars."""
    total = 0
    for src in sorted(p for p in DOCS.rglob("*") if p.is_file()):
        if total >= limit:
            break
        text = src.read_text(encoding="utf-8", errors="replace")
        total += len(text)
        out = dst / src.relative_to(DOCS)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    return total


def old_embed_many(
    self: CachedEmbedder, texts: Sequence[str], progress: Callable[[int, int], None] | None = None
) -> np.ndarray:
    """The loop `Collection._assemble` / `_embed_passage_texts` ran before issue 16."""
    parts = [self.embed(texts[i : i + 64]) for i in range(0, len(texts), 64)]
    return np.concatenate(parts) if parts else np.zeros((0, self.dim), dtype=np.float32)


def padded_tokens(tok_lengths: Sequence[int], batch: int, window: int | None) -> int:
    """Tokens the model runs on: each batch pads to its longest text. `window`: texts sorted in
    windows of that many (the old path), None: sorted all together (the new one)."""
    total = 0
    step = window or max(1, len(tok_lengths))
    for i in range(0, len(tok_lengths), step):
        group = sorted(tok_lengths[i : i + step])
        total += sum(max(group[j : j + batch]) * len(group[j : j + batch]) for j in range(0, len(group), batch))
    return total


def run_ingest(docs: Path, tmp: Path, label: str, config: PipelineConfig, old: bool) -> tuple[dict[str, object], Path]:
    home = tmp / f"home-{label}"
    settings = Settings(home=home)
    dense = config.retrieval.dense
    models._loaded.clear()
    models._loaded[(dense.embedder, dense.max_tokens, dense.batch_size)] = OnnxMiniLMEmbedder(
        threads=settings.threads, batch_size=dense.batch_size, max_tokens=dense.max_tokens
    )
    saved = CachedEmbedder.embed_many
    if old:
        CachedEmbedder.embed_many = old_embed_many  # type: ignore[method-assign]
    try:
        load_before = os.getloadavg()[0]
        cpu0, wall0 = time.process_time(), time.perf_counter()
        summary = Collection("bench", settings).ingest([docs], config)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    finally:
        CachedEmbedder.embed_many = saved  # type: ignore[method-assign]
    print(f"  {label}: {summary.chunks_total} chunks in {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "chunks": summary.chunks_total,
        "load_average_1min_before": round(load_before, 2),
        "load_average_1min_after": round(os.getloadavg()[0], 2),
    }, home


def cached_vectors(home: Path) -> dict[str, np.ndarray]:
    with sqlite3.connect(home / "cache" / "embeddings.sqlite") as db:
        return {h: np.frombuffer(v, dtype=np.float32) for h, v in db.execute("SELECT hash, vector FROM embeddings")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chars", type=int, default=1_000_000, help="characters of the docs to ingest (whole files)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = ap.parse_args(argv)
    if not DOCS.is_dir():
        print(f"missing {DOCS}", file=sys.stderr)
        return 2
    os.environ["RAGLOOP_PRECOMPUTE_PASSAGE_VECTORS"] = "1"
    config = PipelineConfig()
    tmp = Path(tempfile.mkdtemp(prefix="ragloop-ingest-throughput-"))
    try:
        docs = tmp / "docs"
        chars = copy_subset(docs, args.chars)
        print(f"subset: {chars} characters", flush=True)
        old, old_home = run_ingest(docs, tmp, "old", config, old=True)
        new, new_home = run_ingest(docs, tmp, "new", config, old=False)

        new_coll = Collection("bench", Settings(home=new_home))
        chunks = new_coll.load().chunks
        chunk_texts = [index_text(c, config.retrieval.index_headings) for c in chunks]
        passage_texts = list(dict.fromkeys(t for c in chunks for t in passage_embed_texts(c.text)))
        embedder = models._loaded[next(iter(models._loaded))]
        assert isinstance(embedder, OnnxMiniLMEmbedder)
        lengths = {
            name: [len(e.ids) for e in embedder._tok.encode_batch([t for t in texts if t.strip()])]
            for name, texts in (("chunks", chunk_texts), ("passages", passage_texts))
        }
        bs = config.retrieval.dense.batch_size
        tokens = {
            "real": sum(sum(v) for v in lengths.values()),
            "old_padded": sum(padded_tokens(v, bs, 64) for v in lengths.values()),
            "new_padded": sum(padded_tokens(v, bs, None) for v in lengths.values()),
        }
        old_vecs = np.asarray(Collection("bench", Settings(home=old_home)).load().vectors)
        new_vecs = np.asarray(new_coll.load().vectors)
        chunk_cos = float((old_vecs * new_vecs).sum(axis=1).min()) if len(new_vecs) else 1.0
        a, b = cached_vectors(old_home), cached_vectors(new_home)
        common = sorted(set(a) & set(b))
        live = [h for h in common if a[h].any()]
        cache_cos = min(float(a[h] @ b[h]) for h in live) if live else 1.0
        new_coll.close()
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    rows = []
    results: dict[str, object] = {}
    for label, r in (("old", old), ("new", new)):
        wall, cpu = float(r["wall_s"]), float(r["cpu_s"])  # type: ignore[arg-type]
        rate = chars / wall
        r |= {"chars_per_s": round(rate, 1), "extrapolated_11M_min": round(FULL_DOCS_CHARS / rate / 60, 1)}
        results[label] = r
        rows.append([label, wall, cpu, rate, FULL_DOCS_CHARS / rate / 60, r["load_average_1min_before"]])
    speedup_wall = float(old["wall_s"]) / float(new["wall_s"])  # type: ignore[arg-type]
    speedup_cpu = float(old["cpu_s"]) / float(new["cpu_s"])  # type: ignore[arg-type]
    md = "Command: `nice -n 10 .venv/bin/python benchmarks/ingest_throughput.py" + (
        f" --chars {args.chars}`" if args.chars != 1_000_000 else "`"
    )
    md += "\n\n" + print_table(
        f"Ingest of the first {chars:,} characters of the Python 3.11 docs ({new['chunks']} chunks, "
        f"{len(passage_texts):,} passage texts), default config, cold cache",
        ["path", "wall s", "CPU s", "chars/s (wall)", "11 M chars, min (extrapolated)", "load 1 min before"],
        rows,
        1,
    )
    md += "\n" + print_table(
        "Ratios and agreement",
        ["measure", "value"],
        [
            ["speed-up, wall time (old / new)", speedup_wall],
            ["speed-up, process CPU time (old / new)", speedup_cpu],
            ["model tokens, real", tokens["real"]],
            ["model tokens run, old (padded per 64-text window)", tokens["old_padded"]],
            ["model tokens run, new (padded after a global sort)", tokens["new_padded"]],
            ["padding work removed (old / new tokens)", tokens["old_padded"] / tokens["new_padded"]],
            ["chunk vectors, min cosine old vs new", f"{chunk_cos:.7f}"],
            [f"cached vectors ({len(live):,} by content hash), min cosine old vs new", f"{cache_cos:.7f}"],
        ],
        4,
    )
    md += (
        "\nThe 11 M-character column is an extrapolation at the rate measured on this subset, on a machine "
        "shared with other work (see the load average); the ratios are the comparable numbers.\n"
    )
    write_results(
        "ingest_throughput",
        {
            "command": md.splitlines()[0],
            "machine": machine(),
            "chars": chars,
            "chunks": new["chunks"],
            "passage_texts": len(passage_texts),
            "old": results["old"],
            "new": results["new"],
            "speedup_wall": round(speedup_wall, 3),
            "speedup_cpu": round(speedup_cpu, 3),
            "tokens": tokens,
            "min_cosine_chunk_vectors": chunk_cos,
            "min_cosine_cached_vectors": cache_cos,
            "cached_vectors_compared": len(live),
        },
        md,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
