"""A form holding a field twice: Starlette reads the last one, while whatever checked the
form first (a proxy, a filter, the page's own script, a person reading the raw body) may
read the first. No page of the dashboard sends a field twice (but the inbox's ticked
requests and a confirmation page's restated decisions), so such a form is refused
whole, and a repeated token as a bad one."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from starlette.testclient import TestClient
from test_dashboard import app_dsn, approval_row, log_in

from dashboard_helpers import PASSWORD, confirm_form, csrf_of, waiting_session

Conn = psycopg.Connection[Any]
__all__ = ["app_dsn"]  # a fixture shared with test_dashboard


def test_a_repeated_token_is_refused_as_a_bad_one_whichever_comes_last(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    waiting = waiting_session(app_dsn)
    log_in(web, "dash_approver")
    token = csrf_of(web.get("/approvals").text)
    for tokens in ([token, token], ["forged", token], [token, "forged"]):
        refused = web.post(
            "/approvals/decide",
            data={
                "csrf": tokens,
                "reject_one": str(waiting.approval_id),
                f"reason_{waiting.approval_id}": "no",
            },
        )
        assert refused.status_code == 403, tokens
        assert "Form expired" in refused.text and "Reload the page" in refused.text
    assert approval_row(conn, waiting.approval_id)[0] == "pending"
    refused = web.post("/logout", data={"csrf": ["forged", token]})
    assert refused.status_code == 403
    assert web.get("/approvals").status_code == 200  # still logged in


def test_the_login_form_refuses_a_repeated_token_or_login(web: TestClient) -> None:
    for login in ("dash_approver", ["dash_agent", "dash_approver"]):
        token = csrf_of(web.get("/login").text)
        tokens = ["forged", token] if isinstance(login, str) else token
        refused = web.post("/login", data={"csrf": tokens, "login": login, "password": PASSWORD})
        assert refused.status_code in (400, 403), login
        assert "nothing was sent" in refused.text
        assert web.get("/approvals").status_code == 303  # not logged in


def test_a_decision_naming_a_request_twice_or_in_two_ways_decides_nothing(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    """Starlette would act on the last of two reject_one (or approve_one) fields: the
    request a filter in front, reading the first, let through is not the one decided."""
    first, second = waiting_session(app_dsn), waiting_session(app_dsn)
    log_in(web, "dash_approver")
    token = csrf_of(web.get("/approvals").text)
    a, b = str(first.approval_id), str(second.approval_id)
    forms: list[dict[str, Any]] = [
        {"reject_one": [a, b], f"reason_{a}": "no", f"reason_{b}": "no"},
        {"reject_one": b, f"reason_{b}": ["fine", "no"]},
        {"action": ["approve", "reject"], "ids": [a], "reason": "no"},
        {"action": "reject", "ids": [a, a], "reason": "no"},
        {"action": "reject", "ids": [a, a.upper()], "reason": "no"},
        {"approve_one": a, "reject_one": a, f"reason_{a}": "no"},
        {"pick": [f"reject:{a}", f"reject:{a}"], f"reason_{a}": "no"},
        {"reject_one": b, f"reason_{b}": "no", "next": ["/sessions", "/approvals"]},
    ]
    for form in forms:
        refused = web.post("/approvals/decide", data={"csrf": token, **form})
        assert refused.status_code == 400, form
        assert "nothing was" in refused.text and "Reload the page" in refused.text
    assert approval_row(conn, first.approval_id)[0] == "pending"
    assert approval_row(conn, second.approval_id)[0] == "pending"
    # the same forms with each field once are decided
    done = web.post(
        "/approvals/decide",
        data={"csrf": token, "action": "reject", "ids": [a, b], "reason": "no"},
    )
    assert done.status_code == 303
    assert approval_row(conn, first.approval_id)[0] == "rejected"
    assert approval_row(conn, second.approval_id)[0] == "rejected"


def test_a_confirmation_with_a_repeated_nonce_or_decision_approves_nothing(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    waiting = waiting_session(app_dsn)
    log_in(web, "dash_approver")
    token = csrf_of(web.get("/approvals").text)
    ask = {"csrf": token, "approve_one": str(waiting.approval_id)}
    stale = confirm_form(web.post("/approvals/decide", data=ask).text)["confirm"]
    form = confirm_form(web.post("/approvals/decide", data=ask).text)
    for changed in (
        {"confirm": stale + form["confirm"]},  # the page's own nonce last
        {"pick": form["pick"] * 2},
        {"csrf": form["csrf"] * 2},
    ):
        refused = web.post("/approvals/decide", data={**form, **changed})
        assert refused.status_code in (400, 403), changed
        assert approval_row(conn, waiting.approval_id)[0] == "pending"
        # a refused form used no nonce: ask again for a fresh one each time
        form = confirm_form(web.post("/approvals/decide", data=ask).text)
    assert web.post("/approvals/decide", data=form).status_code == 303
    assert approval_row(conn, waiting.approval_id)[0] == "approved"


def test_a_repeated_field_is_refused_on_every_other_post(
    web: TestClient, app_dsn: str, conn: Conn
) -> None:
    """The session actions, maintenance, tools and notifications read their fields as
    decide does: a repeated one refuses the form before anything is read or written."""
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/approvals").text)
    sid = uuid.uuid4()
    posts = {
        f"/sessions/{sid}/rollback": {"reason": ["a", "b"]},
        "/maintenance/drop": {"before": ["2020-01", "2030-01"]},
        "/maintenance/run": {"months_ahead": ["1", "2"]},
        "/tools/retire": {"tool_id": [str(sid), str(sid)]},
        "/notifications/remove": {"name": ["a", "b"]},
    }
    for path, data in posts.items():
        refused = web.post(path, data={"csrf": token, **data})
        assert refused.status_code == 400, path
        assert "Form refused" in refused.text, path
