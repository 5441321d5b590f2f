"""Conversation memory follows the service's database.

With the embedded default (a SQLite store in `RAGLOOP_HOME`) the answer graph's checkpoints and the
full conversation log stay in their SQLite files beside it (`checkpoints.sqlite`,
`conversations.sqlite`). With a PostgreSQL store (`RAGLOOP_DATABASE_URL`) both live in that
database, so every instance on it shares every conversation: a follow-up may land on any instance,
and deleting a session on one deletes it for all. Nothing else is configured: the URL of the
store decides.
"""

from __future__ import annotations

from sqlalchemy.engine import URL, make_url

from ragloop.agent.memory import ConversationMemory
from ragloop.config import Settings

MAX_CHECKPOINT_CONNECTIONS = 10


def memory_urls(database_url: str | URL, settings: Settings) -> tuple[str, str]:
    """(checkpointer URL, conversation-log URL) for a service whose store is at `database_url`."""
    url = make_url(database_url)
    if url.get_backend_name() == "postgresql":
        checkpoints = url.set(drivername="postgresql").render_as_string(hide_password=False)
        log = url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
        return checkpoints, log
    home = settings.home
    return f"sqlite:///{home / 'checkpoints.sqlite'}", f"sqlite:///{home / 'conversations.sqlite'}"


def service_memory(database_url: str | URL, settings: Settings) -> ConversationMemory:
    checkpoints, log = memory_urls(database_url, settings)
    return ConversationMemory(checkpoints, log)
