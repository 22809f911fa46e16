"""The Tools and Notification channels pages: the tool registry and the channels as the
CLI lists them, and an operator's actions on them (register, retire, add, remove), on a
real PostgreSQL with real logins; what the engine refuses is said in its own words, and
nothing is written."""

from __future__ import annotations

import html
import re
import uuid
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from starlette.testclient import TestClient
from test_dashboard import log_in as first_log_in

from dashboard_helpers import csrf_of
from undolog.queries import QUERIES

Conn = psycopg.Connection[Any]
SECRET = "hook-signing-key-" + "k" * 16
PASSWORD_SMTP = "smtp-password-never-shown"


def register(conn: Conn, owner: str, tool: str, tier: str = "compensable") -> uuid.UUID:
    """A registration made as an operator would (the tests' login is a superuser)."""
    compensation = Jsonb({"name": f"undo_{tool}"}) if tier == "compensable" else None
    params = {
        "tool_name": tool,
        "tier": tier,
        "compensation": compensation,
        "owner": owner,
        "on_reject": "fail_session",
    }
    row = conn.execute(QUERIES["register_tool_for"], params).fetchone()
    assert row is not None
    return uuid.UUID(str(row[0]))


def registrations(conn: Conn) -> list[tuple[Any, ...]]:
    return [
        tuple(r)
        for r in conn.execute(
            "SELECT owner_role, tool_name, tier, compensation, on_reject, retired_by, "
            "retire_reason FROM undolog.undolog_tools ORDER BY registered_at"
        ).fetchall()
    ]


def channels(conn: Conn) -> list[tuple[Any, ...]]:
    return [
        tuple(r)
        for r in conn.execute(
            "SELECT channel_name, kind, destination, config, secret, created_by, removed_by "
            "FROM undolog.undolog_notification_channels ORDER BY created_at"
        ).fetchall()
    ]


def add_channel(conn: Conn, name: str) -> None:
    conn.execute(
        QUERIES["add_notification_channel"],
        {
            "name": name,
            "kind": "webhook",
            "target": "https://hooks.example.com/T0/secret-path",
            "config": Jsonb({"format": "json"}),
            "secret": SECRET,
            "dashboard_url": None,
            "by": "setup",
        },
    )


def hidden(page: str, form_id: str) -> dict[str, str]:
    found = re.search(rf'<form[^>]*id="{form_id}"[^>]*>(.*?)</form>', page, re.S)
    assert found, f"no form {form_id}"
    fields = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', found[1])
    return {name: html.unescape(value) for name, value in fields}


def log_in(web: TestClient, login: str) -> None:
    """Log ``login`` in, in place of whoever the client was logged in as."""
    web.cookies.clear()
    assert first_log_in(web, login).status_code == 303


def text_of(page: str) -> str:
    return html.unescape(page)


# --- reading ----------------------------------------------------------------------------


def test_staff_read_the_registry_and_an_agent_only_its_own_logins_tools(
    web: TestClient, conn: Conn
) -> None:
    mine = register(conn, "dash_agent", "book_room")
    theirs = register(conn, "dash_agent2", "wire_money", "irreversible")
    retired = register(conn, "dash_agent2", "old_tool")
    conn.execute(QUERIES["retire_tool"], {"tool_id": retired, "by": "setup", "reason": "gone"})

    log_in(web, "dash_approver")
    page = web.get("/tools")
    assert page.status_code == 200
    assert 'id="nav-tools"' in page.text and 'id="nav-notifications"' in page.text
    assert f"tool-{mine}" in page.text and f"tool-{theirs}" in page.text
    assert f"tool-{retired}" not in page.text  # live ones unless asked
    assert '{"args":{},"name":"undo_book_room"}' in text_of(page.text)
    # an approver reads, but is offered no operator action
    assert "retire-" not in page.text and "register-form" not in page.text
    everything = web.get("/tools", params={"all": "1"})
    assert f"tool-{retired}" in everything.text and "gone" in everything.text
    one_owner = web.get("/tools", params={"owner": "dash_agent"})
    assert f"tool-{mine}" in one_owner.text and f"tool-{theirs}" not in one_owner.text

    log_in(web, "dash_agent")
    page = web.get("/tools", params={"all": "1"})
    assert page.status_code == 200
    assert f"tool-{mine}" in page.text
    # row-level security: another login's tools are not there, even asked for by name
    assert f"tool-{theirs}" not in page.text and f"tool-{retired}" not in page.text
    assert web.get("/tools", params={"owner": "a\x00"}).status_code == 422
    asked = web.get("/tools", params={"owner": "dash_agent2", "all": "1"})
    assert asked.status_code == 200 and "wire_money" not in asked.text
    assert 'id="no-tools"' in asked.text
    assert "register-form" not in page.text and "nav-tools" not in page.text
    # the channels are staff's alone
    assert web.get("/notifications").status_code == 403


