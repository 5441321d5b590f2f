"""How tier-1/tier-2 disagreement reaches human review (tier 3): capped a day, highest first.

Until tier 1 is recalibrated, most tier-2 judgements disagree with its uncalibrated prior (178 of
187 in the reliability run went to review), and sending each one to people turns the review queue
into a firehose. So a disagreement above `tier3_disagreement` only makes the answer a *candidate*:
a `human_candidate` job (`Tier.HUMAN_CANDIDATE`) that no worker claims. Once a UTC day is over (and
`GRACE_S` more, for judgements still committing), that day's candidates are ranked by disagreement
and the top N go to the review queue, with

    N = min(tier3_disagreement_daily_max, ceil(tier3_disagreement_share × answers judged at tier 2 that day))

and every candidate of the day is closed. The N are exactly the day's N highest (ties: the earlier
candidate). The price is latency: a disagreement reaches reviewers the day after it was judged. The
random tier-3 sample and detailed user feedback are not capped and go to review at once; an answer
that already waits for review for one of those reasons takes no disagreement slot.

Days are read from the queue's clock (`store.queue.clock`), the clock that stamps the jobs, so one
injected clock moves both. `select_due()` runs in the worker loop; it holds an exclusive lock for
its one transaction and is idempotent: another worker's pass, or a rerun after a late candidate,
admits only what the day's cap has left.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ragloop.improve.routing import RoutingConfig, RoutingReason
from ragloop.store import Job, Store
from ragloop.store.vocabulary import JobStatus, Tier

log = logging.getLogger("ragloop.improve.review_intake")

GRACE_S = 300.0
DAY = timedelta(days=1)
MAX_CANDIDATES = 100_000
"""Candidates read per pass; past this a day's ranking is no longer exact (far above any sane flood)."""


def day_start(at: datetime) -> datetime:
    """00:00 UTC of the day `at` falls in."""
    return at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class DaySelection:
    """What one pass decided for one closed day."""

    day: datetime
    judged: int
    candidates: int
    cap: int
    admitted: list[str]
    """Answer ids sent to review by this pass, highest disagreement first."""


class ReviewIntake:
    def __init__(self, store: Store, config: RoutingConfig) -> None:
        self.store = store
        self.config = config

    def offer(self, answer_id: str, disagreement: float) -> bool:
        """Inside the tier-2 transaction: hold the answer as a candidate when it disagrees enough."""
        if disagreement <= self.config.tier3_disagreement:
            return False
        self.store.queue.enqueue(answer_id, Tier.HUMAN_CANDIDATE, {"disagreement": round(disagreement, 6)})
        return True

    def cap(self, judged: int) -> int:
        """Disagreement cases a day with `judged` tier-2 judgements may send to review."""
        share = math.ceil(max(0.0, self.config.tier3_disagreement_share) * judged - 1e-9)
        return max(0, min(self.config.tier3_disagreement_daily_max, share))

    def select_due(self, now: datetime | None = None) -> list[DaySelection]:
        """Choose the review intake of every day that is over (`now`: the queue's clock)."""
        queue = self.store.queue
        cutoff = day_start((now or queue.clock()) - timedelta(seconds=GRACE_S))
        done: list[DaySelection] = []
        with queue.exclusive("review-intake"):
            by_day: dict[datetime, list[Job]] = {}
            for job in queue.listed(Tier.HUMAN_CANDIDATE, limit=MAX_CANDIDATES):
                if job.created_at < cutoff:
                    by_day.setdefault(day_start(job.created_at), []).append(job)
            for day, jobs in sorted(by_day.items()):
                done.append(self._select_day(day, jobs))
        for d in done:
            log.info(
                "review intake %s: %d of %d disagreement candidates sent to review (cap %d of %d judged)",
                d.day.date(),
                len(d.admitted),
                d.candidates,
                d.cap,
                d.judged,
            )
        return done

    def _select_day(self, day: datetime, jobs: list[Job]) -> DaySelection:
        queue, end, tag = self.store.queue, day + DAY, day.date().isoformat()
        judged = queue.count(Tier.LLM_JUDGE, statuses=(JobStatus.DONE,), since=day, until=end, by="completed_at")
        cap = self.cap(judged)
        earlier = sum(
            1 for j in queue.listed(Tier.HUMAN, statuses=tuple(JobStatus), since=end) if j.payload.get("day") == tag
        )
        ranked = sorted(jobs, key=lambda j: (-float(j.payload.get("disagreement", 0.0)), j.created_at, j.job_id))
        admitted: list[str] = []
        for job in ranked:
            if earlier + len(admitted) >= cap:
                break
            payload = {
                "reasons": [RoutingReason.DISAGREEMENT],
                "disagreement": job.payload.get("disagreement"),
                "day": tag,
                "rank": earlier + len(admitted) + 1,
                "cap": cap,
            }
            got = queue.enqueue(job.answer_id, Tier.HUMAN, payload)
            if got.payload.get("day") == tag:  # else it already waits for review (sample, feedback)
                admitted.append(job.answer_id)
        queue.close([j.job_id for j in jobs])
        return DaySelection(day=day, judged=judged, candidates=len(jobs), cap=cap, admitted=admitted)
