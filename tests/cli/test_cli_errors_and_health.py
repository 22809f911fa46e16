"""The `undolog` command's rough edges, found by a newcomer, each held to its fix: exit
codes, messages, JSON errors, id prefixes, the operator actions, health."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from expiry_support import (
    expired_per_transaction,
    failed_per_transaction,
    lease_run_out,
    past_deadline,
)
from pgcluster import free_port
from undolog import engine, errors, notifications, saga
from undolog.cli import build_parser, describe_error, main
from undolog.cli._common import UsageError
from undolog.cli._ids import resolve_id
from undolog.ids import short_id
from undolog.migrations import available_migrations
from undolog.walk import run_walk

Conn = psycopg.Connection[Any]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def demo_on(dsn: str) -> subprocess.CompletedProcess[str]:
    """`make demo` on the database ``dsn`` names (python -m undolog.demos)."""
    return subprocess.run(
        [sys.executable, "-m", "undolog.demos"],
        env={**os.environ, "UNDOLOG_DSN": dsn},
        capture_output=True,
        text=True,
        check=False,
    )


def committed_session(
    conn: Conn,
    compensation: str = "undo",
    session_id: uuid.UUID | None = None,
    max_attempts: int = 1,
) -> uuid.UUID:
    sid = engine.begin_session(conn, session_id, agent="edges")
    hit = engine.intercept(
        conn,
        sid,
        0,
        "create_user",
        "compensable",
        {"n": 1},
        {"name": compensation, "max_attempts": max_attempts},
    )
    assert hit.effect_id is not None
    engine.commit(conn, hit.effect_id, {"user_id": 1})
    return sid


def halted_session(conn: Conn) -> uuid.UUID:
    """A session whose only compensation failed for good: halted, waiting for a person."""
    sid = committed_session(conn)
    engine.fail_session(conn, sid, "gave up")

    def refuses(call: Any) -> None:
        raise RuntimeError("the refund API is down")

    assert run_walk(conn, sid, {"undo": refuses}, wait=0) == "halted"
    return sid


def test_halted_abandoned_and_halted_waiting_look_different_and_undone_means_compensated(
    dsn: str, conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    waiting, abandoned = halted_session(conn), halted_session(conn)
    done = committed_session(conn)
    engine.fail_session(conn, done, "gave up")
    assert run_walk(conn, done, {"undo": lambda call: None}, wait=0) == "compensated"
    code, out, err = run(
        capsys, "sessions", "abandon", str(abandoned)[:13], "--by", "alice", "--reason", "by hand"
    )
    assert (code, out.strip()) == (0, f"session {abandoned}: halted"), err
    code, out, _ = run(capsys, "sessions", "list", "--dsn", dsn)
    assert code == 0
    line = {sid: next(x for x in out.splitlines() if str(sid) in x) for sid in (waiting, abandoned)}
    assert "halted (needs operator)" in line[waiting]
    assert "halted (abandoned)" in line[abandoned]
    code, out, _ = run(capsys, "--dsn", dsn, "sessions", "list", "--json")
    rows = {r["session_id"]: r for r in json.loads(out)}
    assert rows[str(waiting)]["undone_calls"] == 0  # its compensation failed: not undone
    assert rows[str(waiting)]["compensation_failed_calls"] == 1
    assert rows[str(done)]["undone_calls"] == 1
    assert rows[str(abandoned)]["resolved_by"] == "alice"
    assert rows[str(waiting)]["resolved_by"] is None


@pytest.fixture(autouse=True)
def _dsn_env(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNDOLOG_DSN", dsn)


def test_sessions_resume_retry_rollback(conn: Conn, capsys: pytest.CaptureFixture[str]) -> None:
    retried, resumed = halted_session(conn), halted_session(conn)
    code, out, err = run(capsys, "sessions", "retry", str(retried), "--by", "bob")
    assert (code, out.strip()) == (0, f"session {retried}: compensating"), err
    code, out, err = run(capsys, "--json", "sessions", "resume", str(resumed), "--by", "bob")
    assert code == 0, err
    assert json.loads(out) == {
        "session_id": str(resumed),
        "action": "resume",
        "state": "compensating",
    }
    live = committed_session(conn)
    code, _, err = run(capsys, "sessions", "rollback", str(live), "--by", "carol")
    assert code == 2 and "--reason" in err  # required, like the SQL requires it
    code, out, err = run(
        capsys, "sessions", "rollback", str(live), "--by", "carol", "--reason", "wrong customer"
    )
    assert (code, out.strip()) == (0, f"session {live}: failed"), err
    actions = conn.execute(
        "SELECT session_id, action, performed_by FROM undolog.undolog_operator_actions ORDER BY at"
    ).fetchall()
    assert actions == [
        (retried, "retry", "bob"),
        (resumed, "resume", "bob"),
        (live, "rollback", "carol"),
    ]
    code, _, err = run(capsys, "sessions", "retry", str(live), "--by", "bob")
    assert code == 1 and "not halted" in err and "\nhint: " in err  # UL001, as resume's
    code, _, err = run(capsys, "sessions", "resume", str(live), "--by", " ")
    assert code == 2 and "--by" in err and "p_by" not in err
    # the engine's hint, in the command's words: what to pass instead
    assert "\nhint: Pass --by: who acts" in err, err


def test_id_prefixes_unique_ambiguous_and_unknown(
    conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    a = engine.begin_session(conn, uuid.UUID("abcd1111-0000-4000-8000-000000000001"))
    engine.begin_session(conn, uuid.UUID("abcd2222-0000-4000-8000-000000000002"))
    code, out, err = run(capsys, "sessions", "show", "abcd1")
    assert code == 0 and out.startswith(f"session {a} "), err
    code, out, err = run(capsys, "sessions", "show", "abcd1111…")  # as the demo prints it
    assert code == 0, err
    code, _, err = run(capsys, "sessions", "show", "abcd")
    assert code == 2 and "ambiguous" in err and str(a) in err
    code, _, err = run(capsys, "sessions", "show", "ffff9")
    assert code == 3 and "unknown session" in err
    for bad in ("not-hex!", "-", "ab", ""):
        code, _, err = run(capsys, "sessions", "show", bad)
        assert code == 2 and "id prefix of 4 to 32 hex digits" in err, bad
    hit = engine.intercept(conn, a, 0, "pay", "irreversible", {"cents": 1})
    assert hit.approval_id is not None
    code, out, err = run(capsys, "approvals", "approve", str(hit.approval_id)[:8], "--by", "dora")
    assert (code, out.splitlines()[0]) == (0, f"approval {hit.approval_id}: approved"), err
    code, _, err = run(capsys, "approvals", "reject", str(hit.approval_id), "--by", "\t")
    assert code == 2 and err.startswith("undolog: --by must name who decides"), err


def test_an_id_end_is_looked_up_among_the_ids_the_login_reads(
    conn: Conn, login: Callable[..., Conn]
) -> None:
    """An id given by its end (as short_id prints it) is one of the ids its login may
    read: two agents' sessions that end alike are each its owner's one match, and
    ambiguous to an operator, who reads both; the end of another agent's approval or
    delivery id is unknown to an agent, as an id that does not exist."""
    mine, theirs, operator = (
        login("undolog_agent"),
        login("undolog_agent"),
        login("undolog_operator"),
    )
    a = engine.begin_session(mine, uuid.UUID("abcd0001-0000-4000-8000-00000000beef"))
    b = engine.begin_session(theirs, uuid.UUID("abcd0002-0000-4000-8000-00000000beef"))
    assert resolve_id(mine, "session", "…0000beef") == a
    assert resolve_id(theirs, "session", "…0000beef") == b
    with pytest.raises(UsageError, match="ambiguous: it matches " + f"{a}, {b}"):
        resolve_id(operator, "session", "…0000beef")
    notifications.add_webhook(
        conn, "ops", "http://127.0.0.1:9/hook", "s3cret-of-16-chars", by="ann"
    )
    asked = {}
    for agent, session in ((mine, a), (theirs, b)):
        hit = engine.intercept(agent, session, 0, "pay", "irreversible", {"cents": 1})
        assert hit.approval_id is not None
        asked[session] = hit.approval_id
    notifications.enqueue(conn)
    delivered = dict(
        conn.execute(
            "SELECT session_id, delivery_id FROM undolog.undolog_notification_deliveries"
        ).fetchall()
    )
    for kind, ids in (("approval", asked), ("delivery", delivered)):
        own, other = short_id(ids[a]), short_id(ids[b])
        assert resolve_id(mine, kind, own) == ids[a]
        assert resolve_id(operator, kind, other) == ids[b]
        with pytest.raises(errors.UndoLogError, match=f"unknown {kind} {other} .*or not yours"):
            resolve_id(mine, kind, other)


def test_approvals_expire_closes_the_requests_past_their_deadline(
    conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator's command for undolog.expire_approvals (the worker runs it on each
    pass): what was only SQL from cron."""
    conn.execute(
        f"ALTER DATABASE \"{conn.info.dbname}\" SET undolog.approval_timeout = '300 milliseconds'"
    )
    sid = engine.begin_session(conn)
    late = engine.intercept(conn, sid, 0, "pay", "irreversible", {"cents": 1})
    assert late.approval_id is not None
    time.sleep(0.4)
    code, out, err = run(capsys, "--json", "approvals", "expire")
    assert code == 0, err
    assert json.loads(out) == [{"approval_id": str(late.approval_id), "state": "expired"}]
    assert engine.session_state(conn, sid) != "awaiting_approval"
    code, out, err = run(capsys, "--json", "approvals", "expire")
    assert (code, json.loads(out)) == (0, []), err


