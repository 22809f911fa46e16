"""The Maintenance page: the journal's month partitions and what maintenance would do,
the anchors of the history chains, and an operator's actions on them (run maintenance,
create the coming months, write an anchor), as `undolog partitions` and `undolog anchor`
do, on a real PostgreSQL with real logins. Whoever is not an operator reads (staff) or is
refused (an agent), and nothing is done."""

from __future__ import annotations

import datetime
import html
import re
import threading
import time
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient
from test_dashboard import log_in as first_log_in

from dashboard_helpers import csrf_of

Conn = psycopg.Connection[Any]
ACTIONS = ("/maintenance/run", "/maintenance/ensure", "/maintenance/anchor")


def log_in(web: TestClient, login: str) -> None:
    """Log ``login`` in, in place of whoever the client was logged in as."""
    web.cookies.clear()
    assert first_log_in(web, login).status_code == 303


def month(n: int) -> str:
    """The UTC month n months from now, as partition names spell it (2026_12)."""
    now = datetime.datetime.now(datetime.UTC)
    index = now.year * 12 + now.month - 1 + n
    return f"{index // 12}_{index % 12 + 1:02d}"


def partitions(conn: Conn) -> list[str]:
    return [
        str(r[0])
        for r in conn.execute(
            "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid "
            "WHERE i.inhparent IN ('undolog.undolog_effect_log'::regclass, "
            "'undolog.undolog_effect_history'::regclass) ORDER BY 1"
        ).fetchall()
    ]


def anchors(conn: Conn) -> list[int]:
    return [
        int(r[0])
        for r in conn.execute(
            "SELECT anchor_id FROM undolog.undolog_chain_anchors ORDER BY 1"
        ).fetchall()
    ]


def old_month(conn: Conn) -> None:
    """A month of 2024 in place, long past the retention: maintenance drops it."""
    conn.execute("SELECT undolog.create_month_partitions('2024-01-01'::date)")


def flash_of(page: str) -> list[str]:
    return [html.unescape(t) for t in re.findall(r'<p class="flash ok">(.*?)</p>', page)]


# --- reading ------------------------------------------------------------------------------


def test_staff_read_the_months_the_plan_and_the_anchors_and_an_agent_is_refused(
    web: TestClient, conn: Conn
) -> None:
    old_month(conn)
    conn.execute("SELECT undolog.write_anchor()")
    log_in(web, "dash_approver")
    page = web.get("/maintenance")
    assert page.status_code == 200
    assert 'id="nav-maintenance"' in page.text
    for name in (
        f"undolog_effect_log_{month(0)}",
        f"undolog_effect_history_{month(1)}",
        "undolog_effect_log_2024_01",
    ):
        assert f'id="partition-{name}"' in page.text, name
    assert page.text.count('class="partition-row"') == len(partitions(conn))
    # what a run would do: drop 2024's month, create the third and fourth months ahead
    plan_drop = page.text.split('id="plan-drop"')[1].split("</li>")[0]
    assert "undolog_effect_log_2024_01" in plan_drop
    assert "undolog_effect_history_2024_01" in plan_drop
    assert f"undolog_effect_log_{month(0)}" not in plan_drop
    plan_create = page.text.split('id="plan-create"')[1].split("</li>")[0]
    for n in (2, 3):
        assert f"undolog_effect_log_{month(n)}" in plan_create
        assert f"undolog_effect_history_{month(n)}" in plan_create
    assert f"undolog_effect_log_{month(1)}" not in plan_create
    assert "Keep 12 months" in page.text
    assert 'id="anchor-1"' in page.text
    # an approver reads, and is offered no action
    for button in ("run-maintenance", "ensure-months", "write-anchor"):
        assert f'id="{button}"' not in page.text

    log_in(web, "dash_operator")
    page = web.get("/maintenance")
    assert page.status_code == 200
    for button in ("run-maintenance", "ensure-months", "write-anchor"):
        assert f'id="{button}"' in page.text

    log_in(web, "dash_agent")
    page = web.get("/maintenance")
    assert page.status_code == 403 and "Only approvers and operators" in page.text
    assert "nav-maintenance" not in web.get("/sessions").text

    web.cookies.clear()
    answer = web.get("/maintenance")
    assert answer.status_code == 303 and answer.headers["location"] == "/login"


