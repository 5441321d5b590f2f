"""Does a chunking fit that re-chunks only its focus score the pooled questions as the whole
collection re-chunked would, and what does it save?

On a copy of a finished simulation arm (its store and collection, never the arm itself): the
serving version's pooled chunking failures, the focus the fit would take (`ChunkingBufferAction.focus`:
the pooled documents and those of each question's top `FOCUS_DEPTH` x k hits), and for each size
the fit tries, every pooled question's score on the focused preview and on the whole-collection
preview, with the CPU seconds of each from a cold embedding cache (the file is removed before
each preview). A diagnostic of the fit's approximation; it never feeds the loop.

    PYTHONPATH=. .venv/bin/python benchmarks/chunking_focus.py \
        --arm benchmarks/.home/self_improvement/mtrag-degraded --name chunking_focus
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from _common import machine, markdown_table, write_results

from ragloop.config import Settings
from ragloop.improve.remediate import current_config, make_context
from ragloop.improve.remediation import ActionSpec, ChunkingBufferAction
from ragloop.improve.remediation.chunking import FOCUS_DEPTH, pooled_items
from ragloop.improve.simulation.run import COLLECTION
from ragloop.improve.types import ActionKind
from ragloop.retrieval.variants import preview_variant
from ragloop.store import Store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--arm", type=Path, required=True, help="a simulation arm's folder (holds home/)")
    ap.add_argument("--name", default="chunking_focus")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ragloop-focus-") as tmp:
        home = Path(tmp) / "home"
        shutil.copytree(args.arm / "home", home, ignore=shutil.ignore_patterns("*.lock", ".lock"))
        os.environ["RAGLOOP_HOME"] = str(home)
        settings = Settings()
        store = Store.open(f"sqlite:///{home / 'ragloop.db'}")
        stack = ExitStack()
        try:
            config = current_config(store)
            ctx, resolver = make_context(store, config, settings=settings)
            stack.callback(resolver.close)
            spec = ActionSpec(
                action_id="focus", kind=ActionKind.CHUNKING_BUFFER, component="c", payload={"collection": COLLECTION}
            )
            action = ChunkingBufferAction(spec)
            items = pooled_items(store, COLLECTION, config.version_id)
            serving = ctx.collections(COLLECTION)
            documents = len({c.doc_id for c in serving.load().chunks})
            focus = action.focus(ctx, items)
            before = action.scores(ctx, items, None)
            rows, sizes = [], []
            for size, overlap in action.sizes(ctx):
                cfg = config.with_overrides(chunking={"size": size, "overlap": overlap})
                run = {}
                for label, kwargs in (("focused", {"focus": focus, "rest": serving}), ("whole", {})):
                    for f in settings.cache_dir.glob("embeddings.sqlite*"):
                        f.unlink()
                    start = time.process_time()
                    scores = action.scores(ctx, items, preview_variant(serving, cfg, **kwargs))
                    run[label] = (scores, time.process_time() - start)
                (focused, cpu_f), (whole, cpu_w) = run["focused"], run["whole"]
                differ = sum(a != b for a, b in zip(focused, whole, strict=True))
                sizes.append(
                    {
                        "size": size,
                        "overlap": overlap,
                        "focused": focused,
                        "whole": whole,
                        "differ": differ,
                        "cpu_focused_s": round(cpu_f, 1),
                        "cpu_whole_s": round(cpu_w, 1),
                    }
                )
                rows.append([size, sum(focused), sum(whole), differ, round(cpu_f, 1), round(cpu_w, 1)])
                print(rows[-1], flush=True)
        finally:
            stack.close()
            store.close()
    payload = {
        "meta": {"arm": str(args.arm), "serving": config.version_id, "focus_depth": FOCUS_DEPTH} | machine(),
        "items": len(items),
        "before": before,
        "focus": {"documents": len(focus), "of": documents},
        "sizes": sizes,
    }
    md = "\n".join(
        [
            f"# Chunking fit: focused vs whole-collection previews ({args.arm.name})",
            "",
            f"{len(items)} pooled chunking failures of the serving version {config.version_id} "
            f"(chunk size {config.chunking.size}, k {config.retrieval.k}); target recall at the serving size "
            f"{sum(before):g} of {len(items)}. Focus: {len(focus)} of {documents} documents "
            f"(top {FOCUS_DEPTH} x k hits a question, and the pooled documents). CPU from a cold embedding cache.",
            "",
            markdown_table(
                [
                    "size",
                    "found (focused)",
                    "found (whole)",
                    "scored differently",
                    "CPU-s focused",
                    "CPU-s whole",
                ],
                rows,
            ),
        ]
    )
    write_results(args.name, payload, md + "\n")


if __name__ == "__main__":
    main()
