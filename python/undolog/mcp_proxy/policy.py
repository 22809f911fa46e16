"""The operator's policy file (TOML): upstream servers, each tool's tier, compensations.

The tier of a tool is the operator's word, never the agent's: the proxy reads it here and
nowhere else. ``load_policy`` checks the file's own shape (unknown keys, bad tiers, bad
mapping expressions); ``Policy.check_against`` then checks it against the tools the
upstreams actually list, so that a policy naming a missing tool, or a compensation whose
arguments cannot be filled, is refused before the proxy serves a single call.

Compensation arguments are a small mapping language, never evaluated as code: see
``undolog.mcp_proxy.mapping`` (and docs/mcp-proxy.md). Its parser runs here, once.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from undolog.mcp_proxy.mapping import (
    ArgSource,
    MappingError,
    PolicyError,
    _walk_path,
    check_mapping,
    resolve,
    result_value,
)
from undolog.mcp_proxy.metrics import parse_listen

__all__ = [
    "ArgSource",
    "Compensation",
    "MappingError",
    "Policy",
    "PolicyError",
    "ToolPolicy",
    "Upstream",
    "_walk_path",
    "load_policy",
    "resolve",
    "result_value",
]

Tier = Literal["safe", "compensable", "irreversible"]
TIERS: tuple[Tier, ...] = ("safe", "compensable", "irreversible")
# What a human's rejection of an irreversible call does: fail the session and undo it
# (the engine's rule), or answer the call with the rejection and keep the session going.
OnReject = Literal["fail_session", "tell_model"]
ON_REJECT: tuple[OnReject, ...] = ("fail_session", "tell_model")
# One upstream process for every client session, or one per UndoLog session.
Instances = Literal["shared", "per_session"]
INSTANCES: tuple[Instances, ...] = ("shared", "per_session")
# What an upstream's roots/list is answered: nothing, its client's roots (a shared
# upstream would be governed by whichever client it asked), or the operator's own list.
Roots = Literal["none", "client"] | tuple[str, ...]
# Where an UndoLog session ends: with the client's connection, after an idle gap, or
# where the client says a conversation ends (its _meta conversation key).
Boundary = Literal["connection", "idle", "conversation"]
BOUNDARIES: tuple[Boundary, ...] = ("connection", "idle", "conversation")
# Whether the agent gets the proxy's own tool undolog__undo_last (undo its session's last
# calls, undolog.rollback_last), and as what: "off" (the default: not listed), "safe"
# (answered by the proxy at once, not journaled: undoing is not itself undone) or
# "irreversible" (journaled as an irreversible call and held for a human's approval like
# any other; a rejection undoes nothing and the session goes on). The database must also
# allow the proxy's login to undo its own sessions, unless that login is an operator's
# (ALTER DATABASE ... SET undolog.agent_rollback_to = on).
UndoTool = Literal["off", "safe", "irreversible"]
UNDO_TOOLS: tuple[UndoTool, ...] = ("off", "safe", "irreversible")

# How long the clients wait for an answer to a request: 60 s is the TypeScript SDK's
# default (Claude Desktop, MCP Inspector), and its progress notifications do not extend
# it unless the client opts in (resetTimeoutOnProgress). So the proxy does not rely on
# progress: a held call, and the upstream call an approval then makes, must both fit in
# it, which is checked at start.
DEFAULT_CLIENT_TIMEOUT_SECONDS = 60.0
DEFAULT_HOLD_SECONDS = 25.0

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# The proxy journals its own tools under this upstream name (undolog__undo_last, under
# undo_last_tool = "irreversible", as undolog/undo_last: proxy.UNDO_LAST_UPSTREAM): an
# upstream of that name would share their journal names, and so their signatures and
# approvals. Refused in any case, for a journal that may compare names so.
RESERVED_UPSTREAM = "undolog"


@dataclass(frozen=True)
class Compensation:
    tool: str  # a tool of the same upstream
    args: dict[str, ArgSource]
    max_attempts: int | None = None

    def result_paths(self) -> list[tuple[str, ...]]:
        """The parts of the call's result the mapping reads (see ArgSource.result_paths)."""
        return [p for source in self.args.values() for p in source.result_paths()]


