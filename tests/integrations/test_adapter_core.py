"""What the adapters share (undolog.integrations._core), against a real PostgreSQL: its
async reads raise the binding's errors, as its sync twins do."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from undolog.errors import PermissionDenied
from undolog.integrations import _core


def test_async_and_sync_reads_raise_the_same_undolog_error(
    dsn: str, login: Callable[..., psycopg.Connection[Any]]
) -> None:
    """A login with no engine role may read nothing: both twins say PermissionDenied (the
    binding's error, with what to do), not psycopg's InsufficientPrivilege."""
    nobody = login()
    name = nobody.info.user
    with pytest.raises(PermissionDenied):
        _core.approval_of_step_sync(nobody, uuid.uuid4(), "payout", "call-1")

    async def read() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, user=name, autocommit=True) as c:
            await _core.approval_state_async(c, uuid.uuid4())

    with pytest.raises(PermissionDenied):
        asyncio.run(read())
