"""Prometheus metrics, one registry per app (so tests and a second app in one process never share counts).

Request counts and latencies are labelled by the route *template* (`/v1/answers/{answer_id}`), never
the raw path, so ids cannot blow up the label space. Queue depth and evaluation lag are read from
the database at scrape time, so they are right whichever process (server or `ragloop worker`) did
the work.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ragloop.store.vocabulary import AUTOMATIC_TIERS, JobStatus, Tier

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from ragloop.store import Store

log = logging.getLogger("ragloop.service")

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0)


class _QueueCollector(Collector):
    """Queue depth and lag per tier. The headline depth and lag cover the automatic tiers (1 and 2):
    human review jobs (tier 3) wait for people and are reported on their own, as are the review
    candidates held for the capped daily intake (`ragloop.improve.review_intake`)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily(
            "ragloop_evaluation_queue_jobs", "Evaluation jobs by tier and status", labels=["tier", "status"]
        )
        depth = GaugeMetricFamily(
            "ragloop_evaluation_queue_depth", "Tier-1 and tier-2 evaluation jobs not finished (queued + leased)"
        )
        lag = GaugeMetricFamily(
            "ragloop_evaluation_lag_seconds", "Age of the oldest unfinished tier-1 or tier-2 evaluation job"
        )
        lag_by_tier = GaugeMetricFamily(
            "ragloop_evaluation_tier_lag_seconds", "Age of the oldest unfinished job per tier", labels=["tier"]
        )
        review = GaugeMetricFamily("ragloop_review_queue_depth", "Answers waiting for human review (tier 3)")
        held = GaugeMetricFamily(
            "ragloop_review_candidates", "Disagreement cases held until their day's capped review intake is chosen"
        )
        due = GaugeMetricFamily("ragloop_evaluation_queue_due", "Evaluation jobs due to be claimed now")
        try:
            stats = self.store.queue.stats()
        except Exception as exc:  # the store being down must not break the scrape
            log.warning("metrics: cannot read the evaluation queue: %s", type(exc).__name__)
            return
        now = self.store.queue.clock()
        for tier, counts in sorted(stats.by_tier.items()):
            for status, n in sorted(counts.items()):
                jobs.add_metric([tier, status], n)
        ages = {tier: max(0.0, (now - at).total_seconds()) for tier, at in stats.oldest_pending_by_tier.items()}
        for tier, age in sorted(ages.items()):
            lag_by_tier.add_metric([tier], age)
        depth.add_metric([], stats.pending(AUTOMATIC_TIERS))
        lag.add_metric([], max((ages.get(t, 0.0) for t in AUTOMATIC_TIERS), default=0.0))
        review.add_metric([], stats.by_tier.get(Tier.HUMAN, {}).get(JobStatus.QUEUED, 0))
        held.add_metric([], stats.by_tier.get(Tier.HUMAN_CANDIDATE, {}).get(JobStatus.QUEUED, 0))
        due.add_metric([], stats.due)
        yield from (jobs, depth, lag, lag_by_tier, review, held, due)


class ServiceMetrics:
    def __init__(self, store: Store | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "ragloop_http_requests", "HTTP requests by route and status", ["method", "route", "status"], registry=r
        )
        self.latency = Histogram(
            "ragloop_http_request_duration_seconds",
            "HTTP request latency by route",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.answers = Counter("ragloop_answers", "Answers served", ["refused", "degraded"], registry=r)
        self.answer_latency = Histogram(
            "ragloop_answer_duration_seconds", "Time to a validated answer", buckets=LATENCY_BUCKETS, registry=r
        )
        self.persist_failures = Counter(
            "ragloop_answer_persist_failures", "Answers that could not be stored (and so not evaluated)", registry=r
        )
        self.rate_limited = Counter("ragloop_rate_limited", "Requests refused by the per-key rate limit", registry=r)
        self.auth_failures = Counter(
            "ragloop_auth_failures", "Requests refused for a malformed, unknown, wrong or revoked key", registry=r
        )
        self.auth_blocked = Counter(
            "ragloop_auth_blocked", "Requests refused unchecked: their address had too many refused keys", registry=r
        )
        self.evaluations = Counter(
            "ragloop_evaluations", "Evaluations written by this process", ["tier", "status"], registry=r
        )
        self.evaluation_seconds = Histogram(
            "ragloop_evaluation_duration_seconds",
            "Time to evaluate one job",
            ["tier"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.job_retries = Counter(
            "ragloop_evaluation_job_retries", "Evaluation attempts that failed", ["tier"], registry=r
        )
        self.ingest_jobs = Counter("ragloop_ingest_jobs", "Document jobs by outcome", ["kind", "status"], registry=r)
        if store is not None:
            r.register(_QueueCollector(store))

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
