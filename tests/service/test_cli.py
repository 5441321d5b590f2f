"""`ragloop keys ...` and `ragloop db upgrade` (in-process through typer's runner)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ragloop.cli import app
from ragloop.store import Store, current_revision, head_revision, upgrade

runner = CliRunner()


def test_db_upgrade_and_keys(ragloop_home: Path) -> None:
    r = runner.invoke(app, ["db", "upgrade", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["from"] is None and out["to"] == head_revision()
    r = runner.invoke(app, ["db", "upgrade", "--json"])
    assert json.loads(r.stdout)["from"] == head_revision()  # idempotent

    r = runner.invoke(app, ["keys", "create", "--role", "admin", "--name", "ops", "--json"])
    assert r.exit_code == 0, r.output
    made = json.loads(r.stdout)
    assert made["role"] == "admin" and made["key"].startswith(f"rlk_{made['key_id']}_")
    with Store.open(f"sqlite:///{ragloop_home / 'ragloop.db'}") as store:
        rec = store.api_keys.verify_api_key(made["key"])
        assert rec is not None and rec.role == "admin" and rec.name == "ops"

    r = runner.invoke(app, ["keys", "create"])  # human output: the key on stdout, the notice on stderr
    assert r.exit_code == 0 and r.stdout.strip().startswith("rlk_")

    listed = json.loads(runner.invoke(app, ["keys", "list", "--json"]).stdout)
    assert {k["key_id"] for k in listed} >= {made["key_id"]}
    assert all("key" not in k for k in listed)

    assert runner.invoke(app, ["keys", "revoke", made["key_id"]]).exit_code == 0
    assert runner.invoke(app, ["keys", "revoke", made["key_id"]]).exit_code != 0
    with Store.open(f"sqlite:///{ragloop_home / 'ragloop.db'}") as store:
        assert store.api_keys.verify_api_key(made["key"]) is None

    r = runner.invoke(app, ["keys", "create", "--role", "root"])
    assert r.exit_code == 2 and "--role must be user or admin" in r.output


def test_db_upgrade_from_the_previous_revision(store_url: str) -> None:
    """A database left at the first release's schema is brought to head by `ragloop db upgrade`, rows kept."""
    assert upgrade(store_url, "0001_initial") == "0001_initial"
    with Store.open(store_url, migrate=False) as store:
        key = store.api_keys.create_api_key("user", name="kept").key
    r = runner.invoke(app, ["db", "upgrade", "--database-url", store_url, "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["from"] == "0001_initial" and out["to"] == out["head"] == head_revision() != "0001_initial"
    assert current_revision(store_url) == head_revision()
    with Store.open(store_url, migrate=False) as store:
        assert store.api_keys.verify_api_key(key) is not None
        assert store.document_jobs.recent() == []  # the new table is there
