"""Judge calibration: how far can the correctness judge be trusted?

A person labels answers correct / incorrect (CSV with a header, or JSONL); each row has
`question`, `answer`, `reference` and `label` (correct/incorrect, yes/no, true/false, 1/0), and
optionally `id`. The judge labels the same answers (`judge_correct` >= 0.5: at least half of the
reference's claims are supported by the answer) and we report its
accuracy against the human labels and Cohen's kappa, both with bootstrap 95% intervals.

The result is stored per judge name in `RAGLOOP_HOME/eval/calibrations.json`; a report whose
judge has no stored calibration with at least `MIN_LABELS` labels prints a warning.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragloop.config import Settings
from ragloop.evaluation.metrics.answer import judge_correct
from ragloop.evaluation.stats import bootstrap_ci, cohen_kappa
from ragloop.models.scoring.base import Scorer

MIN_LABELS = 30
_TRUE = {"correct", "yes", "true", "1", "y", "right"}
_FALSE = {"incorrect", "no", "false", "0", "n", "wrong"}


class LabelError(ValueError):
    pass


@dataclass(frozen=True)
class Label:
    id: str
    question: str
    answer: str
    reference: str
    correct: bool


def _parse_label(raw: object, where: str) -> bool:
    text = str(raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise LabelError(f"{where}: label {raw!r} is not correct/incorrect")


def parse_labels(text: str, fmt: str, origin: str = "<labels>") -> list[Label]:
    rows: list[dict[str, Any]] = []
    if fmt == "jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise LabelError(f"{origin}:{n}: {exc}") from None
    else:
        rows = list(csv.DictReader(io.StringIO(text)))
    out = []
    for n, r in enumerate(rows, 1):
        where = f"{origin}:{n}"
        missing = [k for k in ("answer", "label") if k not in r]
        if missing:
            raise LabelError(f"{where}: missing {', '.join(missing)}")
        out.append(
            Label(
                id=str(r.get("id") or n),
                question=str(r.get("question") or ""),
                answer=str(r["answer"]),
                reference=str(r.get("reference") or ""),
                correct=_parse_label(r["label"], where),
            )
        )
    if not out:
        raise LabelError(f"{origin}: no labels")
    return out


def load_labels(path: str | Path) -> list[Label]:
    p = Path(path)
    fmt = "jsonl" if p.suffix.lower() in (".jsonl", ".json") else "csv"
    return parse_labels(p.read_text(encoding="utf-8"), fmt, str(p))


@dataclass(frozen=True)
class Calibration:
    judge: str
    n: int
    accuracy: tuple[float, float, float]
    kappa: tuple[float, float, float]
    confusion: dict[str, int]
    source: str
    at: str

    def to_json(self) -> dict[str, Any]:
        return {
            "judge": self.judge,
            "n": self.n,
            "accuracy": [round(x, 4) for x in self.accuracy],
            "kappa": [round(x, 4) for x in self.kappa],
            "confusion": self.confusion,
            "source": self.source,
            "at": self.at,
        }


def agreement(human: Sequence[bool], judge: Sequence[bool], judge_name: str, source: str = "") -> Calibration:
    if len(human) != len(judge) or not human:
        raise LabelError("need the same, non-empty set of items from the person and the judge")
    acc = bootstrap_ci([float(h == j) for h, j in zip(human, judge, strict=True)])
    kap = cohen_kappa(list(human), list(judge))
    conf = {
        "both_correct": sum(h and j for h, j in zip(human, judge, strict=True)),
        "both_incorrect": sum((not h) and (not j) for h, j in zip(human, judge, strict=True)),
        "judge_only_correct": sum((not h) and j for h, j in zip(human, judge, strict=True)),
        "human_only_correct": sum(h and (not j) for h, j in zip(human, judge, strict=True)),
    }
    return Calibration(
        judge_name,
        len(human),
        (acc.value, acc.lo, acc.hi),
        (kap.value, kap.lo, kap.hi),
        conf,
        source,
        time.strftime("%Y-%m-%dT%H:%M:%S"),
    )


async def calibrate(labels: Sequence[Label], judge: Scorer, threshold: float = 0.5, source: str = "") -> Calibration:
    verdicts = []
    for lab in labels:
        p = await judge_correct(judge, lab.answer, lab.reference or lab.question, lab.question)
        verdicts.append(p is not None and p >= threshold)
    return agreement([lab.correct for lab in labels], verdicts, judge.name, source)


def calibrations_path(settings: Settings) -> Path:
    return settings.home / "eval" / "calibrations.json"


def load_calibrations(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def save_calibration(cal: Calibration, path: Path) -> Path:
    data = load_calibrations(path)
    data[cal.judge] = cal.to_json()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def judge_warning(judge: str | None, calibrations: dict[str, dict[str, Any]]) -> str | None:
    """The warning a report prints for its judge, or None when it is calibrated."""
    if not judge:
        return None
    cal = calibrations.get(judge)
    if cal is None:
        return (
            f"WARNING: the judge `{judge}` has not been calibrated against human labels "
            "(`ragloop eval calibrate LABELS`): faithfulness, answer relevancy, context precision/recall, "
            "citation precision/recall, context sufficiency and judged correctness are uncalibrated."
        )
    if int(cal.get("n", 0)) < MIN_LABELS:
        return (
            f"WARNING: the judge `{judge}` was calibrated on only {cal.get('n')} human labels "
            f"(fewer than {MIN_LABELS}): its kappa {cal.get('kappa')} is not trustworthy yet."
        )
    return None
