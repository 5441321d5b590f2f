"""Log records without personal data: every record the process makes is redacted as it is made.

`ragloop serve` and `ragloop worker` install this at start-up (through
`ragloop.service.auth.install_log_redaction`): a server's log is a file under someone's home too.
"""

from __future__ import annotations

import logging

from ragloop.text.pii import Redactor, default_redactor


def install_log_redaction(redactor: Redactor | None = None) -> None:
    """Redact every log record as it is made (message and traceback), whatever logger or handler it
    goes to: a record factory, not a filter, because filters on a logger miss its children's records
    and uvicorn replaces its handlers when it starts. Installing twice is a no-op."""
    base = logging.getLogRecordFactory()
    if getattr(base, "ragloop_pii", False):
        return
    red = redactor or default_redactor()
    formatter = logging.Formatter()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        rec = base(*args, **kwargs)
        if not red.enabled:
            return rec
        try:
            msg = rec.getMessage()
        except Exception:  # a malformed record is logging's to report, not ours
            return rec
        clean = red.redact(msg)
        if clean != msg:
            rec.msg, rec.args = clean, ()
        if rec.exc_info and rec.exc_info[1] is not None:
            rec.exc_text = red.redact(formatter.formatException(rec.exc_info))
        return rec

    factory.ragloop_pii = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)
