"""Offline evaluation of the answer graph: every decision it makes, not just its final answer.

- `datasets`: typed loaders for the shared sets (SQuAD 2.0 dev, MTRAG-UN dev, CACM);
  `suites`: those sets (and golden-set JSONL files) as evaluation items with their gold, and the
  collection each one runs against (built on first use, cached under RAGLOOP_HOME);
  `golden`: the golden-set schema, validation, drafting, pooling and human review.
- `metrics`: ranking metrics (`retrieval`), per-item decision metrics (`agent`), answer metrics
  with the RAGAS formulas through the scorer interface (`answer`), operations (`ops`), and all of
  them for one result record (`item`). Definitions: docs/metrics.md.
- `runner`: one suite x one config, parallel, resumable, one JSON line (with the trace) per item.
- `stats`: bootstrap intervals, paired bootstrap / permutation tests, Cohen's kappa.
- `ablations`: the shipped configs (baseline, hybrid, hybrid_rerank, full, single toggles).
- `report`: Markdown + PNG charts + failure cases (built from `summary`, `charts`, `failures`);
  `gate`: the CI gate against `thresholds.yaml`; `judge`: judge calibration against human labels.

CLI: `ragloop eval run|report|gate|calibrate|golden`.
"""
