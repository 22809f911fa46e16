"""The ``undolog`` command: install, inspect, decide, recover.

    undolog migrate [--target NAME]            install or upgrade the engine
    undolog status | migrate --check           is the engine up to date? (exit 0 yes, 1 no)
    undolog install-sql                        print the install as one plain SQL script
    undolog health [--max-lag SECONDS]         connection, engine schema, worker lag
    undolog sessions list [--state S] [--limit N]   sessions, newest first
    undolog sessions show SESSION              one session and its effect timeline
    undolog sessions resume SESSION --by NAME [--reason TEXT]    move a halted walk on
    undolog sessions retry SESSION --by NAME [--reason TEXT]     retry its failed compensation
    undolog sessions abandon SESSION --by NAME --reason TEXT     resolved by hand: stays halted
    undolog sessions rollback SESSION --by NAME --reason TEXT    undo an active/waiting session
    undolog approvals list                     requests waiting for a human
    undolog approvals approve|reject APPROVAL --by NAME [--reason TEXT]
    undolog tools list [--owner ROLE] [--all]  registered tools: tier and compensation
    undolog tools retire TOOL --owner ROLE --by NAME --reason TEXT   end a registration
    undolog recover                            fail expired sessions; name walks to run
    undolog worker --app MODULE:OBJECT [--owner ROLE]... [--interval S] [--max-backoff S] [--once]
                                               recover and walk, with the app's compensations
    undolog partitions ensure [--months-ahead N]
    undolog partitions drop --older-than INSTANT [--detach] [--force]
    undolog partitions maintain [--months-ahead N] [--retention-months N]

SESSION and APPROVAL are a whole id or a unique prefix of one (``701f4cbc``; an ambiguous
prefix is a usage error). Every command takes --dsn (default: UNDOLOG_DSN, then libpq's
PG* variables) and --json (machine-readable output; errors then are one JSON object
``{"error", "sqlstate", "hint"}`` on stderr), before or after the subcommand.
``undolog --version`` prints the package's version.

Exit codes: 0 success (``health``: healthy), 1 a database or engine error (``health``:
unhealthy), 2 a usage error (bad flag or value, ambiguous id prefix, a worker that is
misconfigured), 3 not found (unknown session or approval).

``undolog worker`` serves until SIGTERM or SIGINT: a halted session, a lost server
(reconnected with backoff), a compensation that outlives its claim, or one session's error
is logged and the worker goes on. On the signal it finishes the entry it holds and exits
0; a second signal stops it at once (the entry's claim then expires and is handed out
again).
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import importlib
import json
import logging
import os
import re
import shutil
import signal
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from types import FrameType
from typing import Any, NoReturn

import psycopg
from psycopg.rows import dict_row

from undolog import approvals, partitions, saga
from undolog.engine import SESSION_STATES, translated
from undolog.errors import (
    InvalidArgument,
    UndoLogError,
    UnknownApproval,
    UnknownSession,
)
from undolog.migrations import (
    DEFAULT_LOCK_TIMEOUT,
    MigrationError,
    applied_migrations,
    available_migrations,
    describe_applied,
    engine_version,
    install_script,
    migrate,
)
from undolog.migrations import status as migration_status
from undolog.walk import Worker, WorkerConfigError

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_FOUND = 0, 1, 2, 3
Rows = list[dict[str, Any]]
log = logging.getLogger("undolog.cli")


class UsageError(Exception):
    """A bad command line: exit 2."""


class ConnectError(Exception):
    """The database could not be reached: the message says where we looked."""


@dataclass(frozen=True)
class ErrorReport:
    message: str
    sqlstate: str | None
    hint: str | None
    code: int


class _Parser(argparse.ArgumentParser):
    """argparse, except that a usage error is raised (and reported by main, as JSON under
    --json) instead of printed here."""

    def error(self, message: str) -> NoReturn:
        # self.prog is the subcommand's own ("undolog approvals list"): its help is the one
        # that lists the choices refused here
        raise UsageError(f"{message} (see `{self.prog} --help`)")


class _Version(argparse.Action):
    """The package's version; then, when UNDOLOG_DSN (or libpq's defaults) reaches a
    database within two seconds, the engine installed in it, which may differ."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(f"undolog {engine_version()}")
        engine = _engine_version_here(os.environ.get("UNDOLOG_DSN", ""))
        if engine is not None:
            print(f"engine in this database: {engine}")
        parser.exit()


def _engine_version_here(dsn: str) -> str | None:
    try:
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=2)
    except psycopg.Error:
        return None  # no database here: the package's version says all there is
    with conn:
        try:
            row = conn.execute("SELECT undolog.version()").fetchone()
        except psycopg.Error:
            return "not installed (run `undolog migrate`)"
    return str(row[0]) if row else None


# --- connecting, querying, printing --------------------------------------------------------


def _dsn(args: argparse.Namespace) -> str:
    return str(args.dsn) if args.dsn is not None else os.environ.get("UNDOLOG_DSN", "")


def _connect(args: argparse.Namespace) -> psycopg.Connection[Any]:
    dsn = _dsn(args)
    try:
        return psycopg.connect(dsn, autocommit=True)
    except psycopg.ProgrammingError as exc:  # the DSN itself does not parse
        raise UsageError(f"invalid --dsn / UNDOLOG_DSN: {_one_line(exc)}") from exc
    except psycopg.OperationalError as exc:
        where = (
            "no DSN given (--dsn absent, UNDOLOG_DSN unset), so libpq's defaults were used"
            if not dsn
            else "the DSN given"
        )
        raise ConnectError(f"cannot connect to PostgreSQL with {where}: {_one_line(exc)}") from exc


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _query(conn: psycopg.Connection[Any], sql: str, params: Any = ()) -> Rows:
    with translated():
        return conn.cursor(row_factory=dict_row).execute(sql, params).fetchall()


def _plain(value: Any) -> Any:
    if isinstance(value, uuid.UUID | datetime.datetime | datetime.timedelta | decimal.Decimal):
        return str(value)
    return value


def _printable(text: str) -> str:
    """Agents write much of what is shown (names, errors, args): no control character of
    theirs reaches the terminal."""
    return "".join(ch if ch.isprintable() else "?" for ch in text)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


