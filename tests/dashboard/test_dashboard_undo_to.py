"""Undo from here on the dashboard: a call's button shows what will be undone and in
which order; only a second POST from that page, with its one-time confirmation and a
reason, undoes it (undolog.rollback_to), and the session then goes on."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

import psycopg
from starlette.testclient import TestClient

from dashboard_helpers import (
    PASSWORD,
    as_login,
    csrf_of,
    without_user,
)
from undolog import engine, walk
from undolog.walk import CompensationCall

Conn = psycopg.Connection[Any]


def log_in(client: TestClient, login: str) -> None:
    page = client.get("/login")
    done = client.post(
        "/login", data={"csrf": csrf_of(page.text), "login": login, "password": PASSWORD}
    )
    assert done.status_code == 303


def three_calls(dsn: str) -> uuid.UUID:
    """A live session of dash_agent with three committed bookings (steps 0, 1, 2)."""
    with psycopg.connect(as_login(without_user(dsn), "dash_agent"), autocommit=True) as c:
        sid = engine.begin_session(c, None, "travel", {}, timedelta(hours=1))
        for step, item in enumerate(("flight", "hotel", "car")):
            call = engine.intercept(
                c, sid, step, "book", "compensable", {"item": item}, {"name": "cancel_booking"}
            )
            assert call.effect_id is not None
            engine.commit(c, call.effect_id, {"booking": f"B-{item}"})
    return sid


def hidden(page: str, form_id: str) -> dict[str, str]:
    found = re.search(rf'<form[^>]*id="{form_id}"[^>]*>(.*?)</form>', page, re.S)
    assert found, f"no form {form_id}"
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', found[1]))


def test_undo_from_here_previews_then_confirms_and_the_session_goes_on(
    web: TestClient, dsn: str, conn: Conn
) -> None:
    sid = three_calls(dsn)
    log_in(web, "dash_operator")
    page = web.get(f"/sessions/{sid}")
    assert 'id="undo-from-1"' in page.text
    token = csrf_of(page.text)

    preview = web.post(f"/sessions/{sid}/undo-to", data={"csrf": token, "step": "1"})
    assert preview.status_code == 200
    order = re.findall(r'<tr id="plan-(\d)"><td>\d</td><td>(\d)</td>', preview.text)
    assert order == [("1", "2"), ("2", "1")]  # step 2 first, then step 1
    assert "Yes, undo 2 calls" in preview.text
    state = conn.execute(
        "SELECT state FROM undolog.undolog_sessions WHERE session_id = %s", (sid,)
    ).fetchone()
    assert state == ("active",)  # the preview changed nothing

    fields = hidden(preview.text, "undo-to-form")
    no_reason = web.post(f"/sessions/{sid}/undo-to", data={**fields, "reason": " "})
    assert no_reason.status_code == 409 and "Give a reason" in no_reason.text
    reused = web.post(f"/sessions/{sid}/undo-to", data={**fields, "reason": "wrong week"})
    assert reused.status_code == 409 and 'id="undo-to-stale"' in reused.text  # one time only

    fields = hidden(reused.text, "undo-to-form")
    done = web.post(f"/sessions/{sid}/undo-to", data={**fields, "reason": "wrong week"})
    assert done.status_code == 303
    row = conn.execute(
        "SELECT state, undo_to ->> 'by', undo_to ->> 'reason' FROM undolog.undolog_sessions"
        " WHERE session_id = %s",
        (sid,),
    ).fetchone()
    assert row == ("compensating", "dash_operator", "wrong week")
    page = web.get(f"/sessions/{sid}")
    assert "rollback_to</strong> by <strong>dash_operator" in page.text
    assert 'id="undo-from-1"' not in page.text  # walking: no new undo

    undone: list[str] = []

    def cancel_booking(call: CompensationCall) -> None:
        undone.append(call.result["booking"])

    assert walk.run_walk(conn, sid, {"cancel_booking": cancel_booking}, wait=1.0) == "active"
    assert undone == ["B-car", "B-hotel"]
    assert 'id="undo-from-0"' in web.get(f"/sessions/{sid}").text  # live again


def test_a_plan_that_changed_since_the_preview_is_asked_again(web: TestClient, dsn: str) -> None:
    sid = three_calls(dsn)
    log_in(web, "dash_operator")
    token = csrf_of(web.get(f"/sessions/{sid}").text)
    preview = web.post(f"/sessions/{sid}/undo-to", data={"csrf": token, "step": "2"})
    assert "Yes, undo 1 call" in preview.text
    with psycopg.connect(as_login(without_user(dsn), "dash_agent"), autocommit=True) as c:
        call = engine.intercept(
            c, sid, 3, "book", "compensable", {"item": "train"}, {"name": "cancel_booking"}
        )
        assert call.effect_id is not None
        engine.commit(c, call.effect_id, {"booking": "B-train"})
    fields = hidden(preview.text, "undo-to-form")
    asked = web.post(f"/sessions/{sid}/undo-to", data={**fields, "reason": "r"})
    assert asked.status_code == 409 and "Yes, undo 2 calls" in asked.text  # train too


def test_agents_and_a_bad_form_undo_nothing(web: TestClient, dsn: str, conn: Conn) -> None:
    sid = three_calls(dsn)
    log_in(web, "dash_agent")
    page = web.get(f"/sessions/{sid}")
    assert "undo-from-" not in page.text
    refused = web.post(f"/sessions/{sid}/undo-to", data={"csrf": csrf_of(page.text), "step": "0"})
    assert refused.status_code == 403
    no_csrf = web.post(f"/sessions/{sid}/undo-to", data={"step": "0"})
    assert no_csrf.status_code == 403 and "nothing was written" in no_csrf.text
    state = conn.execute(
        "SELECT state FROM undolog.undolog_sessions WHERE session_id = %s", (sid,)
    ).fetchone()
    assert state == ("active",)
