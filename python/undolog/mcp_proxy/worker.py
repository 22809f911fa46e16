"""What ``undolog worker --mcp-config FILE`` walks with: the proxy's compensations.

``load_worker_app(FILE)`` answers an object like an ``UndoLog`` app for the worker loop:
``compensations`` maps each compensation the policy names (``mcp:UPSTREAM/TOOL``) to a
synchronous callable that calls that upstream tool. The upstream connections live on an
event loop in a background thread, opened once.

Only the policy decides what undoes a call: an upstream tool no policy names as a
compensation is never one, and a compensation runs only for a journaled tool whose policy
names it, with the arguments the policy's mapping computes from the call's journaled args
and result, never with a descriptor read back from the journal alone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from undolog import walk
from undolog.mcp_proxy.policy import load_policy
from undolog.mcp_proxy.proxy import UpstreamCompensation, compensation_name, journal_name
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
        # journaled tool name -> (compensation name, the policy's args mapping)
        self.undoes: dict[str, tuple[str, dict[str, Any]]] = {}
        self.compensations: dict[str, Callable[..., Any]] = {}
        for u, up in self.upstreams.items():
            for t in up.tools:
                rule = self.policy.tier_of(u, t)
                if rule.tier != "compensable" or rule.compensation is None:
                    continue
                name = compensation_name(u, rule.compensation.tool)
                mapping = {k: v.to_json() for k, v in rule.compensation.args.items()}
                self.undoes[journal_name(u, t)] = (name, mapping)
                self.compensations[name] = PolicyCompensation(
                    self, name, UpstreamCompensation(self, u, rule.compensation.tool)
                )

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


class PolicyCompensation:
    """One policy compensation, run only for a journaled tool the policy undoes with it,
    with the policy's mapping (the journal's args and result fill it in)."""

    def __init__(self, app: ProxyWorkerApp, name: str, upstream: UpstreamCompensation) -> None:
        self.app = app
        self.name = name
        self.upstream = upstream

    def __call__(self, call: walk.CompensationCall) -> None:
        rule = self.app.undoes.get(call.tool_name)
        if rule is None or rule[0] != self.name:
            raise PermissionError(
                f"the policy does not undo {call.tool_name} with {self.name}: not run"
            )
        self.upstream(dataclasses.replace(call, args=rule[1]))


def load_worker_app(config: str) -> ProxyWorkerApp:
    return ProxyWorkerApp(config)
