"""The regression report (n and 95% CI per metric, the baseline comparison, Markdown + PNG), its
CLI (`ragloop regress report`), and the alert webhook against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from ragloop.cli import app
from ragloop.experiments.golden import import_jsonl
from ragloop.experiments.regression import Answered, RegressionResult, run_regression
from ragloop.experiments.regression_report import regression_history, render_markdown, write_report
from ragloop.experiments.versions import register_candidate
from ragloop.store import Store
from tests.experiments.test_lifecycle import _base, _golden


def _good(q: str) -> Answered:
    i = q.split()[-1].rstrip("?")
    return Answered(f"item {i} is red", [f"d{i}.md"], False)


def _half(q: str) -> Answered:
    """Right on even items, wrong on odd ones: means near 0.5 with a real spread."""
    i = int(q.split()[-1].rstrip("?"))
    return _good(q) if i % 2 == 0 else Answered("no idea", [], False)


def _three_runs(store: Store, tmp_path: Path, webhook: str | None = None) -> list[RegressionResult]:
    good_version = _base(store)
    import_jsonl(store, _golden(tmp_path), created_by="t")
    first = run_regression(store, _good, pipeline_version=good_version)
    second = run_regression(store, _good, pipeline_version=good_version)
    worse = register_candidate(store, {"retrieval": {"k": 2}}, created_by="t")
    store.pipelines.activate(worse.version_id, reason="deliberately worse")
    third = run_regression(store, _half, pipeline_version=worse.version_id, webhook_url=webhook)
    return [first, second, third]


def test_report_has_n_and_ci_per_metric_and_flags_the_failing_one(store: Store, tmp_path: Path) -> None:
    runs = _three_runs(store, tmp_path)
    assert runs[2].regression_detected
    history = regression_history(store)
    assert [r.run_id for r in history.runs] == [r.run_id for r in runs]  # oldest first
    last = history.runs[-1]
    assert last.regression_detected and last.rollback_triggered
    assert set(last.regressed_metrics) >= {"answer_correct", "doc_recall"}  # answer_f1 is reported, not a gate
    assert "answer_f1" not in last.regressed_metrics
    f1 = last.metrics["answer_f1"]
    assert f1.n == runs[2].entries and f1.mean is not None and f1.ci95 is not None
    assert f1.ci95[0] < f1.mean < f1.ci95[1]  # a real spread: half right, half wrong
    assert abs(f1.mean - runs[2].metrics["answer_f1"]) < 1e-6
    ok = history.runs[0].metrics["doc_recall"]
    assert ok.mean == 1.0 and ok.ci95 == (1.0, 1.0)
    data = json.loads(json.dumps(history.to_json()))
    assert data["runs"][-1]["metrics"]["answer_f1"]["n"] == f1.n
    assert data["runs"][-1]["comparisons"][0]["ci95"][1] < 0
    md = render_markdown(history)
    assert f"(n={f1.n})" in md and "**yes**" in md and history.runs[-1].run_id[:12] in md
    # the odd-numbered entries went wrong and none went right: counted, beside the interval
    [acc] = [c for c in data["runs"][-1]["comparisons"] if c["metric"] == "answer_correct"]
    worse = round(-acc["difference"] * acc["n"])  # the baseline answered every entry right
    assert worse > 0 and (acc["worse"], acc["better"]) == (worse, 0)
    assert f"| {worse} / 0 | **yes** |" in md


def test_report_files_markdown_json_and_png(store: Store, tmp_path: Path) -> None:
    _three_runs(store, tmp_path)
    files = write_report(regression_history(store), tmp_path / "out")
    png = Path(files["chart"]).read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000
    assert "![metric trend](regression.png)" in Path(files["markdown"]).read_text()
    assert len(json.loads(Path(files["json"]).read_text())["runs"]) == 3


def test_empty_history_renders() -> None:
    from ragloop.experiments.regression_report import RegressionHistory, render_chart

    assert "No regression runs yet" in render_markdown(RegressionHistory([]))
    assert render_chart(RegressionHistory([]), Path("/nonexistent/x.png")) is None


def test_cli_regress_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("RAGLOOP_DATABASE_URL", url)
    monkeypatch.setenv("RAGLOOP_HOME", str(tmp_path / "home"))
    with Store.open(url) as store:
        _three_runs(store, tmp_path)
    res = CliRunner().invoke(app, ["regress", "report", "--out", str(tmp_path / "rep"), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert len(data["runs"]) == 3 and data["runs"][-1]["regressed_metrics"]
    assert Path(data["files"]["chart"]).exists()
    human = CliRunner().invoke(app, ["regress", "report", "--limit", "1"])
    assert human.exit_code == 0 and "Golden-set regression runs" in human.output


class _Hook(BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append({"path": self.path, "type": self.headers["Content-Type"], "body": json.loads(body)})
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def hook_server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    received: ClassVar[list[dict[str, Any]]] = []
    handler = type("Hook", (_Hook,), {"received": received})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/alerts", received
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_a_regression_posts_the_alert_to_the_webhook(
    store: Store, tmp_path: Path, hook_server: tuple[str, list[dict[str, Any]]]
) -> None:
    url, received = hook_server
    runs = _three_runs(store, tmp_path, webhook=url)
    assert len(received) == 1  # only the regressing run alerts
    post = received[0]
    assert post["path"] == "/alerts" and post["type"] == "application/json"
    assert post["body"]["text"] == runs[2].alert and "rolled back to" in post["body"]["text"]
    assert post["body"]["evidence"]["run_id"] == runs[2].run_id
    assert {r["metric"] for r in post["body"]["evidence"]["regressions"]} >= {"answer_correct"}


def test_a_dead_webhook_is_logged_not_fatal(store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    runs = _three_runs(store, tmp_path, webhook=f"http://127.0.0.1:{port}/x")
    assert runs[2].rollback_triggered
    assert any("webhook" in r.getMessage() and "failed" in r.getMessage() for r in caplog.records)
