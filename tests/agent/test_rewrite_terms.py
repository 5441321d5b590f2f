"""Offline rewrite terms must not depend on the interpreter's hash seed: evaluation runs use
several processes, and a resumed run must add the same terms as the first one."""

from __future__ import annotations

import os
import subprocess
import sys

from ragloop.agent.nodes.rewrite import prf_terms

TEXTS = [
    "Alpha beta gamma delta epsilon zeta theta iota kappa lambda sigma omega.",
    "Omega sigma lambda kappa iota theta zeta epsilon delta gamma beta alpha.",
]
SNIPPET = f"from ragloop.agent.nodes.rewrite import prf_terms; print(prf_terms('question', {TEXTS!r}))"


def test_prf_terms_break_ties_by_first_occurrence() -> None:
    # every word occurs in both texts: all tie, so the first-seen order of the first text decides
    assert prf_terms("question", TEXTS, n=3) == ["alpha", "beta", "gamma"]


def test_prf_terms_are_the_same_under_any_hash_seed() -> None:
    outs = set()
    for seed in ("1", "2", "3"):
        env = os.environ | {"PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", SNIPPET], env=env, capture_output=True, text=True, check=True)
        outs.add(done.stdout.strip())
    assert len(outs) == 1, outs
