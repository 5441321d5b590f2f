"""Ingest throughput: the embedding path before and after issue 16's second step, on one subset in one run.

    nice -n 10 .venv/bin/python benchmarks/ingest_throughput.py                 # first ~1 M chars
    nice -n 10 .venv/bin/python benchmarks/ingest_throughput.py --chars 200000  # quick

The first `--chars` characters of the Python 3.11 docs (files in sorted order) are copied to a
temp dir and ingested twice with the default PipelineConfig (chunk vectors plus the precomputed
passage vectors), each time into a FRESH temp `RAGLOOP_HOME` (cold embedding cache):

- main: the path before this step: `Embedder.embed_many` (texts sorted by length across the
  ingest) in 64-text slices, one ONNX session with `RAGLOOP_THREADS` intra-op threads (no
  spinning) on batches of 16 texts;
- new: the package's path: `RAGLOOP_THREADS` single-threaded sessions run batches side by side
  (Python threads; onnxruntime releases the GIL), batches of at most 16 texts AND 1,024 padded
  tokens, 256-text slices (one cache commit each).

Then the model variants alone, on a sample of that ingest's distinct texts (every k-th block of
16 of all texts sorted by length, so lengths and padding are those of the real run), in
round-robin rounds (min CPU per variant, so that other work on a shared machine inflates it
least): one 2-thread session or 2 single-thread sessions, batches of 16 texts or capped at a
token budget. Reported: wall and process CPU seconds (CPU, not wall, is comparable on a shared
machine), the ratios to `main`, and the agreement of every vector (min cosine).
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
import ragloop.models.embedding as emb
from ragloop.config import PipelineConfig, Settings
from ragloop.models import OnnxMiniLMEmbedder
from ragloop.models.scoring import passage_embed_texts
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.store import index_text

DOCS = REPO.parent / "shared" / "datasets" / "python311-docs-rst"


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


class OneSessionEmbedder(OnnxMiniLMEmbedder):
    """The MiniLM path before this step: ONE session with `threads` intra-op threads (no
    spinning), batches of `batch_size` texts, or of at most `budget` padded tokens."""

    def __init__(self, threads: int, batch_size: int = 16, max_tokens: int = 256, budget: int = 10**9) -> None:
        import onnxruntime as ort

        super().__init__(threads=1, batch_size=batch_size, max_tokens=max_tokens)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        model_path, _ = emb._minilm_files()
        self._sessions = [ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])]
        self._idle.get()
        self._idle.put(self._sessions[0])
        self.budget = budget

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return _with_budget(self.budget, super().embed, texts)


class ParallelEmbedder(OnnxMiniLMEmbedder):
    """The package's embedder with another token budget (10**9: batches of `batch_size` texts)."""

    def __init__(self, threads: int, budget: int) -> None:
        super().__init__(threads=threads)
        self.budget = budget

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return _with_budget(self.budget, super().embed, texts)


def _with_budget(budget: int, embed: Callable[[Sequence[str]], np.ndarray], texts: Sequence[str]) -> np.ndarray:
    """`embed` with the package's token cap set to `budget` for the call."""
    saved = emb.BATCH_TOKENS
    emb.BATCH_TOKENS = budget
    try:
        return embed(texts)
    finally:
        emb.BATCH_TOKENS = saved


def run_ingest(
    docs: Path, tmp: Path, label: str, config: PipelineConfig, main_path: bool
) -> tuple[dict[str, object], Path]:
    home = tmp / f"home-{label}"
    settings = Settings(home=home)
    dense = config.retrieval.dense
    models._loaded.clear()
    models._loaded[(dense.embedder, dense.max_tokens, dense.batch_size)] = (
        OneSessionEmbedder(settings.threads, dense.batch_size, dense.max_tokens)
        if main_path
        else OnnxMiniLMEmbedder(threads=settings.threads, batch_size=dense.batch_size, max_tokens=dense.max_tokens)
    )
    saved = emb.EMBED_SLICE
    emb.EMBED_SLICE = 64 if main_path else saved
    try:
        load_before = os.getloadavg()[0]
        cpu0, wall0 = time.process_time(), time.perf_counter()
        summary = Collection("bench", settings).ingest([docs], config)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    finally:
        emb.EMBED_SLICE = saved
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


