"""Every example of the documentation runs, as the pages show it, on a real PostgreSQL.

The pages include their code from files under examples/ (pymdownx.snippets, ``--8<--``);
the tests here run each file, check that every page's code is such an include, that
every include resolves, and that the reference pages cover what the database and the
binding really have.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import undolog
from pgcluster import throwaway_cluster
from undolog import engine
from undolog import errors as undolog_errors
from undolog.errors import BY_SQLSTATE
from undolog.migrations import migrate

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = ROOT / "examples"
VENV_BIN = Path(sys.executable).parent
# The faces' pages: their examples are run by the faces' own tests.
FACE_PAGES = {"dashboard.md", "mcp-proxy.md", "integrations.md"}

INCLUDE = re.compile(r'^\s*--8<--\s+"([^"]+)"\s*$')
FENCE = re.compile(r"^(\s*)```(\S*)")


# --- running examples ---------------------------------------------------------------------


def shell_env(dsn: str | None, **extra: str) -> dict[str, str]:
    """The environment a reader has after `. .venv/bin/activate` and `eval "$(make -s db)"`:
    the venv first on PATH, and UNDOLOG_DSN plus libpq's PG* variables for psql. Outer
    make's variables are dropped: under them `make -s db` would print its directory."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PG", "MAKE", "MFLAGS", "UNDOLOG_")) and k != "MFLAGS"
    }
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    if dsn is not None:
        params = conninfo_to_dict(dsn)
        env.update(
            UNDOLOG_DSN=dsn,
            PGHOST=str(params["host"]),
            PGPORT=str(params["port"]),
            PGUSER=str(params["user"]),
            PGDATABASE=str(params["dbname"]),
        )
    env.update(extra)
    return env


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A scratch folder with examples/ in it, as in the clone: the scripts name their
    files examples/..., and `undolog worker --app examples.x:ul` imports from here."""
    folder = Path(tempfile.mkdtemp(prefix="undolog-docs-"))
    (folder / "examples").symlink_to(EXAMPLES)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run(
    cmd: list[str], env: dict[str, str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert out.returncode == 0, f"{cmd} exited {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out


def run_script(name: str, dsn: str, cwd: Path, **extra: str) -> str:
    """The script's output, stdout then stderr (where the binding's warnings go)."""
    out = run(["bash", str(EXAMPLES / name)], shell_env(dsn, **extra), cwd)
    return out.stdout + out.stderr


def psql_file(name: str, dsn: str, cwd: Path) -> str:
    cmd = ["psql", "-X", "-v", "ON_ERROR_STOP=1", "-f", str(EXAMPLES / name)]
    return run(cmd, shell_env(dsn), cwd).stdout


def count(out: str, text: str) -> int:
    return out.count(text)


# --- the tutorials --------------------------------------------------------------------------


def test_first_agent_completes_one_session_and_undoes_the_other(dsn: str, workdir: Path) -> None:
    out = run_script("first_agent.sh", dsn, workdir)
    assert "  opened ada@example.com on plan team" in out
    assert "accounts now: {'ada@example.com': 'team'}" in out
    assert re.search(r"undo: closed bob@example.com \(idempotency key [0-9a-f-]{36}\)", out)
    assert re.search(r"completed\s+1\s+1\s+0", out)  # sessions list: the completed one
    assert re.search(r"compensated\s+1\s+0\s+1", out)  # ... and the undone one
    assert "committed     compensating" in out  # sessions show: the failed one's timeline
    # as first-agent.md §4 says: journaled straight into executing, from no state (-)
    assert re.search(r"\s-\s+executing\s", out) and "pending" not in out


def test_approval_round_trip_runs_the_refund_once_after_approval(dsn: str, workdir: Path) -> None:
    # as after the quickstart, and after an earlier try of this tutorial whose agent gave
    # up: other requests wait already, one of them for the same tool
    run([sys.executable, "examples/quickstart.py"], shell_env(dsn), workdir)
    with psycopg.connect(dsn, autocommit=True) as conn:
        earlier = engine.begin_session(conn, None, "support")
        engine.intercept(conn, earlier, 0, "refund", "irreversible", {"order": 7, "cents": 5})
    out = run(["bash", str(EXAMPLES / "refund_approval.sh")], shell_env(dsn), workdir).stdout
    approved = re.search(r"approval [0-9a-f-]{36}: approved", out)
    assert approved
    assert not (workdir / "agent.log").exists(), "the agent's log stays out of the clone"
    agent = out[approved.end() :]  # the script ends by printing the agent's log
    assert "decision: approved" in agent
    assert count(agent, "ticket opened for order 42") == 1  # replayed, not run again
    assert count(agent, "refunded 1999 cents on order 42") == 1
    assert agent.rstrip().endswith("{'refunded': 1999}")
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT decided_by, reason FROM undolog.decided_approvals WHERE tool_name = 'refund'"
        ).fetchone()
    assert row == ("alice", "order checked")
    with psycopg.connect(dsn) as conn:
        waiting = conn.execute(
            "SELECT tool_name FROM undolog.pending_approvals ORDER BY requested_at"
        ).fetchall()
    assert waiting == [("delete_database",), ("refund",)]  # the others are left alone


def test_notifications_reach_the_webhook_and_the_mailbox(dsn: str, workdir: Path) -> None:
    """The tutorial's script against a real receiver process (examples/webhook_receiver.py,
    checking the signature) and a real SMTP server (aiosmtpd)."""
    import email
    import email.policy
    import socket

    from aiosmtpd.controller import Controller

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    mails: list[email.message.EmailMessage] = []

    class Mailbox:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
            assert isinstance(parsed, email.message.EmailMessage)
            mails.append(parsed)
            return "250 OK"

    smtp = Controller(Mailbox(), hostname="127.0.0.1", port=free_port())
    smtp.start()
    secret = uuid.uuid4().hex
    port = free_port()
    receiver = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "webhook_receiver.py"), str(port)],
        env=shell_env(None, HOOK_SECRET=secret),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert receiver.stdout is not None
        assert receiver.stdout.readline().startswith("listening")
        out = run_script(
            "notifications.sh",
            dsn,
            workdir,
            HOOK_SECRET=secret,
            HOOK_URL=f"http://127.0.0.1:{port}/undolog",
            SMTP_HOST="127.0.0.1",
            SMTP_PORT=str(smtp.port),
            DASHBOARD_URL="https://undolog.example.com",
        )
        announced = receiver.stdout.readline()
    finally:
        receiver.terminate()
        receiver.wait(timeout=30)
        smtp.stop()
    # the script sets UNDOLOG_LINK_SECRET: the link is signed, the same in both messages
    link = re.search(
        r"https://undolog\.example\.com/open/[0-9a-f-]{36}\?exp=\d+&sig=[0-9a-f]{64}", announced
    )
    assert announced.startswith("refund {'cents': 1999, 'order': 42} waits: ") and link
    assert re.search(r"ops-hook\s+webhook\s+sent\s+1\s+8", out)
    assert re.search(r"oncall\s+email\s+sent\s+1\s+8", out)
    assert re.search(r"approval [0-9a-f-]{36}: approved", out)
    [mail] = mails
    assert (
        mail["To"] == "oncall@example.com"
        and mail["Subject"] == "[UndoLog] approval requested: refund"
    )
    body = mail.get_body(("plain",))
    assert body is not None and link[0] in body.get_content()


def test_edit_then_approve_runs_the_payout_once_with_the_approved_amount(
    dsn: str, workdir: Path
) -> None:
    out = run(["bash", str(EXAMPLES / "edit_then_approve.sh")], shell_env(dsn), workdir).stdout
    assert re.search(r"approval [0-9a-f-]{36}: approved, with edited args", out)
    assert "decision: approved" in out
    assert count(out, "paid 25000 cents to supplier-17") == 1  # once, the approved amount
    assert "paid 250000" not in out
    assert "Note: alice changed the arguments of this payout call before approving it" in out
    assert "(reason: the invoice says 250.00, not 2500.00)" in out and "250000 -> 25000" in out
    assert "requested {'cents': 250000, 'account': 'supplier-17'}, ran with" in out
    # run, then replayed (from jsonb: its keys in jsonb's order)
    assert "{'paid': 25000, 'to': 'supplier-17'}" in out
    assert "{'to': 'supplier-17', 'paid': 25000}" in out
    assert "payouts made: [('supplier-17', 25000)]" in out
    # the journal's two argument sets, as the script's last query shows them
    assert '{"cents": 250000, "account": "supplier-17"}' in out
    assert '{"cents": 25000, "account": "supplier-17"}' in out


def test_crash_recovery_replays_after_a_restart_and_the_worker_undoes_a_dead_agent(
    dsn: str, workdir: Path
) -> None:
    out = run_script("crash_recovery.sh", dsn, workdir)
    assert count(out, "agent exited with 1") == 2
    assert count(out, "booked hotel on 2026-06-01") == 2  # two crashed runs; no re-run
    assert count(out, "booked car on 2026-06-02") == 1
    flight = out.index("undo: cancelled flight-2026-06-01 (notify=True)")
    hotel = out.index("undo: cancelled hotel-2026-06-01 (notify=True)")
    assert flight < hotel  # last action first
    assert "error: lease expired" in out
    with psycopg.connect(dsn) as conn:
        states = conn.execute(
            "SELECT state, count(*) FROM undolog.undolog_sessions GROUP BY state ORDER BY 1"
        ).fetchall()
    assert states == [("compensated", 1), ("completed", 1)]


def test_production_commands_run(dsn: str, workdir: Path) -> None:
    out = run_script("production.sh", dsn, workdir)
    assert "(none)" in out  # no halted session on a fresh database
    assert "walking every login's sessions" not in out  # the worker was told whom it serves


def test_crontab_jobs_run_as_written(dsn: str, workdir: Path) -> None:
    lines = (EXAMPLES / "crontab").read_text(encoding="utf-8").splitlines()
    env_lines = [ln for ln in lines if re.match(r"^[A-Z_]+=", ln)]
    assert [ln.split("=", 1)[0] for ln in env_lines] == ["UNDOLOG_DSN"]
    jobs = [ln for ln in lines if ln.strip() and not ln.startswith("#") and ln not in env_lines]
    assert len(jobs) == 1
    for job in jobs:
        command = job.split(None, 5)[5]  # after minute, hour, day, month, weekday
        # cron runs the command with /bin/sh, UNDOLOG_DSN set by the crontab's line
        run(["sh", "-c", command], shell_env(dsn), workdir)


def test_worker_service_runs_its_exec_start_until_stopped(dsn: str, conn: Any) -> None:
    unit = configparser.ConfigParser(interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(EXAMPLES / "undolog-worker.service", encoding="utf-8")
    service = unit["Service"]
    assert service["Environment"].strip('"').startswith("UNDOLOG_DSN=")
    program, *args = shlex.split(service["ExecStart"])
    assert program == f"{service['WorkingDirectory']}/.venv/bin/undolog"
    # the agent login the unit serves (examples/roles.sql's), made here when missing
    (owner,) = [args[i + 1] for i, a in enumerate(args) if a == "--owner"]
    made = conn.execute("SELECT NOT EXISTS (SELECT FROM pg_roles WHERE rolname = %s)", (owner,))
    if made.fetchone()[0]:
        conn.execute(f"CREATE ROLE {owner} LOGIN IN ROLE undolog_agent")
    agent = psycopg.connect(dsn, user=owner, autocommit=True)
    # a dead agent's session for the worker to find: open_account committed, lease gone
    sid = engine.begin_session(agent, None, "first-agent", None, timedelta(seconds=1))
    call = {"email": "eve@example.com", "plan": "solo"}
    descriptor = {"name": "close_account", "args": {}}
    answer = engine.intercept(agent, sid, 0, "open_account", "compensable", call, descriptor)
    assert answer.action == "execute" and answer.effect_id is not None
    engine.commit(agent, answer.effect_id, call)
    agent.close()
    time.sleep(1.2)
    # WorkingDirectory is the clone; the venv's undolog stands for /srv/undolog/.venv's
    worker = subprocess.Popen(
        [str(VENV_BIN / "undolog"), *args],
        env=shell_env(dsn),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while engine.session_state(conn, sid) != "compensated":
            assert worker.poll() is None, worker.communicate()
            assert time.monotonic() < deadline, "the worker did not walk the session"
            time.sleep(0.2)
        time.sleep(1)
        assert worker.poll() is None  # a service: it keeps running
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    assert "undo: closed eve@example.com" in out
    assert f"session {sid}: compensated" in out
    assert "walking every login's sessions" not in err  # the unit chose whom it serves


# --- how-to guides and operations --------------------------------------------------------


def test_roles_each_login_does_its_part(workdir: Path) -> None:
    # Roles belong to the whole cluster: a cluster of its own, so no other test sees them.
    with throwaway_cluster() as cluster:
        with psycopg.connect(cluster.dsn, autocommit=True) as admin:
            migrate(admin)
        out = run_script("roles.sh", cluster.dsn, workdir)
        assert "this login may not run its undo walk" in out
        with psycopg.connect(cluster.dsn) as admin:
            owners = admin.execute(
                "SELECT DISTINCT owner_role, state FROM undolog.undolog_sessions ORDER BY 2"
            ).fetchall()
            granted = admin.execute(
                "SELECT r.rolname, g.rolname FROM pg_auth_members m"
                " JOIN pg_roles r ON r.oid = m.member JOIN pg_roles g ON g.oid = m.roleid"
                " WHERE g.rolname LIKE 'undolog_%' ORDER BY 1"
            ).fetchall()
    assert owners == [("billing_agent", "compensated"), ("billing_agent", "completed")]
    assert granted == [
        ("alice", "undolog_approver"),
        ("billing_agent", "undolog_agent"),
        ("undolog_cron", "undolog_operator"),
    ]
    # as billing_agent the failed session stayed failed; the operator's worker undid it
    assert re.search(r"failed\s+1\s+1\s+0", out)
    assert "undo: closed bob@example.com" in out
    assert re.search(r"session [0-9a-f-]{36}: compensated", out)


def test_retention_setting_and_maintenance(dsn: str, workdir: Path) -> None:
    out = run_script("retention.sh", dsn, workdir)
    assert "ALTER DATABASE" in out
    with psycopg.connect(dsn) as conn:
        (months,) = conn.execute("SHOW undolog.retention_months").fetchone() or ("",)
    assert months == "24"


def test_settings_file_sets_what_the_pages_say(dsn: str, workdir: Path) -> None:
    psql_file("settings.sql", dsn, workdir)
    expected = {
        "undolog.approval_timeout": "4 hours",
        "undolog.max_pending_approvals": "500",
        "undolog.max_live_sessions": "200000",
        "undolog.default_max_attempts": "8",
        "undolog.retry_base": "2 seconds",
        "undolog.retry_cap": "10 minutes",
        "undolog.claim_timeout": "5 minutes",
        "undolog.retention_months": "24",
        "undolog.notification_max_attempts": "12",
        "undolog.notification_retry_base": "30 seconds",
        "undolog.notification_retry_cap": "2 hours",
        "undolog.agent_rollback_to": "off",
        "undolog.notify_queue_percent": "80",
    }
    with psycopg.connect(dsn) as conn:
        for name, value in expected.items():
            assert conn.execute(f"SHOW {name}").fetchone() == (value,)
        # the engine reads them: a new approval request gets a deadline of 4 hours
        (timeout,) = conn.execute("SELECT undolog.approval_timeout()").fetchone() or (None,)
        # ... and a login's sessions may have 500 requests pending at once
        (bound,) = conn.execute("SELECT undolog.max_pending_approvals()").fetchone() or (None,)
        # ... and one login may have 200,000 sessions unfinished
        (live,) = conn.execute("SELECT undolog.max_live_sessions()").fetchone() or (None,)
        # ... and agents may not undo their sessions to a point; NOTIFYs stop at 80%
        (undo,) = conn.execute("SELECT undolog.agent_rollback_to_allowed()").fetchone() or (None,)
        (queue,) = conn.execute(
            "SELECT undolog.database_setting_integer('undolog.notify_queue_percent', 50, 0, 100)"
        ).fetchone() or (None,)
    assert timeout == timedelta(hours=4)
    assert undo is False and queue == 80
    assert bound == 500
    assert live == 200_000


def test_session_in_sql(dsn: str, workdir: Path) -> None:
    out = psql_file("session.sql", dsn, workdir)
    assert re.search(r"replay\s*\|\s*\{\"user_id\": 7\}", out)
    assert re.search(r"compensated\s*\|\s*1\s*\|\s*1", out)


def test_halted_session_retried_and_abandoned(dsn: str, workdir: Path) -> None:
    out = run_script("halted_session.sh", dsn, workdir)
    assert "undo: mail to ada@example.com recalled" in out
    assert "failed after 1 attempt(s): ConnectionError" in out
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT state, resolved_by, resolution FROM undolog.undolog_sessions"
            " ORDER BY created_at"
        ).fetchall()
        actions = conn.execute(
            "SELECT action, performed_by FROM undolog.undolog_operator_actions ORDER BY at"
        ).fetchall()
    assert rows == [
        ("compensated", None, None),
        ("halted", "alice", "recalled the mail by hand"),
    ]
    assert actions == [("retry", "alice"), ("abandon", "alice")]


def test_monitoring_queries_report_a_halted_session(dsn: str, workdir: Path) -> None:
    quiet = psql_file("monitoring.sql", dsn, workdir)
    assert "(0 rows)" in quiet and "next_month_exists \n-------------------\n t" in quiet
    agent = run(
        [sys.executable, "examples/halted_session.py"], shell_env(dsn, MAIL_DOWN="1"), workdir
    )
    halted = re.search(r"session ([0-9a-f-]{36}) failed", agent.stdout)
    assert halted is not None
    assert halted.group(1) in psql_file("monitoring.sql", dsn, workdir)


def test_metrics_script_prints_and_serves_the_metrics(dsn: str, workdir: Path) -> None:
    with socket.socket() as probe:  # a port free now (the page's 9464 may be taken here)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = run_script("metrics.sh", dsn, workdir, UNDOLOG_METRICS_LISTEN=f"127.0.0.1:{port}")
    lines = out.splitlines()
    assert lines[:3] == [
        "undolog_up 1",
        "undolog_halted_sessions 0",
        "undolog_worker_lag_seconds 0",
    ]
    assert 'undolog_sessions{state="active"} 0' in lines
    assert 'undolog_sessions{state="halted"} 0' in lines


def test_audit_verifies_exports_and_anchors(dsn: str, workdir: Path) -> None:
    out = run_script("audit.sh", dsn, workdir)
    assert out.count("match their chains") == 5  # three online, the file, the anchor
    # each run over every session (plain, --since, --anchor) shows its progress
    progress = re.findall(r"undolog verify: \d+ of \d+ rows \(100%\) in 2 of 2 sessions", out)
    assert len(progress) == 3, out
    kept = json.loads((workdir / "anchor.json").read_text(encoding="utf-8"))
    assert kept["anchor_id"] == 1 and len(kept["hash"]) == 64
    exported = list(workdir.glob("session-*.jsonl"))
    assert len(exported) == 1 and exported[0].read_text().count("\n") > 3
    assert " assert_chain \n--------------\n            2" in out


def test_archive_detaches_dumps_and_drops_an_old_month(dsn: str, workdir: Path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        # the passage of time: a month of 2024 in the journal (created as maintenance would)
        conn.execute("SELECT undolog.create_month_partitions('2024-06-01')")
    out = run_script("archive.sh", dsn, workdir)
    assert "detached  undolog_effect_log_2024_06" in out
    dump = (workdir / "undolog-2024.sql").read_text(encoding="utf-8")
    assert "CREATE TABLE undolog.undolog_effect_log_2024_06" in dump
    assert "CREATE TABLE undolog.undolog_effect_history_2024_06" in dump
    with psycopg.connect(dsn) as conn:
        left = conn.execute(
            "SELECT relname FROM pg_class WHERE relname LIKE 'undolog_effect_%_2024_%'"
        ).fetchall()
    assert left == []


# --- the install story ---------------------------------------------------------------------


def reachable_tempdir() -> Path:
    """A scratch folder the postgres system user can enter (as root the cluster runs as
    postgres; mkdtemp's folders are closed to others)."""
    folder = Path(tempfile.mkdtemp(prefix="undolog-db-"))
    folder.chmod(0o755)
    return folder


def test_local_database_path_from_the_quickstart() -> None:
    """make deps, activate, make db, migrate, the example, make db-stop: as written.
    Then the database is stopped, and what the example wrote is still there on restart."""
    folder = reachable_tempdir()
    env = shell_env(None, DB_DIR=str(folder / "pgdata"))
    try:
        out = run(["bash", str(EXAMPLES / "local_database.sh")], env, ROOT, timeout=300)
        assert "rolled back; users now: {1: 'ada@example.com'}" in out.stdout
        assert "stopped the PostgreSQL in" in out.stderr
        start = run(["make", "-s", "db"], env, ROOT)
        line = start.stdout.strip()
        assert line.startswith("export ") and "\n" not in line  # eval-able, one line
        values = dict(part.split("=", 1) for part in shlex.split(line)[1:])
        with psycopg.connect(values["UNDOLOG_DSN"]) as conn:
            agents = conn.execute("SELECT count(*) FROM undolog.undolog_sessions").fetchone()
        assert agents == (3,)  # the quickstart's three sessions stayed
        assert values["PGPORT"] in values["UNDOLOG_DSN"]
    finally:
        subprocess.run(["make", "-s", "db-stop"], env=env, cwd=ROOT, check=False)
        shutil.rmtree(folder, ignore_errors=True)


def test_install_from_the_wheel_into_a_fresh_environment(postgresql: Any, tmp_path: Path) -> None:
    """make dist, pip install the wheel into a venv of its own, migrate an empty database,
    run the first example with it; then the upgrade steps."""
    name = f"install_{uuid.uuid4().hex[:8]}"
    info = postgresql.info
    admin_dsn = make_conninfo(host=info.host, port=info.port, user=info.user, dbname=info.dbname)
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    fresh_dsn = make_conninfo(admin_dsn, dbname=name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = shell_env(fresh_dsn)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    env["VIRTUAL_ENV"] = str(venv)
    # a PYTHONPATH of the caller's (a worktree's python/) would put the clone's copy first
    env.pop("PYTHONPATH", None)
    try:
        out = run(["bash", str(EXAMPLES / "install_wheel.sh")], env, ROOT, timeout=600)
        assert re.search(r"^applied 0001", out.stdout, re.MULTILINE)
        where = run(["python", "-c", "import undolog; print(undolog.__file__)"], env, tmp_path)
        assert where.stdout.startswith(str(venv))  # the wheel's copy, not the clone's
        first = run(["python", str(EXAMPLES / "first_agent.py")], env, tmp_path)
        assert "undo: closed bob@example.com" in first.stdout
        upgrade = run(["bash", str(EXAMPLES / "upgrade.sh")], env, ROOT, timeout=600)
        assert upgrade.stdout.rstrip().endswith("up to date (undolog 0.1.0)")
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# --- the pages: every code block is an include, every include resolves ------------------------


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def code_blocks(text: str) -> Iterator[tuple[str, list[str]]]:
    """(language, lines) of every fenced block of a Markdown page."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, language = opening.groups()
        body: list[str] = []
        i += 1
        while not lines[i].startswith(f"{indent}```"):
            body.append(lines[i])
            i += 1
        yield language, body
        i += 1


def includes(text: str) -> list[str]:
    return [m.group(1) for line in text.splitlines() if (m := INCLUDE.match(line))]


# Blocks that show no code to run: output, syntax, the two make commands (make test is
# this very run; make demo has tests/docs/test_demo.py).
NOT_RUN = {"text", "ini"}


# The faces' pages are their helpers' (and their tests'): not held to this rule here.
@pytest.mark.parametrize(
    "page",
    [p for p in pages() if p.name not in FACE_PAGES],
    ids=lambda p: str(p.relative_to(DOCS)),
)
def test_every_code_block_is_an_included_example(page: Path) -> None:
    for language, body in code_blocks(page.read_text(encoding="utf-8")):
        if any(INCLUDE.match(line) for line in body):
            assert all(INCLUDE.match(line) or not line.strip() for line in body), (page, body)
            continue
        assert language in NOT_RUN, f"{page}: a {language or 'plain'} block that no test runs"
        assert not any(line.lstrip().startswith(("$ ", "psql ", "undolog ")) for line in body)


def snippet_sections(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    starts = set(re.findall(r"--8<-- \[start:([\w-]+)\]", text))
    ends = set(re.findall(r"--8<-- \[end:([\w-]+)\]", text))
    assert starts == ends, f"{path}: sections opened and closed differ"
    return starts


def test_every_include_resolves() -> None:
    seen = 0
    for page in pages():
        for target in includes(page.read_text(encoding="utf-8")):
            file, _, section = target.partition(":")
            path = ROOT / file
            assert path.is_file(), f"{page}: {target} does not exist"
            assert path.resolve().is_relative_to(EXAMPLES), f"{page}: {target} not in examples/"
            if section:
                assert section in snippet_sections(path), f"{page}: no section {target}"
            seen += 1
    assert seen >= 30


def test_undo_to_a_point_by_the_agent_and_by_an_operator(dsn: str, workdir: Path) -> None:
    out = run_script("undo_to.sh", dsn, workdir)
    # the agent's own undo: the last two calls, last first, then it goes on
    assert out.index("undo: cancelled car") < out.index("undo: cancelled hotel Grand")
    assert "state after undo: active" in out
    assert "bookings now: {'flight': 'LIS -> OSL, 3 May', 'hotel': 'Bristol, 3-6 May'}" in out
    # the operator's: the plan, in order, then the walk; the held agent goes on
    assert re.search(r"1\s+2\s+book\s+compensable\s+committed\s+undo", out)
    assert re.search(r"2\s+1\s+book\s+compensable\s+committed\s+undo", out)
    assert "nothing changed (--plan)" in out
    assert "compensating (the walk undoes these, then the session goes on)" in out
    assert "booked train: OSL -> BGO, 6 May" in out and "session completed" in out
    assert '"rollback_to": {"at":' in out and '"by": "alice"' in out
    with psycopg.connect(dsn) as conn:
        actions = conn.execute(
            "SELECT action, performed_by, reason FROM undolog.undolog_operator_actions"
            " WHERE performed_by = 'alice'"
        ).fetchall()
        allowed = conn.execute("SELECT undolog.agent_rollback_to_allowed()").fetchone()
    assert actions == [("rollback_to", "alice", "step 1: hotel and car were for the wrong week")]
    assert allowed == (True,)


# Which test runs each example file. A new example without a test here fails this check.
RUN_BY = {
    "advisory_locks.sql": "test_hostile_probes.py::test_the_roles_page_advisory_lock_statements_*",
    "quickstart.py": "test_examples.py::test_quickstart_runs_as_written, local_database.sh",
    "local_database.sh": "test_local_database_path_from_the_quickstart",
    "install_wheel.sh": "test_install_from_the_wheel_into_a_fresh_environment",
    "upgrade.sh": "test_install_from_the_wheel_into_a_fresh_environment",
    "first_agent.py": "first_agent.sh, roles.sh, production.sh, the wheel test",
    "first_agent.sh": "test_first_agent_completes_one_session_and_undoes_the_other",
    "approval_round_trip.py": "test_api.py::test_the_approval_round_trip_example_runs",
    "refund_approval.py": "refund_approval.sh",
    "refund_approval.sh": "test_approval_round_trip_runs_the_refund_once_after_approval",
    "notifications.sh": "test_notifications_reach_the_webhook_and_the_mailbox",
    "webhook_receiver.py": "test_notifications_reach_the_webhook_and_the_mailbox",
    "rejection_feedback.py": "test_reject_option.py::test_the_rejection_example_runs",
    "citus.sql": "test_the_citus_plan_names_every_journal_table_and_real_functions",
    "edit_then_approve.py": "edit_then_approve.sh",
    "edit_then_approve.sh": "test_edit_then_approve_runs_the_payout_once_with_the_approved_...",
    "crash_recovery.py": "crash_recovery.sh",
    "crash_recovery.sh": "test_crash_recovery_replays_after_a_restart_and_the_worker_...",
    "production.sh": "test_production_commands_run",
    "crontab": "test_crontab_jobs_run_as_written",
    "undolog-worker.service": "test_worker_service_runs_its_exec_start_until_stopped",
    "roles.sql": "roles.sh",
    "roles.sh": "test_roles_each_login_does_its_part",
    "retention.sh": "test_retention_setting_and_maintenance",
    "settings.sql": "test_settings_file_sets_what_the_pages_say",
    "session.sql": "test_session_in_sql",
    "halted_session.py": "halted_session.sh, test_monitoring_queries_report_a_halted_session",
    "halted_session.sh": "test_halted_session_retried_and_abandoned",
    "monitoring.sql": "test_monitoring_queries_report_a_halted_session",
    "archive.sh": "test_archive_detaches_dumps_and_drops_an_old_month",
    "metrics.sh": "test_metrics_script_prints_and_serves_the_metrics",
    "prometheus.yml": "cli/test_metrics.py::test_the_example_scrape_config_loads_the_alerts_*",
    "prometheus_alerts.yml": "cli/test_metrics.py::test_the_example_alerts_name_only_*",
    "tracing.py": "binding/test_tracing.py::test_the_tracing_example_runs",
    "undo_to.py": "undo_to.sh",
    "undo_to.sh": "test_undo_to_a_point_by_the_agent_and_by_an_operator",
    "unwaited_result.py": "binding/test_unwaited_results.py::test_the_reference_example_*",
    "audit.sh": "test_audit_verifies_exports_and_anchors",
}


def example_files() -> set[str]:
    return {p.name for p in EXAMPLES.iterdir() if p.is_file() and not p.name.startswith((".", "_"))}


def shown_by(page_list: list[Path]) -> set[str]:
    return {Path(t.partition(":")[0]).name for p in page_list for t in includes(p.read_text())}


def test_every_example_is_run_by_a_test_and_shown_in_the_docs() -> None:
    # The faces' examples are shown by their own pages and run by their own tests.
    faces = shown_by([p for p in pages() if p.name in FACE_PAGES])
    assert example_files() - faces == set(RUN_BY), "add the new example to RUN_BY, and its test"
    assert set(RUN_BY) <= shown_by(pages())


def test_the_nav_lists_every_page() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    in_nav = set(re.findall(r"^\s*- (?:[^:#\n]+: )?([\w/.-]+\.md)\s*$", config, re.MULTILINE))
    on_disk = {str(p.relative_to(DOCS)) for p in pages()}
    assert in_nav == on_disk


# --- the README: its example and commands are the examples' --------------------------------


def readme_blocks() -> list[tuple[str, list[str]]]:
    """The blocks of the README before its Faces section (the faces' own, after it, are
    their helpers' to run)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return list(code_blocks(readme[: readme.index("\n## Faces\n")]))


def without_markers(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if "--8<--" not in line)


def test_readme_example_is_an_example_file_verbatim() -> None:
    (python,) = [body for language, body in readme_blocks() if language == "python"]
    example = without_markers((EXAMPLES / "first_agent.py").read_text(encoding="utf-8"))
    assert "\n".join(python) in example
    assert len(python) > 20


def test_readme_commands_are_those_of_tested_scripts() -> None:
    scripts = "\n".join(p.read_text(encoding="utf-8") for p in EXAMPLES.glob("*.sh"))
    script_lines = {line.split("  #")[0].strip() for line in scripts.splitlines()}
    for language, body in readme_blocks():
        if language != "sh":
            continue
        for line in body:
            command = line.split("#")[0].strip()
            if command in ("", "make demo", "make test"):  # the demo's own test; this run
                continue
            assert command in script_lines, f"README runs {command!r}, which no test runs"


# --- the reference pages cover what exists ------------------------------------------------------


def test_every_sqlstate_is_in_the_one_table() -> None:
    table = (DOCS / "reference" / "errors.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| (UL\d{3}|42501) \| `(\w+)` \|", table, re.MULTILINE))
    ours = {
        code: cls.__name__
        for code, cls in BY_SQLSTATE.items()
        if code.startswith("UL") or code == "42501"
    }
    assert rows == ours
    # PostgreSQL's own refusals, mapped too, each in the second table with its class.
    theirs = {code: cls for code, cls in BY_SQLSTATE.items() if code not in ours}
    assert {"22P02", "22P05", "22007", "42883", "54001"} <= set(theirs)
    lines = [line for line in table.splitlines() if line.startswith("| ")]
    for code, cls in theirs.items():
        assert any(code in line and f"`{cls.__name__}`" in line for line in lines), code


def test_the_errors_table_gives_each_class_its_exit_code_and_http_status() -> None:
    """The exit code and HTTP columns of docs/reference/errors.md are the classes' own
    (``exit_code``, ``http_status``), for every UndoLogError the binding defines."""
    table = (DOCS / "reference" / "errors.md").read_text(encoding="utf-8")
    # | [SQLSTATE |] `Class` [(a `Base`)] | exit code | HTTP | raised when |
    rows = re.findall(r"^\|(?: [^|`]+ \|)? `(\w+)`[^|]* \| (\d) \| (\d{3}) \|", table, re.MULTILINE)
    documented = {name: (int(code), int(status)) for name, code, status in rows}
    classes = {
        name: cls
        for name, cls in vars(undolog_errors).items()
        if isinstance(cls, type)
        and issubclass(cls, undolog_errors.UndoLogError)
        and not name.startswith("_")
        and cls is not undolog_errors.UndoLogError
    }
    assert set(documented) == set(classes), "a class without its row, or a row too many"
    for name, cls in classes.items():
        assert documented[name] == (cls.exit_code, cls.http_status), name
    # "every one of them can be imported from undolog"
    assert set(classes) <= set(undolog.__all__), set(classes) - set(undolog.__all__)


def test_the_sql_reference_has_every_function_and_view(conn: Any) -> None:
    api = {
        name
        for (name,) in conn.execute(
            "SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'undolog'::regnamespace"
            " AND (has_function_privilege('undolog_agent', p.oid, 'EXECUTE')"
            " OR has_function_privilege('undolog_approver', p.oid, 'EXECUTE')"
            " OR has_function_privilege('undolog_operator', p.oid, 'EXECUTE'))"
        ).fetchall()
    }
    views = {
        name
        for (name,) in conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'undolog'::regnamespace"
            " AND relkind = 'v'"
        ).fetchall()
    }
    page = (DOCS / "reference" / "sql.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^### undolog\.(\w+)$", page, re.MULTILINE))
    assert len(api) >= 21
    assert documented == api | views


def test_the_citus_plan_names_every_journal_table_and_real_functions(conn: Any) -> None:
    """Citus cannot be installed here: check what can be, that the plan names every
    journal table and only functions that exist, with their exact argument types."""
    plan = (EXAMPLES / "citus.sql").read_text(encoding="utf-8")
    tables = set(re.findall(r"create_distributed_table\('undolog\.(\w+)', 'session_id'", plan))
    journal = {
        name
        for (name,) in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid"
            " WHERE c.relnamespace = 'undolog'::regnamespace AND c.relkind IN ('r', 'p')"
            " AND NOT c.relispartition AND a.attname = 'session_id'"
        ).fetchall()
    }
    assert tables == journal
    functions = re.findall(r"create_distributed_function\(\s*'([^']+)'", plan)
    assert len(functions) >= 9
    for signature in functions:
        (found,) = conn.execute("SELECT to_regprocedure(%s)::text", (signature,)).fetchone()
        assert found is not None, f"{signature} is not a function of the engine"
