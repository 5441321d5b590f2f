"""The PostgreSQL half of this suite is skipped when the server is missing, but fails under CI=true."""

from __future__ import annotations

import pytest

from .conftest import require_postgres

NOWHERE = "postgresql+psycopg://postgres@127.0.0.1:1/test"  # nothing listens on port 1


def test_unreachable_postgres_fails_loudly_in_ci() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"unreachable.*CI=true requires"):
        require_postgres(NOWHERE, ci=True)


def test_unreachable_postgres_is_skipped_with_the_reason_elsewhere() -> None:
    with pytest.raises(pytest.skip.Exception, match=r"127\.0\.0\.1:1/test is unreachable"):
        require_postgres(NOWHERE, ci=False)
