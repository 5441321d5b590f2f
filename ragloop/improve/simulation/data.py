"""The simulation's data: a published data set split, once and for all, into *traffic* (replayed
through the served API, where the loop learns from it) and *held-out* (measured in-process, never
sent to the service, never read by any fit).

The split is `ragloop.improve.simulation.split` (the one the offline optimum reads too), by the
group a user's traffic comes in, so no held-out question or conversation is ever replayed: the SQuAD
article title and the MTRAG conversation id are the group keys. About 30% of the groups (by hash,
not by count) are held out; the salt is fixed, so the split is the same on every run and machine,
and it was fixed before the first run. The whole corpus is served (held-out articles must be answerable), so the
loop can only improve held-out answers by changes that generalise (pipeline versions), not by a
fix local to a traffic question.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ragloop.evaluation.datasets import MtragDataset, RetrievalDataset, SquadDataset, load_mtrag, load_squad2
from ragloop.evaluation.suites import EvalItem, mtrag_suite_from, squad_suite_from
from ragloop.improve.simulation.split import SALT, TEST_SHARE, is_test

HELDOUT_PERCENT = round(100 * TEST_SHARE)
SQUAD_SESSION_TURNS = 6
"""A SQuAD user's session: this many questions about one article, in the file's order."""


def split_part(group: str) -> str:
    """`heldout` for the groups `split.is_test` holds out (a SQuAD title, an MTRAG conversation id)."""
    return "heldout" if is_test(group) else "traffic"


@dataclass(frozen=True)
class TrafficTurn:
    """One user turn sent to the service, with what the simulated user knows about it (the gold)."""

    item: EvalItem | None
    """The gold of this turn, or None for a turn that only leads up to a graded one (MTRAG history)."""
    question: str


@dataclass(frozen=True)
class Session:
    session_id: str
    unit: str
    turns: tuple[TrafficTurn, ...]


@dataclass
class SimData:
    name: str
    dataset: RetrievalDataset
    doc_prefix: str
    traffic: list[Session]
    heldout: list[EvalItem]
    units: dict[str, list[str]] = field(default_factory=dict)
    """`traffic` / `heldout` -> the units (articles, conversations) in each part."""

    def split_note(self) -> str:
        t, h = self.units.get("traffic", []), self.units.get("heldout", [])
        unit = "articles" if self.name == "squad" else "conversations"
        return (
            f"{self.name}: {len(t)} {unit} traffic / {len(h)} held out (ragloop.improve.simulation.split: "
            f"sha256('{SALT}\\0<group>') < {TEST_SHARE}); {sum(len(s.turns) for s in self.traffic)} traffic turns, "
            f"{len(self.heldout)} held-out items"
        )


def _file_or_default(path: str | Path | None) -> Path | None:
    return None if path is None else Path(path).expanduser()


def load_squad_sim(path: str | Path | None = None, *, paragraphs_per_article: int | None = None) -> SimData:
    """SQuAD 2.0 in its published JSON (`path`: the file; default the shared 12-article dev set).
    `paragraphs_per_article` keeps the first N paragraphs of every article (the quick slice)."""
    ds = load_squad2(_file_or_default(path))
    if paragraphs_per_article is not None:
        keep = {p.doc_id for p in ds.passages if int(p.doc_id.rsplit("_p", 1)[1]) < paragraphs_per_article}
        ds = SquadDataset(
            tuple(p for p in ds.passages if p.doc_id in keep),
            tuple(q for q in ds.questions if q.paragraph_id in keep),
            name=f"squad2-first{paragraphs_per_article}",
        )
    suite = squad_suite_from(ds)
    by_article: dict[str, list[EvalItem]] = defaultdict(list)
    for item in suite.items:
        by_article[str(item.meta["title"])].append(item)
    data = SimData("squad", ds, suite.doc_prefix, [], [])
    for title in sorted(by_article):
        part = split_part(title)
        data.units.setdefault(part, []).append(title)
        if part == "heldout":
            data.heldout.extend(by_article[title])
        else:
            qs = by_article[title]
            for k in range(0, len(qs), SQUAD_SESSION_TURNS):
                turns = tuple(TrafficTurn(i, i.question) for i in qs[k : k + SQUAD_SESSION_TURNS])
                data.traffic.append(Session(f"squad-{_slug(title)}-{k // SQUAD_SESSION_TURNS}", title, turns))
    return data


def load_mtrag_sim(path: str | Path | None = None) -> SimData:
    """MTRAG-UN in its published JSONL (`path`: the file; default the shared dev set). A traffic
    session replays a conversation's user turns in order; a turn that is a task's last turn carries
    that task's gold. A held-out item is a task, measured with its reference conversation before it."""
    ds: MtragDataset = load_mtrag(_file_or_default(path))
    suite = mtrag_suite_from(ds)
    items = {i.id: i for i in suite.items}
    by_conv: dict[str, list[str]] = defaultdict(list)
    for t in ds.tasks:
        by_conv[t.conversation_id].append(t.task_id)
    tasks = {t.task_id: t for t in ds.tasks}
    data = SimData("mtrag", ds, suite.doc_prefix, [], [])
    for conv in sorted(by_conv):
        part = split_part(conv)
        data.units.setdefault(part, []).append(conv)
        conv_tasks = sorted((tasks[x] for x in by_conv[conv]), key=lambda t: t.turn)
        if part == "heldout":
            data.heldout.extend(items[t.task_id] for t in conv_tasks)
            continue
        graded = {len(t.user_turns()) - 1: items[t.task_id] for t in conv_tasks}
        longest = max(conv_tasks, key=lambda t: len(t.user_turns())).user_turns()
        turns = tuple(TrafficTurn(graded.get(n), q) for n, q in enumerate(longest))
        data.traffic.append(Session(f"mtrag-{_slug(conv)}", conv, turns))
    return data