@dataclass(frozen=True)
class ToolPolicy:
    tier: Tier
    compensation: Compensation | None = None
    on_reject: OnReject = "fail_session"


@dataclass(frozen=True)
class Upstream:
    name: str
    command: list[str] | None = None  # stdio: the command and its arguments
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None  # streamable HTTP
    tools: dict[str, ToolPolicy] = field(default_factory=dict)
    hide: tuple[str, ...] = ()
    instances: Instances = "shared"
    roots: Roots = "none"


# A tool name every client takes: the model APIs behind desktop clients accept this
# pattern (Anthropic's, and OpenAI's with 64 characters), and the MCP specification
# (2025-11-25) asks for [A-Za-z0-9_.-]{1,128}. Some clients prefix the server's name too
# (Claude Code: mcp__SERVER__), so a name near 64 may still be refused there.
PORTABLE_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def unportable_name(name: str) -> str | None:
    """Why a client may refuse a tool of this exposed name (None: it will not)."""
    if PORTABLE_TOOL_NAME.fullmatch(name):
        return None
    if not 1 <= len(name) <= 64:
        return f"it is {len(name)} characters long (1 to 64)"
    odd = sorted({c for c in name if not re.fullmatch(r"[A-Za-z0-9_-]", c)})
    return f"it holds {' '.join(repr(c) for c in odd)}; only ASCII letters, digits, _ and -"


