"""How tier-1/tier-2 disagreement reaches human review (tier 3): capped a day, highest first.

Until tier 1 is recalibrated, most tier-2 judgements disagree with its uncalibrated prior (178 of
187 in the reliability run went to review), and sending each one to people turns the review queue
into a firehose. So a disagreement above `tier3_disagreement` only makes the answer a *candidate*:
a `human_candidate` job (`Tier.HUMAN_CANDIDATE`) that no worker claims. Once a UTC day is over (and
`GRACE_S` more, for judgements still committing), that day's candidates are ranked by disagreement
and the top N go to the review queue, with

    N = min(tier3_disagreement_daily_max, ceil(tier3_disagreement_share × answers judged at tier 2 that day))

and every candidate of the day is closed. The price of ranking is latency: a candidate reaches
reviewers the day after it was judged. So a **floor** goes first: the day's first
`tier3_disagreement_daily_min` disagreements (never more than the daily max) go to review at once,
when they are offered, and the day's cap is at least the floor:

    N = min(daily_max, max(daily_min, ceil(share × judged)))

The floor admissions count against N, and the ranked selection at the day's end fills the rest with
the day's highest remaining candidates (ties: the earlier). Why a floor: at low volume the share
rounds to one item a day, a day late (the simulation: 20 judged a day, one review, while the
reviewer could do 20 and every diagnosis waited for an ideal answer that only a reviewer's
correction would supply); one reviewer's day of work is no firehose. The random tier-3 sample and
detailed user feedback are not capped and go to review at once; an answer that already waits for
review for one of those reasons takes no disagreement slot.

Days are read from the queue's clock (`store.queue.clock`), the clock that stamps the jobs, so one
injected clock moves both. `select_due()` runs in the worker loop; it holds an exclusive lock for
its one transaction and is idempotent: another worker's pass, or a rerun after a late candidate,
admits only what the day's cap has left. `offer` takes the same lock for the floor, so two workers
judging at once never admit past it.
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
        """Inside the tier-2 transaction: when the answer disagrees enough, send it to review at once
        while the day's floor has room, else hold it as a candidate for the day's ranked selection."""
        if disagreement <= self.config.tier3_disagreement:
            return False
        queue, rounded = self.store.queue, round(disagreement, 6)
        if self.floor > 0:
            with queue.exclusive("review-intake"):
                day = day_start(queue.clock())
                tag = day.date().isoformat()
                admitted = self._admitted(day, tag)
                if admitted < self.floor:
                    payload = {
                        "reasons": [RoutingReason.DISAGREEMENT],
                        "disagreement": rounded,
                        "day": tag,
                        "rank": admitted + 1,
                        "floor": self.floor,
                    }
                    queue.enqueue(answer_id, Tier.HUMAN, payload)  # already waiting for review: unchanged
                    return True
        queue.enqueue(answer_id, Tier.HUMAN_CANDIDATE, {"disagreement": rounded})
        return True

    @property
    def floor(self) -> int:
        """Disagreements a day that go to review at once."""
        return max(0, min(self.config.tier3_disagreement_daily_min, self.config.tier3_disagreement_daily_max))

    def cap(self, judged: int) -> int:
        """Disagreement cases a day with `judged` tier-2 judgements may send to review."""
        share = math.ceil(max(0.0, self.config.tier3_disagreement_share) * judged - 1e-9)
        return max(0, min(self.config.tier3_disagreement_daily_max, max(self.floor, share)))

    def _admitted(self, day: datetime, tag: str) -> int:
        """Review jobs this intake already sent for the day `tag` (at once or at the day's end)."""
        jobs = self.store.queue.listed(Tier.HUMAN, statuses=tuple(JobStatus), since=day, limit=MAX_CANDIDATES)
        return sum(1 for j in jobs if j.payload.get("day") == tag)

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
        earlier = self._admitted(day, tag)
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