def test_approvals_expire_says_how_far_a_long_sweep_got(
    conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sweep of many expires them 50 to a transaction (approvals.SWEEP_BATCH) and says
    after each, on standard error, how many are expired and committed so far: the list of
    what it expired comes only at its end. With --json, standard error stays for errors."""
    due = past_deadline(conn, 120)
    code, out, err = run(capsys, "approvals", "expire")
    assert code == 0, err
    assert err.splitlines() == [
        "undolog approvals expire: 50 expired so far (committed), going on",
        "undolog approvals expire: 100 expired so far (committed), going on",
    ]
    lines = out.splitlines()
    assert lines[0].split() == ["APPROVAL_ID", "STATE"] and len(lines) == 121
    assert sorted(uuid.UUID(line.split()[0]) for line in lines[1:]) == sorted(due)
    assert expired_per_transaction(conn, due) == [50, 50, 20]
    more = past_deadline(conn, 60)
    code, out, err = run(capsys, "--json", "approvals", "expire")
    assert (code, err) == (0, "")
    assert sorted(uuid.UUID(r["approval_id"]) for r in json.loads(out)) == sorted(more)
    assert expired_per_transaction(conn, more) == [50, 10]


def test_recover_fails_a_fleets_sessions_in_batches_and_says_how_far_it_got(
    conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    """After a fleet of agents died, `undolog recover` fails their sessions 50 to a
    transaction (saga.SWEEP_BATCH), as each worker pass does, and says after each, on
    standard error, how many are failed and committed so far; then the sessions whose
    undo walk must run. With --json, standard error stays for errors."""
    dead = lease_run_out(conn, 120)
    code, out, err = run(capsys, "recover")
    assert code == 0, err
    assert err.splitlines() == [
        "undolog recover: 50 session(s) whose lease expired failed so far (committed), going on",
        "undolog recover: 100 session(s) whose lease expired failed so far (committed), going on",
    ]
    named = [uuid.UUID(w) for w in out.split() if re.fullmatch(r"[0-9a-f-]{36}", w)]
    assert sorted(named) == sorted(dead)
    assert failed_per_transaction(conn, dead) == [50, 50, 20]
    more = lease_run_out(conn, 60)
    code, out, err = run(capsys, "--json", "recover")
    assert (code, err) == (0, "")
    assert sorted(uuid.UUID(r["session_id"]) for r in json.loads(out)) == sorted(dead + more)
    assert failed_per_transaction(conn, more) == [50, 10]


def test_recover_most_stops_at_its_bound_and_says_more_may_have_expired(
    conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    """`undolog recover --most N` fails N expired leases at most (the oldest first), then
    recover() one batch more at most, as a worker's pass: under a flood it answers. It
    says so on standard error when it stopped at N; run again, it goes on."""
    dead = lease_run_out(conn, 130)
    code, out, err = run(capsys, "recover", "--most", "60")
    assert code == 0, err
    assert err.splitlines() == [
        "undolog recover: 50 session(s) whose lease expired failed so far (committed), going on",
        "undolog recover: 60 session(s) whose lease expired failed, as many as --most says: "
        "more may have expired (the oldest were failed first); the workers go on failing "
        "them, or run it again",
    ]
    assert failed_per_transaction(conn, dead) == [50, 10, 50]
    assert len([w for w in out.split() if re.fullmatch(r"[0-9a-f-]{36}", w)]) == 110
    code, out, err = run(capsys, "--json", "recover", "--most", "60")
    assert (code, err) == (0, "")
    assert sorted(uuid.UUID(r["session_id"]) for r in json.loads(out)) == sorted(dead)
    assert failed_per_transaction(conn, dead) == [50, 10, 50, 20]
    assert run(capsys, "recover", "--most", "0")[0] == 2


def test_usage_errors_exit_2(conn: Conn, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "sessions", "list", "--state", "bogus")[0] == 2
    assert run(capsys, "sessions", "list", "--limit", "-1")[0] == 2
    code, _, err = run(capsys, "migrate", "--target", "9999_nope")
    assert code == 2 and "0001_baseline" in err
    code, _, err = run(capsys, "partitions", "ensure", "--older-than", "2025-01-01Z")
    assert code == 2 and "--older-than" in err
    assert run(capsys, "partitions", "ensure", "--force")[0] == 2
    assert run(capsys, "partitions", "maintain", "--detach")[0] == 2
    code, _, err = run(capsys, "partitions", "ensure", "--months-ahead", "500")
    assert code == 2 and "--months-ahead: must be from 0 to 120, not 500" in err
    assert "p_months_ahead" not in err


def test_migrate_to_a_target_the_database_is_past_says_so(
    conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    latest = available_migrations()[-1].name  # the database has every migration there is
    assert run(capsys, "migrate", "--target", latest)[1].strip() == "up to date"
    # as a newer package would have left it: a migration after the target is recorded
    conn.execute(
        "INSERT INTO undolog.undolog_migrations (name, checksum) VALUES ('9999_later', 'x')"
    )
    code, out, _ = run(capsys, "migrate", "--target", latest)
    assert code == 0
    assert f"already past {latest} (it has 9999_later)" in out and "up to date" not in out


def test_json_anywhere_and_errors_as_a_json_object(
    conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    committed_session(conn)
    for argv in (
        ["--json", "sessions", "list"],
        ["sessions", "--json", "list"],
        ["sessions", "list", "--json"],
    ):
        code, out, _ = run(capsys, *argv)
        assert code == 0 and json.loads(out)[0]["agent"] == "edges", argv
    code, out, err = run(capsys, "sessions", "--json", "show", str(uuid.uuid4()))
    assert code == 3 and out == ""
    assert json.loads(err)["sqlstate"] == "UL002"
    code, _, err = run(capsys, "--json", "sessions", "list", "--state", "bogus")
    body = json.loads(err)
    assert code == 2 and set(body) == {"error", "sqlstate", "hint"} and "bogus" in body["error"]


def test_partitions_drop_takes_the_readmes_instant_forms(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for instant in ("2020-01-01Z", "2020-01-01T00:00:00Z", "2020-01-01 00:00:00+00:00"):
        code, out, err = run(capsys, "partitions", "drop", "--older-than", instant)
        assert (code, out.strip()) == (0, "(none)"), (instant, err)
    code, _, err = run(capsys, "partitions", "drop", "--older-than", "2020-01-01")
    assert code == 2 and "no time zone" in err


def _iter_actions(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.Action]]:
    """Every option and argument of the parser and its subcommands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _iter_actions(sub)
        else:
            yield parser.prog, action


def test_every_option_and_argument_has_help_text() -> None:
    missing = [
        f"{prog} {action.dest}"
        for prog, action in _iter_actions(build_parser())
        if not isinstance(action, argparse._HelpAction) and not action.help
    ]
    assert missing == []


def test_health_healthy_then_lagging(conn: Conn, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "health", "--json")
    report = json.loads(out)
    assert code == 0 and report["healthy"] is True, err
    assert [c["name"] for c in report["checks"]] == [
        "connection",
        "schema",
        "locks",
        "partitions",
        "worker",
        "operator",
        "schemas",
        "logins",
    ]
    sid = committed_session(conn)
    engine.fail_session(conn, sid, "gave up")  # and no worker walks it
    halted_session(conn)
    code, out, _ = run(capsys, "health", "--max-lag", "0")
    assert code == 1 and "FAIL  worker" in out and "unhealthy" in out
    assert "1 halted sessions wait for an operator" in out
    assert run(capsys, "health", "--max-lag", "3600")[0] == 0


def test_health_says_whether_advisory_locks_are_revoked_from_public(
    conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "health")
    assert code == 0 and "advisory-lock functions revoked from PUBLIC" in out
    conn.execute("GRANT EXECUTE ON FUNCTION pg_catalog.pg_advisory_lock(bigint) TO PUBLIC")
    code, out, _ = run(capsys, "--json", "health")
    report = json.loads(out)
    (locks,) = [c for c in report["checks"] if c["name"] == "locks"]
    assert code == 1 and locks["ok"] is False
    assert locks["public_advisory_functions"] == ["pg_advisory_lock(bigint)"]


def test_health_says_whether_agent_logins_may_create_objects(
    conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    """public writable by PUBLIC (a database made before PostgreSQL 15) lets an agent put a
    function on every other login's search path (tests/engine/test_object_shadowing.py):
    health fails until the owner revokes it (red team, round 7)."""
    code, out, _ = run(capsys, "health")
    assert code == 0 and "agent logins may create no schema nor objects in one" in out
    conn.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
    try:
        code, out, _ = run(capsys, "--json", "health")
    finally:
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    report = json.loads(out)
    (schemas,) = [c for c in report["checks"] if c["name"] == "schemas"]
    assert code == 1 and schemas["ok"] is False
    assert schemas["agent_writable_schemas"] == ["public"]
    assert "undolog_agent" in schemas["agent_logins_that_may_create"]
    assert "the owner must revoke that privilege" in schemas["detail"]


def test_health_asks_every_agent_login_not_only_the_group(
    conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    """A grant to one agent login, and a schema one owns (named after a person's login it
    is first on their path, "$user"), are as open as PUBLIC's grant: the check asked
    undolog_agent alone and passed them (outside review of round 7)."""
    agent = f"agent_{uuid.uuid4().hex[:8]}"
    writer = f"writer_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE ROLE {agent} LOGIN NOINHERIT IN ROLE undolog_agent")
    conn.execute(f"CREATE ROLE {writer}")
    try:
        for grant, undo, schemas in (
            (
                f"GRANT CREATE ON SCHEMA public TO {agent}",
                f"REVOKE CREATE ON SCHEMA public FROM {agent}",
                ["public"],
            ),
            (  # an owner may grant itself CREATE again
                f"CREATE SCHEMA dash_person AUTHORIZATION {agent};"
                f" REVOKE CREATE ON SCHEMA dash_person FROM {agent}",
                "DROP SCHEMA dash_person",
                ["dash_person"],
            ),
            (  # a NOINHERIT login's SET ROLE
                f"GRANT CREATE ON SCHEMA public TO {writer}; GRANT {writer} TO {agent}",
                f"REVOKE {writer} FROM {agent}; REVOKE CREATE ON SCHEMA public FROM {writer}",
                ["public"],
            ),
        ):
            conn.execute(grant)
            try:
                code, out, _ = run(capsys, "--json", "health")
            finally:
                conn.execute(undo)
            (check,) = [c for c in json.loads(out)["checks"] if c["name"] == "schemas"]
            assert code == 1 and check["ok"] is False, check
            assert check["agent_writable_schemas"] == schemas
            assert check["agent_logins_that_may_create"] == [agent]
    finally:
        conn.execute(f"DROP ROLE {agent}")
        conn.execute(f"DROP ROLE {writer}")


def test_health_counts_a_walk_whose_walker_died(
    conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    """A worker that died mid-walk leaves its claim to expire: that session is due."""
    sid = committed_session(conn)
    engine.fail_session(conn, sid, "gave up")
    # long enough that a loaded machine still reads health before the claim expires
    claim = saga.claim_compensation(conn, sid, timedelta(seconds=2))
    assert claim is not None
    code, out, _ = run(capsys, "--json", "health", "--max-lag", "30")
    worker = json.loads(out)["checks"][4]
    assert code == 0 and worker["due_sessions"] == 0  # in flight under a live claim
    time.sleep(2.2)  # the claim expires: nobody walks it
    code, out, _ = run(capsys, "--json", "health", "--max-lag", "0.1")
    worker = json.loads(out)["checks"][4]
    assert code == 1 and worker["due_sessions"] == 1 and worker["ok"] is False


def failed_session(conn: Conn, max_attempts: int = 1) -> uuid.UUID:
    """A session with one committed compensable call, failed and not walked yet."""
    sid = committed_session(conn, max_attempts=max_attempts)
    engine.fail_session(conn, sid, "gave up")
    return sid


def test_health_and_recover_agree_on_every_kind_of_due_session(
    conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    """One rule (undolog.due_sessions) for what a worker must act on: health counts
    exactly the sessions recover() hands out, each kind of due and of not-due session."""
    never_walked = failed_session(conn)
    retry_passed = failed_session(conn, max_attempts=3)
    claim = saga.claim_compensation(conn, retry_passed)
    assert claim is not None
    assert saga.fail_compensation(conn, claim.undo_id, "refund API down") == "retry"
    claim_expired = failed_session(conn)
    assert saga.claim_compensation(conn, claim_expired, timedelta(milliseconds=500))
    nothing_left = failed_session(conn)  # its walk ends at the next claim
    claim = saga.claim_compensation(conn, nothing_left)
    assert claim is not None
    saga.complete_compensation(conn, claim.undo_id)
    lease_expired = engine.begin_session(conn, agent="died", lease=timedelta(seconds=1))
    # not due: a walk under a live claim, a live agent, a halted session (a person's)
    walking = failed_session(conn)
    assert saga.claim_compensation(conn, walking, timedelta(minutes=5))
    engine.begin_session(conn, agent="alive")
    halted_session(conn)
    time.sleep(1.2)  # the lease, the short claim and the first retry's backoff run out

    due = {never_walked, retry_passed, claim_expired, nothing_left, lease_expired}
    states = dict(conn.execute("SELECT session_id, state FROM undolog.due_sessions").fetchall())
    assert set(states) == due
    assert states[nothing_left] == "compensating" and states[lease_expired] == "active"
    code, out, _ = run(capsys, "--json", "health", "--max-lag", "3600")
    worker = json.loads(out)["checks"][4]
    assert code == 0 and worker["due_sessions"] == len(due)
    assert set(saga.recover(conn)) == due  # recover() fails the lapsed lease first
    assert engine.session_state(conn, lease_expired) == "failed"


@pytest.fixture
def empty_db(fresh_db: Callable[..., str]) -> str:
    """A database of the same cluster without the engine."""
    return fresh_db()


def test_a_database_without_the_engine_says_run_migrate(
    empty_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "sessions", "list", "--dsn", empty_db)
    assert code == 1
    assert err.startswith(
        "undolog: the UndoLog engine is not installed in this database: run `undolog migrate`"
    )
    code, out, _ = run(capsys, "health", "--dsn", empty_db)
    assert code == 1 and "FAIL  schema" in out and "run `undolog migrate`" in out


def test_no_dsn_or_a_refused_connection_says_what_to_check(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a DSN given, and no server there: is it running, is the DSN right (not "set one")
    refused = f"host=127.0.0.1 port={free_port()} connect_timeout=2"
    code, _, err = run(capsys, "sessions", "list", "--dsn", refused)
    assert code == 1 and "with the DSN given" in err, err
    assert "hint: is the server running" in err and "make -s db" in err, err
    demo = demo_on(refused)
    assert demo.returncode == 1 and "Traceback" not in demo.stderr, demo.stderr
    assert "hint: is the server running" in demo.stderr, demo.stderr
    assert "unset UNDOLOG_DSN, and make demo starts a throwaway one" in demo.stderr
    # none given: libpq's defaults were used, and the hint says how to give one
    monkeypatch.delenv("UNDOLOG_DSN")
    monkeypatch.setenv("PGHOST", "/nonexistent-socket-dir")
    code, _, err = run(capsys, "sessions", "list")
    assert code == 1 and "no DSN given" in err and "hint: set UNDOLOG_DSN or pass --dsn" in err
    code, out, _ = run(capsys, "health", "--json")
    assert code == 1 and json.loads(out)["checks"][0]["ok"] is False


@pytest.fixture
def nobody(conn: Conn, dsn: str) -> Iterator[str]:
    """A login with no UndoLog role and no privilege."""
    conn.execute("CREATE ROLE cli_nobody LOGIN")
    yield psycopg.conninfo.make_conninfo(dsn, user="cli_nobody")
    conn.execute("DROP OWNED BY cli_nobody")
    conn.execute("DROP ROLE cli_nobody")


def test_a_login_without_privileges_gets_a_hint_not_a_traceback(
    nobody: str, empty_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "sessions", "list", "--dsn", nobody)
    assert code == 1 and "permission denied" in err and "undolog_operator" in err
    fresh_as_nobody = psycopg.conninfo.make_conninfo(empty_db, user="cli_nobody")
    code, _, err = run(capsys, "migrate", "--dsn", fresh_as_nobody)
    assert code == 1 and "permission denied for database" in err
    assert "may create a schema" in err
    demo = demo_on(fresh_as_nobody)
    assert demo.returncode == 1 and "Traceback" not in demo.stderr
    assert "demo stopped: permission denied" in demo.stderr and "hint:" in demo.stderr


def test_an_installer_without_createrole_is_told_so(nobody: str) -> None:
    with (
        psycopg.connect(nobody, autocommit=True) as as_nobody,
        pytest.raises(psycopg.Error) as refused,
    ):
        as_nobody.execute("CREATE ROLE undolog_agent_test NOLOGIN")
    report = describe_error(refused.value)
    assert report.sqlstate == "42501" and "CREATEROLE" in (report.hint or "")


def test_a_closed_pipe_ends_quietly(dsn: str) -> None:
    """`undolog install-sql | head -1`: far more than a pipe buffer, the reader gone."""
    out = subprocess.run(
        f"{sys.executable} -m undolog.cli install-sql | head -1",
        shell=True,
        capture_output=True,
        text=True,
        check=False,
        executable="/bin/bash",
    )
    assert out.stdout == "BEGIN;\n"
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr, out.stderr


def test_the_command_and_the_dashboard_answer_an_error_from_one_table(conn: Conn) -> None:
    """An engine refusal gets its class's exit code from the command and its class's HTTP
    status from the dashboard (undolog.errors), whichever face meets it."""
    from undolog.dashboard.app import engine_error

    refusals = [
        ("SELECT undolog.retry_compensation(%s, 'ops', 'why')", errors.UnknownUndoEntry, 3, 404),
        ("SELECT undolog.resume_session(%s, 'ops', 'why')", errors.UnknownSession, 3, 404),
        ("SELECT undolog.approve(%s, 'ops')", errors.UnknownApproval, 3, 404),
        ("SELECT undolog.approve(%s, ' ')", errors.InvalidArgument, 2, 422),
        ("SELECT undolog.approve(%s::text::uuid, 'ops')", errors.InvalidArgument, 2, 422),
    ]
    for sql, cls, code, status in refusals:
        with pytest.raises(psycopg.Error) as raised:
            conn.execute(sql, ("not-a-uuid" if "::text" in sql else uuid.uuid4(),))
        assert errors.classify(raised.value) is cls, sql
        assert (cls.exit_code, cls.http_status) == (code, status)
        assert describe_error(raised.value).code == code, sql
        assert describe_error(errors.translate(raised.value)).code == code, sql
        assert engine_error(raised.value)[0] == status, sql


def test_a_permission_denied_names_the_role_the_command_needs(
    nobody: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each command's parser says which group role it needs; the hint names that one."""
    approval = str(uuid.uuid4())
    code, _, err = run(capsys, "approvals", "approve", approval, "--by", "x", "--dsn", nobody)
    assert code == 1 and "grant the login undolog_approver, which this command needs" in err
    code, _, err = run(capsys, "partitions", "ensure", "--dsn", nobody)
    assert code == 1 and "grant the login undolog_operator, which this command needs" in err


def test_health_says_whether_one_person_may_hold_both_sides_of_a_call(
    conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    """An agent login and a person's login where one may become the other (SET ROLE, then
    set its password), or either holding CREATEROLE on PostgreSQL 15 (it may set any
    non-superuser's password): one person could make a call and approve it. The engine
    refuses such approvals (42501, red team round 12); health says so before one is
    refused, with what to do. A login that is an agent and an approver both, and two
    logins sharing only undolog_agent, are no such pair."""
    tag = uuid.uuid4().hex[:8]
    agent, approver, both = f"agent_{tag}", f"approver_{tag}", f"both_{tag}"
    conn.execute(f"CREATE ROLE {agent} LOGIN IN ROLE undolog_agent")
    conn.execute(f"CREATE ROLE {approver} LOGIN IN ROLE undolog_approver")
    conn.execute(f"CREATE ROLE {both} LOGIN IN ROLE undolog_agent, undolog_approver")

    def logins_check() -> tuple[int, dict[str, Any]]:
        code, out, _ = run(capsys, "--json", "health")
        (check,) = [c for c in json.loads(out)["checks"] if c["name"] == "logins"]
        return code, check

    try:
        code, check = logins_check()
        assert code == 0 and check["ok"] is True, check
        assert "no agent login and person's login may become one another" in check["detail"]
        conn.execute(f"GRANT {agent} TO {approver}")
        code, check = logins_check()
        assert code == 1 and check["ok"] is False
        assert check["logins_that_may_become_another"] == [f"{agent} and {approver}"]
        assert "REVOKE the membership" in check["detail"]
        conn.execute(f"REVOKE {agent} FROM {approver}")
        conn.execute(f"GRANT {approver} TO {agent}")  # the other way round
        assert logins_check()[1]["logins_that_may_become_another"] == [f"{agent} and {approver}"]
        conn.execute(f"REVOKE {approver} FROM {agent}")
        conn.execute(f"ALTER ROLE {approver} CREATEROLE")
        code, check = logins_check()
        if conn.info.server_version < 160000:
            assert code == 1 and check["logins_with_createrole"] == [approver]
            assert f"{approver} holds CREATEROLE" in check["detail"]
        conn.execute(f"ALTER ROLE {approver} NOCREATEROLE")
        assert logins_check()[1]["ok"] is True
    finally:
        for login in (agent, approver, both):
            conn.execute(f"DROP ROLE {login}")