@dataclass(frozen=True)
class Policy:
    path: Path
    upstreams: dict[str, Upstream]
    default_tier: Tier = "irreversible"
    hold_seconds: float = DEFAULT_HOLD_SECONDS
    call_timeout_seconds: float = 30.0
    client_timeout_seconds: float = DEFAULT_CLIENT_TIMEOUT_SECONDS
    lease_seconds: float = 300.0
    agent: str = "mcp-proxy"
    # irreversible calls one client session may have held at once (each waits for a human)
    max_holds_per_client: int = 16
    # approval requests one client may have pending at once, across its sessions: the
    # engine bounds the proxy login's as a whole (undolog.max_pending_approvals), and
    # every client shares that login, so one client must not use up the bound
    max_pending_approvals_per_client: int = 16
    # live sessions one client connection (or stdio process) may have at once, and
    # per-session upstream processes running at once across all clients
    max_sessions_per_client: int = 64
    max_upstream_processes: int = 32
    # SAFE calls one client may have in flight at once over streamable HTTP (a
    # handshake-era MCP session; the stateless requests together count as one client)
    max_safe_calls_per_client: int = 64
    session_boundary: Boundary = "connection"
    undo_last_tool: UndoTool = "off"
    session_idle_seconds: float | None = None  # "idle" (and optionally "conversation")
    # a COMPENSABLE call's answer waits for its result's commit (off: it is recorded while
    # the answer is on its way, and a result that cannot be recorded refuses the session's
    # next call)
    durable_results: bool = False
    # how long a journaled call that did not answer within call_timeout_seconds is still
    # awaited in the background, its answer recorded if it comes (0: not awaited), and
    # how many such calls the proxy awaits at once (past that, one is not awaited)
    late_answer_seconds: float = 30.0
    max_late_answers: int = 64
    # how long the proxy's undo walk waits for compensations whose retry is not due yet
    # (the backoff after a failed attempt) before it leaves them to `undolog worker`
    walk_wait_seconds: float = 10.0
    # HOST:PORT of the proxy's own GET /metrics (None: not served)
    metrics_listen: str | None = None
    # over --http, the longest body of a POST the proxy reads (past it: HTTP 413); the
    # journal bounds a journaled call's arguments at 1 MiB, a SAFE call's are not
    max_request_mib: int = 16

    def tier_of(self, upstream: str, tool: str) -> ToolPolicy:
        return self.upstreams[upstream].tools.get(tool) or ToolPolicy(self.default_tier)

    def exposed_name(self, upstream: str, tool: str) -> str:
        """The name the client sees: the upstream's own with one upstream, else
        ``upstream__tool``."""
        return tool if len(self.upstreams) == 1 else f"{upstream}__{tool}"

    def check_against(self, listed: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> None:
        """Refuse the policy unless it fits the tools the upstreams list.

        ``listed``: upstream name -> tool name -> {"inputSchema": ..., "outputSchema": ...}.
        """
        problems: list[str] = []
        for up in self.upstreams.values():
            tools = listed.get(up.name, {})
            for name in (*up.tools, *up.hide):
                if name not in tools:
                    problems.append(
                        f"upstreams.{up.name}: the policy names tool {name!r}, which the "
                        f"upstream does not list (it lists: {', '.join(sorted(tools)) or 'none'})"
                    )
            for name in up.tools:
                if name in up.hide:
                    problems.append(f"upstreams.{up.name}: tool {name!r} is both hidden and tiered")
            for name, tool in up.tools.items():
                if tool.compensation is None or name not in tools:
                    continue
                problems += _check_compensation(up.name, name, tool.compensation, tools)
        if problems:
            raise PolicyError(f"{self.path}: refused:\n  " + "\n  ".join(problems))

    def compensation_problems(
        self, upstream: str, tool: str, tools: Mapping[str, Mapping[str, Any]]
    ) -> list[str]:
        """Why ``tool``'s compensation cannot fill its arguments from what the upstream
        lists now (``tools``: as in check_against, of that upstream), the check made at
        start, made again when the upstream lists its tools again; empty when it fits
        (or the tool has no compensation)."""
        comp = self.tier_of(upstream, tool).compensation
        if comp is None:
            return []
        if tool not in tools:
            return [f"upstreams.{upstream}: tool {tool!r} is no longer listed"]
        return _check_compensation(upstream, tool, comp, tools)


def _check_compensation(
    upstream: str, tool: str, comp: Compensation, tools: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    where = f"upstreams.{upstream}.tools.{tool}.compensation"
    if comp.tool not in tools:
        return [f"{where}: compensation tool {comp.tool!r} is not listed by upstream {upstream!r}"]
    return check_mapping(
        where, tool, comp.tool, comp.args, tools[tool], tools[comp.tool].get("inputSchema")
    )


def _table(raw: Any, where: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise PolicyError(f"{where}: expected a table, got {raw!r}")
    unknown = set(raw) - allowed
    if unknown:
        raise PolicyError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))} "
            f"(allowed: {', '.join(sorted(allowed))})"
        )
    return raw


def _count(raw: Any, where: str, high: int) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= high:
        raise PolicyError(f"{where}: expected a whole number from 1 to {high}")
    return raw


def _number(raw: Any, where: str, low: float, high: float) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not low < raw <= high:
        raise PolicyError(f"{where}: expected a number of seconds in ({low:g}, {high:g}]")
    return float(raw)


def _tier(raw: Any, where: str) -> Tier:
    if raw not in TIERS:
        raise PolicyError(f"{where}: tier must be one of {', '.join(TIERS)}, not {raw!r}")
    return raw  # type: ignore[no-any-return]


