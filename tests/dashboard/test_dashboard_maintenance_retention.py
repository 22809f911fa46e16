""" "Run maintenance now" with a retention typed in: when it would drop months, the first
POST restates them (as "Drop old months…" does) and drops nothing; only the second, from
that page with its one-time confirmation for exactly that retention and those months,
runs. If the months changed in between, the run is rolled back and the page asks again.
On a real PostgreSQL with real logins (Starlette's TestClient)."""

from __future__ import annotations

import html
import re
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient
from test_dashboard_maintenance import anchors, flash_of, log_in, month, partitions

from dashboard_helpers import csrf_of
from undolog import engine
from undolog import partitions as undolog_partitions

Conn = psycopg.Connection[Any]


def make_month(conn: Conn, n: int) -> None:
    """The month n months from now (n < 0: past), of the effect log and its history."""
    conn.execute(
        "SELECT undolog.create_month_partitions(%s::date)", (month(n).replace("_", "-") + "-01",)
    )


def hidden_fields(page: str) -> dict[str, str]:
    found = re.search(r'<form[^>]*id="run-confirm-form"[^>]*>(.*?)</form>', page, re.S)
    assert found is not None, "not the confirmation page"
    return {
        html.unescape(name): html.unescape(value)
        for name, value in re.findall(
            r'<input type="hidden" name="([^"]+)" value="([^"]*)">', found.group(1)
        )
    }


def ask_to_run(web: TestClient, retention_months: str) -> Any:
    """Log in as the operator and, from /maintenance, ask to run maintenance keeping
    ``retention_months`` (as typed): the answer (a confirmation page when months would
    be dropped)."""
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/maintenance").text)
    return web.post("/maintenance/run", data={"csrf": token, "retention_months": retention_months})


def test_a_typed_retention_that_drops_is_restated_then_confirmed(
    web: TestClient, conn: Conn
) -> None:
    make_month(conn, -6)  # kept by the setting's 12 months; past a typed 1
    old = [f"undolog_effect_log_{month(-6)}", f"undolog_effect_history_{month(-6)}"]
    log_in(web, "dash_operator")
    page = web.get("/maintenance")
    assert "Keep 12 months" in page.text
    plan_drop = page.text.split('id="plan-drop"')[1].split("</li>")[0]
    assert old[0] not in plan_drop  # what the page said: kept
    answer = web.post(
        "/maintenance/run",
        data={"csrf": csrf_of(page.text), "retention_months": " 1 ", "months_ahead": "4"},
    )
    # restated, nothing done: no month dropped or created, no anchor
    assert answer.status_code == 200
    assert set(old) <= set(partitions(conn))
    assert f"undolog_effect_log_{month(4)}" not in partitions(conn)
    assert anchors(conn) == []
    assert "Run maintenance keeping 1 months, and drop 2 partitions?" in answer.text
    for name in old:
        assert f'id="run-drop-{name}"' in answer.text
    assert answer.text.count('class="drop-row"') == 2  # the current month is not listed
    form = hidden_fields(answer.text)
    assert form["retention_months"] == "1" and form["months_ahead"] == "4"
    # confirmed: run, with the options given
    done = web.post("/maintenance/run", data=form)
    assert done.status_code == 303 and done.headers["location"] == "/maintenance"
    now = partitions(conn)
    assert not set(old) & set(now)
    assert f"undolog_effect_log_{month(4)}" in now
    assert anchors(conn) == [1]
    (said,) = flash_of(web.get("/maintenance").text)
    assert said.startswith(
        "maintenance: run by dash_operator with 4 months ahead, keeping 1 months"
    )
    assert f"dropped {old[0]}" in said or f"dropped {old[1]}" in said
    # the confirmation is used up: sent again, it is refused, and nothing more is done
    make_month(conn, -7)
    again = web.post("/maintenance/run", data=form)
    assert again.status_code == 409 and 'id="run-stale"' in again.text
    assert f"undolog_effect_log_{month(-7)}" in partitions(conn)
    assert anchors(conn) == [1]


def test_a_confirmation_is_for_that_retention_only(web: TestClient, conn: Conn) -> None:
    make_month(conn, -6)
    asked = ask_to_run(web, "3")
    assert asked.status_code == 200
    form = hidden_fields(asked.text)
    # the nonce of "keep 3 months" sent with "keep 1 month": refused, nothing done
    refused = web.post("/maintenance/run", data={**form, "retention_months": "1"})
    assert refused.status_code == 409 and 'id="run-stale"' in refused.text
    assert f"undolog_effect_log_{month(-6)}" in partitions(conn)
    assert anchors(conn) == []
    # without any confirmation: restated again, never run
    bare = web.post("/maintenance/run", data={"csrf": form["csrf"], "retention_months": "3"})
    assert bare.status_code == 200 and 'id="run-confirm"' in bare.text
    assert f"undolog_effect_log_{month(-6)}" in partitions(conn)


