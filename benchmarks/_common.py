"""Shared helpers for the benchmark scripts: paths, timing, tables, result files."""

from __future__ import annotations

import json
import os
import platform
import resource
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
BENCH_HOME = BENCH_DIR / ".home"
"""Persistent RAGLOOP_HOME for benchmark collections and the embedding cache (gitignored)."""

if str(REPO) not in sys.path:  # run as `python benchmarks/x.py` from anywhere
    sys.path.insert(0, str(REPO))


@dataclass
class Stopwatch:
    seconds: float = 0.0


@contextmanager
def timed() -> Iterator[Stopwatch]:
    """`with timed() as t: ...` then `t.seconds`."""
    sw = Stopwatch()
    start = time.perf_counter()
    try:
        yield sw
    finally:
        sw.seconds = time.perf_counter() - start


def percentiles_ms(seconds: Sequence[float], ps: Sequence[float] = (50, 95)) -> dict[str, float]:
    """{"p50": ..., "p95": ...} in milliseconds (linear interpolation, numpy's default)."""
    arr = np.asarray(seconds, dtype=np.float64) * 1000.0
    return {f"p{int(p)}": round(float(np.percentile(arr, p)), 3) for p in ps}


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (ru_maxrss is KiB on Linux)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


def dir_size_mb(path: Path) -> float:
    total = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return round(total / 1e6, 2)


def machine() -> dict[str, object]:
    """Where the numbers come from; the load average says whether the machine was shared."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
    }


def fmt(value: object, digits: int = 3) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return "" if value is None else str(value)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]], digits: int = 3) -> str:
    cells = [[fmt(c, digits) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]

    def line(parts: Sequence[str]) -> str:
        return "| " + " | ".join(p.ljust(w) for p, w in zip(parts, widths, strict=True)) + " |"

    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in cells]
    return "\n".join(out)


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]], digits: int = 3) -> str:
    """Print a titled Markdown table and return it (for the .md result file)."""
    table = markdown_table(headers, rows, digits)
    print(f"\n### {title}\n\n{table}\n", flush=True)
    return f"### {title}\n\n{table}\n"


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_results(name: str, payload: dict[str, object], markdown: str) -> tuple[Path, Path]:
    """`benchmarks/results/<name>.json` and `<name>.md`, each written atomically."""
    payload = {"benchmark": name, "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S"), **payload}
    json_path = RESULTS_DIR / f"{name}.json"
    md_path = RESULTS_DIR / f"{name}.md"
    _atomic_write(json_path, json.dumps(payload, indent=2, sort_keys=False) + "\n")
    _atomic_write(md_path, markdown.rstrip() + "\n")
    print(f"wrote {json_path.relative_to(REPO)} and {md_path.relative_to(REPO)}", flush=True)
    return json_path, md_path
