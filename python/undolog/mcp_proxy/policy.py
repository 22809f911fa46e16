"""The operator's policy file (TOML): upstream servers, each tool's tier, compensations.

The tier of a tool is the operator's word, never the agent's: the proxy reads it here and
nowhere else. ``load_policy`` checks the file's own shape (unknown keys, bad tiers, bad
mapping expressions); ``Policy.check_against`` then checks it against the tools the
upstreams actually list, so that a policy naming a missing tool, or a compensation whose
arguments cannot be filled, is refused before the proxy serves a single call.

Compensation arguments are a small mapping language, never evaluated as code. Each
argument of the compensation call is one of:

- ``"args.PATH"``: taken from the original call's arguments;
- ``"result.PATH"``: taken from the original call's result (its structured content, else
  the JSON of its single text block);
- ``"undo_id"``: the undo entry's id, the same on every attempt (an idempotency key);
- ``{ value = ANY }``: that literal value (strings included);
- a bare number or boolean: that literal.

PATH is dot-separated: object keys, or integers that index a list (``result.items.0.id``).
Any other string is refused, so that a typo is an error at start rather than at undo time.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Tier = Literal["safe", "compensable", "irreversible"]
TIERS: tuple[Tier, ...] = ("safe", "compensable", "irreversible")
# What a human's rejection of an irreversible call does: fail the session and undo it
# (the engine's rule), or answer the call with the rejection and keep the session going.
OnReject = Literal["fail_session", "tell_model"]
ON_REJECT: tuple[OnReject, ...] = ("fail_session", "tell_model")
# One upstream process for every client session, or one per UndoLog session.
Instances = Literal["shared", "per_session"]
INSTANCES: tuple[Instances, ...] = ("shared", "per_session")
# Where an UndoLog session ends: with the client's connection, after an idle gap, or
# where the client says a conversation ends (its _meta conversation key).
Boundary = Literal["connection", "idle", "conversation"]
BOUNDARIES: tuple[Boundary, ...] = ("connection", "idle", "conversation")

# Most MCP clients give up on a request after 60 s (the TypeScript SDK's default, not
# reset by progress unless the client opts in): a held call must answer before that.
MAX_HOLD_SECONDS = 55.0
DEFAULT_HOLD_SECONDS = 25.0

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SEGMENT = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_-]*|[0-9]+)$")


class PolicyError(ValueError):
    """The policy file is refused; the message says where and why."""


@dataclass(frozen=True)
class ArgSource:
    """Where one argument of a compensation call comes from."""

    kind: Literal["args", "result", "undo_id", "value"]
    path: tuple[str, ...] = ()
    value: Any = None

    def to_json(self) -> Any:
        """The form stored in the journal's compensation descriptor (re-read by the walk,
        so that a walk after a policy change still undoes what the old policy meant)."""
        if self.kind == "value":
            return {"value": self.value}
        if self.kind in ("args", "result"):
            return ".".join((self.kind, *self.path))
        return self.kind

    @classmethod
    def parse(cls, raw: Any, where: str) -> ArgSource:
        if isinstance(raw, bool | int | float):
            return cls("value", value=raw)
        if isinstance(raw, dict):
            if set(raw) != {"value"}:
                raise PolicyError(f"{where}: a literal is written {{ value = ... }}, got {raw!r}")
            _check_json(raw["value"], where)
            return cls("value", value=raw["value"])
        if not isinstance(raw, str):
            raise PolicyError(f"{where}: expected a mapping expression, got {raw!r}")
        if raw == "undo_id":
            return cls("undo_id")
        head, _, rest = raw.partition(".")
        if head in ("args", "result") and rest:
            segments = tuple(rest.split("."))
            if all(_SEGMENT.match(s) for s in segments):
                return cls(head, segments)  # type: ignore[arg-type]
        raise PolicyError(
            f"{where}: {raw!r} is not args.PATH, result.PATH or undo_id "
            f'(a literal string is written {{ value = "..." }})'
        )


def _check_json(value: Any, where: str) -> None:
    if isinstance(value, str | bool | int | float) or value is None:
        return
    if isinstance(value, list):
        for item in value:
            _check_json(item, where)
        return
    if isinstance(value, dict):
        for item in value.values():
            _check_json(item, where)
        return
    raise PolicyError(f"{where}: {value!r} cannot be sent as JSON")


class MappingError(LookupError):
    """A compensation's argument cannot be filled from what the journal holds."""


def resolve(
    mapping: Mapping[str, Any],
    *,
    call_args: Mapping[str, Any],
    result: Any,
    undo_id: str,
) -> dict[str, Any]:
    """Fill a stored mapping (``ArgSource.to_json`` forms) into the compensation's args."""
    out: dict[str, Any] = {}
    for name, stored in mapping.items():
        source = ArgSource.parse(stored, f"compensation argument {name!r}")
        if source.kind == "value":
            out[name] = source.value
        elif source.kind == "undo_id":
            out[name] = undo_id
        elif source.kind == "args":
            out[name] = _walk_path(call_args, source.path, f"args.{'.'.join(source.path)}")
        else:
            if result is None:
                raise MappingError(
                    f"{name} = result.{'.'.join(source.path)}: the call has no recorded "
                    "result (its outcome is unknown): undo it by hand"
                )
            out[name] = _walk_path(result_value(result), source.path, stored)
    return out


