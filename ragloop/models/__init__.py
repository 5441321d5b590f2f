"""Model backends behind small interfaces, named `"provider:name"`."""

from __future__ import annotations

from ragloop.config.settings import Settings
from ragloop.models.cache import CachedEmbedder
from ragloop.models.embedding import Embedder, HashedEmbedder, OnnxMiniLMEmbedder
from ragloop.models.errors import UnknownModelError

EMBEDDERS = ("onnx:all-minilm-l6-v2", "test:hashed")

_loaded: dict[tuple[str, int, int], Embedder] = {}


def make_embedder(name: str, settings: Settings, *, max_tokens: int = 256, batch_size: int = 16) -> Embedder:
    """An embedder wrapped in the content-hash cache: the shared one in PostgreSQL when
    `settings.embedding_cache_url` names one (ingest spread over workers when
    `settings.distributed_embedding`), else the SQLite file under `RAGLOOP_HOME/cache`.
    """
    inner = make_model(name, settings, max_tokens=max_tokens, batch_size=batch_size)
    if settings.embedding_cache_url:
        from ragloop.models.shared_cache import SharedCachedEmbedder

        return SharedCachedEmbedder(
            inner, settings.embedding_cache_url, distributed=settings.distributed_embedding, max_tokens=max_tokens
        )
    return CachedEmbedder(inner, settings.cache_dir / "embeddings.sqlite")


def make_model(name: str, settings: Settings, *, max_tokens: int = 256, batch_size: int = 16) -> Embedder:
    """The uncached embedder `name`. The ONNX session is loaded once per process: the service and
    the CLI ask for it often."""
    key = (name, max_tokens, batch_size)
    inner = _loaded.get(key)
    if inner is None:
        if name == "onnx:all-minilm-l6-v2":
            inner = OnnxMiniLMEmbedder(threads=settings.threads, batch_size=batch_size, max_tokens=max_tokens)
        elif name.startswith("test:hashed"):
            dim = int(name.rsplit("-", 1)[1]) if name.count("-") else 384
            inner = HashedEmbedder(dim)
        else:
            raise UnknownModelError(f"unknown embedder {name!r}; known: {', '.join(EMBEDDERS)}")
        _loaded[key] = inner
    return inner


__all__ = [
    "EMBEDDERS",
    "CachedEmbedder",
    "Embedder",
    "HashedEmbedder",
    "OnnxMiniLMEmbedder",
    "make_embedder",
    "make_model",
]