def _emit(args: argparse.Namespace, rows: Rows, columns: Sequence[str], title: str = "") -> None:
    """Rows as JSON (--json) or as an aligned table a person can read."""
    if args.json:
        _print_json([{c: _plain(r.get(c)) for c in columns} for r in rows])
        return
    if title:
        print(title)
    if not rows:
        print("  (none)")
        return

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, dict | list):
            return json.dumps(value, separators=(",", ":"))
        if isinstance(value, datetime.datetime):
            return value.strftime("%Y-%m-%d %H:%M:%S")
        if isinstance(value, datetime.timedelta):
            return str(value).split(".")[0]
        return _printable(str(value))

    table = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [min(max(len(c), *(len(row[i]) for row in table)), 60) for i, c in enumerate(columns)]
    widths = _fit(widths, _terminal_width())
    print("  ".join(c.upper()[:w].ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in table:
        print("  ".join(_cut(v, w).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


MIN_COLUMN = 8  # a column is never narrowed below this (a short id, a state's start)


def _terminal_width() -> int | None:
    """The terminal's width when a person reads it (COLUMNS overrides it); None for a
    pipe or a file, which gets whole cells (up to 60 characters) for grep and scripts."""
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def _fit(widths: list[int], total: int | None) -> list[int]:
    """Narrow the widest columns, one character at a time, until the row fits ``total``."""
    widths = list(widths)
    if total is None:
        return widths
    gaps = 2 * (len(widths) - 1)
    while sum(widths) + gaps > total:
        widest = max(range(len(widths)), key=lambda i: widths[i])
        if widths[widest] <= MIN_COLUMN:
            break
        widths[widest] -= 1
    return widths


def _cut(value: str, width: int) -> str:
    """``value`` in at most ``width`` characters: cut at a word boundary when one is near,
    and marked with … so that a cut text is not read as the whole."""
    if len(value) <= width:
        return value
    head = value[: width - 1]
    space = head.rfind(" ")
    if space >= width // 2:
        head = head[:space]
    return head.rstrip() + "…"


# --- ids: whole, or a unique prefix --------------------------------------------------------

_ID_TABLES = {
    "session": ("undolog.undolog_sessions", "session_id"),
    "approval": ("undolog.undolog_approval_requests", "approval_id"),
}
_PREFIX = re.compile(r"[0-9a-fA-F-]{1,36}")
MIN_PREFIX = 4  # as git's short ids: fewer would match by chance more often than not


SHORT_ID = 8


def short_id(value: uuid.UUID | str) -> str:
    """A short form of an id that tells apart ids made in the same millisecond: its last
    8 hex digits, after an ellipsis (``…9f3a01bc``). The ids are UUIDv7, whose first 12
    hex digits are the creation time: a prefix of 8 is the same for every id of the same
    minute. ``undolog sessions show …9f3a01bc`` takes it back (see _resolve_id)."""
    return "…" + str(value).replace("-", "")[-SHORT_ID:]


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _resolve_id(conn: psycopg.Connection[Any], kind: str, text: str) -> uuid.UUID:
    """A whole id as given, or the one id of ``kind`` that starts with ``text`` (the
    short ids the demo and people print: ``701f4cbc``, ``701f4cbc…``)."""
    given = text.strip().rstrip("…").rstrip(".")
    try:
        return uuid.UUID(given)
    except ValueError:
        pass
    for mark in ("…", "..."):
        if given.startswith(mark):  # a short_id: the id's end
            return _resolve_suffix(conn, kind, text, given.removeprefix(mark))
    digits = given.replace("-", "").lower()
    if not _PREFIX.fullmatch(given) or len(digits) < MIN_PREFIX:
        raise UsageError(
            f"{text!r} is not {_article(kind)} {kind} id, nor an id prefix of at least "
            f"{MIN_PREFIX} hex digits"
        )
    table, column = _ID_TABLES[kind]
    rows = _query(
        conn,
        f"SELECT DISTINCT {column} AS id FROM {table} WHERE {column} BETWEEN %s AND %s"
        f" ORDER BY {column} LIMIT 4",
        (uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))),
    )
    if not rows:
        not_found = UnknownSession if kind == "session" else UnknownApproval
        raise not_found(f"unknown {kind} {given} (no {kind} id starts with it, or not yours)")
    if len(rows) > 1:
        shown = ", ".join(str(r["id"]) for r in rows[:3])
        more = ", ..." if len(rows) > 3 else ""
        raise UsageError(
            f"{kind} id prefix {given!r} is ambiguous: it matches {shown}{more}; "
            "give more characters"
        )
    return uuid.UUID(str(rows[0]["id"]))


def _resolve_suffix(conn: psycopg.Connection[Any], kind: str, text: str, tail: str) -> uuid.UUID:
    digits = tail.replace("-", "").lower()
    if not re.fullmatch(r"[0-9a-f]+", digits) or len(digits) < MIN_PREFIX:
        raise UsageError(
            f"{text!r} is not {_article(kind)} {kind} id, nor an id's end of at least "
            f"{MIN_PREFIX} hex digits"
        )
    table, column = _ID_TABLES[kind]
    rows = _query(
        conn,
        f"SELECT DISTINCT {column} AS id FROM {table}"
        f" WHERE replace({column}::text, '-', '') LIKE %s ORDER BY {column} LIMIT 4",
        ("%" + digits,),
    )
    if not rows:
        not_found = UnknownSession if kind == "session" else UnknownApproval
        raise not_found(f"unknown {kind} {text} (no {kind} id ends with it, or not yours)")
    if len(rows) > 1:
        shown = ", ".join(str(r["id"]) for r in rows[:3])
        raise UsageError(f"{kind} id end {text!r} is ambiguous: it matches {shown}; give more")
    return uuid.UUID(str(rows[0]["id"]))


# --- commands -----------------------------------------------------------------------------


def _cmd_status(args: argparse.Namespace) -> int:
    """What migrate would do; exit 0 when the database is up to date, 1 when not."""
    with _connect(args) as conn:
        found = migration_status(conn)
        installed = bool(applied_migrations(conn))
    if args.json:
        print(json.dumps({"up_to_date": found.up_to_date, "installed": installed, **asdict(found)}))
    elif not installed:
        # every migration and file would be listed: one line says the same
        print("the UndoLog engine is not installed in this database: run `undolog migrate`")
    else:
        print("\n".join(found.describe()) or f"up to date (undolog {engine_version()})")
    return EXIT_OK if found.up_to_date else EXIT_ERROR


def _cmd_migrate(args: argparse.Namespace) -> int:
    if getattr(args, "check", False):
        return _cmd_status(args)
    names = [m.name for m in available_migrations()]
    if args.target is not None and args.target not in names:
        raise UsageError(f"unknown --target {args.target!r}; known: {', '.join(names)}")
    with _connect(args) as conn:
        before = applied_migrations(conn)
        if args.target is not None:
            # names sort in apply order (NNNN_); a newer package's migrations count too
            later = sorted(n for n in before if n > args.target)
            if later:
                message = (
                    f"the database is already past {args.target} (it has {', '.join(later)}):"
                    " nothing applied; migrations are never undone"
                )
                if args.json:
                    print(json.dumps({"applied": [], "already_past": later, "message": message}))
                else:
                    print(message)
                return EXIT_OK
        applied = migrate(conn, target=args.target, lock_timeout=args.lock_timeout)
    if args.json:
        print(json.dumps({"applied": applied}))
    else:
        print("\n".join(f"applied {a}" for a in describe_applied(applied)) or "up to date")
    return EXIT_OK


def _cmd_install_sql(args: argparse.Namespace) -> int:
    sys.stdout.write(install_script())
    return EXIT_OK


SESSION_COLUMNS = [
    "session_id",
    "agent",
    "state",
    "calls",
    "committed_calls",
    "undone_calls",
    "replays",
    "created_at",
    "error",
    "needs_attention",
]
# --json carries these too: they tell what "halted" means for this session
SESSION_JSON_COLUMNS = [
    *SESSION_COLUMNS,
    "compensating_calls",
    "compensation_failed_calls",
    "awaiting_approval_calls",
    "resolved_by",
    "resolved_at",
    "resolution",
    "attention_reason",
]


def _shown_state(row: dict[str, Any]) -> str:
    """Halted sessions an operator abandoned (resolved) and ones still waiting for one
    need different things from a person: the table says which."""
    if row["state"] != "halted":
        return str(row["state"])
    return "halted (abandoned)" if row.get("resolved_at") else "halted (needs operator)"


def _cmd_sessions_list(args: argparse.Namespace) -> int:
    with _connect(args) as conn:
        rows = _query(
            conn,
            "SELECT * FROM undolog.sessions_overview WHERE %(state)s::text IS NULL"
            " OR state = %(state)s ORDER BY created_at DESC LIMIT %(limit)s",
            {"state": args.state, "limit": args.limit},
        )
    if args.json:
        _emit(args, rows, SESSION_JSON_COLUMNS)
    else:
        _emit(args, [{**r, "state": _shown_state(r)} for r in rows], SESSION_COLUMNS)
    return EXIT_OK


TIMELINE_COLUMNS = [
    "at",
    "step_index",
    "tool_name",
    "tier",
    "event",
    "from_state",
    "to_state",
    "actor",
    "detail",
]


def _cmd_sessions_show(args: argparse.Namespace) -> int:
    with _connect(args) as conn:
        sid = _resolve_id(conn, "session", args.session)
        session = _query(
            conn, "SELECT * FROM undolog.sessions_overview WHERE session_id = %s", (sid,)
        )
        if not session:
            raise UnknownSession(f"unknown session {sid} (or not yours to read)")
        timeline = _query(
            conn,
            "SELECT * FROM undolog.effect_timeline WHERE session_id = %s ORDER BY history_id",
            (sid,),
        )
    if args.json:
        _print_json(
            {
                "session": {k: _plain(v) for k, v in session[0].items()},
                "timeline": [{c: _plain(r[c]) for c in TIMELINE_COLUMNS} for r in timeline],
            }
        )
        return EXIT_OK
    s = session[0]
    print(
        _printable(
            f"session {s['session_id']}  agent={s['agent'] or '-'}  state={_shown_state(s)}  "
            f"calls={s['calls']}  owner={s['owner_role']}"
        )
    )
    if s["error"]:
        print(f"error: {_printable(s['error'])}")
    if s.get("needs_attention"):  # a result arrived after its compensation: see README
        print(f"NEEDS ATTENTION: {_printable(s['attention_reason'])}")
    if s.get("resolved_at"):
        by, why = _printable(s["resolved_by"]), _printable(s["resolution"])
        print(f"abandoned by {by} at {s['resolved_at']}: {why}")
    _emit(args, timeline, TIMELINE_COLUMNS, title="\ntimeline:")
    if any(r["from_state"] == "executing" and r["to_state"] == "pending" for r in timeline):
        # the engine's word for a call that raised reads as "not started yet" otherwise
        print("(executing → pending: the call raised, took no effect, and may be made again)")
    return EXIT_OK


def _halted_entry(conn: psycopg.Connection[Any], sid: uuid.UUID) -> uuid.UUID:
    """The undo entry a halted session stopped at (what `sessions retry` retries)."""
    rows = _query(
        conn,
        "SELECT state, halt_undo_id FROM undolog.undolog_sessions WHERE session_id = %s",
        (sid,),
    )
    if not rows:
        raise UnknownSession(f"unknown session {sid} (or not yours to read)")
    if rows[0]["halt_undo_id"] is None:
        raise UsageError(
            f"session {sid} is {rows[0]['state']}, not halted at a compensation: nothing to retry"
        )
    return uuid.UUID(str(rows[0]["halt_undo_id"]))


def _operator_action(action: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        with _connect(args) as conn:
            sid = _resolve_id(conn, "session", args.session)
            if action == "resume":
                state = saga.resume_session(conn, sid, args.by, args.reason)
            elif action == "retry":
                undo_id = _halted_entry(conn, sid)
                state = saga.retry_compensation(conn, undo_id, args.by, args.reason)
            elif action == "abandon":
                state = saga.abandon_session(conn, sid, args.by, args.reason)
            else:
                state = saga.rollback_session(conn, sid, args.by, args.reason)
        if args.json:
            print(json.dumps({"session_id": str(sid), "action": action, "state": state}))
        else:
            print(f"session {sid}: {state}")
        return EXIT_OK

    return run


APPROVAL_COLUMNS = [
    "approval_id",
    "tool_name",
    "args",
    "agent",
    "session_id",
    "age",
    "expires_at",
    "expired",
]


def _cmd_approvals_list(args: argparse.Namespace) -> int:
    with _connect(args) as conn:
        rows = _query(conn, "SELECT * FROM undolog.pending_approvals ORDER BY requested_at")
    _emit(args, rows, APPROVAL_COLUMNS)
    return EXIT_OK


def _decide(decide: Callable[..., str]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        with _connect(args) as conn:
            approval_id = _resolve_id(conn, "approval", args.approval)
            state = decide(conn, approval_id, args.by, args.reason)
        if args.json:
            print(json.dumps({"approval_id": str(approval_id), "state": state}))
        else:
            print(f"approval {approval_id}: {state}")
        return EXIT_OK

    return run


TOOL_COLUMNS = [
    "tool_id",
    "owner_role",
    "tool_name",
    "tier",
    "compensation",
    "registered_at",
    "live",
    "retired_by",
    "retire_reason",
]


def _cmd_tools_list(args: argparse.Namespace) -> int:
    with _connect(args) as conn:
        rows = _query(
            conn,
            "SELECT * FROM undolog.registered_tools"
            " WHERE (%(owner)s::text IS NULL OR owner_role = %(owner)s)"
            " AND (live OR %(all)s) ORDER BY owner_role, tool_name, registered_at",
            {"owner": args.owner, "all": args.all},
        )
    _emit(args, rows, TOOL_COLUMNS)
    return EXIT_OK


def _cmd_tools_retire(args: argparse.Namespace) -> int:
    """An operator ends a live registration (recorded), so that its author may register
    the tool again with another tier or compensation."""
    with _connect(args) as conn:
        rows = _query(
            conn,
            "SELECT tool_id FROM undolog.registered_tools"
            " WHERE owner_role = %s AND tool_name = %s AND live",
            (args.owner, args.tool),
        )
        if not rows:
            raise UsageError(
                f"no live registration of {args.tool!r} for {args.owner!r}: "
                "see `undolog tools list --owner ROLE`"
            )
        tool_id = rows[0]["tool_id"]
        retired = _query(
            conn,
            "SELECT undolog.retire_tool(%s, %s, %s) AS at",
            (tool_id, args.by, args.reason),
        )[0]["at"]
    if args.json:
        print(json.dumps({"tool_id": str(tool_id), "retired_at": str(retired)}))
    else:
        print(f"tool {args.tool} of {args.owner} ({tool_id}): retired at {retired}")
    return EXIT_OK


def _cmd_recover(args: argparse.Namespace) -> int:
    with _connect(args) as conn:
        due = saga.recover(conn)
    _emit(
        args,
        [{"session_id": sid} for sid in due],
        ["session_id"],
        title="sessions whose undo walk must run:",
    )
    return EXIT_OK


def _load_app(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError("--app takes MODULE:OBJECT, e.g. myagent.tools:ul")
    sys.path.insert(0, os.getcwd())
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"--app {spec}: {exc}") from exc


def _cmd_worker(args: argparse.Namespace) -> int:
    if args.mcp_config is not None:  # the MCP proxy's compensations (undolog[mcp])
        try:
            from undolog.mcp_proxy.worker import load_worker_app
        except ImportError as exc:
            print(f"undolog: --mcp-config needs the mcp extra: {exc}", file=sys.stderr)
            return EXIT_USAGE
        app = load_worker_app(args.mcp_config)
    elif args.app is None:
        print("undolog: worker needs --app MODULE:OBJECT or --mcp-config FILE", file=sys.stderr)
        return EXIT_USAGE
    else:
        app = _load_app(args.app)
    compensations = getattr(app, "compensations", None)
    if not isinstance(compensations, dict):
        raise UsageError(f"--app {args.app} is not an UndoLog (it has no compensations)")
    logging.basicConfig(
        level=logging.INFO, format="undolog worker: %(levelname)s %(message)s", stream=sys.stderr
    )

    def walked(sid: uuid.UUID, state: str) -> None:
        line = json.dumps({"session_id": str(sid), "state": state}) if args.json else None
        print(line or f"session {sid}: {state}", flush=True)

    worker = Worker(
        lambda: _connect_for_worker(args),
        compensations,
        interval=args.interval,
        max_backoff=args.max_backoff,
        on_walked=walked,
        # the proxy's worker walks the proxy's sessions, not another application's
        only_known=args.mcp_config is not None,
        # --owner ROLE: only those logins' sessions; the proxy's worker, by default, only
        # its own login's (run it as the proxy's login, or name that login)
        owners=args.owner or ([] if args.mcp_config is not None else None),
    )

    def on_signal(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        log.warning("%s: finishing the entry in hand, then exiting (again: exit at once)", name)
        # a second signal gets the default action: the process ends, the claim expires
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        worker.stop()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        reached = worker.run(once=args.once)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if worker.stopping:
        log.info("stopped")
        return EXIT_OK
    return EXIT_OK if reached else EXIT_ERROR


# The server answered and refused this login or database: no retry fixes that (a server
# that is down or restarting is retried instead). libpq gives these as text only.
_REFUSED_LOGIN = re.compile(
    r'database "[^"]*" does not exist|role "[^"]*" does not exist'
    r"|password authentication failed|no password supplied|pg_hba\.conf rejects"
)


def _connect_for_worker(args: argparse.Namespace) -> psycopg.Connection[Any]:
    try:
        return _connect(args)
    except ConnectError as exc:
        if _REFUSED_LOGIN.search(str(exc)):
            raise WorkerConfigError(f"{exc}: fix --dsn / UNDOLOG_DSN") from exc
        # the worker's backoff retries psycopg's own class
        raise psycopg.OperationalError(str(exc)) from exc
    except UsageError as exc:
        raise WorkerConfigError(str(exc)) from exc


def _health_schema(conn: psycopg.Connection[Any]) -> tuple[bool, str]:
    """Whether the engine is installed and as current as this package (what `undolog
    status` reports)."""
    if not applied_migrations(conn):
        return False, "the UndoLog engine is not installed in this database: run `undolog migrate`"
    try:
        found = migration_status(conn)
    except MigrationError as exc:  # a recorded migration differs from this package's
        return False, str(exc)
    if not found.up_to_date:
        return False, f"behind this package ({'; '.join(found.describe())}): run `undolog migrate`"
    return True, f"current (undolog {engine_version()})"


def _cmd_health(args: argparse.Namespace) -> int:
    checks: list[dict[str, Any]] = []

    def check(name: str, ok: bool, detail: str, **extra: Any) -> None:
        checks.append({"name": name, "ok": ok, "detail": detail, **extra})

    try:
        conn = _connect(args)
    except ConnectError as exc:
        check("connection", False, f"{exc}; set UNDOLOG_DSN or pass --dsn")
        return _report_health(args, checks)
    with conn:
        check("connection", True, f"{conn.info.user}@{conn.info.host}:{conn.info.port}")
        ok, detail = _health_schema(conn)
        check("schema", ok, detail)
        if ok:
            _health_locks(conn, check)
            _health_partitions(conn, check)
            _health_worker(conn, args.max_lag, check)
    return _report_health(args, checks)


# The advisory-lock functions of pg_catalog that any login of this database may still call
# (migration 0004_locks revokes them from PUBLIC when a superuser migrates).
_PUBLIC_ADVISORY = """
SELECT coalesce(pg_catalog.array_agg(p.oid::regprocedure::text ORDER BY p.oid), '{}') AS open
FROM pg_catalog.pg_proc AS p
WHERE p.pronamespace = 'pg_catalog'::regnamespace
  AND p.proname ~ '^pg_(try_)?advisory_'
  AND pg_catalog.has_function_privilege('public', p.oid, 'EXECUTE')
"""


def _health_partitions(conn: psycopg.Connection[Any], check: Callable[..., None]) -> None:
    """The months partition maintenance created ahead but could not attach yet (their
    locks were busy: an open read of the effect log); the next run attaches them."""
    (row,) = _query(
        conn,
        "SELECT pg_catalog.has_function_privilege('undolog.pending_partitions()', 'EXECUTE')"
        " AS allowed",
    )
    if not row["allowed"]:
        return
    pending = [str(r["name"]) for r in _query(conn, "SELECT undolog.pending_partitions() AS name")]
    check(
        "partitions",
        True,
        f"{len(pending)} months created ahead, still to attach (the next"
        f" `undolog partitions maintain` attaches them): {', '.join(pending)}"
        if pending
        else "every month created is attached",
        pending_partitions=pending,
    )


def _health_locks(conn: psycopg.Connection[Any], check: Callable[..., None]) -> None:
    """Whether the engine's advisory locks are its own: a login that may call
    pg_advisory_lock can hold a session's lock and stall its agent and its recovery."""
    (row,) = _query(conn, _PUBLIC_ADVISORY)
    still_open = list(row["open"])
    check(
        "locks",
        not still_open,
        f"PUBLIC may still call {len(still_open)} advisory-lock functions: a superuser must"
        " revoke them (docs/how-to/roles.md)"
        if still_open
        else "advisory-lock functions revoked from PUBLIC",
        public_advisory_functions=still_open,
    )


# Every session a worker should be walking, with the moment it became due: failed ones
# (since they failed), active ones whose lease ran out (recover() has not failed them),
# and compensating ones whose top unfinished entry is due (its claim expired, or its retry
# time passed since the walk last moved) -- recover()'s rule, read without writing.
_DUE_SESSIONS = """
SELECT s.session_id,
    CASE
        WHEN s.state = 'failed' THEN s.updated_at
        WHEN s.state = 'active' THEN s.lease_expires_at
        WHEN top.state = 'compensating' THEN top.claimed_until
        ELSE greatest(top.next_attempt_at, moved.at)
    END AS due_since
FROM undolog.undolog_sessions AS s
LEFT JOIN LATERAL (
    SELECT u.state, u.next_attempt_at, u.claimed_until
    FROM undolog.undolog_undo_stack AS u
    WHERE u.session_id = s.session_id AND u.state IN ('pending', 'compensating')
    ORDER BY u.stack_position DESC
    LIMIT 1
) AS top ON s.state = 'compensating'
LEFT JOIN LATERAL (
    SELECT max(u.updated_at) AS at
    FROM undolog.undolog_undo_stack AS u
    WHERE u.session_id = s.session_id
) AS moved ON s.state = 'compensating'
WHERE s.state = 'failed'
   OR (s.state = 'active' AND s.lease_expires_at <= now())
   OR (s.state = 'compensating' AND (
        (top.state = 'compensating' AND top.claimed_until <= now())
        OR (top.state = 'pending' AND top.next_attempt_at <= now())))
"""


def _health_worker(
    conn: psycopg.Connection[Any], max_lag: float, check: Callable[..., None]
) -> None:
    """Worker lag: how long the oldest session due for an undo walk has waited for a
    worker. Halted sessions are reported (they wait for a person, not for the worker)
    but do not make the check fail."""
    (row,) = _query(
        conn,
        f"""
        SELECT count(*) AS due,
            coalesce(extract(EPOCH FROM now() - min(due_since)), 0)::float8 AS lag_seconds
        FROM ({_DUE_SESSIONS}) AS due
        """,
    )
    lag, due = max(float(row["lag_seconds"]), 0.0), int(row["due"])
    check(
        "worker",
        lag <= max_lag,
        f"{due} sessions due for an undo walk, the oldest waiting {lag:.0f} s (max {max_lag:g} s)"
        if due
        else "no session waits for an undo walk",
        due_sessions=due,
        lag_seconds=round(lag, 3),
    )
    (row,) = _query(
        conn,
        "SELECT count(*) AS halted FROM undolog.undolog_sessions"
        " WHERE state = 'halted' AND resolved_at IS NULL",
    )
    halted = int(row["halted"])
    check(
        "operator",
        True,
        f"{halted} halted sessions wait for an operator (undolog sessions list --state halted)"
        if halted
        else "no halted session waits for an operator",
        halted_sessions=halted,
    )


def _report_health(args: argparse.Namespace, checks: list[dict[str, Any]]) -> int:
    healthy = all(c["ok"] for c in checks)
    if args.json:
        _print_json({"healthy": healthy, "checks": checks})
    else:
        for c in checks:
            print(f"{'ok  ' if c['ok'] else 'FAIL'}  {c['name']:<10}  {c['detail']}")
        print("healthy" if healthy else "unhealthy")
    return EXIT_OK if healthy else EXIT_ERROR


def _cmd_mcp_proxy(args: argparse.Namespace) -> int:
    try:
        from undolog.mcp_proxy.server import serve
    except ImportError as exc:
        print(
            f"undolog: mcp-proxy needs the mcp extra (pip install 'undolog[mcp]'): {exc}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    dsn = args.dsn if args.dsn is not None else os.environ.get("UNDOLOG_DSN", "")
    return serve(args.config, dsn, args.http)


def _timestamptz(value: str) -> datetime.datetime:
    """An ISO 8601 instant with its zone: 2025-01-01T00:00:00Z, 2025-01-01 00:00+00,
    or a date with a zone, 2025-01-01Z (its midnight)."""
    text = value.strip()
    date_with_zone = re.fullmatch(r"(\d{4}-\d{2}-\d{2})([Zz]|[+-]\d{2}(?::?\d{2})?)", text)
    if date_with_zone:
        text = f"{date_with_zone[1]}T00:00:00{date_with_zone[2]}"
    try:
        ts = datetime.datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 timestamp: {value!r}") from exc
    if ts.utcoffset() is None:
        raise argparse.ArgumentTypeError(f"{value!r} has no time zone: e.g. 2025-01-01T00:00:00Z")
    return ts


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {number}")
    return number


def _non_negative_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not number >= 0:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return number


def _partitions_logging() -> None:
    # maintain() logs a WARNING for each month it keeps because a session still needs it
    logging.basicConfig(level=logging.WARNING, format="undolog: %(message)s")


def _cmd_partitions_ensure(args: argparse.Namespace) -> int:
    _partitions_logging()
    with _connect(args) as conn:
        created = partitions.ensure(conn, args.months_ahead)
    _emit(args, [{"action": "created", "partition": p} for p in created], ["action", "partition"])
    return EXIT_OK


def _cmd_partitions_drop(args: argparse.Namespace) -> int:
    _partitions_logging()
    verb = "detached" if args.detach else "dropped"
    with _connect(args) as conn:
        done = partitions.drop(conn, args.older_than, detach_only=args.detach, force=args.force)
    _emit(args, [{"action": verb, "partition": p} for p in done], ["action", "partition"])
    return EXIT_OK


def _cmd_partitions_maintain(args: argparse.Namespace) -> int:
    _partitions_logging()
    with _connect(args) as conn:
        done = partitions.maintain(conn, args.months_ahead, args.retention_months)
    _emit(args, [{"action": a, "partition": p} for a, p in done], ["action", "partition"])
    return EXIT_OK


def _cmd_dashboard(args: argparse.Namespace) -> int:
    try:
        from undolog.dashboard.server import run_from_args
    except ImportError as exc:
        print(
            "undolog dashboard needs the 'dashboard' extra: "
            f"pip install 'undolog[dashboard]' ({exc})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    return run_from_args(args)


# --- the parser -----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    # --dsn and --json are accepted before or after any subcommand. SUPPRESS keeps a
    # subcommand's copy of the option from overwriting a value given before it.
    common = _Parser(add_help=False)
    common.add_argument(
        "--dsn",
        default=argparse.SUPPRESS,
        help="libpq connection string (default: UNDOLOG_DSN, then libpq's PG* variables)",
    )
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="machine-readable output; errors as a JSON object on stderr",
    )
    parser = _Parser(
        prog="undolog",
        description="UndoLog: install, inspect, decide, recover.",
        parents=[common],
        epilog="Exit codes: 0 ok, 1 database or engine error, 2 usage error, 3 not found.",
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="the package's version, and the engine's"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("migrate", parents=[common], help="install or upgrade the engine")
    p.add_argument("--target", help="stop after this migration (default: apply all)")
    p.add_argument("--check", action="store_true", help="change nothing: same as status")
    p.add_argument(
        "--lock-timeout",
        default=DEFAULT_LOCK_TIMEOUT,
        metavar="DURATION",
        help="give up when a table lock is not granted within this (PostgreSQL duration,"
        f" e.g. 500ms, 30s; 0: no limit; default {DEFAULT_LOCK_TIMEOUT}); agents' calls on"
        " that table wait behind migrate meanwhile",
    )
    p.set_defaults(func=_cmd_migrate)
    p = sub.add_parser("status", parents=[common], help="is the engine up to date? (0 yes, 1 no)")
    p.set_defaults(func=_cmd_status)
    p = sub.add_parser("install-sql", parents=[common], help="print the plain-SQL install")
    p.set_defaults(func=_cmd_install_sql)
    p = sub.add_parser(
        "health",
        parents=[common],
        help="connection, engine schema, worker lag (exit 0 healthy, 1 not)",
    )
    p.add_argument(
        "--max-lag",
        type=_non_negative_float,
        default=120.0,
        metavar="SECONDS",
        help="unhealthy when a session has waited longer than this for its undo walk (default 120)",
    )
    p.set_defaults(func=_cmd_health)

    sessions = sub.add_parser(
        "sessions", parents=[common], help="list, show and act on sessions"
    ).add_subparsers(dest="sessions_command", required=True, metavar="ACTION")
    p = sessions.add_parser("list", parents=[common], help="sessions, newest first")
    p.add_argument("--state", choices=SESSION_STATES, help="only sessions in this state")
    p.add_argument("--limit", type=_positive_int, default=50, help="at most this many (default 50)")
    p.set_defaults(func=_cmd_sessions_list)
    p = sessions.add_parser("show", parents=[common], help="one session and its timeline")
    p.add_argument(
        "session", metavar="SESSION", help="session id, a unique prefix of it, or …its end"
    )
    p.set_defaults(func=_cmd_sessions_show)
    for action, summary, reason_required in (
        ("resume", "move a halted walk on past the entry it stopped at", False),
        ("retry", "give the compensation a halted walk stopped at one more attempt", False),
        ("abandon", "close a halted session as resolved by hand (it stays halted)", True),
        ("rollback", "fail an active or waiting session so that its work is undone", True),
    ):
        p = sessions.add_parser(action, parents=[common], help=summary)
        p.add_argument(
            "session", metavar="SESSION", help="session id, a unique prefix of it, or …its end"
        )
        p.add_argument("--by", required=True, help="who acts (recorded)")
        p.add_argument(
            "--reason",
            required=reason_required,
            help="why (recorded)" + ("; required" if reason_required else ""),
        )
        p.set_defaults(func=_operator_action(action))

    appr = sub.add_parser("approvals", parents=[common], help="approval requests").add_subparsers(
        dest="approvals_command", required=True, metavar="ACTION"
    )
    p = appr.add_parser("list", parents=[common], help="requests waiting for a human")
    p.set_defaults(func=_cmd_approvals_list)
    for name, decide in (("approve", approvals.approve), ("reject", approvals.reject)):
        p = appr.add_parser(name, parents=[common], help=f"{name} a request")
        p.add_argument("approval", metavar="APPROVAL", help="approval id or a unique prefix")
        p.add_argument("--by", required=True, help="who decides (recorded)")
        p.add_argument("--reason", help="why (recorded)")
        p.set_defaults(func=_decide(decide))

    tools = sub.add_parser(
        "tools", parents=[common], help="the tool registry (tier and compensation per tool)"
    ).add_subparsers(dest="tools_command", required=True, metavar="ACTION")
    p = tools.add_parser("list", parents=[common], help="registered tools, by owner")
    p.add_argument("--owner", help="only this login's tools")
    p.add_argument("--all", action="store_true", help="retired registrations too")
    p.set_defaults(func=_cmd_tools_list)
    p = tools.add_parser(
        "retire", parents=[common], help="end a tool's registration (operator; recorded)"
    )
    p.add_argument("tool", metavar="TOOL", help="the tool's name")
    p.add_argument("--owner", required=True, help="the login the tool is registered for")
    p.add_argument("--by", required=True, help="who decides (recorded)")
    p.add_argument("--reason", required=True, help="why (recorded)")
    p.set_defaults(func=_cmd_tools_retire)

    p = sub.add_parser("recover", parents=[common], help="fail expired sessions, list walks")
    p.set_defaults(func=_cmd_recover)
    p = sub.add_parser("worker", parents=[common], help="recover and walk until SIGTERM/SIGINT")
    p.add_argument("--app", help="MODULE:OBJECT of the UndoLog instance")
    p.add_argument("--mcp-config", help="the MCP proxy's policy file: walk its sessions")
    p.add_argument(
        "--owner",
        action="append",
        metavar="ROLE",
        help="walk only the sessions begun by this login (repeatable; default: every "
        "session, or with --mcp-config the worker's own login's)",
    )
    p.add_argument(
        "--interval",
        type=_non_negative_float,
        default=5.0,
        help="seconds between passes (default 5)",
    )
    p.add_argument(
        "--max-backoff",
        type=_non_negative_float,
        default=30.0,
        metavar="SECONDS",
        help="longest pause between reconnection attempts (default 30)",
    )
    p.add_argument("--once", action="store_true", help="one pass, then exit (for cron)")
    p.set_defaults(func=_cmd_worker)

    p = sub.add_parser("mcp-proxy", parents=[common], help="serve the MCP proxy (undolog[mcp])")
    p.add_argument("--config", required=True, help="the policy file (TOML)")
    p.add_argument("--http", metavar="HOST:PORT", help="streamable HTTP instead of stdio")
    p.set_defaults(func=_cmd_mcp_proxy)

    parts = sub.add_parser(
        "partitions", parents=[common], help="month partitions (operators)"
    ).add_subparsers(dest="partitions_command", required=True, metavar="ACTION")
    months_ahead_help = "months to create beyond the current one, 0 to 120 (default 3)"
    p = parts.add_parser("ensure", parents=[common], help="create the coming months")
    p.add_argument("--months-ahead", type=int, default=3, help=months_ahead_help)
    p.set_defaults(func=_cmd_partitions_ensure)
    p = parts.add_parser("drop", parents=[common], help="drop (or detach) old months")
    p.add_argument(
        "--older-than",
        type=_timestamptz,
        required=True,
        help="months ending at or before this instant: ISO 8601 with a zone, e.g. "
        "2025-01-01Z or 2025-01-01T00:00:00+00:00",
    )
    p.add_argument("--detach", action="store_true", help="detach instead of drop")
    p.add_argument("--force", action="store_true", help="even months that unfinished sessions need")
    p.set_defaults(func=_cmd_partitions_drop)
    p = parts.add_parser("maintain", parents=[common], help="ensure, then apply retention")
    p.add_argument("--months-ahead", type=int, default=3, help=months_ahead_help)
    p.add_argument(
        "--retention-months",
        type=int,
        default=None,
        help="keep this many past months (default: the database setting)",
    )
    p.set_defaults(func=_cmd_partitions_maintain)

    # The dashboard face: imported only when asked for, so that `undolog` works without
    # the extra installed (then a clear message naming it, exit 2).
    p = sub.add_parser("dashboard", parents=[common], help="the web dashboard (extra: dashboard)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default: %(default)s)")
    p.add_argument("--port", type=int, default=8765, help="default: %(default)s")
    p.add_argument("--idle-timeout", type=float, default=30.0, help="minutes (default: 30)")
    p.add_argument("--demo", action="store_true", help="fill a throwaway database with the demo")
    p.set_defaults(func=_cmd_dashboard)
    return parser


# --- errors -------------------------------------------------------------------------------

# The engine's messages name its SQL parameters; on the command line they are flags.
_FLAGS = {
    "p_months_ahead": "--months-ahead",
    "p_retention_months": "--retention-months",
    "p_older_than": "--older-than",
    "p_detach_only": "--detach",
    "p_force": "--force",
    "p_by": "--by",
    "p_decided_by": "--by",
    "decided_by": "--by",
    "p_reason": "--reason",
    "p_session_id": "SESSION",
    "p_approval_id": "APPROVAL",
}
_PARAM = re.compile(r"\b(?:p_[a-z_]+|decided_by)\b")
# SQLSTATEs of a database without the engine, or with an older one
_NO_ENGINE = ("42P01", "42883", "3F000")
_ROLES_HINT = "grant the login one of undolog_agent, undolog_approver, undolog_operator"


def _flags(message: str) -> str:
    return _PARAM.sub(lambda m: _FLAGS.get(m[0], m[0]), message)


def _sqlstate(exc: BaseException) -> str | None:
    for e in (exc, exc.__cause__):
        code = getattr(e, "sqlstate", None)
        if isinstance(code, str):
            return code
    return None


# The group role each command needs (sql/grants.sql): the hint names the missing one, not
# all three.
_COMMAND_ROLE = {
    ("approvals", "approve"): "undolog_approver",
    ("approvals", "reject"): "undolog_approver",
    ("approvals", "list"): "undolog_approver (or undolog_operator)",
    ("recover", None): "undolog_operator",
    ("worker", None): "undolog_operator",
    ("sessions", "resume"): "undolog_operator",
    ("sessions", "retry"): "undolog_operator",
    ("sessions", "abandon"): "undolog_operator",
    ("sessions", "rollback"): "undolog_operator",
    ("partitions", "ensure"): "undolog_operator",
    ("partitions", "drop"): "undolog_operator",
    ("partitions", "maintain"): "undolog_operator",
}


def _needed_role(args: argparse.Namespace | None) -> str | None:
    if args is None:
        return None
    command = str(getattr(args, "command", ""))
    action = getattr(args, f"{command}_command", None)
    return _COMMAND_ROLE.get((command, None if action is None else str(action)))


def _permission_hint(message: str, args: argparse.Namespace | None = None) -> str:
    lowered = message.lower()
    if "create role" in lowered:
        return (
            "installing the engine creates its roles (undolog_agent, undolog_approver, "
            "undolog_operator): run `undolog migrate` as a login with CREATEROLE (or a "
            "superuser), or have such a login create those three roles first"
        )
    if "for database" in lowered or "for schema public" in lowered:
        return (
            "installing the engine needs a login that may create a schema in this database"
            " (its owner, or GRANT CREATE ON DATABASE)"
        )
    role = _needed_role(args)
    if role is not None:
        return f"grant the login {role}, which this command needs"
    return _ROLES_HINT


def _engine_missing(args: argparse.Namespace) -> str:
    """Why an engine object is missing: not installed at all, or older than us."""
    try:
        with _connect(args) as conn:
            applied = applied_migrations(conn)
    except Exception:
        applied = {}
    if not applied:
        return "the UndoLog engine is not installed in this database: run `undolog migrate`"
    return "the UndoLog engine in this database is older than this package: run `undolog migrate`"


def describe_error(exc: BaseException, args: argparse.Namespace | None = None) -> ErrorReport:
    """What to tell a person (and a script) about an error: message, SQLSTATE, hint,
    and the exit code."""
    sqlstate = _sqlstate(exc)
    if isinstance(exc, UsageError | WorkerConfigError | argparse.ArgumentTypeError):
        return ErrorReport(str(exc), sqlstate, None, EXIT_USAGE)
    if isinstance(exc, ConnectError):
        hint = "set UNDOLOG_DSN or pass --dsn, e.g. --dsn postgresql://USER@HOST:5432/DBNAME"
        return ErrorReport(str(exc), None, hint, EXIT_ERROR)
    if isinstance(exc, UnknownSession | UnknownApproval):
        return ErrorReport(_flags(str(exc)), sqlstate, None, EXIT_NOT_FOUND)
    if isinstance(exc, InvalidArgument):  # a value given on the command line was refused
        return ErrorReport(_flags(str(exc)), sqlstate, None, EXIT_USAGE)
    if sqlstate in _NO_ENGINE and args is not None:
        return ErrorReport(_engine_missing(args), sqlstate, None, EXIT_ERROR)
    if sqlstate == "42501":
        message = _one_line(exc)
        return ErrorReport(_flags(message), sqlstate, _permission_hint(message, args), EXIT_ERROR)
    if isinstance(exc, psycopg.Error):
        primary = exc.diag.message_primary or _one_line(exc)
        return ErrorReport(_flags(primary), sqlstate, exc.diag.message_hint, EXIT_ERROR)
    return ErrorReport(_flags(str(exc)), sqlstate, None, EXIT_ERROR)


def _report(report: ErrorReport, as_json: bool) -> int:
    if as_json:
        body = {"error": report.message, "sqlstate": report.sqlstate, "hint": report.hint}
        print(json.dumps(body), file=sys.stderr)
    else:
        print(f"undolog: {report.message}", file=sys.stderr)
        if report.hint:
            print(f"hint: {report.hint}", file=sys.stderr)
    return report.code


def _reader_gone() -> None:
    """The reader of stdout went away (``undolog sessions list | head``): end quietly.
    Python would report the failed flush of the closed pipe at exit, so stdout is pointed
    at /dev/null, leaving nothing to flush."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _wants_json(argv: Sequence[str]) -> bool:
    return "--json" in argv


def _parse(argv: list[str]) -> argparse.Namespace:
    """parse_args, except that an unknown option sends to the subcommand's own help
    (argparse reports it from the top parser, whose help does not list the options)."""
    args, extra = build_parser().parse_known_args(argv)
    if extra:
        words = ["undolog"]
        command = getattr(args, "command", None)
        if command:
            words.append(command)
            action = getattr(args, f"{command}_command", None)
            if action:
                words.append(action)
        prog = " ".join(words)
        raise UsageError(f"unrecognized arguments: {' '.join(extra)} (see `{prog} --help`)")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            args = _parse(argv)
        except UsageError as exc:
            return _report(describe_error(exc), _wants_json(argv))
        # not set_defaults: the parents' option objects are shared, and a default set on
        # them would make each subcommand's copy overwrite a value given before it
        args.dsn = getattr(args, "dsn", None)
        args.json = getattr(args, "json", False)
        try:
            code = int(args.func(args))
        except (UndoLogError, psycopg.Error, MigrationError, UsageError, ConnectError) as exc:
            return _report(describe_error(exc, args), args.json)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        _reader_gone()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