def parse_sizes(text: str) -> tuple[int, ...]:
    """`--heldout-avoid 100,300` -> (100, 300)."""
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"--heldout-avoid takes sample sizes like 100,300, got {text!r}") from None
    if any(n < 1 for n in sizes):
        raise ValueError(f"--heldout-avoid sizes must be positive, got {text!r}")
    return sizes


def sample_heldout(
    items: Sequence[EvalItem], n: int | None, seed: int = 0, *, avoid: Sequence[int] = ()
) -> list[EvalItem]:
    """A fixed random sample of the held-out items (all of them when `n` is None or larger).

    `avoid`: the sizes of the samples earlier runs measured, in order (the first this seed's plain
    sample, each later one drawn the same way from what the earlier ones left); their items are left
    out, so a rule chosen after seeing their results is tested on held-out items nothing has seen.
    ValueError when they leave none (an earlier sample took every item): measuring nothing is no run."""
    pool = list(range(len(items)))
    key = f"heldout-sample:{seed}"
    for size in avoid:
        seen = set(random.Random(key).sample(pool, min(size, len(pool))))
        pool, key = [i for i in pool if i not in seen], f"{key}:avoid-{size}"
    if items and not pool:
        raise ValueError(
            f"the earlier held-out samples ({', '.join(map(str, avoid))}) took all {len(items)} held-out items: "
            "nothing unseen is left to measure"
        )
    if n is None or n >= len(pool):
        return [items[i] for i in pool]
    picked = sorted(random.Random(key).sample(pool, n))
    return [items[i] for i in picked]


def day_sessions(traffic: Sequence[Session], days: int, per_day: int | None, seed: int = 0) -> list[list[Session]]:
    """The traffic in a fixed shuffled order, dealt out into `days` days of about `per_day` graded
    turns each (None: all of it once, evenly); a session is never split across days."""
    order = list(traffic)
    random.Random(f"traffic-order:{seed}").shuffle(order)
    graded = sum(sum(t.item is not None for t in s.turns) for s in order)
    budget = per_day if per_day is not None else max(1, -(-graded // max(1, days)))
    out: list[list[Session]] = [[] for _ in range(days)]
    pos = 0
    for d in range(days):
        used = 0
        while used < budget:
            s = order[pos % len(order)]
            if pos >= len(order):  # a second pass over the traffic: a new user, same questions
                s = Session(f"{s.session_id}-r{pos // len(order)}", s.unit, s.turns)
            out[d].append(s)
            used += max(1, sum(t.item is not None for t in s.turns))
            pos += 1
    return out


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in text)[:80]
