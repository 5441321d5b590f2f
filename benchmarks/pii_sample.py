"""The labelled PII sample: sentences with typed spans, generated deterministically from a seed.

Positives are the shapes people type into a support chat (emails, phone numbers in international,
North American and European national formats, payment cards in their printed groupings, IBANs of
several countries, account numbers and social security numbers after the word that names them).
Some are *hard* on purpose and expected to be missed (an address spelled "at ... dot", a bare
11-digit number with no word saying it is an account, a 7-digit local phone number): they keep the
recall honest. Negatives are the traps a RAG service's text is full of: version numbers, dates,
times, IPs, ports, hex literals, line numbers, ISBN-10/13, prices, unix timestamps, UUIDs, commit
hashes, coordinates, page and year ranges, numbers that fail Luhn or mod 97, and a few honest
near-misses (a 3-3-4 part number, which the North American phone rule will take).

Each record: `{"id", "text", "spans": [{"start", "end", "type"}], "kind": "positive"|"trap"|"mixed",
"hard": bool}`; written to `benchmarks/data/pii_sample.jsonl` by `benchmarks/pii_redaction.py`.
"""

from __future__ import annotations

import random
import string
from typing import Any

FIRST = ["alice", "bob", "carol", "dmitri", "eva", "farid", "grace", "hiro", "ines", "jonas", "kemal", "lena"]
LAST = ["mcgregor", "smith", "okafor", "novak", "garcia", "tanaka", "schmidt", "rossi", "dubois", "kowalski"]
DOMAINS = ["example.org", "mail.example.com", "corp.example.co.uk", "uni-example.de", "example.io", "post.example.fr"]
CARD_BRANDS = [("4", 16), ("4", 13), ("51", 16), ("55", 16), ("2221", 16), ("34", 15), ("37", 15), ("6011", 16)]
IBAN_COUNTRIES = {"DE": "8n10n", "GB": "4a14n", "FR": "10n11c2n", "NL": "4a10n", "ES": "20n", "IT": "1a10n12c"}
IBAN_COUNTRIES_FULL = {"DE": 22, "GB": 22, "FR": 27, "NL": 18, "ES": 24, "IT": 27}


def luhn_complete(prefix_and_body: str) -> str:
    """Append the check digit that makes the number pass Luhn."""
    for d in "0123456789":
        cand = prefix_and_body + d
        total = 0
        for i, ch in enumerate(reversed(cand)):
            n = int(ch)
            if i % 2:
                n = n * 2 - 9 if n > 4 else n * 2
            total += n
        if total % 10 == 0:
            return cand
    raise AssertionError("unreachable")


def card_number(rng: random.Random, valid: bool = True) -> str:
    prefix, length = rng.choice(CARD_BRANDS)
    body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    full = luhn_complete(body)
    if not valid:
        full = full[:-1] + str((int(full[-1]) + rng.randint(1, 9)) % 10)
    return full


def card_printed(rng: random.Random, digits: str) -> str:
    style = rng.choice(["bare", "space", "dash"])
    if style == "bare" or len(digits) == 13:  # 13-digit cards are not printed in groups
        return digits
    sep = " " if style == "space" else "-"
    if len(digits) == 15:
        return sep.join([digits[:4], digits[4:10], digits[10:]])
    return sep.join(digits[i : i + 4] for i in range(0, len(digits), 4))


def iban(rng: random.Random, valid: bool = True) -> str:
    country = rng.choice(sorted(IBAN_COUNTRIES_FULL))
    n = IBAN_COUNTRIES_FULL[country] - 4
    bban = "".join(rng.choice(string.digits) for _ in range(n))
    if country == "GB":
        bban = "".join(rng.choice(string.ascii_uppercase) for _ in range(4)) + bban[4:]
    moved = bban + country + "00"
    check = 98 - int("".join(str(int(ch, 36)) for ch in moved)) % 97
    if not valid:
        check = (check + rng.randint(1, 50)) % 97 or 1
    compact = f"{country}{check:02d}{bban}"
    return " ".join(compact[i : i + 4] for i in range(0, len(compact), 4)) if rng.random() < 0.6 else compact


def email(rng: random.Random) -> str:
    f, last = rng.choice(FIRST), rng.choice(LAST)
    local = rng.choice([f"{f}.{last}", f"{f}{rng.randint(1, 99)}", f"{f[0]}{last}", f"{f}+rag", f"{f}_{last}"])
    if rng.random() < 0.15:  # not tuned on: capitals
        return f"{local.title()}@{rng.choice(DOMAINS).upper()}"
    return f"{local}@{rng.choice(DOMAINS)}"


