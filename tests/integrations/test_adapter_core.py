"""The adapters' round trips (undolog.integrations._arun and its generated twin _run),
against a real PostgreSQL: the async reads raise the binding's errors, as the sync twin's
do."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from undolog import aapprovals
from undolog.errors import PermissionDenied
from undolog.integrations import _arun, _run


def test_async_and_sync_reads_raise_the_same_undolog_error(
    dsn: str, login: Callable[..., psycopg.Connection[Any]]
) -> None:
    """A login with no engine role may read nothing: both twins say PermissionDenied (the
    binding's error, with what to do), not psycopg's InsufficientPrivilege."""
    nobody = login()
    name = nobody.info.user
    with pytest.raises(PermissionDenied):
        _run.approval_of_step(nobody, uuid.uuid4(), "payout", "call-1")

    async def read() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, user=name, autocommit=True) as c:
            with pytest.raises(PermissionDenied):
                await _arun.approval_of_step(c, uuid.uuid4(), "payout", "call-1")
            await aapprovals.approval_state(c, uuid.uuid4())  # what pydantic_ai reads

    with pytest.raises(PermissionDenied):
        asyncio.run(read())
