"""What ``undolog worker --mcp-config FILE`` walks with: the proxy's compensations.

``load_worker_app(FILE)`` answers an object like an ``UndoLog`` app for the worker loop:
``compensations`` maps each compensation name the proxy journals (``mcp:UPSTREAM/TOOL``)
to a synchronous callable that calls that upstream tool. The upstream connections live on
an event loop in a background thread, opened once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from undolog.mcp_proxy.policy import load_policy
from undolog.mcp_proxy.proxy import UpstreamCompensation, compensation_name
from undolog.mcp_proxy.upstream import UpstreamConnection, connect_all


class ProxyWorkerApp:
    def __init__(self, config: str) -> None:
        self.policy = load_policy(config)
        self.upstreams: dict[str, UpstreamConnection] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        threading.Thread(target=self._run, name="undolog-mcp-upstreams", daemon=True).start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        self.compensations: dict[str, Callable[..., Any]] = {
            compensation_name(u, t): UpstreamCompensation(self, u, t)
            for u, up in self.upstreams.items()
            for t in up.tools
        }

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            self.upstreams = await connect_all(
                self.policy.upstreams, self.policy.call_timeout_seconds
            )
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        await self._stop.wait()
        for up in self.upstreams.values():
            await up.close()

    def close(self) -> None:
        if self.loop is not None and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)


def load_worker_app(config: str) -> ProxyWorkerApp:
    return ProxyWorkerApp(config)
