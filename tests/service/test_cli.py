"""`ragloop keys ...` and `ragloop db upgrade` (in-process through typer's runner)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ragloop.cli import app
from ragloop.store import Store, head_revision

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
