"""The `ragloop` command line: typer sub-apps over the layers below.

Every command that prints results has `--json` with stable field names, so scripts and the
contract checks can drive it; human output goes through rich.
"""

from __future__ import annotations

import typer

from ragloop.cli import agent, demo, dev, drift, experiments, golden, improve, kb, models, optimum, service, simulate
from ragloop.cli import eval as eval_cli

app = typer.Typer(
    name="ragloop",
    help="Answers questions from a document collection and checks its own answers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
kb.register(app)
agent.register(app)
demo.register(app)
service.register(app)
experiments.register(app)
drift.register(app)
golden.register(app)
improve.register(app)
simulate.register(app)
optimum.register(app)
dev.register(app)
app.add_typer(models.app, name="models", help="Chat models and scorers: list, pull, check.")
app.add_typer(eval_cli.app, name="eval", help="Evaluation: run suites, reports, the CI gate, judge calibration.")


def main() -> None:
    from ragloop import tracing

    tracing.configure()  # OpenTelemetry spans when the OTEL_* environment names an exporter (off by default)
    app()
