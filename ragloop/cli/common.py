"""Helpers shared by the CLI modules: console, JSON output, errors, progress."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from ragloop.config import PipelineConfig, Settings, load_pipeline_config

if TYPE_CHECKING:
    from ragloop.store import Store

console = Console(stderr=True)
out = Console()

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output with stable field names.")]
CollectionOpt = Annotated[str, typer.Option("--collection", "-c", help="Collection name.")]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="Pipeline config YAML.", exists=False)]


def fail(message: str, code: int = 2) -> NoReturn:
    console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def print_json(data: object) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")


def open_store(url: str | None = None) -> Store:
    """The service database (`url`, else RAGLOOP_DATABASE_URL, else RAGLOOP_HOME/ragloop.db), or one clear
    line and exit code 2 when it cannot be opened."""
    from ragloop.store import Store

    try:
        return Store.open(url)
    except Exception as exc:
        fail(f"cannot open the database: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")


def emit(data: Any, json_: bool, human: str) -> None:
    """`--json`: the data; otherwise the one human line."""
    if json_:
        print_json(data)
    else:
        out.print(human, highlight=False)


def settings() -> Settings:
    return Settings.from_env()


def pipeline_config(path: Path | None) -> PipelineConfig:
    try:
        return load_pipeline_config(path)
    except ValueError as exc:
        fail(str(exc))


@contextmanager
def progress_bar(enabled: bool) -> Iterator[Callable[[str, int, int], None] | None]:
    """A rich progress bar per phase on stderr; off for --json and when stderr is not a terminal."""
    if not enabled or not console.is_terminal:
        yield None
        return
    with Progress(
        TextColumn("{task.description:<8}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as prog:
        tasks: dict[str, TaskID] = {}

        def update(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = prog.add_task(phase, total=total or None)
            prog.update(tasks[phase], completed=done, total=total or None)

        yield update