def phone(rng: random.Random) -> tuple[str, bool]:
    """(number, needs_cue): national formats that only count after a word like "phone"."""
    d = lambda k: "".join(rng.choice(string.digits) for _ in range(k))  # noqa: E731
    area = str(rng.randint(2, 9)) + d(2)
    kind = rng.randrange(12)
    if kind == 9:  # the three below were added after the rules were written: shapes they were not tuned on
        return f"({rng.randint(2, 8):02d}) {d(4)} {d(4)}", False
    if kind == 10:
        return f"+1-{area}-{d(3)}-{d(4)}", False
    if kind == 11:
        return f"0049 30 {d(7)}", False
    if kind == 0:
        return f"+1 ({area}) {d(3)}-{d(4)}", False
    if kind == 1:
        return f"({area}) {d(3)}-{d(4)}", False
    if kind == 2:
        sep = rng.choice("-. ")
        return f"{area}{sep}{d(3)}{sep}{d(4)}", False
    if kind == 3:
        return f"+44 20 {d(4)} {d(4)}", False
    if kind == 4:
        return f"+49 30 {d(7)}", False
    if kind == 5:
        return f"020 {d(4)} {d(4)}", False
    if kind == 6:
        return f"07{d(3)} {d(6)}", False
    if kind == 7:
        return f"+33 6 {d(2)} {d(2)} {d(2)} {d(2)}", False
    return f"06 {d(2)} {d(2)} {d(2)} {d(2)}", True


POS_TEMPLATES = {
    "EMAIL": ["Please reply to {x} with the details.", "my email is {x}", "Contact {x} if the login fails.",
              "cc {x}, thanks!", "Is {x} the right address for invoices?"],
    "PHONE": ["You can call me on {x} after 5pm.", "My number: {x}", "Ring {x} if the router is down.",
              "Support said to dial {x}.", "reach the office at {x} please"],
    "CUE_PHONE": ["my phone number is {x}", "Tel: {x}", "mobile {x}", "call me at {x} tomorrow"],
    "CARD": ["I paid with {x} and was charged twice.", "card {x} expired?", "Refund to {x} please.",
             "Why was {x} declined yesterday?"],
    "IBAN": ["Send it to {x} by Friday.", "IBAN: {x}", "my IBAN is {x}, is that right?", "Transfer to {x}."],
    "ACCOUNT": ["My account number is {x}.", "acct #: {x}", "customer number {x} cannot log in",
                "policy no. {x} renewal", "Account {x} was locked.",
                # not tuned on:
                "a/c no. {x} please", "routing number {x}", "my membership id is {x}", "Kontonummer {x}"],
}  # fmt: skip


def traps(rng: random.Random) -> list[str]:
    """Strings with numbers that are not personal data."""
    d = lambda k: "".join(rng.choice(string.digits) for _ in range(k))  # noqa: E731
    r = rng.randint
    return [
        f"Python {r(2, 3)}.{r(0, 13)}.{r(0, 20)} fixes the bug; upgrade from {r(1, 9)}.{r(0, 30)}.{r(0, 9)}",
        f"Released on {r(1990, 2030)}-{r(1, 12):02d}-{r(1, 28):02d} at {r(0, 23):02d}:{r(0, 59):02d}:{r(0, 59):02d}",
        f"The meeting is on {r(1, 28):02d}/{r(1, 12):02d}/{r(1990, 2030)}"
        f" or {r(1, 28):02d}.{r(1, 12):02d}.{r(2000, 2030)}",
        f"Connect to {r(10, 223)}.{r(0, 255)}.{r(0, 255)}.{r(1, 254)}:{r(1024, 65535)}",
        f"mask = 0x{d(4)}; flags |= 0x{rng.choice(['DEADBEEF', '1F2E', 'FF00FF'])}",
        f'File "app.py", line {r(1, 9999)}, in handler',
        f"See ISBN 978-{r(0, 9)}-{d(2)}-{d(6)}-{r(0, 9)} or ISBN-10 {r(0, 9)}-{d(3)}-{d(5)}-{r(0, 9)}",
        f"ISBN {rng.choice(['9780306406157', '9783161484100', '9780262033848'])}",
        f"It costs ${r(1, 99)},{d(3)}.{d(2)} or € {r(1, 99)} {d(3)},{d(2)}",
        f"epoch {r(1_500_000_000, 1_800_000_000)} ({r(1_500_000_000_000, 1_800_000_000_000)} ms)",
        f"request id {d(8)}-{d(4)}-4{d(3)}-a{d(3)}-{d(12)}",
        f"commit {''.join(rng.choice('0123456789abcdef') for _ in range(10))} broke the build",
        f"Located at {r(-89, 89)}.{d(4)}, {r(-179, 179)}.{d(4)}",
        f"See pp. {r(10, 200)}-{r(201, 400)}; the war lasted {r(1900, 1950)}-{r(1951, 1990)}",
        f"HTTP {rng.choice([200, 404, 500, 503])} after {r(100, 99999)} ms on port {r(1024, 65535)}",
        f"order {card_number(rng, valid=False)} was shipped",
        f"IBAN-like ref {iban(rng, valid=False)} failed validation",
        f"The population grew from {r(1, 9)},{d(3)},{d(3)} to {r(10, 99)},{d(3)},{d(3)} by {r(1900, 2020)}",
        f"Version {r(1, 9)}.{r(0, 99)}.{r(0, 99)}.{r(0, 9999)} of the driver",
        f"The score was {r(0, 9)}-{r(0, 9)} and the temperature {r(-20, 40)}.{r(0, 9)} °C",
        f"Run `pip install pkg=={r(0, 9)}.{r(0, 20)}.{r(0, 9)}` or `npm i lib@{r(1, 9)}.{r(0, 9)}.{r(0, 9)}`",
        f"The account for {r(10, 90)} percent of sales was closed in {r(1990, 2020)}.",
        f"Chunk {d(16)} of document {d(6)} scored {r(0, 99)}.{d(3)}",
        f"x = a @ b + {r(1, 9)}; y = {r(10, 99)}e-{r(1, 9)}",
    ]