def _tool(raw: Any, where: str) -> ToolPolicy:
    raw = _table(raw, where, {"tier", "compensation", "max_attempts", "on_reject"})
    tier = _tier(raw.get("tier"), f"{where}.tier")
    comp_raw = raw.get("compensation")
    on_reject = raw.get("on_reject", "fail_session")
    if on_reject not in ON_REJECT:
        raise PolicyError(f"{where}.on_reject: one of {', '.join(ON_REJECT)}, not {on_reject!r}")
    if "on_reject" in raw and tier != "irreversible":
        raise PolicyError(
            f"{where}.on_reject: only an irreversible tool waits for a human who may reject it"
        )
    if tier != "compensable":
        if comp_raw is not None or "max_attempts" in raw:
            raise PolicyError(f"{where}: only a compensable tool has a compensation")
        return ToolPolicy(tier, on_reject=on_reject)
    if not isinstance(comp_raw, dict) or len(comp_raw) != 1:
        raise PolicyError(
            f"{where}: a compensable tool names exactly one compensation, e.g. "
            'compensation.delete_user = { user_id = "result.user_id" }'
        )
    ((comp_tool, args_raw),) = comp_raw.items()
    args_raw = _table(
        args_raw,
        f"{where}.compensation.{comp_tool}",
        set(args_raw) if isinstance(args_raw, dict) else set(),
    )
    args = {
        str(k): ArgSource.parse(v, f"{where}.compensation.{comp_tool}.{k}")
        for k, v in args_raw.items()
    }
    max_attempts = raw.get("max_attempts")
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int)
    ):
        raise PolicyError(f"{where}.max_attempts: expected an integer from 1 to 100")
    if max_attempts is not None and not 1 <= max_attempts <= 100:
        raise PolicyError(f"{where}.max_attempts: expected an integer from 1 to 100")
    return ToolPolicy(tier, Compensation(str(comp_tool), args, max_attempts))


def _upstream(name: str, raw: Any) -> Upstream:
    where = f"upstreams.{name}"
    if not _NAME.match(name):
        raise PolicyError(f"{where}: an upstream's name is 1-64 of A-Z a-z 0-9 _ -")
    if name.lower() == RESERVED_UPSTREAM:
        raise PolicyError(
            f"{where}: the name {name!r} is reserved for the proxy's own tools, which it "
            f"journals under {RESERVED_UPSTREAM}/ (undolog__undo_last as "
            f"{RESERVED_UPSTREAM}/undo_last): an upstream of that name would share their "
            "journal names, so that approving one call could let another run; rename the "
            f"upstream in the policy (e.g. [upstreams.{name}_upstream], its tools tables "
            "with it)"
        )
    raw = _table(
        raw, where, {"command", "env", "cwd", "url", "tools", "hide", "instances", "roots"}
    )
    command, url = raw.get("command"), raw.get("url")
    if (command is None) == (url is None):
        raise PolicyError(f"{where}: give either command (stdio) or url (streamable HTTP)")
    if command is not None and (
        not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command)
    ):
        raise PolicyError(f"{where}.command: expected a non-empty list of strings")
    if url is not None and (not isinstance(url, str) or not re.match(r"^https?://", url)):
        raise PolicyError(f"{where}.url: expected an http:// or https:// URL")
    env = raw.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise PolicyError(f"{where}.env: expected a table of strings")
    hide = raw.get("hide", [])
    if not isinstance(hide, list) or not all(isinstance(h, str) for h in hide):
        raise PolicyError(f"{where}.hide: expected a list of tool names")
    tools_raw = raw.get("tools", {})
    if not isinstance(tools_raw, dict):
        raise PolicyError(f"{where}.tools: expected a table")
    cwd = raw.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise PolicyError(f"{where}.cwd: expected a path")
    instances = raw.get("instances", "shared")
    if instances not in INSTANCES:
        raise PolicyError(f"{where}.instances: one of {', '.join(INSTANCES)}, not {instances!r}")
    if instances == "per_session" and command is None:
        raise PolicyError(
            f"{where}.instances: per_session starts a process per session, so it needs a "
            "command; a url upstream is one server the proxy cannot start more of"
        )
    roots = raw.get("roots", "client" if instances == "per_session" else "none")
    if isinstance(roots, list) and all(
        isinstance(r, str) and r.startswith("file://") for r in roots
    ):
        roots = tuple(roots)
    elif roots not in ("none", "client"):
        raise PolicyError(
            f'{where}.roots: "none" (answer an empty list), "client" (ask the client: the '
            "default for per_session) or a list of file:// URIs to answer, not "
            f"{roots!r}"
        )
    tools = {t: _tool(v, f"{where}.tools.{t}") for t, v in tools_raw.items()}
    for t, tool in tools.items():
        undo = tool.compensation.tool if tool.compensation else None
        if undo in tools and tools[undo].tier == "irreversible":
            # the undo walk runs a compensation with no one approving it
            raise PolicyError(
                f"{where}.tools.{t}.compensation: {undo}, which this policy tiers "
                "irreversible (it runs only once a human approves it), cannot be run by "
                "the undo walk"
            )
    return Upstream(
        name=name,
        command=command,
        env=dict(env),
        cwd=cwd,
        url=url,
        tools=tools,
        hide=tuple(hide),
        instances=instances,
        roots=roots,
    )


