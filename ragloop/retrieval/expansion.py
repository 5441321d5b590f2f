"""The query-expansion hook: chunks to pre-load into the candidate pool for a query.

The retriever knows only this protocol. The remediation that fills it (a failed query's embedding
with its oracle chunk ids, matched by cosine) lives in `ragloop.improve.remediation`, above this
layer; the registry's exact-string pins (`Registry.pinned`) keep working beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class ExpansionLookup(Protocol):
    def lookup(self, query: str, vector: np.ndarray) -> Sequence[str]:
        """Chunk ids to put ahead of the ranked candidates, best first; empty for none. `vector` is
        the query's embedding by the collection's embedder (all zeros when nothing in it embeds)."""
        ...