def test_the_page_reads_while_maintenance_holds_a_month_locked(
    web: TestClient, conn: Conn, dsn: str
) -> None:
    """A drop or an attach holds ACCESS EXCLUSIVE on a partition until it commits: the
    page, which reads the catalog only, does not queue behind it."""
    log_in(web, "dash_approver")
    with psycopg.connect(dsn) as other:  # a transaction, open until the end of the block
        other.execute("LOCK TABLE undolog.undolog_effect_log_default IN ACCESS EXCLUSIVE MODE")
        other.execute(
            f"LOCK TABLE undolog.undolog_effect_history_{month(0)} IN ACCESS EXCLUSIVE MODE"
        )
        # the lock is let go after 10 s: a page that queued would be answered only then
        ends = threading.Timer(10, other.rollback)
        ends.start()
        try:
            started = time.monotonic()
            page = web.get("/maintenance")
            assert time.monotonic() - started < 5
        finally:
            ends.cancel()
            ends.join()
        other.rollback()
    assert page.status_code == 200
    assert 'id="partition-undolog_effect_log_default"' in page.text


# --- the operator's actions ---------------------------------------------------------------


def test_an_operator_runs_maintenance_and_the_flash_says_what_was_done(
    web: TestClient, conn: Conn
) -> None:
    old_month(conn)
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/maintenance").text)
    answer = web.post("/maintenance/run", data={"csrf": token})
    assert answer.status_code == 303 and answer.headers["location"] == "/maintenance"
    now = partitions(conn)
    assert "undolog_effect_log_2024_01" not in now
    assert "undolog_effect_history_2024_01" not in now
    for n in range(4):
        assert f"undolog_effect_log_{month(n)}" in now
        assert f"undolog_effect_history_{month(n)}" in now
    assert anchors(conn) == [1]  # the run anchors the chains too
    page = web.get("/maintenance")
    (said,) = flash_of(page.text)
    assert said.startswith("maintenance: run by dash_operator: created ")
    assert f"undolog_effect_log_{month(3)}" in said and f"undolog_effect_history_{month(2)}" in said
    assert "dropped undolog_effect_log_2024_01" in said and "undolog_effect_history_2024_01" in said
    assert "anchor #1 written" in said
    assert 'id="partition-undolog_effect_log_2024_01"' not in page.text
    # a second run finds nothing to do but the anchor
    web.post("/maintenance/run", data={"csrf": token})
    (said,) = flash_of(web.get("/maintenance").text)
    assert (
        said == "maintenance: run by dash_operator: no month to create or drop; anchor #2 written"
    )


def test_an_operator_creates_the_coming_months(web: TestClient, conn: Conn) -> None:
    old_month(conn)
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/maintenance").text)
    answer = web.post("/maintenance/ensure", data={"csrf": token})
    assert answer.status_code == 303 and answer.headers["location"] == "/maintenance"
    now = partitions(conn)
    for n in range(4):
        assert f"undolog_effect_log_{month(n)}" in now
    assert "undolog_effect_log_2024_01" in now  # ensure drops nothing
    assert anchors(conn) == []  # nor anchors
    (said,) = flash_of(web.get("/maintenance").text)
    assert said.startswith("months ahead: created undolog_effect_log_")
    assert f"undolog_effect_history_{month(3)}" in said and said.endswith("by dash_operator")
    web.post("/maintenance/ensure", data={"csrf": token})
    (said,) = flash_of(web.get("/maintenance").text)
    assert "nothing was created" in said


def test_an_operator_writes_an_anchor_and_the_page_lists_it(
    web: TestClient, conn: Conn, dsn: str
) -> None:
    from dashboard_helpers import active_session

    active_session(dsn)
    log_in(web, "dash_operator")
    page = web.get("/maintenance")
    assert 'id="no-anchors"' in page.text
    answer = web.post("/maintenance/anchor", data={"csrf": csrf_of(page.text)})
    assert answer.status_code == 303 and answer.headers["location"] == "/maintenance"
    assert anchors(conn) == [1]
    (stored,) = conn.execute(
        "SELECT encode(anchor_hash, 'hex') FROM undolog.undolog_chain_anchors"
    ).fetchone() or (None,)
    page = web.get("/maintenance")
    (said,) = flash_of(page.text)
    assert said == (
        "anchor: #1 written by dash_operator: the heads of 1 session(s) whose chain moved "
        f"since the previous anchor; hash {stored}"
    )
    assert 'id="anchor-1"' in page.text and str(stored) in page.text


