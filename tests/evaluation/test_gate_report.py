"""The CI gate (exit codes through the CLI) and the report (Markdown, charts, judge warning)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from ragloop.cli import app
from ragloop.config import PipelineConfig, Settings
from ragloop.evaluation.gate import DEFAULT_THRESHOLDS, check, load_gate_spec
from ragloop.evaluation.judge import agreement, calibrations_path, load_calibrations, save_calibration
from ragloop.evaluation.report import build_report, write_report
from ragloop.evaluation.runner import run_suite
from ragloop.evaluation.suites import golden_suite
from ragloop.retrieval.collection import Collection

runner = CliRunner()


def _gate_spec(tmp_path: Path, golden_path: Path, config_path: Path, thresholds: dict[str, dict[str, float]]) -> Path:
    spec = {
        "subset": {
            "dataset": "golden",
            "golden": golden_path.name,
            "collection": "kb",
            "config": config_path.name,
            "judge": "lexical",
        },
        "thresholds": thresholds,
    }
    path = tmp_path / "thresholds.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_gate_passes_then_fails_when_a_threshold_is_raised_above_the_measured_value(
    kb: Collection, golden_path: Path, tiny_config_path: Path, tmp_path: Path
) -> None:
    spec = _gate_spec(tmp_path, golden_path, tiny_config_path, {"first_recall@k": {"min": 0.5}, "steps": {"max": 100}})
    ok = runner.invoke(app, ["eval", "gate", "--thresholds", str(spec), "--workers", "1", "--json"])
    assert ok.exit_code == 0, ok.output
    data = json.loads(ok.stdout)
    assert data["ok"] and data["items"] == 6 and data["errors"] == 0
    measured = {c["metric"]: c["measured"] for c in data["checks"]}
    assert 0.5 <= measured["first_recall@k"] <= 1.0

    raised = _gate_spec(
        tmp_path, golden_path, tiny_config_path, {"first_recall@k": {"min": measured["first_recall@k"] + 0.01}}
    )
    bad = runner.invoke(app, ["eval", "gate", "--thresholds", str(raised), "--workers", "1"])
    assert bad.exit_code == 1
    assert "DROP" in bad.stdout and "FAILED" in bad.output


def test_gate_checks_and_spec_validation(tmp_path: Path) -> None:
    rows = check({"a": (0.8, 10), "b": (5.0, 10)}, {"a": {"min": 0.8}, "b": {"max": 4.0}, "c": {"min": 0.1}})
    assert [r.ok for r in rows] == [True, False, False]  # c was not measured at all: a failure
    spec = load_gate_spec(DEFAULT_THRESHOLDS)  # the committed gate is well-formed
    assert spec["subset"]["dataset"] == "squad" and spec["thresholds"]
    broken = tmp_path / "t.yaml"
    broken.write_text("subset: {}\nthresholds: {x: {at_least: 1}}\n")
    res = runner.invoke(app, ["eval", "gate", "--thresholds", str(broken)])
    assert res.exit_code == 2 and "min: x" in res.output


def test_report_writes_markdown_and_charts_and_warns_about_an_uncalibrated_judge(
    kb: Collection, golden_path: Path, tiny_config: PipelineConfig, tmp_path: Path
) -> None:
    suite = golden_suite(golden_path, "kb")
    runs = tmp_path / "runs"
    base = tiny_config.with_overrides(agent={"tau_upper": 0.0, "tau_lower": 0.0, "rewrite": False, "critique": False})
    for name, cfg in (("baseline", base), ("full", tiny_config)):
        run_suite(suite, name, cfg, runs / "golden" / name, settings=Settings(), workers=1, judge="lexical")
    out = tmp_path / "report"
    res = runner.invoke(app, ["eval", "report", "--runs", str(runs), "--out", str(out), "--resamples", "200", "--json"])
    assert res.exit_code == 0, res.output
    md = (out / "report.md").read_text()
    assert "| Metric | baseline | full |" in md and "End-to-end accuracy" in md
    assert "full − baseline" in md  # paired comparisons
    assert "has not been calibrated" in md
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["golden-latency.png", "golden-metrics.png", "golden-refusal-curve.png"]
    assert all((out / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    data = json.loads((out / "report.json").read_text())
    assert data["suites"]["golden"]["full"]["metrics"]["first_recall@k"]["n"] == 5

    # once the judge is calibrated on >= 30 labels, the warning goes
    cal = agreement([True, False] * 15, [True, False] * 15, "lexical")
    save_calibration(cal, calibrations_path(Settings()))
    rep = build_report(runs, calibrations=load_calibrations(calibrations_path(Settings())), resamples=100)
    assert rep.warnings == []
    write_report(rep, out)
    assert "has not been calibrated" not in (out / "report.md").read_text()
