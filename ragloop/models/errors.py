"""Typed model errors, so callers route on the kind of failure instead of parsing messages."""


class ModelError(Exception):
    """Base of every model-layer failure."""


class ModelUnavailableError(ModelError):
    """The backend's package or weights are not installed."""


class ModelIntegrityError(ModelError):
    """A model file's hash does not match the pinned one: never load it."""


class UnknownModelError(ModelError, KeyError):
    """No backend is registered under that `"provider:name"`."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "unknown model"


class RealCallsBlockedError(ModelError):
    """A real backend was called while `ragloop.models.chat.testing` forbids real calls."""


class ModelRequestError(ModelError):
    """The endpoint refused the request itself (4xx other than 429): retrying cannot help."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class TransientModelError(ModelError):
    """A failure worth retrying (5xx, dropped connection, rate limit, timeout).

    `retry_after` is the server's `Retry-After` in seconds when it sent one.
    """

    def __init__(self, message: str, *, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class RateLimitedError(TransientModelError):
    """HTTP 429 without quota exhaustion: wait (honouring `retry_after`) and try again."""


class ModelTimeoutError(TransientModelError):
    """The request took longer than its timeout."""


class QuotaExhaustedError(ModelError):
    """The account's quota or budget is spent: never retried, so long runs stop cleanly and resume later."""


class StructuredOutputError(ModelError):
    """The reply did not validate against the requested schema, even after one repair attempt.

    Carries the raw text and the validation errors so a caller (a grader) can route on it
    instead of crashing; every occurrence is counted in `ragloop.models.chat.structured_stats()`.
    """

    def __init__(
        self,
        message: str,
        *,
        model: str = "",
        raw_text: str = "",
        errors: str = "",
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
    ) -> None:
        super().__init__(message)
        self.model = model
        self.raw_text = raw_text
        self.errors = errors
        self.prompt_tokens = prompt_tokens  # spent on the failed attempts, for the call log
        self.completion_tokens = completion_tokens
