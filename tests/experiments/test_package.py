"""The package's place in the layers and its public names."""

from __future__ import annotations

import ast
from pathlib import Path

import ragloop.experiments as experiments

PACKAGE = Path(experiments.__file__).parent
ABOVE = ("ragloop.service", "ragloop.cli", "ragloop.web", "ragloop.improve")


def test_imports_nothing_above_it() -> None:
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            bad = [n for n in names if n.startswith(ABOVE)]
            assert not bad, f"{path.name} imports {bad}: ragloop.experiments sits below them"


def test_public_names_resolve() -> None:
    missing = [name for name in experiments.__all__ if not hasattr(experiments, name)]
    assert not missing and len(set(experiments.__all__)) == len(experiments.__all__)