HARD = [
    ("reach me at {f} at example dot org", None),
    ("please refund to {n11}", "ACCOUNT"),
    ("ring 555 {d4} when you arrive", "PHONE"),
]


def generate(seed: int = 16, rounds: int = 40, hard: int = 8) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []

    def add(text: str, spans: list[tuple[int, int, str]], kind: str, hard: bool = False) -> None:
        out.append(
            {
                "id": f"s{len(out):04d}",
                "text": text,
                "spans": [{"start": s, "end": e, "type": t} for s, e, t in spans],
                "kind": kind,
                "hard": hard,
            }
        )

    def fill(template: str, value: str, typ: str) -> tuple[str, tuple[int, int, str]]:
        start = template.index("{x}")
        return template.replace("{x}", value), (start, start + len(value), typ)

    for _ in range(rounds):
        for typ, templates in POS_TEMPLATES.items():
            template = rng.choice(templates)
            if typ == "EMAIL":
                value = email(rng)
            elif typ in ("PHONE", "CUE_PHONE"):
                value, needs_cue = phone(rng)
                while needs_cue and typ == "PHONE":
                    value, needs_cue = phone(rng)
            elif typ == "CARD":
                value = card_printed(rng, card_number(rng))
            elif typ == "IBAN":
                value = iban(rng)
            elif rng.random() < 0.25:
                template = "SSN {x} on file"
                value = f"{rng.randint(100, 665)}-{rng.randint(10, 99)}-{rng.randint(1000, 9999)}"
            else:
                value = "".join(rng.choice(string.digits) for _ in range(rng.randint(8, 12)))
            text, span = fill(template, value, "PHONE" if typ == "CUE_PHONE" else typ)
            add(text, [span], "positive")
        for trap in traps(rng):
            add(trap, [], "trap")
        # mixed: a trap and a positive in one string
        trap = rng.choice(traps(rng))
        value = email(rng)
        text, span = fill(trap + " — write to {x}", value, "EMAIL")
        add(text, [span], "mixed")
        value = card_printed(rng, card_number(rng))
        text, span = fill("Charged {x} on " + f"{rng.randint(2020, 2026)}-{rng.randint(1, 12):02d}-01", value, "CARD")
        add(text, [span], "mixed")
    for i in range(hard):
        f = rng.choice(FIRST)
        text = HARD[0][0].format(f=f)
        add(text, [(len("reach me at "), len(text), "EMAIL")], "positive", hard=True)
        n11 = "".join(rng.choice(string.digits) for _ in range(11))
        text = HARD[1][0].format(n11=n11)
        add(text, [(len(text) - 11, len(text), "ACCOUNT")], "positive", hard=True)
        d4 = "".join(rng.choice(string.digits) for _ in range(4))
        text = HARD[2][0].format(d4=d4)
        add(text, [(5, 13, "PHONE")], "positive", hard=True)
        if i % 2 == 0:
            text = f"part no. {rng.randint(200, 999)}-{rng.randint(100, 999)}-{rng.randint(1000, 9999)} is out of stock"
            add(text, [], "trap", hard=True)
    return out
