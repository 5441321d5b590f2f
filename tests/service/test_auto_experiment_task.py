"""`ragloop serve` runs the auto-experiment step as a periodic task, with the experiment defaults
read from the environment."""

from __future__ import annotations

from ragloop.service.config import ServiceConfig
from ragloop.store import Store
from tests.service.conftest import SERVICE, build_app


def test_serve_runs_the_auto_experiment_step(store: Store) -> None:
    app = build_app(store)
    assert "auto-experiment" in app.state.service.loops.names
    off = build_app(store, service_config=SERVICE.with_(auto_experiment_interval_s=0.0))
    assert "auto-experiment" not in off.state.service.loops.names


def test_the_experiment_defaults_come_from_the_environment() -> None:
    env = {
        "RAGLOOP_EXPERIMENT_TRAFFIC_SPLIT": "0.5",
        "RAGLOOP_EXPERIMENT_MIN_SAMPLE_SIZE": "20",
        "RAGLOOP_EXPERIMENT_PRIMARY_METRIC": "user_rating",
        "RAGLOOP_EXPERIMENT_GUARDRAIL_METRICS": "faithfulness",
        "RAGLOOP_AUTO_EXPERIMENT_REQUIRES_APPROVAL": "true",
    }
    auto = ServiceConfig.from_env(env).auto_experiments
    assert (auto.traffic_split, auto.min_sample_size, auto.primary_metric) == (0.5, 20, "user_rating")
    assert auto.guardrail_metrics == ("faithfulness",) and auto.require_approval is True
    spec = auto.spec("x", "pv-a", "pv-b")
    assert spec.traffic_split == 0.5 and [m.value for m in spec.guardrail_metrics] == ["faithfulness"]
    defaults = ServiceConfig.from_env({}).auto_experiments
    assert (defaults.traffic_split, defaults.min_sample_size, defaults.min_duration_s) == (0.05, 500, 86400.0)
    assert defaults.require_approval is False