def variants(texts: list[str], threads: int, stride: int, rounds: int) -> tuple[list[list[object]], dict[str, object]]:
    """Each model variant on every `stride`-th block of 16 of `texts` sorted by length."""
    ordered = sorted(dict.fromkeys(t for t in texts if t.strip()), key=len)
    sample = [t for b in range(0, len(ordered), 16 * stride) for t in ordered[b : b + 16]]
    tok = OnnxMiniLMEmbedder(threads=1)._tok
    tokens = sum(len(e.ids) for e in tok.encode_batch(sample))
    kinds: dict[str, OnnxMiniLMEmbedder] = {
        f"main: 1 session x {threads} threads, 16 texts": OneSessionEmbedder(threads),
        f"1 session x {threads} threads, <= 16 texts and 1,024 tokens": OneSessionEmbedder(threads, budget=1024),
        f"1 session x {threads} threads, <= 64 texts and 4,096 tokens": OneSessionEmbedder(
            threads, batch_size=64, budget=4096
        ),
        f"{threads} sessions x 1 thread, 16 texts": ParallelEmbedder(threads, 10**9),
        f"{threads} sessions x 1 thread, <= 64 texts and 4,096 tokens": ParallelEmbedder(threads, 4096),
        f"new: {threads} sessions x 1 thread, <= 16 texts and 1,024 tokens": ParallelEmbedder(threads, 1024),
    }
    for kind, e in kinds.items():
        if "64 texts" in kind:
            e.batch_size = 64
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    wall: dict[str, list[float]] = {k: [] for k in kinds}
    vecs: dict[str, np.ndarray] = {}
    for r in range(rounds):
        for kind, e in kinds.items():
            c0, w0 = time.process_time(), time.perf_counter()
            vecs[kind] = e.embed(sample)
            cpu[kind].append(time.process_time() - c0)
            wall[kind].append(time.perf_counter() - w0)
            print(f"  round {r + 1} {kind}: {cpu[kind][-1]:.1f} s CPU, {wall[kind][-1]:.1f} s wall", flush=True)
    base = next(iter(kinds))
    live = np.abs(vecs[base]).sum(axis=1) > 0
    rows: list[list[object]] = []
    out: dict[str, object] = {"sample_texts": len(sample), "sample_tokens": tokens, "stride_blocks": stride}
    for kind in kinds:
        c, w = min(cpu[kind]), float(np.median(wall[kind]))
        cos = float((vecs[kind][live] * vecs[base][live]).sum(axis=1).min())
        ratio = min(cpu[base]) / c
        rows.append([kind, c, w, 1e6 * c / tokens, ratio, f"{cos:.7f}"])
        out[kind] = {
            "cpu_s_min": round(c, 2),
            "cpu_s": [round(x, 2) for x in cpu[kind]],
            "wall_s_median": round(w, 2),
            "cpu_ratio_main_over_variant": round(ratio, 3),
            "min_cosine_vs_main": cos,
        }
    return rows, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chars", type=int, default=1_000_000, help="characters of the docs to ingest (whole files)")
    ap.add_argument("--stride", type=int, default=8, help="variants: every k-th block of 16 sorted texts")
    ap.add_argument("--rounds", type=int, default=2, help="variants: round-robin rounds (min CPU kept)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = ap.parse_args(argv)
    if not DOCS.is_dir():
        print(f"missing {DOCS}", file=sys.stderr)
        return 2
    os.environ["RAGLOOP_PRECOMPUTE_PASSAGE_VECTORS"] = "1"
    config = PipelineConfig()
    threads = Settings().threads
    tmp = Path(tempfile.mkdtemp(prefix="ragloop-ingest-throughput-"))
    try:
        docs = tmp / "docs"
        chars = copy_subset(docs, args.chars)
        print(f"subset: {chars} characters, {threads} threads", flush=True)
        old, old_home = run_ingest(docs, tmp, "main", config, main_path=True)
        new, new_home = run_ingest(docs, tmp, "new", config, main_path=False)

        new_coll = Collection("bench", Settings(home=new_home))
        chunks = new_coll.load().chunks
        chunk_texts = [index_text(c, config.retrieval.index_headings) for c in chunks]
        passage_texts = list(dict.fromkeys(t for c in chunks for t in passage_embed_texts(c.text)))
        old_vecs = np.asarray(Collection("bench", Settings(home=old_home)).load().vectors)
        new_vecs = np.asarray(new_coll.load().vectors)
        chunk_cos = float((old_vecs * new_vecs).sum(axis=1).min()) if len(new_vecs) else 1.0
        a, b = cached_vectors(old_home), cached_vectors(new_home)
        common = sorted(set(a) & set(b))
        live = [h for h in common if a[h].any()]
        cache_cos = min(float(a[h] @ b[h]) for h in live) if live else 1.0
        new_coll.close()
        var_rows, var_out = variants(chunk_texts + passage_texts, threads, args.stride, args.rounds)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    rows = [
        [label, r["wall_s"], r["cpu_s"], r["load_average_1min_before"]] for label, r in (("main", old), ("new", new))
    ]
    speedup_wall = float(old["wall_s"]) / float(new["wall_s"])  # type: ignore[arg-type]
    speedup_cpu = float(old["cpu_s"]) / float(new["cpu_s"])  # type: ignore[arg-type]
    flags = "".join(
        f" --{k} {v}"
        for k, v, d in (("chars", args.chars, 1_000_000), ("stride", args.stride, 8), ("rounds", args.rounds, 2))
        if v != d
    )
    niceness = os.nice(0)
    prefix = f"nice -n {niceness} " if niceness else ""
    md = f"Command: `{prefix}.venv/bin/python benchmarks/ingest_throughput.py{flags}`"
    md += f" (load average 1/5/15 at the end: {machine()['load_average_1_5_15']})"
    md += "\n\n" + print_table(
        f"Ingest of the first {chars:,} characters of the Python 3.11 docs ({new['chunks']} chunks, "
        f"{len(passage_texts):,} passage texts), default config, cold cache, {threads} threads",
        ["path", "wall s", "CPU s", "load 1 min before"],
        rows,
        1,
    )
    md += "\n" + print_table(
        "Ratios and agreement",
        ["measure", "value"],
        [
            ["speed-up, wall time (main / new)", speedup_wall],
            ["speed-up, process CPU time (main / new)", speedup_cpu],
            ["chunk vectors, min cosine main vs new", f"{chunk_cos:.7f}"],
            [f"cached vectors ({len(live):,} by content hash), min cosine main vs new", f"{cache_cos:.7f}"],
        ],
        4,
    )
    md += "\n" + print_table(
        f"Model variants on {var_out['sample_texts']:,} of those texts ({var_out['sample_tokens']:,} tokens; every "
        f"{args.stride}th block of 16 sorted by length), min CPU of {args.rounds} round-robin rounds",
        ["variant", "CPU s", "wall s (median)", "CPU us / token", "CPU ratio main / variant", "min cosine vs main"],
        var_rows,
        2,
    )
    md += "\nCPU seconds include every thread of the process. The machine may be shared (see the load average): "
    md += "compare ratios.\n"
    write_results(
        "ingest_throughput",
        {
            "command": md.splitlines()[0],
            "machine": machine(),
            "threads": threads,
            "chars": chars,
            "chunks": new["chunks"],
            "passage_texts": len(passage_texts),
            "main": old,
            "new": new,
            "speedup_wall": round(speedup_wall, 3),
            "speedup_cpu": round(speedup_cpu, 3),
            "min_cosine_chunk_vectors": chunk_cos,
            "min_cosine_cached_vectors": cache_cos,
            "cached_vectors_compared": len(live),
            "variants": var_out,
        },
        md,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