def test_operator_sees_the_actions_and_agent_written_names_are_escaped(
    web: TestClient, conn: Conn
) -> None:
    hostile = "<script>alert(1)</script>\u202e"
    tool_id = register(conn, "dash_agent", hostile)
    log_in(web, "dash_operator")
    page = web.get("/tools")
    assert f'id="retire-{tool_id}"' in page.text and 'id="register-form"' in page.text
    assert "<script>alert(1)" not in page.text and "\u202e" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;\\u202e" in page.text


# --- register -----------------------------------------------------------------------------


def test_an_operator_registers_a_tool_for_an_agent_login(web: TestClient, conn: Conn) -> None:
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/tools").text)
    answer = web.post(
        "/tools/register",
        data={
            "csrf": token,
            "tool_name": "refund",
            "owner": "dash_agent",
            "tier": "compensable",
            "compensation": '{"name": "charge_again", "max_attempts": 3}',
            "on_reject": "fail_session",
        },
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/tools"
    assert registrations(conn) == [
        (
            "dash_agent",
            "refund",
            "compensable",
            {"name": "charge_again", "args": {}, "max_attempts": 3},
            "fail_session",
            None,
            None,
        )
    ]
    page = web.get("/tools")
    assert "tool refund of dash_agent: registered as compensable" in page.text
    assert "by dash_operator" in page.text
    answer = web.post(
        "/tools/register",
        data={
            "csrf": token,
            "tool_name": "pay_out",
            "owner": "dash_agent",
            "tier": "irreversible",
            "on_reject": "continue",
        },
    )
    assert answer.status_code == 303
    assert registrations(conn)[-1][:5] == (
        "dash_agent",
        "pay_out",
        "irreversible",
        None,
        "continue",
    )


def test_a_registration_that_differs_from_the_live_one_is_refused_in_the_engines_words(
    web: TestClient, conn: Conn
) -> None:
    tool_id = register(conn, "dash_agent", "book_room")
    before = registrations(conn)
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/tools").text)
    answer = web.post(
        "/tools/register",
        data={
            "csrf": token,
            "tool_name": "book_room",
            "owner": "dash_agent",
            "tier": "compensable",
            "compensation": '{"name": "something_else"}',
        },
    )
    assert answer.status_code == 409  # UL018: the live registration says otherwise
    said = text_of(answer.text)
    assert "tool book_room of dash_agent is registered differently" in said
    assert "something_else" in said  # the engine's detail
    assert f"An operator replaces tool_id {tool_id} in one transaction" in said  # its hint
    assert registrations(conn) == before


def test_an_operator_replaces_a_live_registration_that_differs_after_confirming(
    web: TestClient, conn: Conn
) -> None:
    """Retire, then Register, in two steps, leaves the name to the agent's binding in
    between: "replace" (with a reason) retires the live registration and registers the new
    one in one transaction (undolog.replace_tool, as `tools register --replace`), recorded
    as by the operator's login. Like Retire…, it retires nothing on the first POST: that
    one answers a page showing the live registration and the new one side by side, and
    only the POST from that page, with its one-time confirmation and the CSRF token, goes
    through. The same definition again retires nothing and needs no confirmation."""
    theirs = register(conn, "dash_agent", "book_room")
    before = registrations(conn)
    log_in(web, "dash_operator")
    page = web.get("/tools")
    assert 'id="reg-replace"' in page.text and 'id="reg-reason"' in page.text
    token = csrf_of(page.text)
    pin = {"csrf": token, "tool_name": "book_room", "owner": "dash_agent", "tier": "irreversible"}

    for change, words in (
        ({"replace": "1"}, "give a reason"),
        ({"replace": "1", "reason": " \t "}, "give a reason"),
        ({"reason": "it books for good"}, "a reason goes with replacing"),
        ({"replace": "1", "reason": "r" * 8193}, "the reason is over 8192 characters"),
    ):
        answer = web.post("/tools/register", data={**pin, **change})
        assert answer.status_code == 422, (change, answer.status_code)
        assert words in text_of(answer.text) and "nothing was written" in answer.text
        assert registrations(conn) == before, change

    asked = web.post("/tools/register", data={**pin, "replace": "1", "reason": "it books for good"})
    assert asked.status_code == 200 and 'id="replace-confirm"' in asked.text
    assert registrations(conn) == before  # the first POST writes nothing
    said = text_of(asked.text)
    live = said[said.index('id="replace-live"') : said.index('id="replace-new"')]
    new = said[said.index('id="replace-new"') : said.index('id="replace-form"')]
    assert str(theirs) in live and "compensable" in live and "undo_book_room" in live
    assert "irreversible" in new and str(theirs) not in new and "undo_book_room" not in new
    assert 'value="it books for good"' in asked.text  # the reason, to confirm or change
    fields = hidden(asked.text, "replace-form")
    assert fields["confirm"] and fields["csrf"] == token
    assert {k: fields[k] for k in pin} == pin and fields["replace"] == "1"

    # without the CSRF token: refused, nothing written (the nonce is not spent)
    forged = web.post("/tools/register", data={**fields, "csrf": "x", "reason": "r"})
    assert forged.status_code == 403 and registrations(conn) == before
    # no reason: asked again, nothing written
    again = web.post("/tools/register", data={**fields, "reason": "  "})
    assert again.status_code == 422 and "Give a reason" in again.text
    assert registrations(conn) == before
    # a used confirmation, or one for another definition: asked again, nothing written
    stale = web.post("/tools/register", data={**fields, "reason": "r"})
    assert stale.status_code == 409 and "already used or has expired" in stale.text
    other = web.post(
        "/tools/register",
        data={**hidden(stale.text, "replace-form"), "tier": "compensable", "reason": "r"},
    )
    assert other.status_code == 409 and registrations(conn) == before
    assert 'name="tier" value="compensable"' in other.text  # what was posted, restated
    # or one shown before the live registration changed: the new live one is shown
    asked = web.post("/tools/register", data={**pin, "replace": "1", "reason": "r"})
    fields = hidden(asked.text, "replace-form")
    conn.execute(QUERIES["retire_tool"], {"tool_id": theirs, "by": "setup", "reason": "moved"})
    theirs = register(conn, "dash_agent", "book_room")
    before = registrations(conn)
    moved = web.post("/tools/register", data={**fields, "reason": "r"})
    assert moved.status_code == 409 and str(theirs) in moved.text
    assert registrations(conn) == before

    fields = hidden(moved.text, "replace-form")
    answer = web.post("/tools/register", data={**fields, "reason": "it books for good"})
    assert answer.status_code == 303 and answer.headers["location"] == "/tools"
    assert registrations(conn) == [
        *before[:-1],
        (*before[-1][:5], "dash_operator", "it books for good"),
        ("dash_agent", "book_room", "irreversible", None, "fail_session", None, None),
    ]
    live_now = conn.execute(
        "SELECT tool_id, registered_by FROM undolog.undolog_tools WHERE retired_at IS NULL"
    ).fetchall()
    assert [r[1] for r in live_now] == ["dash_operator"]
    page = web.get("/tools")
    said = text_of(page.text)
    assert (
        f"tool book_room of dash_agent: registered as irreversible ({live_now[0][0]}) by "
        f"dash_operator, replacing {theirs}" in said
    )

    # the same definition again: nothing to retire, so no confirmation; nothing written
    answer = web.post("/tools/register", data={**pin, "replace": "1", "reason": "again"})
    assert answer.status_code == 303
    assert len(registrations(conn)) == 3
    assert "nothing was retired (no live registration that differs)" in web.get("/tools").text


def test_a_replacement_confirmed_as_the_live_registration_changes_retires_nothing(
    web: TestClient, conn: Conn, monkeypatch: Any
) -> None:
    """The confirmation is bound to the live registration it showed, read again on the
    confirming POST; another operator's replacement committed right after that read (here
    made by the read itself) is not retired in its stead: replace_tool answers which one
    it retired, and any other than the one confirmed rolls it all back (409)."""
    from undolog.dashboard import queries as dashboard_queries

    theirs = register(conn, "dash_agent", "book_room")
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/tools").text)
    pin = {"csrf": token, "tool_name": "book_room", "owner": "dash_agent", "tier": "irreversible"}
    asked = web.post("/tools/register", data={**pin, "replace": "1", "reason": "pays"})
    fields = hidden(asked.text, "replace-form")
    real = dashboard_queries.live_tool
    moved: list[uuid.UUID] = []

    async def read_then_moved(*args: Any) -> Any:
        row = await real(*args)
        conn.execute(QUERIES["retire_tool"], {"tool_id": theirs, "by": "bea", "reason": "moved"})
        moved.append(register(conn, "dash_agent", "book_room", "compensable"))
        return row

    monkeypatch.setattr(dashboard_queries, "live_tool", read_then_moved)
    answer = web.post("/tools/register", data={**fields, "reason": "pays"})
    monkeypatch.setattr(dashboard_queries, "live_tool", real)
    before = registrations(conn)
    assert answer.status_code == 409, answer.status_code
    assert "changed since you confirmed" in text_of(answer.text)
    assert [r[5] for r in before] == ["bea", None]  # the other operator's stays live
    live = conn.execute(
        "SELECT tool_id FROM undolog.undolog_tools WHERE retired_at IS NULL"
    ).fetchall()
    assert live == [(moved[0],)]


def test_a_bad_compensation_or_definition_is_refused_and_nothing_is_written(
    web: TestClient, conn: Conn
) -> None:
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/tools").text)
    base = {"csrf": token, "tool_name": "refund", "owner": "dash_agent", "tier": "compensable"}
    cases: list[tuple[dict[str, str], int, str]] = [
        ({"compensation": '{"name": "x"'}, 422, "the compensation is not JSON"),
        ({"compensation": '{"name": "nul\\u0000"}'}, 422, "U+0000"),
        ({"compensation": "[1, 2]"}, 422, "compensation"),  # the engine's UL007
        ({"compensation": '{"args": {}}'}, 422, "compensation"),  # no name: UL007
        ({"compensation": ""}, 422, "compensation"),  # compensable needs one: UL007
        ({"tier": "sometimes", "compensation": '{"name": "x"}'}, 422, "tier: compensable"),
        ({"on_reject": "shrug", "compensation": '{"name": "x"}'}, 422, "on_reject"),
        ({"owner": "", "compensation": '{"name": "x"}'}, 422, "agent login"),
        ({"owner": "no_such_login_x", "compensation": '{"name": "x"}'}, 422, "is not a role"),
        ({"tool_name": "nul\x00", "compensation": '{"name": "x"}'}, 422, "nothing was written"),
        (
            {"tier": "compensable", "on_reject": "continue", "compensation": '{"name": "x"}'},
            422,
            "on_reject 'continue' is for an irreversible tool",
        ),
    ]
    for change, status, words in cases:
        answer = web.post("/tools/register", data={**base, **change})
        assert answer.status_code == status, (change, answer.status_code, answer.text[-600:])
        assert words in text_of(answer.text), (change, answer.text[-600:])
        assert registrations(conn) == [], change


def test_the_engines_own_refusal_of_a_privilege_is_403_with_its_words(
    web: TestClient, conn: Conn
) -> None:
    """A login the dashboard takes for an operator whom the database refuses anyway (here
    the function's grant is gone): PostgreSQL's 42501, said, and nothing written."""
    tool_id = register(conn, "dash_agent", "book_room")
    conn.execute(
        "REVOKE EXECUTE ON FUNCTION undolog.retire_tool(uuid, text, text) FROM undolog_operator"
    )
    conn.execute(
        "REVOKE EXECUTE ON FUNCTION undolog.register_tool(text, text, jsonb, text, text) "
        "FROM undolog_operator"
    )
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/tools").text)
    asked = web.post("/tools/retire", data={"csrf": token, "tool_id": str(tool_id)})
    fields = hidden(asked.text, "retire-form")
    answer = web.post("/tools/retire", data={**fields, "reason": "no longer used"})
    assert answer.status_code == 403
    assert "permission denied for function retire_tool" in answer.text
    answer = web.post(
        "/tools/register",
        data={"csrf": token, "tool_name": "t", "owner": "dash_agent", "tier": "irreversible"},
    )
    assert answer.status_code == 403
    assert "permission denied for function register_tool" in answer.text
    assert [r[5] for r in registrations(conn)] == [None]


# --- retire -------------------------------------------------------------------------------


def test_an_operator_retires_a_registration_after_confirming_with_a_reason(
    web: TestClient, conn: Conn
) -> None:
    tool_id = register(conn, "dash_agent", "book_room")
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/tools").text)
    asked = web.post("/tools/retire", data={"csrf": token, "tool_id": str(tool_id)})
    assert asked.status_code == 200 and 'id="retire-confirm"' in asked.text
    assert "book_room" in asked.text and "dash_agent" in asked.text
    assert registrations(conn)[0][5] is None  # the first click writes nothing
    fields = hidden(asked.text, "retire-form")
    assert fields["confirm"]

    # no reason: asked again, nothing written
    again = web.post("/tools/retire", data={**fields, "reason": "  "})
    assert again.status_code == 422 and "Give a reason" in again.text
    assert registrations(conn)[0][5] is None
    # a used or hand-made confirmation: asked again, nothing written
    stale = web.post("/tools/retire", data={**fields, "reason": "replaced"})
    assert stale.status_code == 409 and "already used or has expired" in stale.text
    made_up = web.post(
        "/tools/retire",
        data={"csrf": token, "tool_id": str(tool_id), "confirm": "x", "reason": "r"},
    )
    assert made_up.status_code == 409
    assert registrations(conn)[0][5] is None

    fields = hidden(made_up.text, "retire-form")
    done = web.post("/tools/retire", data={**fields, "reason": "replaced by book_room_v2"})
    assert done.status_code == 303 and done.headers["location"] == "/tools"
    assert registrations(conn)[0][5:] == ("dash_operator", "replaced by book_room_v2")
    page = web.get("/tools")
    assert "tool book_room of dash_agent: retired by dash_operator" in page.text
    assert f"tool-{tool_id}" not in page.text

    # once retired, there is nothing to retire
    again = web.post("/tools/retire", data={"csrf": token, "tool_id": str(tool_id)})
    assert again.status_code == 409 and "already retired" in again.text
    for bad in ("not-a-uuid", str(uuid.uuid4())):
        assert web.post("/tools/retire", data={"csrf": token, "tool_id": bad}).status_code == 404


# --- refusals of every action to whoever is not an operator -------------------------------


def test_only_an_operator_registers_retires_adds_or_removes(web: TestClient, conn: Conn) -> None:
    tool_id = register(conn, "dash_agent", "book_room")
    add_channel(conn, "ops-hook")
    tools_before, channels_before = registrations(conn), channels(conn)
    posts: dict[str, dict[str, str]] = {
        "/tools/register": {
            "tool_name": "refund",
            "owner": "dash_agent",
            "tier": "compensable",
            "compensation": '{"name": "x"}',
        },
        "/tools/retire": {"tool_id": str(tool_id), "reason": "r", "confirm": "x"},
        "/notifications/add/webhook": {"name": "h2", "url": "https://x.test/", "secret": SECRET},
        "/notifications/add/email": {
            "name": "m2",
            "to": "a@x.test",
            "smtp_host": "smtp.x.test",
            "smtp_from": "u@x.test",
        },
        "/notifications/remove": {"name": "ops-hook", "confirm": "x"},
    }
    for login in ("dash_approver", "dash_agent"):
        log_in(web, login)
        token = csrf_of(web.get("/sessions").text)
        for path, data in posts.items():
            answer = web.post(path, data={**data, "csrf": token})
            assert answer.status_code == 403, (login, path, answer.status_code)
            assert "only an operator" in answer.text and "nothing was written" in answer.text
    # and without the form's token, not even an operator
    log_in(web, "dash_operator")
    for path, data in posts.items():
        answer = web.post(path, data={**data, "csrf": "stale"})
        assert answer.status_code == 403 and "nothing was written" in answer.text, path
    assert registrations(conn) == tools_before
    assert channels(conn) == channels_before


# --- notification channels ----------------------------------------------------------------


def test_an_operator_adds_a_webhook_and_an_email_channel_and_no_secret_is_shown(
    web: TestClient, conn: Conn
) -> None:
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/notifications").text)
    answer = web.post(
        "/notifications/add/webhook",
        data={
            "csrf": token,
            "name": "ops-hook",
            "url": "https://hooks.example.com/T0/secret-path",
            "secret": SECRET,
            "slack": "1",
            "dashboard_url": "https://undolog.example.com",
        },
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/notifications"
    answer = web.post(
        "/notifications/add/email",
        data={
            "csrf": token,
            "name": "oncall",
            "to": "a@example.com,\nb@example.com",
            "smtp_host": "smtp.example.com",
            "smtp_port": "587",
            "smtp_from": "undolog@example.com",
            "smtp_user": "mailer",
            "password": PASSWORD_SMTP,
            "starttls": "1",
        },
    )
    assert answer.status_code == 303
    assert channels(conn) == [
        (
            "ops-hook",
            "webhook",
            "https://hooks.example.com/T0/secret-path",
            {"format": "slack"},
            SECRET,
            "dash_operator",
            None,
        ),
        (
            "oncall",
            "email",
            "a@example.com, b@example.com",
            {
                "smtp_host": "smtp.example.com",
                "smtp_port": 587,
                "smtp_from": "undolog@example.com",
                "smtp_user": "mailer",
                "starttls": True,
                "ssl": False,
            },
            PASSWORD_SMTP,
            "dash_operator",
            None,
        ),
    ]
    page = web.get("/notifications")
    assert "channel ops-hook: webhook channel added" in page.text
    assert "channel oncall: email channel added" in page.text
    for approver in (False, True):
        if approver:
            log_in(web, "dash_approver")
            page = web.get("/notifications")
            assert "add-webhook-form" not in page.text and "remove-" not in page.text
        assert page.status_code == 200
        assert "ops-hook" in page.text and "oncall" in page.text
        assert "https://hooks.example.com/…" in page.text
        for secret in (SECRET, PASSWORD_SMTP, "secret-path"):
            assert secret not in page.text, secret


def test_a_channel_the_engine_refuses_is_said_and_nothing_is_written(
    web: TestClient, conn: Conn
) -> None:
    add_channel(conn, "ops-hook")
    before = channels(conn)
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/notifications").text)
    hook = {"csrf": token, "name": "h2", "url": "https://x.example.com/", "secret": SECRET}
    mail = {
        "csrf": token,
        "name": "m2",
        "to": "a@example.com",
        "smtp_host": "smtp.example.com",
        "smtp_from": "u@example.com",
    }
    cases: list[tuple[str, dict[str, str], str]] = [
        ("webhook", {**hook, "secret": "short"}, "a webhook secret (the HMAC key)"),
        ("webhook", {**hook, "url": "ftp://x"}, "a webhook URL"),
        ("webhook", {**hook, "name": "ops-hook"}, "a notification channel named ops-hook exists"),
        ("webhook", {**hook, "name": "bad name!"}, "a name of letters"),
        ("email", {**mail, "to": "not-an-address"}, "recipients that are addresses"),
        ("email", {**mail, "smtp_port": "70000"}, "smtp_port: a port from 1 to 65535"),
        ("email", {**mail, "smtp_port": "x"}, "smtp_port"),
        ("email", {**mail, "smtp_host": ""}, "an smtp_host"),
        ("webhook", {**hook, "secret": SECRET + "\x00"}, "nothing was written"),
    ]
    for kind, data, words in cases:
        answer = web.post(f"/notifications/add/{kind}", data=data)
        assert answer.status_code == 422, (data, answer.status_code)
        said = text_of(answer.text)
        assert words in said, (data, said[-600:])
        assert SECRET not in said
        assert channels(conn) == before, data
    # the engine's hint is shown with its message
    answer = web.post("/notifications/add/webhook", data={**hook, "secret": "short"})
    assert "add-webhook --help" in text_of(answer.text)
    assert web.post("/notifications/add/sms", data=hook).status_code == 404
    assert channels(conn) == before


def test_an_operator_removes_a_channel_after_confirming(web: TestClient, conn: Conn) -> None:
    add_channel(conn, "ops-hook")
    log_in(web, "dash_operator")
    page = web.get("/notifications")
    token = csrf_of(page.text)
    asked = web.post("/notifications/remove", data={"csrf": token, "name": "ops-hook"})
    assert asked.status_code == 200 and 'id="remove-confirm"' in asked.text
    assert SECRET not in asked.text and "secret-path" not in asked.text
    assert channels(conn)[0][6] is None  # the first click writes nothing
    fields = hidden(asked.text, "remove-form")
    made_up = web.post("/notifications/remove", data={**fields, "confirm": "x"})
    assert made_up.status_code == 409 and 'id="remove-stale"' in made_up.text
    assert channels(conn)[0][6] is None
    fields = hidden(made_up.text, "remove-form")
    done = web.post("/notifications/remove", data=fields)
    assert done.status_code == 303 and done.headers["location"] == "/notifications"
    assert channels(conn)[0][6] == "dash_operator"
    page = web.get("/notifications")
    assert "channel ops-hook: removed by dash_operator" in page.text
    assert 'class="channel-row"' not in page.text
    assert "ops-hook" in web.get("/notifications", params={"all": "1"}).text
    # no live channel of that name any more
    gone = web.post("/notifications/remove", data={"csrf": token, "name": "ops-hook"})
    assert gone.status_code == 404


def test_the_lists_are_bounded(web: TestClient, conn: Conn, monkeypatch: Any) -> None:
    from undolog.dashboard import queries

    monkeypatch.setattr(queries, "TOOLS_LIMIT", 2)
    monkeypatch.setattr(queries, "CHANNELS_LIMIT", 1)
    for n in range(3):
        register(conn, "dash_agent", f"tool_{n}")
    add_channel(conn, "a-hook")
    add_channel(conn, "b-hook")
    log_in(web, "dash_approver")
    page = web.get("/tools")
    assert page.text.count('class="tool-row"') == 2 and 'id="tools-more"' in page.text
    page = web.get("/notifications")
    assert page.text.count('class="channel-row"') == 1 and 'id="channels-more"' in page.text
