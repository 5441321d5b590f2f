"""Failure-classifier accuracy on injected failures (SQuAD 2.0 dev, Python docs), with the oracle's latency.

    .venv/bin/python benchmarks/diagnosis_accuracy.py [--per-class 80] [--reuse]
    .venv/bin/python benchmarks/diagnosis_accuracy.py --source pydocs --per-class 60

`--source pydocs` runs the same steps on the Python 3.11 docs QA set derived by
`ragloop.evaluation.pydocs` (every 8th library page; cloze questions from headed sections; dev =
even pages, test = odd), collection `diag-pydocs`. It writes
benchmarks/results/diagnosis_accuracy_pydocs.{json,md}, with the SQuAD test part beside it.

Both sources classify with the *shipped* thresholds (`Thresholds()`), which are what
`search_thresholds` chose on the dev parts of both sets together (SQuAD even articles, docs even
pages: the "joint fit", recomputed and compared here when both sources' cached inputs exist; the
SQuAD set at --per-class 80, the docs at 50). A refit on one source's dev part alone is a
sensitivity row.

1. Ingests the SQuAD 2.0 dev paragraphs once into `benchmarks/.home` (collection `diag-squad2`,
   default pipeline: MiniLM int8, hybrid, chunks of 1,200 characters); a rerun embeds nothing.
2. Injects known failures (`ragloop.improve.injection`: cut k, query-vector noise, re-chunk
   inside the answer sentence, gold paragraph removed, corrupted answer, untouched), dev part =
   even articles, test part = odd.
3. Builds each case's `DiagnosisInput` as production would (oracle retriever over the case's
   collection, answer assessed by the judge scorer) and caches them under
   `benchmarks/.home/diagnosis/` (`--reuse` classifies the cached inputs again, e.g. after a
   change to the tree alone).
4. Reports per-class precision and recall with 95% bootstrap intervals on the test part (and
   dev, where the thresholds were fit), the confusion matrix, the collections' measured
   backgrounds, the oracle's latency, and writes benchmarks/results/diagnosis_accuracy.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _common import BENCH_HOME, RESULTS_DIR, machine, percentiles_ms, print_table, write_results

from ragloop.config import PipelineConfig, Settings
from ragloop.evaluation.datasets import SquadDataset, load_squad2
from ragloop.evaluation.pydocs import load_pydocs_qa
from ragloop.improve.accuracy import SEARCH_START, class_scores, confusion, objective, predict, search_thresholds
from ragloop.improve.diagnosis import Diagnoser
from ragloop.improve.injection import InjectedCase, SquadInjector
from ragloop.improve.oracle import OracleRetriever
from ragloop.improve.types import BackgroundCalibration, DiagnosisInput, FailureMode, Thresholds
from ragloop.models.scoring import make_scorer
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.retriever import Retriever

NOTES = """### How to read these numbers

- The label is the injected mechanism (ragloop/improve/injection.py); where the answer is, the
  injector decides by the gold answer strings, and it drops a candidate whose injection did not
  cause the failure. The classifier sees only what production sees: question, ideal answer (the
  SQuAD reference span), the served ranking to rank 100, the answer and its contexts, the
  collection as it then is.
- Reference spans are extractive: a chunk that supports one names it, which the oracle's
  coverage factor uses. A judge's or a user's paraphrased ideal answer is not measured here;
  the thresholds are for span-like ideal answers and the `lexical` scorer.
- The faithful answers are verbatim extracts (a stand-in generator), so the lexical judge gives
  every faithful claim p = 0.862, its maximum; `claim_support` 0.85 would sit on that edge,
  which the robust search refuses. Generation-failure numbers are optimistic next to a
  paraphrasing LLM generator.
- The oracle scores a span-like ideal answer per *sentence* of a chunk (`oracle.score_chunks`)
  and raises its threshold to the 0.8 quantile of the collection's own background (the best
  score of a chunk that does not hold a cloze probe's span, 200 probes of its own sentences,
  `ragloop.improve.calibration`; table above). On SQuAD the background's q0.8 (0.13 to 0.19) stays below
  the absolute threshold 0.25, so here the per-sentence score is what changed; the Python-docs
  run is where the background counts.