def _check_hold(hold: float, call_timeout: float, client_timeout: float) -> None:
    """A held call answers within hold + call_timeout (approved at the last moment, the
    upstream call then runs): more than the client waits, and the client has given up
    when the answer comes, so that it never learns the call ran."""
    if hold + call_timeout <= client_timeout:
        return
    room = client_timeout - call_timeout
    fix = (
        f"lower hold_seconds to at most {room:g}"
        if room > 0
        else f"lower call_timeout_seconds below {client_timeout:g}"
    )
    raise PolicyError(
        f"proxy.hold_seconds: {hold:g} s held, then up to {call_timeout:g} s "
        f"(call_timeout_seconds) for the upstream once approved, is more than the "
        f"{client_timeout:g} s a client waits for an answer (client_timeout_seconds = "
        f"{client_timeout:g}; 60 by default, the TypeScript SDK's): {fix}, or raise "
        "client_timeout_seconds if every client of this proxy waits longer"
    )


def load_policy(path: str | Path) -> Policy:
    """Read and check the policy file's own shape (PolicyError if refused)."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read the policy file: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"{path}: not valid TOML: {exc}") from exc
    try:
        raw = _table(raw, "policy", {"proxy", "upstreams"})
        proxy = _table(
            raw.get("proxy", {}),
            "proxy",
            {
                "default_tier",
                "hold_seconds",
                "call_timeout_seconds",
                "client_timeout_seconds",
                "lease_seconds",
                "agent",
                "max_holds_per_client",
                "max_pending_approvals_per_client",
                "max_sessions_per_client",
                "max_upstream_processes",
                "max_safe_calls_per_client",
                "session_boundary",
                "session_idle_seconds",
                "undo_last_tool",
                "durable_results",
                "late_answer_seconds",
                "max_late_answers",
                "walk_wait_seconds",
                "metrics_listen",
                "max_request_mib",
            },
        )
        late = proxy.get("late_answer_seconds", 30.0)
        if isinstance(late, bool) or not isinstance(late, int | float) or not 0 <= late <= 3600:
            raise PolicyError(
                "proxy.late_answer_seconds: expected a number of seconds in [0, 3600] "
                "(0: a call that did not answer in time is not awaited further)"
            )
        durable = proxy.get("durable_results", False)
        if not isinstance(durable, bool):
            raise PolicyError("proxy.durable_results: expected true or false")
        listen = proxy.get("metrics_listen")
        if listen is not None:
            if not isinstance(listen, str):
                raise PolicyError('proxy.metrics_listen: expected "HOST:PORT"')
            try:
                parse_listen(listen)
            except ValueError as exc:
                raise PolicyError(f"proxy.{exc}") from None
        undo_tool = proxy.get("undo_last_tool", "off")
        if undo_tool not in UNDO_TOOLS:
            raise PolicyError(
                f"proxy.undo_last_tool: one of {', '.join(UNDO_TOOLS)}, not {undo_tool!r}"
            )
        boundary = proxy.get("session_boundary", "connection")
        if boundary not in BOUNDARIES:
            raise PolicyError(
                f"proxy.session_boundary: one of {', '.join(BOUNDARIES)}, not {boundary!r}"
            )
        idle = proxy.get("session_idle_seconds")
        if idle is not None:
            idle = _number(idle, "proxy.session_idle_seconds", 0, 86400)
        if boundary == "idle" and idle is None:
            raise PolicyError(
                'proxy.session_boundary = "idle" needs proxy.session_idle_seconds '
                "(the gap without a call after which the next call starts a new session)"
            )
        if boundary == "connection" and idle is not None:
            raise PolicyError(
                'proxy.session_idle_seconds: only with session_boundary = "idle" or '
                '"conversation" (with "connection" a session lasts as long as the connection)'
            )
        default_tier = _tier(proxy.get("default_tier", "irreversible"), "proxy.default_tier")
        if default_tier == "compensable":
            raise PolicyError(
                "proxy.default_tier: a tool the policy does not name has no compensation, "
                "so it cannot be compensable (safe or irreversible)"
            )
        ups = raw.get("upstreams")
        if not isinstance(ups, dict) or not ups:
            raise PolicyError("upstreams: the policy names no upstream server")
        agent = proxy.get("agent", "mcp-proxy")
        if not isinstance(agent, str) or not agent:
            raise PolicyError("proxy.agent: expected a non-empty string")
        client_timeout = _number(
            proxy.get("client_timeout_seconds", DEFAULT_CLIENT_TIMEOUT_SECONDS),
            "proxy.client_timeout_seconds",
            0,
            86400,
        )
        call_timeout = _number(
            proxy.get("call_timeout_seconds", 30.0), "proxy.call_timeout_seconds", 0, 3600
        )
        hold = _number(
            proxy.get("hold_seconds", DEFAULT_HOLD_SECONDS),
            "proxy.hold_seconds",
            0,
            client_timeout,
        )
        _check_hold(hold, call_timeout, client_timeout)
        return Policy(
            path=path,
            upstreams={n: _upstream(n, u) for n, u in ups.items()},
            default_tier=default_tier,
            hold_seconds=hold,
            call_timeout_seconds=call_timeout,
            client_timeout_seconds=client_timeout,
            lease_seconds=_number(
                proxy.get("lease_seconds", 300.0), "proxy.lease_seconds", 1, 86400
            ),
            agent=agent,
            max_holds_per_client=_count(
                proxy.get("max_holds_per_client", 16), "proxy.max_holds_per_client", 1000
            ),
            max_pending_approvals_per_client=_count(
                proxy.get("max_pending_approvals_per_client", 16),
                "proxy.max_pending_approvals_per_client",
                1000,
            ),
            max_sessions_per_client=_count(
                proxy.get("max_sessions_per_client", 64), "proxy.max_sessions_per_client", 100000
            ),
            max_upstream_processes=_count(
                proxy.get("max_upstream_processes", 32), "proxy.max_upstream_processes", 10000
            ),
            max_safe_calls_per_client=_count(
                proxy.get("max_safe_calls_per_client", 64),
                "proxy.max_safe_calls_per_client",
                10000,
            ),
            max_request_mib=_count(proxy.get("max_request_mib", 16), "proxy.max_request_mib", 1024),
            session_boundary=boundary,
            session_idle_seconds=idle,
            undo_last_tool=undo_tool,
            durable_results=durable,
            late_answer_seconds=float(late),
            max_late_answers=_count(
                proxy.get("max_late_answers", 64), "proxy.max_late_answers", 10000
            ),
            walk_wait_seconds=_number(
                proxy.get("walk_wait_seconds", 10.0), "proxy.walk_wait_seconds", 0, 3600
            ),
            metrics_listen=listen,
        )
    except PolicyError as exc:
        raise PolicyError(f"{path}: {exc}") from None