def test_months_that_changed_since_the_list_are_listed_again_and_nothing_is_done(
    web: TestClient, conn: Conn
) -> None:
    make_month(conn, -6)
    asked = ask_to_run(web, "2")
    form = hidden_fields(asked.text)
    make_month(conn, -9)  # a month past the retention that the list did not name
    answer = web.post("/maintenance/run", data=form)
    assert answer.status_code == 409 and 'id="run-stale"' in answer.text
    now = partitions(conn)
    assert f"undolog_effect_log_{month(-6)}" in now and f"undolog_effect_log_{month(-9)}" in now
    assert anchors(conn) == []
    # the list is read again, the new month in it, with a confirmation that works
    assert f'id="run-drop-undolog_effect_log_{month(-9)}"' in answer.text
    done = web.post("/maintenance/run", data=hidden_fields(answer.text))
    assert done.status_code == 303
    now = partitions(conn)
    assert f"undolog_effect_log_{month(-6)}" not in now
    assert f"undolog_effect_log_{month(-9)}" not in now


def test_a_run_that_takes_other_months_than_confirmed_is_rolled_back(
    web: TestClient, conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last guard: the engine's run drops a month that was not confirmed (one
    attached between the confirmation's check and the run; here the listing is made to
    miss it): its transaction is rolled back, nothing is done, and the person is told."""
    make_month(conn, -6)
    make_month(conn, -9)
    hidden = f"undolog_effect_log_{month(-9)}"
    real = undolog_partitions.months_to_drop

    def missing_one(parts: list[dict[str, Any]], cutoff: Any) -> list[dict[str, Any]]:
        return [p for p in real(parts, cutoff) if p["name"] != hidden]

    monkeypatch.setattr(undolog_partitions, "months_to_drop", missing_one)
    asked = ask_to_run(web, "2")
    assert f'id="run-drop-{hidden}"' not in asked.text
    before = partitions(conn)
    answer = web.post("/maintenance/run", data=hidden_fields(asked.text))
    assert answer.status_code == 409 and 'id="run-changed"' in answer.text
    said = html.unescape(answer.text.split('id="run-changed"')[1].split("</p>")[0])
    assert hidden in said and "nothing was done" in said
    assert partitions(conn) == before
    assert anchors(conn) == []


def test_a_typed_retention_that_drops_nothing_runs_at_once(web: TestClient, conn: Conn) -> None:
    make_month(conn, -6)
    answer = ask_to_run(web, "7")
    assert answer.status_code == 303
    assert f"undolog_effect_log_{month(-6)}" in partitions(conn)
    assert anchors(conn) == [1]


def test_a_month_an_unfinished_session_holds_is_kept_and_the_confirmed_run_goes_on(
    web: TestClient, conn: Conn
) -> None:
    """The list names a month's two partitions, the effect log's and its history's; an
    unfinished session holding that month, the engine keeps both and answers 'skipped'
    for the effect log's alone. That is the month confirmed, kept: the run goes on (it
    was rolled back as "changed" on every confirmation, for as long as the session
    lived), drops the other months confirmed and says which month it kept."""
    make_month(conn, -6)
    make_month(conn, -8)
    held = [f"undolog_effect_log_{month(-6)}", f"undolog_effect_history_{month(-6)}"]
    gone = [f"undolog_effect_log_{month(-8)}", f"undolog_effect_history_{month(-8)}"]
    session = engine.begin_session(conn, agent="old")
    conn.execute(
        "INSERT INTO undolog.undolog_effect_log (effect_id, session_id, executed_at, "
        "call_signature, step_index, tool_name, tier, args, state) VALUES (gen_random_uuid(), "
        "%s, %s::timestamptz, repeat('a', 64), 0, 'book', 'compensable', '{}', 'executing')",
        (session, month(-6).replace("_", "-") + "-15T00:00:00Z"),
    )
    asked = ask_to_run(web, "1")
    assert asked.status_code == 200
    for name in held + gone:
        assert f'id="run-drop-{name}"' in asked.text
    done = web.post("/maintenance/run", data=hidden_fields(asked.text))
    changed = ""
    if 'id="run-changed"' in done.text:
        changed = html.unescape(done.text.split('id="run-changed"')[1].split("</p>")[0])
    assert done.status_code == 303, (done.status_code, changed)
    now = partitions(conn)
    assert set(held) <= set(now) and not set(gone) & set(now)
    assert anchors(conn) == [1]
    (said,) = flash_of(web.get("/maintenance").text)
    assert f"kept (an unfinished session holds it) {held[0]}" in said
