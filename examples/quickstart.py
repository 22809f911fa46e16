"""UndoLog quickstart: the README's example, runnable as written.

UNDOLOG_DSN=postgresql://... python examples/quickstart.py   (after `undolog migrate`)
"""

import asyncio
from typing import Any

from undolog import (
    AsyncUndoLog,
    AwaitingApprovalError,
    CompensationCall,
    CompensationDescriptor,
    ToolTier,
    undolog_tool,
)

users: dict[int, str] = {}  # stands in for a real user directory


@undolog_tool(tier=ToolTier.SAFE)
async def search_web(query: str) -> str:
    return f"top result for {query!r}"


@undolog_tool(
    tier=ToolTier.COMPENSABLE,
    compensation=CompensationDescriptor.new("delete_user", args={"soft": True}),
)
async def create_user(email: str, name: str) -> dict[str, Any]:
    user_id = len(users) + 1
    users[user_id] = email
    return {"user_id": user_id, "email": email}


@undolog_tool(tier=ToolTier.IRREVERSIBLE)
async def delete_database(name: str) -> dict[str, Any]:
    return {"dropped": name}


ul = AsyncUndoLog()  # the DSN from UNDOLOG_DSN, else libpq's PG* variables


@ul.compensation("delete_user")
async def delete_user(call: CompensationCall) -> None:
    # call.undo_id is the idempotency key; call.result is what create_user returned
    users.pop(call.result["user_id"], None)


async def main() -> None:
    # 1. a session that completes
    async with ul.session(agent="quickstart"):
        print(await search_web("undolog"))
        print(await create_user("ada@example.com", "Ada"))

    # 2. a session that fails: create_user is compensated, last action first
    try:
        async with ul.session(agent="quickstart"):
            await create_user("bob@example.com", "Bob")
            raise RuntimeError("the agent changed its mind")
    except RuntimeError:
        print("rolled back; users now:", users)

    # 3. an irreversible call waits for a human
    try:
        async with ul.session(agent="quickstart"):
            await delete_database("staging")
    except AwaitingApprovalError as waiting:
        print("waiting for a human to approve", waiting.approval_id)


if __name__ == "__main__":  # not when imported, e.g. as a worker's --app
    asyncio.run(main())
