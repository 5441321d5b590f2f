"""A real corpus on every machine, with no network: the Python standard library's own
documentation, extracted at run time from the installed modules' docstrings.

One Markdown file per module, headed by the module and then one section per public function,
class and method, with the signature in a code block, so heading-aware chunking and
identifier-aware BM25 have what real technical documentation gives them.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterable
from pathlib import Path

DEMO_MODULES = (
    "argparse", "base64", "bisect", "collections", "contextlib", "copy", "csv", "dataclasses",
    "datetime", "decimal", "difflib", "enum", "fnmatch", "fractions", "functools", "glob", "gzip",
    "hashlib", "heapq", "hmac", "http.client", "inspect", "io", "itertools", "json", "logging",
    "math", "operator", "os", "os.path", "pathlib", "pickle", "pprint", "queue", "random", "re",
    "secrets", "shlex", "shutil", "signal", "socket", "sqlite3", "statistics", "string", "struct",
    "subprocess", "sys", "tarfile", "tempfile", "textwrap", "threading", "time", "timeit",
    "traceback", "urllib.parse", "uuid", "warnings", "weakref", "zipfile",
)  # fmt: skip


def _doc(obj: object) -> str:
    return inspect.cleandoc(inspect.getdoc(obj) or "")


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _signature(name: str, obj: object) -> str:
    """`name(args)`, without the memory addresses in default values' reprs (`<function f at 0x7f…>`):
    they change with every process, and would make every run re-ingest those modules."""
    try:
        return _ADDRESS.sub("", f"{name}{inspect.signature(obj)}")  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return name


def _public(module: object) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in dir(module) if not n.startswith("_")]
    return sorted(set(names))


def module_markdown(modname: str) -> str:
    module = importlib.import_module(modname)
    lines = [f"# {modname}", "", _doc(module), ""]
    for name in _public(module):
        obj = getattr(module, name, None)
        if obj is None or inspect.ismodule(obj):
            continue
        if not (inspect.isclass(obj) or inspect.isroutine(obj)):
            continue
        doc = _doc(obj)
        if not doc:
            continue
        qual = f"{modname}.{name}"
        kind = "class" if inspect.isclass(obj) else "function"
        lines += [f"## {qual}", "", "```python", f"{kind} {_signature(qual, obj)}", "```", "", doc, ""]
        if inspect.isclass(obj):
            for mname, member in sorted(vars(obj).items()):
                if mname.startswith("_") or not inspect.isroutine(member):
                    continue
                mdoc = _doc(member)
                if mdoc:
                    mq = f"{qual}.{mname}"
                    lines += [f"### {mq}", "", "```python", _signature(mq, member), "```", "", mdoc, ""]
    return "\n".join(lines).strip() + "\n"


def write_corpus(dest: Path, modules: Iterable[str] = DEMO_MODULES) -> list[Path]:
    """Write one Markdown file per importable module; modules missing here are skipped."""
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for modname in modules:
        try:
            text = module_markdown(modname)
        except ImportError:
            continue
        path = dest / f"{modname}.md"
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