def test_staff_download_the_latest_anchor_as_anchor_export_prints_it(
    web: TestClient, conn: Conn, dsn: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Maintenance's **Download the latest anchor** is `undolog anchor export`, byte for
    byte: the file to keep outside the database, which `undolog verify --anchor` checks.
    The page told staff to keep what the command prints, and offered no way to get it."""
    from dashboard_helpers import active_session
    from undolog.cli import main

    active_session(dsn)
    log_in(web, "dash_approver")
    page = web.get("/maintenance")
    assert 'id="download-anchor"' not in page.text  # no anchor yet: nothing to download
    none_yet = web.get("/maintenance/anchor/latest")
    assert none_yet.status_code == 404
    assert "No anchor yet" in none_yet.text and "Write an anchor now" in none_yet.text
    conn.execute("SELECT undolog.write_anchor()")
    page = web.get("/maintenance")
    assert 'href="/maintenance/anchor/latest"' in page.text and 'id="download-anchor"' in page.text
    got = web.get("/maintenance/anchor/latest")
    assert got.status_code == 200
    assert got.headers["content-type"] == "application/json"
    assert got.headers["content-disposition"] == 'attachment; filename="undolog-anchor-1.json"'
    assert main(["anchor", "export", "--dsn", dsn]) == 0
    assert got.content == capsys.readouterr().out.encode("utf-8")
    kept = tmp_path / "anchor.json"
    kept.write_bytes(got.content)
    assert main(["verify", "--anchor", str(kept), "--dsn", dsn]) == 0, capsys.readouterr()
    log_in(web, "dash_agent")
    refused = web.get("/maintenance/anchor/latest")
    assert refused.status_code == 403 and "Only approvers and operators" in refused.text
    web.cookies.clear()
    assert web.get("/maintenance/anchor/latest").status_code == 303  # to the login page


def test_an_anchor_write_past_one_anchors_heads_names_the_anchors_it_wrote(
    web: TestClient, conn: Conn, login: Any
) -> None:
    (bound,) = conn.execute("SELECT undolog.anchor_max_heads()").fetchone() or (0,)
    # Over ten logins: every begin_session counts its login's unfinished sessions (the
    # live-sessions cap), and one login's 10,001 took 38 s.
    for _ in range(10):
        login("undolog_agent").execute(
            "SELECT count(undolog.begin_session()) FROM generate_series(1, %s)", (bound // 10,)
        )
    conn.execute("SELECT undolog.begin_session()")
    log_in(web, "dash_operator")
    page = web.get("/maintenance")
    web.post("/maintenance/anchor", data={"csrf": csrf_of(page.text)})
    assert anchors(conn) == [1, 2]
    (stored,) = conn.execute(
        "SELECT encode(anchor_hash, 'hex') FROM undolog.undolog_chain_anchors WHERE anchor_id = 2"
    ).fetchone() or (None,)
    (said,) = flash_of(web.get("/maintenance").text)
    assert said == (
        f"anchor: #1 to #2 written by dash_operator: the heads of {bound + 1} session(s) "
        f"whose chain moved since the previous anchor; hash {stored}"
    )


# --- refusals -----------------------------------------------------------------------------


def test_only_an_operator_runs_maintenance_creates_months_or_writes_an_anchor(
    web: TestClient, conn: Conn
) -> None:
    old_month(conn)
    before = partitions(conn)
    for login in ("dash_approver", "dash_agent"):
        log_in(web, login)
        token = csrf_of(web.get("/sessions").text)
        for path in ACTIONS:
            answer = web.post(path, data={"csrf": token})
            assert answer.status_code == 403, (login, path, answer.status_code)
            assert "only an operator" in answer.text and "nothing was done" in answer.text
    # and without the form's token, not even an operator
    log_in(web, "dash_operator")
    for path in ACTIONS:
        answer = web.post(path, data={"csrf": "stale"})
        assert answer.status_code == 403 and "nothing was written" in answer.text, path
    web.cookies.clear()
    for path in ACTIONS:
        assert web.post(path, data={"csrf": "x"}).status_code == 401
    assert partitions(conn) == before
    assert anchors(conn) == []


def test_the_engines_refusal_is_said_in_its_words_and_nothing_is_done(
    web: TestClient, conn: Conn
) -> None:
    """A login the dashboard takes for an operator whom the database refuses anyway (the
    functions' grants are gone): PostgreSQL's 42501, said, and nothing done."""
    old_month(conn)
    before = partitions(conn)
    for function in (
        "maintain_partitions(integer, integer)",
        "ensure_partitions(integer)",
        "write_anchor()",
    ):
        conn.execute(f"REVOKE EXECUTE ON FUNCTION undolog.{function} FROM undolog_operator")
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/maintenance").text)
    for path, function in zip(
        ACTIONS, ("maintain_partitions", "ensure_partitions", "write_anchor"), strict=True
    ):
        answer = web.post(path, data={"csrf": token})
        assert answer.status_code == 403, path
        assert f"permission denied for function {function}" in answer.text
        assert "nothing was done" in answer.text
    assert partitions(conn) == before
    assert anchors(conn) == []


def test_a_run_gives_up_on_a_busy_lock_instead_of_queueing(
    web: TestClient, conn: Conn, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another maintenance run holds the maintenance lock: the page's run waits at most its
    lock_timeout, then says so, and nothing was done (no month dropped, no anchor)."""
    from undolog.dashboard import queries

    monkeypatch.setattr(queries, "MAINTENANCE_LOCK_TIMEOUT", "200ms")
    old_month(conn)
    before = partitions(conn)
    log_in(web, "dash_operator")
    token = csrf_of(web.get("/maintenance").text)
    with psycopg.connect(dsn) as other:  # a transaction, open until the end of the block
        other.execute("SELECT FROM undolog.undolog_maintenance_lock FOR UPDATE")
        # the other run ends after 10 s: a page that queued would be answered only then
        ends = threading.Timer(10, other.rollback)
        ends.start()
        try:
            for path in ACTIONS:
                started = time.monotonic()
                answer = web.post(path, data={"csrf": token})
                assert time.monotonic() - started < 5, path
                assert answer.status_code == 500, (path, answer.status_code)
                said = html.unescape(answer.text)
                assert "lock timeout" in said and "nothing was done" in said
                assert "another maintenance run or a long reader" in said
        finally:
            ends.cancel()
            ends.join()
        other.rollback()
    assert partitions(conn) == before
    assert anchors(conn) == []
    # the setting was the transaction's only: the page's reads go on without it
    assert web.get("/maintenance").status_code == 200


def test_the_lists_are_bounded(web: TestClient, conn: Conn, monkeypatch: Any) -> None:
    from undolog.dashboard import queries

    monkeypatch.setattr(queries, "PARTITIONS_LIMIT", 2)
    monkeypatch.setattr(queries, "ANCHORS_LIMIT", 1)
    conn.execute("SELECT undolog.write_anchor()")
    conn.execute("SELECT undolog.write_anchor()")
    log_in(web, "dash_approver")
    page = web.get("/maintenance")
    assert page.text.count('class="partition-row"') == 2 and 'id="partitions-more"' in page.text
    assert page.text.count('class="anchor-row"') == 1 and 'id="anchors-more"' in page.text
    assert 'id="anchor-2"' in page.text  # the latest


def test_the_engine_banner_warns_of_a_missing_migration(
    fresh_db: Any, passwords_checked: bool
) -> None:
    """An engine of this package's version migrated by an older tree (every migration but
    the last): every client refuses it (engine_check's one rule), and so the page warns,
    naming the first migration missing; once migrated, no warning."""
    from dashboard_helpers import without_user
    from undolog import _version
    from undolog.dashboard import create_app
    from undolog.migrations import available_migrations, migrate

    shipped = [m.name for m in available_migrations()]
    dsn = fresh_db()
    with psycopg.connect(dsn, autocommit=True) as owner:
        migrate(owner, shipped[-2])
        assert owner.execute("SELECT undolog.version()").fetchone() == (_version.__version__,)
        with TestClient(create_app(without_user(dsn)), follow_redirects=False) as web:
            log_in(web, "dash_approver")
            page = web.get("/maintenance")
            assert page.status_code == 200, page.text
            assert 'id="engine-mismatch"' in page.text
            assert shipped[-1] in page.text
            assert "run <code>undolog migrate</code> with this package" in page.text
            migrate(owner)
            page = web.get("/maintenance")
            assert 'id="engine-mismatch"' not in page.text
