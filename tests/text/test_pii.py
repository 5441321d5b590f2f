"""The redactor: what it finds, what it must leave alone (the false-positive traps a RAG service's text
is full of), its configuration, and the deep walk over stored structures."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from pydantic import BaseModel

from ragloop.text.pii import (
    PiiConfigError,
    Redactor,
    card_ok,
    default_redactor,
    iban_ok,
    load_patterns,
    luhn_ok,
)
from ragloop.text.pii_logging import install_log_redaction

R = Redactor()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mail alice.mcgregor@example.org now", "mail [EMAIL] now"),
        ("Bob.O'Neil? no: bob_oneil+rag@mail.co.uk.", "Bob.O'Neil? no: [EMAIL]."),
        ("card 4111 1111 1111 1111.", "card [CARD]."),
        ("card 4111-1111-1111-1111", "card [CARD]"),
        ("4111111111111111", "[CARD]"),
        ("Amex 3782 822463 10005 ok", "Amex [CARD] ok"),
        ("mc 5555555555554444", "mc [CARD]"),
        ("IBAN DE89 3704 0044 0532 0130 00 thanks", "IBAN [IBAN] thanks"),
        ("GB82WEST12345698765432", "[IBAN]"),
        ("FR1420041010050500013M02606 is mine", "[IBAN] is mine"),
        ("call +44 20 7946 0958 today", "call [PHONE] today"),
        ("+1 (415) 555-2671", "[PHONE]"),
        ("(555) 123-4567 or 555.123.4567", "[PHONE] or [PHONE]"),
        ("office 020 7946 0958", "office [PHONE]"),
        ("my phone number is 0612345678", "my phone number is [PHONE]"),
        ("account number: 12345678", "account number: [ACCOUNT]"),
        ("SSN 123-45-6789", "SSN [ACCOUNT]"),
        ("sort code 20-00-00, acct 55779911", "sort code [ACCOUNT], acct [ACCOUNT]"),
        ("customer no. 00123456789", "customer no. [ACCOUNT]"),
    ],
)
def test_finds_personal_data(text: str, expected: str) -> None:
    assert R.redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Python 3.11.7 was released; see PEP 619 and v2.0.1-rc1",
        "due 2026-12-02, 12/02/2026 or 02.12.2026 at 12:30:45",
        "server 192.168.1.254:8080 and 10.0.0.1",
        "mask = 0x1F2E | 0xDEADBEEF",
        'File "app.py", line 1234, in main',
        "ISBN 978-3-16-148410-0, ISBN-10 0-306-40615-2, 9780306406157",
        "it costs $1,234.56 or € 12 345,00 (1,000,000 sold)",
        "epoch 1733140800 and 1733140800123 ms",
        "uuid 123e4567-e89b-12d3-a456-426614174000, sha 3f2a9c1d",
        "In 1066 the population was 1,500,000; by 1990-1995 it grew 12 percent",
        "pp. 123-145, score 3-2, E=mc2, x = 2+3",
        "pip install pkg==1.2.3; npm i pkg@1.2.3; x = a @ b",
        "the account for 12 percent of GDP",
        "4111 1111 1111 1112",  # fails Luhn
        "DE89 3704 0044 0532 0130 01",  # fails mod 97
        "order 4000123412341230",  # a card's shape without its check digit
        "coordinates 51.5074, -0.1278",
    ],
)
def test_leaves_false_positive_traps_alone(text: str) -> None:
    assert R.find(text) == [], R.find(text)


def test_spans_are_typed_and_placeholders_idempotent() -> None:
    text = "alice@example.org paid with 4111111111111111 from DE89370400440532013000"
    spans = R.find(text)
    assert [s.type for s in spans] == ["EMAIL", "CARD", "IBAN"]
    assert [text[s.start : s.end] for s in spans] == [s.text for s in spans]
    once = R.redact(text)
    assert R.redact(once) == once == "[EMAIL] paid with [CARD] from [IBAN]"


def test_remove_leaves_a_question_to_search_with() -> None:
    q = "How much is the tariff? My email is alice@example.org and card 4111 1111 1111 1111."
    assert R.remove(q) == "How much is the tariff? My email is and card."
    assert R.remove("no personal data") == "no personal data"


def test_checksums() -> None:
    assert luhn_ok("79927398713") and not luhn_ok("79927398710")
    assert card_ok("4111111111111111") and not card_ok("9111111111111111")  # no card brand starts with 9
    assert iban_ok("GB82WEST12345698765432") and not iban_ok("GB82WEST12345698765433")
    assert not iban_ok("GB82WEST1234569876543")  # wrong length for GB


def test_configured_patterns_and_switch(tmp_path: Path) -> None:
    r = Redactor.from_env({"RAGLOOP_PII_PATTERNS": json.dumps({"EMPLOYEE": r"\bE-\d{6}\b"})})
    assert r.redact("ask E-123456 at bob@corp.example") == "ask [EMPLOYEE] at [EMAIL]"
    f = tmp_path / "pii.json"
    f.write_text(json.dumps({"TICKET": r"\bTCK\d+\b"}))
    assert load_patterns(str(f)) == {"TICKET": r"\bTCK\d+\b"}
    assert Redactor.from_env({"RAGLOOP_PII_PATTERNS": str(f)}).redact("see TCK42") == "see [TICKET]"
    off = Redactor.from_env({"RAGLOOP_PII_REDACTION": "off"})
    assert off.redact("bob@corp.example") == "bob@corp.example"
    for bad in ("[1, 2]", '{"X": "("}', '{"bad name": "x"}', str(tmp_path / "missing.json")):
        with pytest.raises(PiiConfigError):
            Redactor.from_env({"RAGLOOP_PII_PATTERNS": bad})
    assert Redactor(types=("EMAIL",)).redact("bob@x.org 4111111111111111") == "[EMAIL] 4111111111111111"


def test_default_redactor_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_redactor().enabled
    monkeypatch.setenv("RAGLOOP_PII_REDACTION", "off")
    assert not default_redactor().enabled


class _Model(BaseModel):
    chunk_id: str
    text: str


@dataclass(frozen=True)
class _Record:
    answer_id: str
    question: str
    parts: tuple[str, ...]


def test_redact_deep_copies_what_changes_and_keeps_identifiers() -> None:
    ident = "4111111111111111"  # an id that happens to look like a card stays an id
    data = {
        "question": "mail bob@x.org",
        "chunk_id": ident,
        "items": [_Model(chunk_id=ident, text="card 4111111111111111"), 3, None],
        "record": _Record(answer_id=ident, question="bob@x.org", parts=("ok", "tel +44 20 7946 0958")),
        "messages": [HumanMessage(content="I am bob@x.org", id="4111111111111111")],
        "same": ["nothing here"],
    }
    out = R.redact_deep(data)
    assert out["question"] == "mail [EMAIL]" and out["chunk_id"] == ident
    assert out["items"][0] == _Model(chunk_id=ident, text="card [CARD]") and out["items"][1:] == [3, None]
    assert out["record"] == _Record(answer_id=ident, question="[EMAIL]", parts=("ok", "tel [PHONE]"))
    assert out["messages"][0].content == "I am [EMAIL]" and out["messages"][0].id == ident
    assert out["same"] is data["same"]  # untouched parts are not copied
    assert data["question"] == "mail bob@x.org" and data["items"][0].text == "card 4111111111111111"  # not mutated


def test_log_records_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    before = logging.getLogRecordFactory()
    try:
        install_log_redaction(Redactor())
        install_log_redaction(Redactor())  # twice: still one layer
        with caplog.at_level(logging.INFO, logger="ragloop.test"):
            logging.getLogger("ragloop.test").info("question from %s: %s", "bob@x.org", "card 4111111111111111")
            try:
                raise ValueError("bad bob@x.org")
            except ValueError:
                logging.getLogger("ragloop.test").exception("failed")
        text = caplog.text
        assert "bob@x.org" not in text and "4111111111111111" not in text
        assert "question from [EMAIL]: card [CARD]" in text and "bad [EMAIL]" in text
    finally:
        logging.setLogRecordFactory(before)
