"""The history's hash chains: verify them, export a session's, check an export offline.

Every history row (session, effect and undo history, operator actions, and an approval
request's request and decision) carries a link of its session's chain, written by the
engine's triggers (sql/functions/chain_<table>.sql)::

    hash = sha256(prev || canonical.encode("utf-8"))

where ``prev`` is the previous link's hash (32 zero bytes for a session's first row) and
``canonical`` the row's canonical record: a JSON text computed in SQL, from the row's
columns, by ``undolog.chain_record_*``. The hash is defined once, in SQL
(``undolog.chain_hash``); :func:`chain_hash` here computes the same over the same bytes,
never re-encoding the record, so the two cannot disagree on how a row is written.

Online, :func:`verify` asks ``undolog.verify_chain`` (every session a batch of sessions at
a time); offline, :func:`verify_export` re-hashes the canonical records of an export
(:func:`export_session`), without any database.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import reprlib
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from undolog.engine import translated
from undolog.errors import ExportInvalid
from undolog.queries import QUERIES
from undolog.signature import KeyTwice, unique_keys

GENESIS = bytes(32)
# The first line of an export names its format.
EXPORT_FORMAT = "undolog-chain-export/1"
# How many history rows one batch of a verification of every session checks: about half
# a second of the server's work here (it checks some 50,000 rows a second,
# docs/operations/audit.md), so that its progress shows every second or so at most.
BATCH_ROWS = 25_000
# Each batch also reads every head the anchors record (its sessions' anchored seqs: the
# anchors hold no range of sessions an index could find), about 1 µs a head here against
# some 20 µs a row: a batch of the default size has at least a row for every 10 of them,
# so that however many anchors there are, reading them adds about half at most.
ANCHORED_HEADS_PER_ROW = 10


def chain_hash(prev: bytes, canonical: str) -> bytes:
    """One link: sha256(prev || canonical as UTF-8), as ``undolog.chain_hash``."""
    return hashlib.sha256(prev + canonical.encode("utf-8")).digest()


@dataclass(frozen=True)
class Finding:
    """A row that does not match its chain: where it is (table, key, its session and
    seq), what is wrong (problem, as undolog.verify_chain names it), expected vs found."""

    session_id: str | None
    seq: int | None
    table: str
    key: str
    problem: str
    expected: str
    found: str

    def describe(self) -> str:
        where = f"{self.table} {self.key}"
        if self.session_id is not None:
            where += f" (session {self.session_id}, seq {self.seq})"
        return f"{self.problem}: {where}: expected {self.expected}, found {self.found}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Report:
    """What a verification checked and found (findings in chain order; none: clean)."""

    sessions: int
    rows: int
    findings: list[Finding]

    @property
    def ok(self) -> bool:
        return not self.findings


@dataclass(frozen=True)
class Progress:
    """How far a verification of every session is, after one of its batches: the sessions
    checked and their chains' rows, of all it checks. A chain's rows are counted as its
    head's seq (the rows written to it), from the start even with ``since``; sessions
    with no head are checked in their batch, never counted here."""

    sessions: int
    sessions_total: int
    rows: int
    rows_total: int

    @property
    def percent(self) -> int:
        return 100 if not self.rows_total else self.rows * 100 // self.rows_total


@contextlib.contextmanager
def _one_snapshot(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """The statements inside read one snapshot: a read-only REPEATABLE READ transaction
    of their own, or, called inside a transaction, the caller's (whose isolation is the
    caller's)."""
    with contextlib.ExitStack() as snapshot:
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            snapshot.enter_context(conn.transaction())
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def verify(
    conn: psycopg.Connection[Any],
    session_id: uuid.UUID | None = None,
    since: datetime | None = None,
    *,
    batch_rows: int | None = None,
    on_progress: Callable[[Progress], object] | None = None,
) -> Report:
    """Recompute the chains in the database (one session, or all; rows from ``since``
    on) and answer every row that does not match (``undolog.verify_chain``), and every
    row that hashes right but holds what the engine never writes there, a look-alike
    its record writes the same way (problem ``impossible``:
    ``undolog.chain_impossible_rows``, e.g. a committed result of SQL NULL).

    One session is one call. Every session is verified a range of session ids at a
    time, in id order, each of about ``batch_rows`` rows (the ``chain_batches`` query;
    None: :data:`BATCH_ROWS`, or more where the anchors record many heads,
    :data:`ANCHORED_HEADS_PER_ROW`), all in one snapshot (:func:`_one_snapshot`): the
    report is the one a single call over every session gives, findings in the same
    order, and ``on_progress`` is called after each batch with how far it is
    (:class:`Progress`)."""
    if batch_rows is not None and batch_rows < 1:
        raise ValueError(f"batch_rows must be at least 1, not {batch_rows}")
    whole: list[dict[str, Any]] = [{"through": None, "sessions": 0, "rows": 0}]
    findings: list[Finding] = []
    sessions = rows = 0
    with translated(), _one_snapshot(conn):
        cur = conn.cursor(row_factory=dict_row)
        batches = whole
        if session_id is None:
            if batch_rows is None:
                anchored = cur.execute(QUERIES["chain_anchored_heads"]).fetchone()
                assert anchored is not None
                batch_rows = max(BATCH_ROWS, anchored["heads"] // ANCHORED_HEADS_PER_ROW)
            plan = cur.execute(QUERIES["chain_batches"], {"batch_rows": batch_rows}).fetchall()
            batches = plan or whole
        sessions_total = sum(int(b["sessions"]) for b in batches)
        rows_total = sum(int(b["rows"]) for b in batches)
        done = Progress(0, sessions_total, 0, rows_total)
        after = None
        for number, batch in enumerate(batches, start=1):
            # the last range is open at its top: it checks the sessions after the last
            # head too, and the anchors' own chain
            through = None if number == len(batches) else batch["through"]
            scope = {"session_id": session_id, "since": since, "after": after, "through": through}
            findings += [_finding(r) for r in cur.execute(QUERIES["verify_chain"], scope)]
            # the same rows, counted without building their records a second time
            counted = cur.execute(QUERIES["chain_events_count"], scope).fetchone()
            assert counted is not None
            sessions += int(counted["sessions"])
            rows += int(counted["rows"])
            done = Progress(
                done.sessions + int(batch["sessions"]),
                sessions_total,
                done.rows + int(batch["rows"]),
                rows_total,
            )
            if on_progress is not None and session_id is None:
                on_progress(done)
            after = through
    return Report(sessions, rows, findings)


def _finding(row: Mapping[str, Any]) -> Finding:
    """A row of the ``verify_chain`` query as a Finding."""
    return Finding(
        None if row["session_id"] is None else str(row["session_id"]),
        row["seq"],
        row["table_name"],
        row["row_key"],
        row["problem"],
        row["expected"],
        row["found"],
    )


def export_header(session_id: uuid.UUID, head: Mapping[str, Any] | None) -> str:
    """The first line of a session's export: its format, the session and its chain's
    head (``head``: the ``chain_head`` query's row, with ``seq`` and ``head``; None for
    a session with no link yet). One line of JSON, without its newline."""
    return json.dumps(
        {
            "format": EXPORT_FORMAT,
            "session_id": str(session_id),
            "head": None
            if head is None
            else {"seq": head["seq"], "hash": bytes(head["head"]).hex()},
        }
    )


def export_line(row: Mapping[str, Any]) -> str:
    """One history row's line of an export (``row``: the ``session_chain_events``
    query's row): its link (seq, prev, hash, hex), where it lives (table, key) and its
    canonical record, as the text that was hashed and, for reading, as JSON. One line of
    JSON, without its newline."""
    return json.dumps(
        {
            "seq": row["seq"],
            "table": row["table_name"],
            "key": row["row_key"],
            "prev": None if row["prev"] is None else bytes(row["prev"]).hex(),
            "hash": None if row["hash"] is None else bytes(row["hash"]).hex(),
            "canonical": row["canonical"],
            "record": json.loads(row["canonical"]),
        }
    )


def export_lines(
    session_id: uuid.UUID, head: Mapping[str, Any] | None, rows: Iterable[Mapping[str, Any]]
) -> Iterator[str]:
    """A session's export, from its head and its history rows in chain order (the
    ``chain_head`` and ``session_chain_events`` queries' rows; read in one snapshot, the
    head is the last row's): the header (:func:`export_header`), then a line per row
    (:func:`export_line`). The one definition of the format, whoever reads the rows:
    ``undolog export`` and the dashboard's download write each line and a newline."""
    yield export_header(session_id, head)
    for row in rows:
        yield export_line(row)


def export_session(conn: psycopg.Connection[Any], session_id: uuid.UUID) -> Iterator[str]:
    """The session's journal as JSON lines (:func:`export_lines`): a header (format,
    session, head), then one line per history row in chain order, each with its link
    (seq, prev, hash, hex) and its canonical record, as the text that was hashed and,
    for reading, as JSON. The head and the rows are read in one snapshot (a read-only
    REPEATABLE READ transaction of its own, or, called inside a transaction, the
    caller's, whose isolation is the caller's): read apart, a call journaled in between
    would put a row after the head, and the file would not verify."""
    with translated(), _one_snapshot(conn):
        cur = conn.cursor(row_factory=dict_row)
        head = cur.execute(QUERIES["chain_head"], {"session_id": session_id}).fetchone()
        rows = cur.execute(QUERIES["session_chain_events"], {"session_id": session_id}).fetchall()
    yield from export_lines(session_id, head, rows)


def _hex(value: Any) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        return None
    return raw if len(raw) == 32 else None


def _numbered(lines: Iterator[str], start: int) -> Iterator[tuple[int, str]]:
    """``lines`` numbered from ``start``; a file read as UTF-8 text that holds other bytes
    raises ExportInvalid (read in blocks, it fails at or before the line that holds them)."""
    number = start
    while True:
        try:
            line = next(lines)
        except StopIteration:
            return
        except UnicodeDecodeError as exc:
            raise ExportInvalid(
                f"not an UndoLog chain export: not UTF-8 text (at line {number} or after)"
            ) from exc
        yield number, line
        number += 1


# How much of a value an export holds where a number was due its report shows.
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxdict = 2, 4, 4
_SHOWN.maxstring = _SHOWN.maxother = _SHOWN.maxlong = 60


def _seq(value: Any) -> int | None:
    """``value`` as a Finding's seq: an export's seq is an integer, and anything else in
    its place (a string, NaN, a list nested hundreds deep: any JSON) is none, never
    carried into a report (its JSON would not be JSON, or would not be made at all)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _shown(value: Any) -> str:
    """A short text of any JSON value an export holds where a seq or a hash was due: an
    integer or a string of up to 80 characters as it is, anything else (nested, long,
    NaN alike) shortened."""
    if _seq(value) is not None or (isinstance(value, str) and len(value) <= 80):
        return str(value)
    return _SHOWN.repr(value)


def _read_line(line: str) -> tuple[Any, bool]:
    """An export's line parsed, and whether an object in it names a key twice: it is
    read as json.loads reads it (the last of the two), and reported, for the record a
    person reads there is not one text (one viewer shows the first, another the last)."""
    try:
        return json.loads(line, object_pairs_hook=unique_keys), False
    except KeyTwice:
        return json.loads(line), True


def same_record(a: Any, b: Any) -> bool:
    """Whether two parsed JSON values are the same value of the same JSON type, as a
    record read from an export must be its canonical text parsed: Python's own ``==``
    says True == 1 == 1.0, so a record showing ``true`` (or ``1.0``, or ``false`` for
    ``0``) where the hashed text says ``1`` would pass it."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_record(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_record(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def verify_export(lines: Iterable[str]) -> Report:
    """Check an export (:func:`export_session`) with no database: every line's hash is
    sha256(prev || canonical), its prev is the previous line's hash, its seq follows,
    its record is its canonical text, and the last line is the head. Raises
    ExportInvalid (UL028) for a file that is not an export at all. The records alone
    cannot show an ``impossible`` row (a record writes SQL NULL and the JSON null
    alike): only :func:`verify` reads the columns."""
    it = iter(lines)
    try:
        # a byte order mark before the header (a file saved again by a Windows editor)
        header, header_twice = _read_line(next(it).removeprefix("\ufeff"))
    except UnicodeDecodeError as exc:  # a file opened as UTF-8 text, read line by line
        raise ExportInvalid("not an UndoLog chain export: not UTF-8 text") from exc
    except (StopIteration, ValueError, RecursionError) as exc:
        raise ExportInvalid("not an UndoLog chain export: no header line") from exc
    if not isinstance(header, dict) or header.get("format") != EXPORT_FORMAT:
        raise ExportInvalid(f"not an UndoLog chain export (format {EXPORT_FORMAT!r} expected)")
    session = str(header.get("session_id"))
    findings: list[Finding] = []
    if header_twice:  # the session and head a person reads are not one text (_read_line)
        findings.append(
            Finding(
                session, None, "export header", "line 1", "altered", "each key once", "a key twice"
            )
        )
    before_seq: int | None = None
    before_hash = GENESIS
    count = 0
    for number, line in _numbered(it, start=2):
        if not line.strip():
            continue
        try:
            row, twice = _read_line(line)
        except RecursionError as exc:
            raise ExportInvalid(f"line {number} is nested too deeply to be a row") from exc
        except ValueError as exc:
            raise ExportInvalid(f"line {number} is not JSON") from exc
        if not isinstance(row, dict):
            raise ExportInvalid(f"line {number} is not a JSON object")
        count += 1
        seq, canonical = row.get("seq"), row.get("canonical")
        table, key = str(row.get("table")), str(row.get("key"))

        def found(problem: str, expected: str, got: str) -> None:
            findings.append(Finding(session, _seq(seq), table, key, problem, expected, got))  # noqa: B023

        prev, stored = _hex(row.get("prev")), _hex(row.get("hash"))
        if _seq(seq) is None or not isinstance(canonical, str) or not prev or not stored:
            got = "no seq, prev, hash or canonical record"
            if seq is not None and _seq(seq) is None:
                got += f" (seq {_shown(seq)})"
            found("unchained", "a link of the chain", got)
            continue
        try:
            record = json.loads(canonical)
            differs = twice or not same_record(record, row.get("record"))
        except RecursionError as exc:  # a row's record is no deeper than its line
            raise ExportInvalid(f"line {number} is nested too deeply to be a row") from exc
        except ValueError:
            record, differs = None, True
        if differs or not isinstance(record, dict):
            found("altered", "record = its canonical text", "a record that differs from it")
        elif record.get("session_id") != session:
            found("altered", f"a row of session {session}", f"session {record.get('session_id')}")
        try:
            recomputed = chain_hash(prev, canonical)
        except UnicodeEncodeError:  # a lone surrogate (JSON's \ud800): no row's text holds one
            found("altered", "a canonical text of UTF-8", "a lone surrogate in it")
        else:
            if recomputed != stored:
                found("altered", recomputed.hex(), stored.hex())
        if before_seq is not None and seq == before_seq:
            found("duplicate", f"seq {before_seq + 1}", f"seq {seq}")
        else:
            if seq != (1 if before_seq is None else before_seq + 1):
                found("missing", f"seq {1 if before_seq is None else before_seq + 1}", f"seq {seq}")
            if prev != before_hash:
                found("link", before_hash.hex(), prev.hex())
        before_seq, before_hash = seq, stored
    head = header.get("head")
    last = None if before_seq is None else {"seq": before_seq, "hash": before_hash.hex()}
    if not same_record(head, last):  # true or 1.0 for a seq of 1 is not the head
        findings.append(
            Finding(
                session,
                None if not isinstance(head, dict) else _seq(head.get("seq")),
                "undolog_chain_heads",
                f"session_id={session}",
                "head",
                "no head" if last is None else f"seq {last['seq']} {last['hash']}",
                "no head"
                if not isinstance(head, dict)
                else f"seq {_shown(head.get('seq'))} {_shown(head.get('hash'))}",
            )
        )
    return Report(1, count, findings)


def write_anchor(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Append an anchor of every session's chain head (``undolog.write_anchor``) and
    answer it, as :func:`latest_anchor` does."""
    with translated():
        conn.execute(QUERIES["write_anchor"])
    anchor = latest_anchor(conn)
    assert anchor is not None
    return anchor


def latest_anchor(conn: psycopg.Connection[Any]) -> dict[str, Any] | None:
    """The latest anchor, to keep where the database cannot rewrite it: its number,
    time, previous and own hash (hex) and canonical record (hash = sha256(prev ||
    canonical)). None before the first anchor."""
    with translated():
        row = conn.cursor(row_factory=dict_row).execute(QUERIES["latest_anchor"]).fetchone()
    return None if row is None else anchor_of(row)


def anchor_of(row: dict[str, Any]) -> dict[str, Any]:
    """An anchor as it is kept (:func:`latest_anchor`), from its row of the
    ``latest_anchor`` query: the dashboard's download is the same."""
    return {
        "anchor_id": row["anchor_id"],
        "written_at": row["written_at"].isoformat(),
        "prev": bytes(row["prev"]).hex(),
        "hash": bytes(row["anchor_hash"]).hex(),
        "canonical": row["canonical"],
    }


def check_anchor(conn: psycopg.Connection[Any], anchor: dict[str, Any]) -> list[Finding]:
    """Compare a kept anchor (:func:`latest_anchor`'s answer, from outside the database)
    with the database's: the anchor must still be there, unchanged, and hash right; and
    the anchors before it, which the kept one pins through their chain, must still be
    that chain: numbered from 1 without a gap, each hashing right over its canonical
    record, each ``prev`` the hash before it (the kept anchor's ``prev`` for the last),
    and the heads each records (which ``undolog.verify_chain`` compares with the rows)
    the ones its canonical record names. With verify() clean, of every session or of
    one, the chains up to it are then as they were when it was written."""
    try:
        anchor_id = int(anchor["anchor_id"])
        prev, stored, canonical = _hex(anchor["prev"]), _hex(anchor["hash"]), anchor["canonical"]
    except (KeyError, TypeError, ValueError) as exc:
        raise ExportInvalid("not an UndoLog anchor (anchor_id, prev, hash, canonical)") from exc
    if prev is None or stored is None or not isinstance(canonical, str):
        raise ExportInvalid("not an UndoLog anchor (prev and hash: 64 hex digits)")
    key = f"anchor_id={anchor_id}"
    findings: list[Finding] = []
    if chain_hash(prev, canonical) != stored:
        findings.append(
            Finding(
                None,
                anchor_id,
                "anchor file",
                key,
                "altered",
                chain_hash(prev, canonical).hex(),
                stored.hex(),
            )
        )
    with translated():
        row = conn.execute(QUERIES["anchor"], {"anchor_id": anchor_id}).fetchone()
        held = conn.cursor(row_factory=dict_row).execute(
            QUERIES["anchors_up_to"], {"anchor_id": anchor_id}
        )
        chained = held.fetchall()
    if row is None:
        findings.append(
            Finding(
                None, anchor_id, "undolog_chain_anchors", key, "missing", stored.hex(), "no anchor"
            )
        )
    elif bytes(row[0]) != stored or row[1] != canonical:
        findings.append(
            Finding(
                None,
                anchor_id,
                "undolog_chain_anchors",
                key,
                "anchored",
                stored.hex(),
                bytes(row[0]).hex(),
            )
        )
    return findings + _anchor_chain(chained, anchor_id, prev)


def _anchor_chain(rows: list[dict[str, Any]], kept_id: int, kept_prev: bytes) -> list[Finding]:
    """The anchors 1..kept_id as the database holds them, checked as a chain ending in
    the kept anchor (whose own hash and record check_anchor compares)."""
    findings: list[Finding] = []

    def found(anchor_id: int, problem: str, expected: str, got: str) -> None:
        key = f"anchor_id={anchor_id}"
        findings.append(
            Finding(None, anchor_id, "undolog_chain_anchors", key, problem, expected, got)
        )

    before_id, before_hash = 0, GENESIS
    for r in rows:
        anchor_id, prev, stored = r["anchor_id"], bytes(r["prev"]), bytes(r["anchor_hash"])
        if anchor_id != before_id + 1:
            found(anchor_id, "missing", f"anchor_id={before_id + 1}", f"anchor_id={anchor_id}")
        if prev != before_hash:
            found(anchor_id, "link", before_hash.hex(), prev.hex())
        if anchor_id < kept_id and chain_hash(prev, r["canonical"]) != stored:
            found(anchor_id, "altered", chain_hash(prev, r["canonical"]).hex(), stored.hex())
        try:
            hashed_heads = json.loads(r["canonical"]).get("heads")
        except (ValueError, AttributeError):
            hashed_heads = None
        if not same_record(hashed_heads, r["heads"]):  # a seq of true is not 1
            found(anchor_id, "altered", "heads = the heads of its canonical record", "other heads")
        before_id, before_hash = anchor_id, stored
    linked = not any(f.seq == kept_id and f.problem == "link" for f in findings)
    if before_id == kept_id and linked and bytes(rows[-1]["prev"]) != kept_prev:
        found(kept_id, "link", kept_prev.hex(), bytes(rows[-1]["prev"]).hex())
    return findings
