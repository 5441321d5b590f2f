"""`build_agent`: the one way the CLI, service, runner, experiments and benchmarks assemble an agent."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ragloop.agent.build import build_agent
from ragloop.retrieval.collection import Collection
from tests.agent.conftest import cfg, fixed


class NoExpansion:
    def lookup(self, query: str, vector: np.ndarray) -> Sequence[str]:
        return []


def test_the_callers_choices_reach_the_agent(coll: Collection, tmp_path: Path) -> None:
    expansion = NoExpansion()
    grade = fixed(0.9)
    agent = build_agent(
        coll,
        cfg(),
        scorers={"grade": grade},
        expansion=expansion,
        checkpointer_url=f"sqlite:///{tmp_path / 'run' / 'ck.sqlite'}",
        log_url=f"sqlite:///{tmp_path / 'run' / 'log.sqlite'}",
    )
    try:
        assert agent.runtime.retriever.expansion is expansion
        assert agent.runtime.grade_scorer is grade
        assert agent.runtime.config is agent.config
        assert agent.checkpointer_url.endswith("run/ck.sqlite")
        assert agent.answer("anything at all?").answer is not None
    finally:
        agent.memory.close()


def test_the_defaults_match_a_plain_agent(coll: Collection) -> None:
    agent = build_agent(coll, cfg())
    try:
        assert agent.runtime.retriever.expansion is None
        assert agent.checkpointer_url.endswith("checkpoints.sqlite")
    finally:
        agent.memory.close()
