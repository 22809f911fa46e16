"""A DSN that does not parse is refused without the text libpq quotes of it: that text is
often the password (a % not percent-encoded, a space not quoted), and the error goes to an
agent's logs. A DSN that names no server that answers says what to check."""

from __future__ import annotations

import asyncio
import traceback

import psycopg
import pytest

from pgcluster import free_port
from undolog import AsyncUndoLog, UndoLog
from undolog._conninfo import UNREACHABLE_HINT, with_connect_timeout

BAD = [
    ("postgresql://agent:p%ss@localhost/undolog", "p%ss"),
    ("postgresql://agent:pa ss@localhost/undolog", "pa ss"),
    ("host=localhost password=hunter2 s3cretpart more", "s3cretpart"),
    # a quote inside the piece libpq quotes: everything between the outer quotes goes
    ('host=localhost password=ab cd"secretend', "secretend"),
    # an "@" not percent-encoded: libpq takes the password's tail for the host
    ("postgresql://alice:s3cr@tail1234@localhost/db", "tail1234"),
]


def _said(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


@pytest.mark.parametrize(("dsn", "secret"), BAD)
def test_a_session_on_a_dsn_that_does_not_parse_does_not_say_its_password(
    dsn: str, secret: str
) -> None:
    with pytest.raises(psycopg.ProgrammingError) as caught, UndoLog(dsn).session():
        pass  # pragma: no cover
    assert "does not parse" in str(caught.value) and secret not in _said(caught.value)

    async def run() -> None:
        async with AsyncUndoLog(dsn).session():
            pass  # pragma: no cover

    with pytest.raises(psycopg.ProgrammingError) as caught:
        asyncio.run(run())
    assert "does not parse" in str(caught.value) and secret not in _said(caught.value)


@pytest.mark.parametrize(("dsn", "secret"), BAD)
def test_the_faces_conninfo_does_not_say_the_password(dsn: str, secret: str) -> None:
    with pytest.raises(psycopg.ProgrammingError) as caught:
        with_connect_timeout(dsn, 10)
    assert secret not in _said(caught.value)
    assert '"="' in str(with_error("host=x password"))


def with_error(dsn: str) -> BaseException:
    try:
        with_connect_timeout(dsn, 10)
    except psycopg.ProgrammingError as exc:
        return exc
    raise AssertionError("parsed")  # pragma: no cover


def test_a_session_on_a_server_that_does_not_answer_says_what_to_check() -> None:
    dsn = f"host=127.0.0.1 port={free_port()} connect_timeout=2"
    with pytest.raises(psycopg.OperationalError) as caught, UndoLog(dsn).session():
        pass  # pragma: no cover
    assert caught.value.__notes__ == [f"hint: {UNREACHABLE_HINT}"]
    assert "hint: is the server running" in _said(caught.value)

    async def run() -> None:
        async with AsyncUndoLog(dsn).session():
            pass  # pragma: no cover

    with pytest.raises(psycopg.OperationalError) as caught:
        asyncio.run(run())
    assert caught.value.__notes__ == [f"hint: {UNREACHABLE_HINT}"]
