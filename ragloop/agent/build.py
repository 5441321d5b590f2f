"""One way to build an agent: the CLI, the service, the evaluation runner, the experiments harness
and the benchmarks all call `build_agent`, each passing only what it chooses differently.

What each caller chooses (everything else comes from the pipeline config and the collection's
settings, as `Runtime.build` reads them):
- the service and the CLI: `calls`, the call log (the store's `model_calls`) every model call it
  builds writes to (the service also: `expansion`, the collection's semantic query-expansion cache);
- the evaluation runner: `scorers` (a sweep's shared scorers) and per-run `checkpointer_url` /
  `log_url`, so an evaluation's threads stay with the run, not in the user's home;
- the benchmarks: checkpointer and conversation log in a temporary directory;
- the experiments harness: the defaults.
Tests pass doubles (`chat`, `scorers`, `search`) the same way.
"""

from __future__ import annotations

from ragloop.agent.api import Agent
from ragloop.agent.memory import ConversationMemory
from ragloop.agent.runtime import Runtime
from ragloop.agent.search import SearchProvider
from ragloop.config import PipelineConfig
from ragloop.models.chat import CallSink, ChatModel
from ragloop.models.scoring import Scorer
from ragloop.retrieval.collection import Collection
from ragloop.retrieval.expansion import ExpansionLookup


def build_agent(
    collection: Collection,
    config: PipelineConfig,
    *,
    chat: ChatModel | None = None,
    scorers: dict[str, Scorer] | None = None,
    search: SearchProvider | None = None,
    expansion: ExpansionLookup | None = None,
    checkpointer_url: str | None = None,
    log_url: str | None = None,
    memory: ConversationMemory | None = None,
    calls: CallSink | None = None,
) -> Agent:
    """The agent for `collection` under `config`: its runtime (chat model, scorers, external search,
    retriever with the optional `expansion` lookup) and its conversation memory (SQLite under the
    collection's `RAGLOOP_HOME` unless `checkpointer_url` / `log_url` or a shared `memory` say otherwise).
    `calls`: the call log (the store's `model_calls`) the chat model and LLM scorers it builds write to."""
    runtime = Runtime.build(
        collection, config, chat=chat, scorers=scorers, search=search, expansion=expansion, calls=calls
    )
    return Agent(collection, config, runtime=runtime, checkpointer_url=checkpointer_url, log_url=log_url, memory=memory)
