"""Typed trace details: what each node records about its decision, one model per node kind.

Why typed: the harness metrics, the recorder, diagnosis and the API used to read a trace record's
`detail` by string keys, so a node that renamed a key silently zeroed a metric. Now a record's
`detail` is the model of its node (`DETAILS`, keyed by the record's `node`), consumers narrow it
with `isinstance` and read attributes (mypy checks both sides), and a node that writes a key its
model does not define fails at once (`parse_detail(..., strict=True)`, used by the graph).

The JSON shape is the one stored before these models existed (the answers table's `trace` column,
the runner's result files): the same keys, tuples as arrays. Loading is tolerant, because stored
rows were written by earlier versions: unknown keys are ignored, missing ones take their
defaults, and a record whose detail no longer fits its model (or whose node is unknown) keeps its
raw detail as `OtherDetail` instead of failing the whole trace.
"""

from __future__ import annotations

from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class NodeDetail(BaseModel):
    """Base of every node's detail; frozen, unknown keys ignored when loading stored rows."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class CondenseDetail(NodeDetail):
    standalone: str = ""
    summarised: bool = False


class RetrieveDetail(NodeDetail):
    queries: list[str] = Field(default_factory=list)
    chunk_ids: list[str] = Field(default_factory=list)
    """Chunk ids in retrieval order (deduplicated across the step's queries)."""
    targeted: bool = False
    """A critique cycle's targeted retrieval (the deficiencies' correction queries)."""
    same: bool = False
    """The same set of chunks as the previous retrieval."""


class GradeDetail(NodeDetail):
    reason: str = ""
    scores: dict[str, float] = Field(default_factory=dict)
    """Grade of every chunk in the context at this step, by chunk id."""
    kept: list[str] = Field(default_factory=list)
    """Chunk ids that passed the lower threshold (empty when the entity gate failed)."""
    ungrounded_entities: list[str] = Field(default_factory=list)
    scorer: str = ""


class RefineDetail(NodeDetail):
    threshold: float = 0.0
    kept: list[tuple[str, int, int, float]] = Field(default_factory=list)
    """Kept strips as (chunk id, start, end, score)."""
    scorer: str = ""


class RewriteDetail(NodeDetail):
    query: str = ""
    purpose: Literal["internal", "external"] = "internal"
    """The knowledge base or web search."""
    duplicate: bool = False


class ExternalSearchDetail(NodeDetail):
    query: str = ""
    chunk_ids: list[str] = Field(default_factory=list)
    urls: list[str] = Field(default_factory=list)
    error: str = ""
    """Why the search failed (the step's decision is then "degraded")."""


class GenerateDetail(NodeDetail):
    sources: list[str] = Field(default_factory=list)
    corrections: list[str] = Field(default_factory=list)
    avoided: list[str] = Field(default_factory=list)


class ValidateDetail(NodeDetail):
    answer: str = ""
    """The draft, when the hallucination gate found no valid citation in it."""
    support: dict[str, float] = Field(default_factory=dict)
    uncited: int = 0
    invalid_ids: list[int] = Field(default_factory=list)
    scorer: str = ""


class CritiqueDetail(NodeDetail):
    how: str = ""
    score: float = 0.0
    found: list[tuple[str, str, float]] = Field(default_factory=list)
    """Deficiencies found this cycle as (type, affected section, severity)."""
    resolved: list[str] = Field(default_factory=list)


class FinalizeDetail(NodeDetail):
    quality: float = 0.0
    answer_check: float | None = None
    """The answer check's score of the draft (None: no check ran); below `tau_answer` the draft was refused."""
    citations: list[str] = Field(default_factory=list)
    residuals: list[str] = Field(default_factory=list)


class RefuseDetail(NodeDetail):
    searched: list[str] = Field(default_factory=list)
    verdict: str | None = None
    reason: str = ""


class OtherDetail(NodeDetail):
    """A node this version does not know, or a stored detail that no longer fits its model."""

    model_config = ConfigDict(frozen=True, extra="allow")


DETAILS: dict[str, type[NodeDetail]] = {
    "condense": CondenseDetail,
    "retrieve": RetrieveDetail,
    "grade": GradeDetail,
    "refine": RefineDetail,
    "rewrite": RewriteDetail,
    "external_search": ExternalSearchDetail,
    "generate": GenerateDetail,
    "validate_citations": ValidateDetail,
    "critique": CritiqueDetail,
    "finalize": FinalizeDetail,
    "refuse": RefuseDetail,
}
"""The detail model of each node kind: the discriminator of a trace record's `detail`."""

AnyDetail = (
    CondenseDetail
    | RetrieveDetail
    | GradeDetail
    | RefineDetail
    | RewriteDetail
    | ExternalSearchDetail
    | GenerateDetail
    | ValidateDetail
    | CritiqueDetail
    | FinalizeDetail
    | RefuseDetail
    | OtherDetail
)


class UnknownDetailKeyError(ValueError):
    """A node wrote a detail key its typed model does not define."""


def parse_detail(node: str, data: NodeDetail | dict[str, Any] | None, *, strict: bool) -> AnyDetail:
    """The typed detail of a record of `node`. strict (what the graph records): the node's model
    must exist and define every key. Not strict (stored rows): anything that does not fit is kept
    as `OtherDetail`."""
    kind = DETAILS.get(node)
    if isinstance(data, NodeDetail):
        if strict and (kind is None or type(data) is not kind):
            raise UnknownDetailKeyError(f"node {node!r} recorded a {type(data).__name__}, not its {kind}")
        return cast(AnyDetail, data)
    raw = dict(data or {})
    if kind is None:
        if strict:
            raise UnknownDetailKeyError(f"node {node!r} has no typed detail model in ragloop.agent.details")
        return OtherDetail.model_validate(raw)
    if strict:
        extra = sorted(set(raw) - set(kind.model_fields))
        if extra:
            raise UnknownDetailKeyError(f"node {node!r} wrote detail keys {extra} that {kind.__name__} does not define")
        return cast(AnyDetail, kind.model_validate(raw))
    try:
        return cast(AnyDetail, kind.model_validate(raw))
    except ValidationError:
        return OtherDetail.model_validate(raw)
