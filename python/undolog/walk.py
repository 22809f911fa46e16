"""The undo walk in Python: run a failed session's registered compensations, last first.

The engine decides the order (strictly LIFO), skips calls that never took effect, stops
at an irreversible call that acted, retries with backoff and halts a session whose
compensation fails for good (undolog.saga). This module only runs the compensation it is
handed and reports the outcome. A compensation is any callable registered by name
(``@ul.compensation("delete_user")``) taking one ``CompensationCall``; it must be
idempotent on ``undo_id``: after a crash the same entry may be handed out again.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from undolog import engine, saga

log = logging.getLogger("undolog.walk")

# How long run_walk waits for entries that are not due yet (retry backoff) before it
# returns and leaves the rest to `undolog worker`.
DEFAULT_WAIT = 10.0
POLL = 0.2


@dataclass(frozen=True)
class CompensationCall:
    """What a compensation receives."""

    undo_id: uuid.UUID  # idempotency key: the same for every attempt at this entry
    args: dict[str, Any]  # the descriptor's fixed args
    call_args: dict[str, Any]  # the original call's args
    result: Any  # the original call's result; None when its outcome is unknown
    tool_name: str
    attempt: int


def _call_for(claim: saga.Claim) -> CompensationCall:
    return CompensationCall(
        undo_id=claim.undo_id,
        args=claim.compensation_args,
        call_args=claim.args,
        result=claim.result_snapshot,
        tool_name=claim.tool_name,
        attempt=claim.attempt,
    )


def _run(
    fn: Callable[..., Any], call: CompensationCall, loop: asyncio.AbstractEventLoop | None
) -> None:
    """Run a sync compensation, or an async one on ``loop`` (or a fresh one)."""
    if not inspect.iscoroutinefunction(fn):
        fn(call)
    elif loop is not None:
        asyncio.run_coroutine_threadsafe(fn(call), loop).result()
    else:
        asyncio.run(fn(call))


def run_walk(
    conn: engine.Connection,
    session_id: uuid.UUID,
    compensations: Mapping[str, Callable[..., Any]],
    *,
    wait: float = DEFAULT_WAIT,
    loop: asyncio.AbstractEventLoop | None = None,
) -> str:
    """Walk the session's undo stack until it is done, halted, or nothing is due within
    ``wait`` seconds. Answers the session's state then (compensated, halted, or still
    compensating: the worker finishes it)."""
    deadline = time.monotonic() + wait
    while True:
        claim = saga.claim_compensation(conn, session_id)
        if claim is None:
            state = engine.session_state(conn, session_id)
            if state != "compensating" or time.monotonic() >= deadline:
                return state
            time.sleep(POLL)
            continue
        fn = compensations.get(claim.name)
        try:
            if fn is None:
                raise LookupError(f"no compensation registered under {claim.name!r}")
            _run(fn, _call_for(claim), loop)
        except Exception as exc:
            outcome = saga.fail_compensation(
                conn, claim.undo_id, f"{type(exc).__name__}: {exc}", claim.attempt
            )
            log.warning(
                "compensation %s of %s failed (%s): %s", claim.name, claim.tool_name, outcome, exc
            )
            continue
        saga.complete_compensation(conn, claim.undo_id, claim.attempt)
        log.info("compensated %s with %s (undo %s)", claim.tool_name, claim.name, claim.undo_id)


def work(
    conn: engine.Connection,
    compensations: Mapping[str, Callable[..., Any]],
    *,
    wait: float = 0.0,
    loop: asyncio.AbstractEventLoop | None = None,
) -> dict[uuid.UUID, str]:
    """One pass of the worker: recover() then walk every session it names."""
    return {
        sid: run_walk(conn, sid, compensations, wait=wait, loop=loop) for sid in saga.recover(conn)
    }
