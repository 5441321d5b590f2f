"""The improvement loop through the API and the CLI: the contract check's knowledge-gap scenario
in-process, the embedded worker diagnosing continuously, admin-only routes, `ragloop improve`."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from typer.testing import CliRunner

from ragloop.cli import app as cli
from ragloop.config import Settings
from ragloop.improve.engine import DIAGNOSIS_TIER, DiagnosisConfig, DiagnosisEngine
from ragloop.improve.remediate import run_pass
from ragloop.models.scoring import LexicalScorer
from ragloop.retrieval.collection import Collection
from ragloop.store import Store
from tests.service.conftest import CFG, SERVICE, build_app, make_keys, running

pytestmark = pytest.mark.anyio

GAP_Q = "What is the boiling point of liquid nitrogen at sea level?"
GAP_FIX = "Liquid nitrogen boils at about minus 196 degrees Celsius (77 kelvin) at atmospheric pressure."
FEEDBACK = {"rating": "negative", "issues": ["wrong_answer"], "corrected_answer": GAP_FIX}


async def ask(c: Any, headers: dict[str, str], question: str, session: str) -> str:
    r = await c.post("/v1/query", json={"question": question, "session_id": session}, headers=headers)
    assert r.status_code == 200, r.text
    return str(r.json()["answer_id"])


async def test_a_question_the_corpus_cannot_answer_is_a_logged_knowledge_gap(
    collection: Collection, any_store: Store
) -> None:
    store = any_store
    keys = make_keys(store)
    async with running(build_app(store)) as c:
        aid = await ask(c, keys.u, GAP_Q, "gap-0")
        r = await c.post(f"/v1/answers/{aid}/feedback", json=FEEDBACK, headers=keys.u)
        assert r.status_code == 201 and r.json()["improvement_queued"]
        assert any(j.tier == DIAGNOSIS_TIER and j.status == "queued" for j in store.queue.for_answer(aid))
        pending = (await c.get(f"/v1/evaluations/{aid}", headers=keys.a)).json()
        assert pending["diagnosis"]["status"] == "pending" and pending["failure_mode"] is None

        engine = DiagnosisEngine(store, Settings(), DiagnosisConfig(), scorer=LexicalScorer(name="lexical"))
        report = (await engine.run_pass("test")).to_json()
        engine.close()
        assert report["failure_modes"] == {"knowledge_gap": 1}, report

        ev = (await c.get(f"/v1/evaluations/{aid}", headers=keys.a)).json()
        assert ev["failure_mode"] == "knowledge_gap"
        assert ev["failure_evidence"]["kind"] == "knowledge_gap" and ev["failure_evidence"]["best_chunk_id"]
        d = ev["diagnosis"]
        assert (d["status"], d["ideal_source"], d["replayable"], d["collection"]) == (
            "completed",
            "correction",
            True,
            "default",
        )
        assert {a["kind"] for a in ev["improvement_actions"]} >= {"knowledge_gap_log"}
        mine = (await c.get(f"/v1/evaluations/{aid}", headers=keys.u)).json()  # the owner sees it too
        assert mine["diagnosis"]["failure_mode"] == "knowledge_gap"

        gaps = (await c.get("/v1/knowledge-gaps", headers=keys.a)).json()
        [gap] = gaps["gaps"]
        assert gaps["open"] == 1 and "nitrogen" in gap["representative_question"].lower()
        assert gap["answer_ids"] == [aid] and gap["ideal_answers"] == [GAP_FIX] and gap["generated_questions"]
        assert gap["gap_id"] == d["knowledge_gap_id"] and "vector" not in gap
        one = await c.get(f"/v1/knowledge-gaps/{gap['gap_id']}", headers=keys.a)
        assert one.status_code == 200 and one.json()["count"] == 1
        assert (await c.get("/v1/knowledge-gaps?status=bogus", headers=keys.a)).status_code == 422

        acts = (await c.get("/v1/improvements", headers=keys.a)).json()
        kinds = {a["kind"]: a for a in acts["actions"]}
        assert "knowledge_gap_log" in kinds and acts["counts"]["proposed"] == len(acts["actions"])
        action = kinds["knowledge_gap_log"]
        assert action["answer_ids"] == [aid] and action["domain"] == "default"
        got = await c.get(f"/v1/improvements/{action['action_id']}", headers=keys.a)
        assert got.status_code == 200 and got.json()["evidence"]["diagnosis"]["kind"] == "knowledge_gap"
        by_answer = (await c.get(f"/v1/improvements?answer_id={aid}&status=proposed", headers=keys.a)).json()
        assert len(by_answer["actions"]) == len(acts["actions"])
        assert (await c.get("/v1/improvements?status=bogus", headers=keys.a)).status_code == 422
        # nothing applied: nothing to revert
        revert = await c.post(f"/v1/improvements/{action['action_id']}/revert", headers=keys.a)
        assert revert.status_code == 409 and "proposed" in revert.json()["detail"]
        assert (await c.get(f"/v1/improvements/{'0' * 32}", headers=keys.a)).status_code == 404
        # the remediation pass links the gap (applied); an admin can undo it, audited under their key
        await asyncio.to_thread(run_pass, store, CFG, settings=Settings())
        applied = (await c.get(f"/v1/improvements/{action['action_id']}", headers=keys.a)).json()
        assert applied["status"] == "applied", applied
        revert = await c.post(f"/v1/improvements/{action['action_id']}/revert", headers=keys.a)
        assert revert.status_code == 200 and revert.json()["status"] == "reverted", revert.text
        assert revert.json()["reverted_at"] is not None
        admin = store.api_keys.verify_api_key(keys.admin)
        assert admin is not None
        entries = store.audit.timeline(action_type="remediation_revert")
        assert [e.actor for e in entries] == [f"admin:{admin.key_id}"]
        again = await c.post(f"/v1/improvements/{action['action_id']}/revert", headers=keys.a)
        assert again.status_code == 409


async def test_the_improvement_routes_are_admin_only(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    action = store.improvement_actions.propose("expansion_cache", "expansion_cache:default", "k").action
    async with running(build_app(store)) as c:
        for method, path in [
            ("GET", "/v1/knowledge-gaps"),
            ("GET", f"/v1/knowledge-gaps/{'0' * 32}"),
            ("GET", "/v1/improvements"),
            ("GET", f"/v1/improvements/{action.action_id}"),
            ("POST", f"/v1/improvements/{action.action_id}/revert"),
        ]:
            r = await c.request(method, path, headers=keys.u)
            assert r.status_code == 403, (path, r.status_code)
            assert (await c.request(method, path)).status_code == 401, path
        assert (await c.get("/v1/improvements", headers=keys.a)).status_code == 200


async def test_the_embedded_worker_diagnoses_and_remediates_continuously(collection: Collection, store: Store) -> None:
    keys = make_keys(store)
    async with running(build_app(store, worker=True, service_config=SERVICE.with_(judge=None))) as c:
        aid = await ask(c, keys.u, GAP_Q, "gap-w")
        assert (await c.post(f"/v1/answers/{aid}/feedback", json=FEEDBACK, headers=keys.u)).status_code == 201
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ev = (await c.get(f"/v1/evaluations/{aid}", headers=keys.a)).json()
            if ev["failure_mode"]:
                break
            await asyncio.sleep(0.1)
        assert ev["failure_mode"] == "knowledge_gap", ev.get("diagnosis")
        job = next(j for j in ev["jobs"] if j["tier"] == DIAGNOSIS_TIER)
        assert job["status"] == "done" and job["attempts"] == 1
        # then the worker's remediation pass applies what was proposed (the gap link) on its own
        while time.monotonic() < deadline:
            acts = (await c.get("/v1/improvements?kind=knowledge_gap_log", headers=keys.a)).json()["actions"]
            if acts and acts[0]["status"] == "applied":
                break
            await asyncio.sleep(0.2)
        assert acts and acts[0]["status"] == "applied" and acts[0]["answer_ids"] == [aid], acts


def test_improve_run_status_and_gaps_on_the_command_line(sqlite_url: str, collection: Collection) -> None:
    runner = CliRunner()
    with Store.open(sqlite_url) as store:
        answer = store.queries.record_answer(
            session_id="s", question=GAP_Q, answer_text="The bridge spans the Vell [1].", pipeline_version="pv-x"
        )
        store.queue.enqueue(answer.answer_id, "heuristic", {"question": GAP_Q, "answer": answer.answer_text})
        store.feedback.add(answer.answer_id, "negative", corrected_answer=GAP_FIX)
    r = runner.invoke(cli, ["improve", "run", "--json", "--no-remediation", "--database-url", sqlite_url])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["selected"] == 1 and report["failure_modes"] == {"knowledge_gap": 1}, report
    assert report["remediation"] is None
    status = json.loads(runner.invoke(cli, ["improve", "status", "--json", "--database-url", sqlite_url]).stdout)
    assert status["diagnoses"]["completed"] == 1 and status["failure_modes"] == {"knowledge_gap": 1}
    assert status["knowledge_gaps"] == {"open": 1} and status["diagnosis_jobs"]["done"] == 1
    gaps = json.loads(runner.invoke(cli, ["improve", "gaps", "--json", "--database-url", sqlite_url]).stdout)
    assert [g["representative_question"] for g in gaps] == [GAP_Q]
    human = runner.invoke(cli, ["improve", "gaps", "--database-url", sqlite_url])
    assert human.exit_code == 0 and "[1x] default" in human.stdout
    # then the remediation pass: the knowledge-gap entry is linked (applied), nothing is diagnosed twice
    r = runner.invoke(cli, ["improve", "run", "--json", "--database-url", sqlite_url])
    assert r.exit_code == 0, r.output
    again = json.loads(r.stdout)
    assert again["selected"] == 0 and again["diagnosed"] == 0
    applied = {a["kind"] for a in again["remediation"]["actions"] if a["outcome"] == "applied"}
    assert "knowledge_gap_log" in applied, again["remediation"]