def result_value(snapshot: Any) -> Any:
    """What ``result.`` paths read: the structured content of the recorded tool result,
    else the JSON of its single text block, else the text itself."""
    if not isinstance(snapshot, dict):
        return snapshot
    structured = snapshot.get("structuredContent")
    if structured is not None:
        return structured
    texts = [c.get("text") for c in snapshot.get("content", []) if c.get("type") == "text"]
    if len(texts) == 1 and isinstance(texts[0], str):
        try:
            return json.loads(texts[0])
        except ValueError:
            return texts[0]
    return snapshot


def _walk_path(value: Any, path: tuple[str, ...], expression: str) -> Any:
    for segment in path:
        if isinstance(value, dict) and segment in value:
            value = value[segment]
        elif isinstance(value, list) and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            raise MappingError(f"{expression}: no {segment!r} in {str(value)[:200]!r}")
    return value


@dataclass(frozen=True)
class Compensation:
    tool: str  # a tool of the same upstream
    args: dict[str, ArgSource]
    max_attempts: int | None = None


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


@dataclass(frozen=True)
class Policy:
    path: Path
    upstreams: dict[str, Upstream]
    default_tier: Tier = "irreversible"
    hold_seconds: float = DEFAULT_HOLD_SECONDS
    call_timeout_seconds: float = 30.0
    lease_seconds: float = 300.0
    agent: str = "mcp-proxy"
    # irreversible calls one client session may have held at once (each waits for a human)
    max_holds_per_client: int = 16
    session_boundary: Boundary = "connection"
    session_idle_seconds: float | None = None  # "idle" (and optionally "conversation")

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


def _properties(schema: Any) -> tuple[set[str] | None, set[str]]:
    """(properties or None when the schema does not say, required)."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return None, set()
    required = schema.get("required")
    names = {str(r) for r in required} if isinstance(required, list) else set()
    return set(schema["properties"]), names


def _check_compensation(
    upstream: str, tool: str, comp: Compensation, tools: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    where = f"upstreams.{upstream}.tools.{tool}.compensation"
    if comp.tool not in tools:
        return [f"{where}: compensation tool {comp.tool!r} is not listed by upstream {upstream!r}"]
    problems = []
    target_props, target_required = _properties(tools[comp.tool].get("inputSchema"))
    if target_props is not None:
        for arg in comp.args:
            if arg not in target_props:
                problems.append(f"{where}: {comp.tool} takes no argument {arg!r}")
    for arg in sorted(target_required - set(comp.args)):
        problems.append(f"{where}: {comp.tool} requires {arg!r}, which the mapping does not fill")
    own_props, _ = _properties(tools[tool].get("inputSchema"))
    out_schema = tools[tool].get("outputSchema")
    out_props, _ = _properties(out_schema)
    closed_output = isinstance(out_schema, dict) and out_schema.get("additionalProperties") is False
    for arg, source in comp.args.items():
        if source.kind == "args" and own_props is not None and source.path[0] not in own_props:
            problems.append(
                f"{where}: {arg} = args.{'.'.join(source.path)}, but {tool} has no argument "
                f"{source.path[0]!r}"
            )
        if (
            source.kind == "result"
            and closed_output
            and out_props is not None
            and source.path[0] not in out_props
        ):
            problems.append(
                f"{where}: {arg} = result.{'.'.join(source.path)}, but {tool}'s output "
                f"schema has no {source.path[0]!r}"
            )
    return problems


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
    raw = _table(raw, where, {"command", "env", "cwd", "url", "tools", "hide", "instances"})
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
                "lease_seconds",
                "agent",
                "max_holds_per_client",
                "session_boundary",
                "session_idle_seconds",
            },
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
        return Policy(
            path=path,
            upstreams={n: _upstream(n, u) for n, u in ups.items()},
            default_tier=default_tier,
            hold_seconds=_number(
                proxy.get("hold_seconds", DEFAULT_HOLD_SECONDS),
                "proxy.hold_seconds",
                0,
                MAX_HOLD_SECONDS,
            ),
            call_timeout_seconds=_number(
                proxy.get("call_timeout_seconds", 30.0), "proxy.call_timeout_seconds", 0, 3600
            ),
            lease_seconds=_number(
                proxy.get("lease_seconds", 300.0), "proxy.lease_seconds", 1, 86400
            ),
            agent=agent,
            max_holds_per_client=int(
                _number(
                    proxy.get("max_holds_per_client", 16), "proxy.max_holds_per_client", 1, 1000
                )
            ),
            session_boundary=boundary,
            session_idle_seconds=idle,
        )
    except PolicyError as exc:
        raise PolicyError(f"{path}: {exc}") from None