- The design (oracle score, cut rule, grounding check, relative cut, the search's robustness
  rule, the per-sentence score and the background) was iterated with both parts' results of
  both sources in view; the thresholds were only ever fit on the dev parts (jointly with the
  docs' dev part since the background landed), but the test part is not a pristine hold-out.
  The dev part, where they were fit, misses the target (weakest class in the dev table).
- The injector's check that a chunk holds the answer reads punctuation as a word boundary (it
  used SQuAD's normalisation, which glues "focus.[citation]" into "focuscitation"): before,
  ranking-failure cases whose top k still held the answer were kept, and the classifier's right
  call on them ("retrieval success") counted against it. No threshold or rule of the tree changed.
- Still called "retrieval success" on the test part: knowledge gaps where a chunk of another
  paragraph clears the oracle threshold (the lexical oracle's false positives), and swapped answers
  the lexical judge passes (a lower-case phrase swapped into a faithful sentence is neither a name
  nor a number, so the grounding check does not see it). `gives_ideal` does not separate them:
  the stand-in generator's extract misses the ideal answer on about a fifth of the untouched cases.
- Only 61 of the 458 paragraphs span more than one chunk, so the false-positive rate of the
  chunking rule on a heavily chunked corpus is not measured here; the Python-docs run
  (`--source pydocs`, benchmarks/results/diagnosis_accuracy_pydocs.md) measures it.
- Latency is the oracle alone (5 retrievals, scoring, split check) on a shared 2-core machine.
  The background is measured once per index generation (200 probes: about 15 s per collection
  at load average about 20 here, SQuAD and docs alike) and is not in these latencies.
"""

PYDOCS_NOTES = """### How to read these numbers

- The docs have no QA file: `ragloop.evaluation.pydocs` derives one. Pages: every 8th file of
  `library/` in sorted name order (40 pages); passages: the prose of each headed section, code,
  directives and tables dropped, packed to at most 2,400 characters; per passage up to four
  sentences of 8 to 40 words, the answer = the sentence's last three words (plain words, two or
  more content terms, once in its passage), the question = "<heading>: <the sentence before the
  answer> what?". Questions are clozes, so they share more words with their passage than
  SQuAD's do; the ideal answer is a span, as SQuAD's is.
- Same pipeline as the SQuAD run (MiniLM int8, hybrid, chunks of 1,200 characters, k = 5),
  same injector, same `lexical` oracle scorer and judge, and the *shipped* thresholds, fit on
  the dev parts of both sources together (this source's even pages among them); the odd pages
  were never fit on. The row "refit on this source's dev part alone" is not what ships.
- Knowledge gaps called "retrieval success" were the weakest class before this run (recall
  0.720 test, 0.680 dev; `retrieval_success` precision 0.725 / 0.676). Cause, from the cases:
  the oracle scored a chunk whole, and with the gold section removed a sibling section of the
  same page covers a three-word span of technical vocabulary from *different* sentences ("next"
  in one, "function" in another; "connection", "shortcut", "methods" scattered) while its other
  sentences share the cloze question's words, so its relevance x coverage cleared the absolute
  0.25 chosen on SQuAD: the best chunk left for a removed-gold question scored 0.49 at the 90th
  percentile here against 0.24 on SQuAD. Fix: a span must be stated in one sentence (the score
  is the best sentence's), and the threshold rises to the collection's background quantile
  (0.40 on these collections, table above). Each part alone, on the test part: per-sentence
  score 0.877 worst class, the background on top 0.893 (the row "background off").
- What is left: a sibling section that states the same thing in one sentence ("Using the
  execute ... methods of the Connection class" for "connection shortcut methods") still looks
  like support to a lexical oracle; such gaps go to success, and ranking failures whose cut top
  k holds such a restatement too (some of these are arguably right calls). The dev part shows
  the spread: `retrieval_success` precision 0.754 there.
- Ranking failures called "retrieval success": a chunk in the cut top k states the answer in
  other words (a sibling section restating it) and scores within 0.8 of the gold chunk, so the
  oracle set reaches into the top k; by the injector's word-exact check it does not hold the
  span. Some of these are arguably right calls.
- Chunking: 206 of the 406 passages span more than one chunk (61 of 458 in SQuAD), so the split
  rule's false positives are measured here: embedding failures and gaps whose best sentence
  straddles a natural chunk boundary are called chunking failures (precision 0.925 test).
- Oracle latency is higher than on SQuAD (more sentences per chunk to score) and was measured
  at load average about 11 on 2 shared cores, as was the ingest (6,900 texts embedded: every
  chunk, sentence and strip, which the offline scorers read).
"""

CACHE = BENCH_HOME / "diagnosis"
JOINT_PER_CLASS = {"squad2": 80, "pydocs": 50}
"""The runs whose dev parts the shipped thresholds were fit on together."""
LABEL = {"squad2": "SQuAD 2.0 dev", "pydocs": "Python 3.11 docs"}


def load_source(source: str) -> SquadDataset:
    return load_squad2() if source == "squad2" else load_pydocs_qa()


def base_collection(settings: Settings, source: str) -> tuple[Collection, float]:
    ds = load_source(source)
    corpus = BENCH_HOME / "corpora" / source
    ds.write_corpus(corpus)
    name = f"diag-{source}"
    coll = Collection(name, settings)
    start = time.perf_counter()
    summary = coll.ingest([corpus], PipelineConfig())
    print(f"{name}: {summary.chunks_total} chunks, {summary.chunks_embedded} embedded now", flush=True)
    return coll, time.perf_counter() - start


async def build_inputs(args: argparse.Namespace, settings: Settings) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    coll, ingest_s = base_collection(settings, args.source)
    embedder = Retriever(coll).embedder
    start = time.perf_counter()
    ds = load_source(args.source)
    injected = SquadInjector(coll, ds, embedder, per_class=args.per_class, seed=args.seed, sigma=args.sigma).build()
    inject_s = time.perf_counter() - start
    print(f"injected {len(injected.cases)} cases in {inject_s:.0f} s; dropped {injected.dropped}", flush=True)
    scorer = make_scorer(args.scorer, settings)
    judge = scorer if args.judge == args.scorer else make_scorer(args.judge, settings)
    oracles = {name: OracleRetriever(c, scorer, embedder=embedder) for name, c in injected.collections.items()}
    rows: list[dict[str, Any]] = []
    for i, case in enumerate(injected.cases):
        diag = Diagnoser(oracles[case.collection], judge)
        inp = await diag.inputs(case.question, case.ideal_answer, case.answer, case.retrieval, case.k, case.contexts)
        rows.append({"case": _case_json(case), "input": inp.model_dump(mode="json")})
        if (i + 1) % 50 == 0:
            print(f"  {i + 1}/{len(injected.cases)} diagnosed", flush=True)
    info = {
        "ingest_seconds": round(ingest_s, 1),
        "inject_seconds": round(inject_s, 1),
        "dropped_by_verification": injected.dropped,
        "chunks": {name: len(c.load().chunks) for name, c in injected.collections.items()},
        "documents": len({c.doc_id for c in coll.load().chunks}),
        "multi_chunk_documents": sum(n > 1 for n in Counter(c.doc_id for c in coll.load().chunks).values()),
        "questions": len(ds.answerable()),
    }
    return rows, info


def _case_json(c: InjectedCase) -> dict[str, Any]:
    return {
        "case_id": c.case_id,
        "label": c.label.value,
        "part": c.part,
        "collection": c.collection,
        "injection": c.injection,
        "answers": list(c.answers),
        "answer_chunks": list(c.answer_chunks),
    }


def _cache_path(args: argparse.Namespace) -> Path:
    prefix = "" if args.source == "squad2" else f"{args.source}-"
    name = f"{prefix}inputs-n{args.per_class}-s{args.seed}-sigma{args.sigma}-{args.scorer}-{args.judge}.jsonl"
    return CACHE / name.replace(":", "_")


def load_parts(path: Path) -> dict[str, tuple[list[DiagnosisInput], list[FailureMode]]]:
    parts: dict[str, tuple[list[DiagnosisInput], list[FailureMode]]] = {"dev": ([], []), "test": ([], [])}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        inputs, labels = parts[r["case"]["part"]]
        inputs.append(DiagnosisInput.model_validate(r["input"]))
        labels.append(FailureMode(r["case"]["label"]))
    return parts


def joint_fit(args: argparse.Namespace) -> Thresholds | None:
    """`search_thresholds` on the dev parts of both sources' cached inputs together (None when
    one is not cached): what the shipped defaults must equal."""
    inputs: list[DiagnosisInput] = []
    labels: list[FailureMode] = []
    for source, n in JOINT_PER_CLASS.items():
        path = _cache_path(argparse.Namespace(**{**vars(args), "source": source, "per_class": n}))
        if not path.exists():
            return None
        dev = load_parts(path)["dev"]
        inputs += dev[0]
        labels += dev[1]
    return search_thresholds(inputs, labels)[0]


def score_rows(title: str, labels: list[FailureMode], preds: list[FailureMode]) -> tuple[list[dict[str, Any]], str]:
    scores = class_scores(labels, preds)
    rows = [
        [
            s.mode.value,
            s.n,
            s.predicted,
            f"{s.precision.value:.3f} [{s.precision.lo:.3f}, {s.precision.hi:.3f}]",
            f"{s.recall.value:.3f} [{s.recall.lo:.3f}, {s.recall.hi:.3f}]",
            "yes" if s.precision.value >= 0.85 and s.recall.value >= 0.85 else "no",
        ]
        for s in scores
    ]
    md = print_table(title, ["class", "n", "predicted", "precision [95% CI]", "recall [95% CI]", ">= 0.85 both"], rows)
    return [s.to_json() for s in scores], md


def confusion_md(title: str, labels: list[FailureMode], preds: list[FailureMode]) -> tuple[dict[str, Any], str]:
    m = confusion(labels, preds)
    short = {mode.value: mode.value.split("_")[0] for mode in FailureMode}
    rows = [[y, *(m[y][p.value] for p in FailureMode)] for y in m]
    return m, print_table(title, ["label \\ predicted", *short.values()], rows)


def beside_squad(pydocs: list[dict[str, Any]]) -> str:
    """The docs' test part next to the committed SQuAD test part (benchmarks/results/diagnosis_accuracy.json)."""
    path = RESULTS_DIR / "diagnosis_accuracy.json"
    squad = {c["mode"]: c for c in json.loads(path.read_text())["test"]["classes"]} if path.exists() else {}

    def pr(c: dict[str, Any] | None, key: str) -> str:
        if c is None:
            return "-"
        e = c[key]
        return f"{e['value']:.3f} [{e['lo']:.3f}, {e['hi']:.3f}]"

    rows = [
        [c["mode"], pr(squad.get(c["mode"]), "precision"), pr(squad.get(c["mode"]), "recall"), c["n"],
         pr(c, "precision"), pr(c, "recall")]
        for c in pydocs
    ]  # fmt: skip
    return print_table(
        "Test parts side by side (same shipped thresholds; SQuAD from benchmarks/results/diagnosis_accuracy.json)",
        ["class", "SQuAD precision", "SQuAD recall", "docs n", "docs precision", "docs recall"],
        rows,
    )


def background_tables(
    rows: list[dict[str, Any]],
    parts: dict[str, tuple[list[DiagnosisInput], list[FailureMode]]],
    thresholds: Thresholds,
) -> tuple[dict[str, Any], str]:
    """Each served collection's measured background, and the background quantile swept on both
    parts (the others held): where `Thresholds.background_quantile` was chosen, and what it does."""
    seen: dict[str, BackgroundCalibration | None] = {}
    for r in rows:
        if r["case"]["collection"] not in seen:
            bg = r["input"]["oracle"].get("background")
            seen[r["case"]["collection"]] = BackgroundCalibration.model_validate(bg) if bg else None
    keys = sorted({k for b in seen.values() if b for k in b.quantiles})
    md = [
        print_table(
            "Background per served collection (best score of a chunk not holding a cloze probe's span)",
            ["collection", "probes", *(f"q{k}" for k in keys), "floor at the chosen quantile"],
            [
                [name, b.probes if b else 0, *((b.quantiles.get(k, "-") if b else "-") for k in keys),
                 round(max(thresholds.oracle, b.at(thresholds.background_quantile)), 3)
                 if b and thresholds.background_quantile is not None else thresholds.oracle]
                for name, b in sorted(seen.items())
            ],
        )
    ]  # fmt: skip
    sweep = []
    for q in (None, 0.5, 0.75, 0.8, 0.85, 0.9, 0.95):
        t = thresholds.model_copy(update={"background_quantile": q})
        row: list[object] = ["off" if q is None else q]
        for part in ("dev", "test"):
            row += list(objective(class_scores(parts[part][1], predict(parts[part][0], t))))
        sweep.append(row)
    md.append(
        print_table(
            "Background quantile (other thresholds as chosen)",
            ["quantile", "dev worst min(P, R)", "dev macro F1", "test worst min(P, R)", "test macro F1"],
            sweep,
        )
    )
    out = {
        "collections": {n: (b.model_dump() if b else None) for n, b in seen.items()},
        "sweep": [
            dict(zip(("quantile", "dev_worst", "dev_f1", "test_worst", "test_f1"), r, strict=True)) for r in sweep
        ],
    }
    return out, "\n".join(md)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", choices=sorted(LABEL), default="squad2", help="the injected collection")
    parser.add_argument("--per-class", type=int, default=80, help="cases per class and part before verification")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--sigma", type=float, default=10.0, help="query-vector noise of the embedding injection")
    parser.add_argument("--scorer", default="lexical", help="the oracle's scorer")
    parser.add_argument("--judge", default="lexical", help="the scorer that assesses the answer")
    parser.add_argument("--reuse", action="store_true", help="classify the cached inputs of these arguments again")
    args = parser.parse_args()
    settings = Settings(home=BENCH_HOME)
    path = _cache_path(args)
    started = time.perf_counter()
    if args.reuse and path.exists():
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        info = json.loads(path.with_suffix(".info.json").read_text())
    else:
        rows, info = asyncio.run(build_inputs(args, settings))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        path.with_suffix(".info.json").write_text(json.dumps(info))
    parts: dict[str, tuple[list[DiagnosisInput], list[FailureMode]]] = {"dev": ([], []), "test": ([], [])}
    for r in rows:
        inputs, labels = parts[r["case"]["part"]]
        inputs.append(DiagnosisInput.model_validate(r["input"]))
        labels.append(FailureMode(r["case"]["label"]))
    refit, trail = search_thresholds(*parts["dev"])
    thresholds = Thresholds()  # the shipped defaults: the joint fit on both sources' dev parts
    joint = joint_fit(args)
    joint_line = (
        "Joint fit not recomputed (both sources' cached inputs are needed)."
        if joint is None
        else f"Joint fit recomputed on both dev parts: `{joint.model_dump()}`; "
        f"equal to the shipped defaults: {'yes' if joint == thresholds else 'NO'}."
    )
    kinds: dict[tuple[str, str], Counter[str]] = {}
    for r in rows:
        how = r["case"]["injection"]
        how = "answer swapped" if how.startswith("answer '") else how.split(" at ")[0].split(" sigma")[0]
        kinds.setdefault((r["case"]["label"], r["case"]["part"]), Counter())[how] += 1
    source_flag = "" if args.source == "squad2" else f" --source {args.source}"
    md = [
        f"# Failure diagnosis on injected failures ({LABEL[args.source]})\n",
        f"Command: `python benchmarks/diagnosis_accuracy.py{source_flag}"
        f" --per-class {args.per_class} --seed {args.seed} --sigma {args.sigma} --scorer {args.scorer}"
        f" --judge {args.judge}`  ",
        "Thresholds: the shipped defaults (`Thresholds()`), chosen by `search_thresholds` on the dev parts of "
        "both injected sets together (SQuAD 2.0 even articles, Python-docs even pages) and reported here on the "
        f"test part: `{thresholds.model_dump()}`. {joint_line}"
        + (
            " Parts: dev = even articles, test = odd articles.\n"
            if args.source == "squad2"
            else " Parts: dev = even pages, test = odd pages. "
            f"Corpus: {info['documents']} section passages ({info['multi_chunk_documents']} span more than one "
            f"chunk), {info.get('questions', '?')} generated questions.\n"
        ),
    ]
    md.append(
        print_table(
            "Injected set (label = the injected mechanism; see ragloop/improve/injection.py)",
            ["class", "dev", "test", "how"],
            [
                [
                    m.value,
                    sum(kinds.get((m.value, "dev"), Counter()).values()),
                    sum(kinds.get((m.value, "test"), Counter()).values()),
                    "; ".join(
                        f"{k} ({n})"
                        for k, n in sorted(
                            (kinds.get((m.value, "dev"), Counter()) + kinds.get((m.value, "test"), Counter())).items()
                        )
                    ),
                ]
                for m in FailureMode
            ],
        )
    )
    md.append(
        "Candidates the verification rejected (the injection did not cause the failure): "
        f"{info['dropped_by_verification']}\n"
    )
    out: dict[str, Any] = {
        "args": vars(args),
        "thresholds": thresholds.model_dump(),
        "joint_fit": joint.model_dump() if joint else None,
        "info": info,
        "refit_on_this_dev_not_shipped": refit.model_dump(),
    }
    for part in ("test", "dev"):
        inputs, labels = parts[part]
        preds = predict(inputs, thresholds)
        scores_json, table = score_rows(f"{part} part: per-class precision and recall", labels, preds)
        conf_json, conf_table = confusion_md(f"{part} part: confusion (rows: injected label)", labels, preds)
        worst, macro = objective(class_scores(labels, preds))
        out[part] = {
            "n": len(labels),
            "classes": scores_json,
            "confusion": conf_json,
            "worst_min_pr": worst,
            "macro_f1": macro,
        }
        met = all(c["precision"]["value"] >= 0.85 and c["recall"]["value"] >= 0.85 for c in scores_json if c["n"])
        out[part]["target_met"] = met
        md += [
            table,
            conf_table,
            f"worst per-class min(P, R): {worst:.3f}; macro F1: {macro:.3f}; "
            f"target (>= 0.85 precision and recall, every class): {'met' if met else 'NOT met'}\n",
        ]
    variants = {
        "shipped": thresholds,
        "claim_support 0.5 (the harness's)": thresholds.model_copy(update={"claim_support": 0.5}),
        "claim_support 0.85 (next to the judge's verbatim maximum)": thresholds.model_copy(
            update={"claim_support": 0.85}
        ),
        "grounding off (the judge's probability alone)": thresholds.model_copy(update={"grounding": False}),
        "context_precision 0.8 (the seed's)": thresholds.model_copy(update={"context_precision": 0.8}),
        "oracle_relative 0 (absolute threshold only)": thresholds.model_copy(update={"oracle_relative": 0.0}),
        "background off (the absolute oracle threshold alone)": thresholds.model_copy(
            update={"background_quantile": None}
        ),
        "seed-like start of the search": SEARCH_START,
    }
    variants["refit on this source's dev part alone (not shipped)"] = refit
    sens = []
    for name, t in variants.items():
        sc = class_scores(parts["test"][1], predict(parts["test"][0], t))
        w, m = objective(sc)
        low = min(sc, key=lambda c: min(c.precision.value if c.predicted else 0.0, c.recall.value) if c.n else 9.0)
        sens.append([name, w, m, low.mode.value])
    out["sensitivity_test"] = [
        dict(zip(("variant", "worst_min_pr", "macro_f1", "weakest"), r, strict=True)) for r in sens
    ]
    md.append(
        print_table(
            "Sensitivity (test part, one threshold changed from the shipped set)",
            ["variant", "worst min(P, R)", "macro F1", "weakest class"],
            sens,
        )
    )
    out["background"], bg_md = background_tables(rows, parts, thresholds)
    md.append(bg_md)
    latencies = [i.oracle.latency_ms / 1000.0 for ins, _ in parts.values() for i in ins]
    lat = percentiles_ms(latencies)
    cands = [len(i.oracle.candidates) for ins, _ in parts.values() for i in ins]
    out["oracle"] = {
        "latency_ms": lat,
        "n": len(latencies),
        "mean_candidates": round(sum(cands) / max(1, len(cands)), 2),
    }
    md.append(
        print_table(
            "Oracle retriever",
            ["calls", "latency p50 ms", "latency p95 ms", "mean candidates", "oracle threshold"],
            [[len(latencies), lat["p50"], lat["p95"], out["oracle"]["mean_candidates"], thresholds.oracle]],
        )
    )
    out["search_trail"] = trail
    out["machine"] = machine()
    out["seconds"] = round(time.perf_counter() - started, 1)
    if args.source != "squad2":
        md.append(beside_squad(out["test"]["classes"]))
    md.append(NOTES if args.source == "squad2" else PYDOCS_NOTES)
    md.append(
        f"Machine: {out['machine']}; wall time {out['seconds']} s "
        f"(inputs {'cached' if args.reuse else 'built'}; ingest took {info['ingest_seconds']} s, "
        f"injection {info['inject_seconds']} s)."
    )
    write_results("diagnosis_accuracy" + ("" if args.source == "squad2" else f"_{args.source}"), out, "\n".join(md))


if __name__ == "__main__":
    main()
