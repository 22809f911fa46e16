"""The compensation mapping language, with real processes: the SDK's MCP client drives
`undolog mcp-proxy` over stdio, which fronts tests/mcp_memory_upstream.py (a
knowledge graph and files, shaped like the reference memory and filesystem servers). A
failed session's undo walk must leave the upstream as it was: the test reads the graph
file and the edited file after the walk.

Also: the policy's start-time checks (mapped types against the upstream's JSON schemas,
a hold longer than the client waits), an upstream that will not start, and the client
configuration the proxy prints."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import psycopg
import pytest
from mcp import Client, StdioServerParameters
from test_mcp_proxy import (
    ROOT,
    UNDOLOG,
    WORKER,
    HttpProxy,
    run,
    sessions,
    text,
    wait_for,
)

from undolog import saga
from undolog.mcp_proxy.client_config import warnings
from undolog.mcp_proxy.mapping import ArgSource, resolve
from undolog.mcp_proxy.policy import load_policy
from undolog.mcp_proxy.proxy import build_routes

MEMORY_POLICY = ROOT / "examples" / "mcp-proxy" / "memory-policy.toml"
DOC = ROOT / "docs" / "mcp-proxy.md"


@pytest.fixture
def upstream_env(tmp_path: Path) -> dict[str, str]:
    files = tmp_path / "files"
    files.mkdir()
    bindir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "MEMORY_FILE": str(tmp_path / "memory.json"),
        "FILES_ROOT": str(files),
        "UPSTREAM_LEDGER": str(tmp_path / "ledger.jsonl"),
        "PATH": f"{bindir}:{os.environ['PATH']}",
    }


def proxy_cmd(config: Path, dsn: str) -> list[str]:
    return [*UNDOLOG, "mcp-proxy", "--config", str(config), "--dsn", dsn]


def client(config: Path, dsn: str, env: dict[str, str]) -> Client:
    command, *args = proxy_cmd(config, dsn)
    params = StdioServerParameters(command=command, args=args, env=env, cwd=str(ROOT))
    return Client(params, read_timeout_seconds=60)


def graph(env: dict[str, str]) -> dict[str, list[str]]:
    path = Path(env["MEMORY_FILE"])
    if not path.exists():
        return {}
    return {e["name"]: e["observations"] for e in json.loads(path.read_text())}


async def create_observe_edit_then_roll_back(
    c: Any,
    conn: psycopg.Connection[Any],
    *,
    tool: Callable[[str], str],
    notes: str,
    notes_file: Path,
    graph: Callable[[], dict[str, list[str]]],
) -> None:
    """The memory policy's story, against whichever upstream serves it (``tool`` names
    each tool as the proxy shows it): create_entities, add_observations and two chained
    edits of a file, then a rollback by a person and the undo walk to its end."""
    made = await c.call_tool(
        tool("create_entities"),
        {
            "entities": [
                {"name": "Ada", "entityType": "person", "observations": []},
                {"name": "Bob", "entityType": "person", "observations": ["new"]},
                {"name": "Cy", "entityType": "robot", "observations": []},
            ]
        },
    )
    assert not made.is_error, text(made)
    assert made.structured_content is not None
    # the upstream answers only the entities it created, as the mapping needs
    assert [e["name"] for e in made.structured_content["entities"]] == ["Bob", "Cy"]
    added = await c.call_tool(
        tool("add_observations"),
        {
            "observations": [
                {"entityName": "Ada", "contents": ["writes code", "likes tea"]},
                {"entityName": "Bob", "contents": ["plays chess"]},
            ]
        },
    )
    assert not added.is_error, text(added)
    # two edits where the second edits the first's output: undone only last first
    edited = await c.call_tool(
        tool("edit_file"),
        {
            "path": notes,
            "edits": [
                {"oldText": "status: draft", "newText": "status: review"},
                {"oldText": "status: review", "newText": "status: final"},
            ],
        },
    )
    assert not edited.is_error, text(edited)
    assert notes_file.read_text() == "status: final\nowner: ada\n"
    assert graph() == {
        "Ada": ["writes code", "likes tea"],
        "Bob": ["new", "plays chess"],
        "Cy": [],
    }
    ((sid, _),) = sessions(conn)
    assert saga.rollback_session(conn, sid, "alice", "wrong graph") == "failed"
    still = await c.call_tool(tool("read_graph"), {})  # SAFE: still served
    assert not still.is_error, text(still)
    # the next acting call hears of the failure: refused, and the undo walk starts
    again = await c.call_tool(tool("edit_file"), {"path": notes, "edits": []})
    assert again.is_error and "undone" in text(again)
    wait_for(lambda: dict(sessions(conn))[sid] == "compensated", timeout=60)


def test_memory_and_file_edits_are_undone_through_the_upstream(
    dsn: str, conn: psycopg.Connection[Any], upstream_env: dict[str, str]
) -> None:
    """create_entities -> delete_entities of the names it created (projected from its
    result), add_observations -> delete_observations of what it added (a list of
    objects built per element), edit_file -> edit_file with every edit swapped, last
    first. What existed before the session is left alone."""
    Path(upstream_env["MEMORY_FILE"]).write_text(
        json.dumps([{"name": "Ada", "entityType": "person", "observations": ["writes code"]}])
    )
    notes = Path(upstream_env["FILES_ROOT"]) / "notes.txt"
    original = "status: draft\nowner: ada\n"
    notes.write_text(original)

    async def body() -> None:
        async with client(MEMORY_POLICY, dsn, upstream_env) as c:
            await create_observe_edit_then_roll_back(
                c,
                conn,
                tool=lambda name: name,
                notes="notes.txt",
                notes_file=notes,
                graph=lambda: graph(upstream_env),
            )

    run(body)
    assert graph(upstream_env) == {"Ada": ["writes code"]}
    assert notes.read_text() == original
    descriptors = [
        r[0]
        for r in conn.execute(
            "SELECT compensation->'args' FROM undolog.undolog_undo_stack ORDER BY undo_id"
        ).fetchall()
    ]
    assert {"entityNames": "result.entities[*].name"} in descriptors


def test_resolve_reads_lists_and_builds_objects() -> None:
    """The stored forms of the three compensations (as the walk re-reads them from the
    journal) fill the arguments the upstream takes."""
    policy = tomllib.loads(MEMORY_POLICY.read_text())
    tools = policy["upstreams"]["mem"]["tools"]

    def stored(tool: str) -> dict[str, Any]:
        ((_, mapping),) = tools[tool]["compensation"].items()
        return {k: ArgSource.parse(v, k).to_json() for k, v in mapping.items()}

    result = {"structuredContent": {"entities": [{"name": "Bob"}, {"name": "Cy"}]}}
    assert resolve(stored("create_entities"), call_args={}, result=result, undo_id="u") == {
        "entityNames": ["Bob", "Cy"]
    }
    edits = [{"oldText": "a", "newText": "b"}, {"oldText": "b", "newText": "c"}]
    assert resolve(
        stored("edit_file"), call_args={"path": "p", "edits": edits}, result=None, undo_id="u"
    ) == {
        "path": "p",
        "edits": [{"oldText": "c", "newText": "b"}, {"oldText": "b", "newText": "a"}],
    }
    added = {"results": [{"entityName": "Ada", "addedObservations": ["x"]}]}
    assert resolve(
        stored("add_observations"),
        call_args={},
        result={"content": [{"type": "text", "text": json.dumps(added)}]},
        undo_id="u",
    ) == {"deletions": [{"entityName": "Ada", "observations": ["x"]}]}
    # what a journal record too big to keep whole keeps for the undo: the projected lists
    paths = {
        tool: [p for v in tools[tool]["compensation"].values() for p in _reads(v)]
        for tool in ("create_entities", "add_observations", "edit_file")
    }
    assert paths == {
        "create_entities": [("entities",)],
        "add_observations": [("results",)],
        "edit_file": [],
    }


def _reads(mapping: dict[str, Any]) -> list[tuple[str, ...]]:
    return [p for k, v in mapping.items() for p in ArgSource.parse(v, k).result_paths()]


MEMORY_UPSTREAM = '[upstreams.mem]\ncommand = ["python", "tests/mcp_memory_upstream.py"]\n'

BAD_MAPPINGS = {
    # the reported case: one name where the upstream's schema wants a list of names
    "a string where an array is wanted": (
        '[upstreams.mem.tools.create_entities]\ntier = "compensable"\n'
        'compensation.delete_entities = { entityNames = "args.entities.0.name" }\n',
        [
            "upstreams.mem.tools.create_entities.compensation: delete_entities.entityNames"
            " wants an array of string, but args.entities.0.name gives a string:"
            ' write entityNames = "args.entities[*].name"',
        ],
    ),
    "a list of objects where a list of strings is wanted": (
        '[upstreams.mem.tools.create_entities]\ntier = "compensable"\n'
        'compensation.delete_entities = { entityNames = "result.entities" }\n',
        ['gives an array of object: write entityNames = "result.entities[*].name"'],
    ),
    "a path the output schema does not have": (
        '[upstreams.mem.tools.create_entities]\ntier = "compensable"\n'
        'compensation.delete_entities = { entityNames = "result.entities[*].nmae" }\n',
        ["result.entities[*] has no 'nmae' (it has: name, entityType, observations)"],
    ),
    "an element missing a required key": (
        '[upstreams.mem.tools.add_observations]\ntier = "compensable"\n'
        "compensation.delete_observations = { deletions = "
        '{ each = "result.results", to = { entityName = "item.entityName" } } }\n',
        ["delete_observations.deletions[*] requires 'observations'"],
    ),
    "a key the element does not take, a path the element does not have": (
        '[upstreams.mem.tools.edit_file]\ntier = "compensable"\n'
        'compensation.edit_file = { path = "args.path", edits = { each = "args.edits", '
        'to = { oldText = "item.newText", newText = "item.old", dry = true } } }\n',
        [
            "edit_file.edits[*] takes no key 'dry'",
            "item (an element of the list each walks) has no 'old'",
        ],
    ),
    "a list where a string is wanted": (
        '[upstreams.mem.tools.edit_file]\ntier = "compensable"\n'
        'compensation.edit_file = { path = "args.edits", edits = "args.edits" }\n',
        ["edit_file.path wants a string, but args.edits gives an array of object"],
    ),
    "item outside each": (
        '[upstreams.mem.tools.create_entities]\ntier = "compensable"\n'
        'compensation.delete_entities = { entityNames = ["item.name"] }\n',
        ["item.PATH reads an element only inside each"],
    ),
    "each over what is not a path": (
        '[upstreams.mem.tools.create_entities]\ntier = "compensable"\n'
        'compensation.delete_entities = { entityNames = { each = { value = ["x"] } } }\n',
        ["expected the PATH of a list"],
    ),
    # a held call must answer before the client gives up: 30 + 40 > 60
    "a hold the client does not wait for": (
        "[proxy]\nhold_seconds = 30\ncall_timeout_seconds = 40\n",
        ["proxy.hold_seconds: 30 s held, then up to 40 s"],
    ),
    "a hold over a shorter client timeout": (
        "[proxy]\nclient_timeout_seconds = 10\nhold_seconds = 8\n",
        ["client_timeout_seconds = 10"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_MAPPINGS))
def test_a_bad_mapping_is_refused_at_start(
    case: str, tmp_path: Path, dsn: str, upstream_env: dict[str, str]
) -> None:
    body, messages = BAD_MAPPINGS[case]
    config = tmp_path / "bad.toml"
    proxy, _, rest = body.partition("[upstreams")
    config.write_text(proxy + MEMORY_UPSTREAM + (f"[upstreams{rest}" if rest else ""))
    done = subprocess.run(
        proxy_cmd(config, dsn),
        env=upstream_env,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "policy refused" in done.stderr, done.stderr
    for message in messages:
        assert message in done.stderr, done.stderr
    if case == "a string where an array is wanted":  # the page's example of a refusal
        assert documented_refusal() in done.stderr, done.stderr


def mapping_section() -> str:
    page = DOC.read_text(encoding="utf-8")
    return page[page.index("### Compensation arguments") : page.index("## Sessions")]


def documented_refusal() -> str:
    section = mapping_section()
    block = re.search(r"```text\n(.*?)\n```", section[section.index("The refusal names") :], re.S)
    assert block is not None
    return block.group(1)


def test_the_documented_mapping_expressions_parse_and_round_trip() -> None:
    """Every expression of the page's reference table is one the policy accepts, and
    its stored form (the journal's) reads back as the same expression."""
    rows = [line for line in mapping_section().splitlines() if line.startswith("| `")]
    expressions = [e for row in rows for e in re.findall(r"`([^`]+)`", row.split(" | ")[0])]
    assert len(expressions) >= 12, expressions
    for expression in expressions:
        raw = tomllib.loads(f"x = {expression}")["x"]
        parsed = ArgSource.parse(raw, expression)
        assert ArgSource.parse(parsed.to_json(), expression) == parsed, expression
    assert ArgSource.parse("result.entities[*].name", "x").path == ("entities", "[*]", "name")


def start(config: Path, dsn: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        proxy_cmd(config, dsn),
        env=env,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_an_upstream_that_exits_at_start_is_reported_with_why(
    tmp_path: Path, dsn: str, upstream_env: dict[str, str]
) -> None:
    """Its command, its exit code and the end of its stderr: not "unhandled errors in a
    TaskGroup (1 sub-exception)"."""
    script = tmp_path / "no_key_server.py"
    script.write_text(
        "import sys\n"
        "print('starting the CRM server', file=sys.stderr)\n"
        "print('error: CRM_API_KEY is not set', file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    config = tmp_path / "exits.toml"
    config.write_text(
        f"[upstreams.crm]\ncommand = [{json.dumps(sys.executable)}, {json.dumps(str(script))}]\n"
    )
    done = start(config, dsn, upstream_env)
    assert done.returncode == 1, done.stderr
    assert "TaskGroup" not in done.stderr, done.stderr
    assert "upstream 'crm' did not start" in done.stderr, done.stderr
    assert f"`{sys.executable} {script}` exited with code 3 before it answered" in done.stderr
    assert "    starting the CRM server\n    error: CRM_API_KEY is not set" in done.stderr


def test_an_upstream_command_that_does_not_exist_is_reported(
    tmp_path: Path, dsn: str, upstream_env: dict[str, str]
) -> None:
    config = tmp_path / "missing.toml"
    config.write_text('[upstreams.crm]\ncommand = ["no-such-mcp-server", "--stdio"]\n')
    done = start(config, dsn, upstream_env)
    assert done.returncode == 1, done.stderr
    assert "TaskGroup" not in done.stderr, done.stderr
    assert (
        "upstream 'crm' did not start: cannot run `no-such-mcp-server --stdio`: "
        "No such file or directory ('no-such-mcp-server'; PATH=" in done.stderr
    ), done.stderr
    assert "give the command's absolute path, or install it" in done.stderr


def test_the_printed_client_configuration_starts_the_proxy_without_path(
    tmp_path: Path, dsn: str, upstream_env: dict[str, str]
) -> None:
    """`--print-client-config` prints mcpServers JSON with absolute paths: started as a
    desktop app would (its own bare PATH, another working directory), it serves."""
    config = tmp_path / "policy.toml"
    upstream = [sys.executable, str(ROOT / "tests" / "mcp_upstream_server.py")]
    config.write_text(
        f"[upstreams.crm]\ncommand = {json.dumps(upstream)}\n"
        '[upstreams.crm.tools.lookup_user]\ntier = "safe"\n'
    )
    printed = subprocess.run(
        [*proxy_cmd(config, dsn), "--print-client-config", "--name", "crm-behind-undolog"],
        env=upstream_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 0, printed.stderr
    assert printed.stderr == ""  # absolute upstream command and a DSN: nothing to add
    server = json.loads(printed.stdout)["mcpServers"]["crm-behind-undolog"]
    assert os.path.isabs(server["command"]) and Path(server["command"]).is_file()
    assert server["args"][-3:] == ["mcp-proxy", "--config", str(config.resolve())]
    assert server["env"] == {"UNDOLOG_DSN": dsn}
    bare = {
        **server["env"],
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT / "python"),  # this worktree's code, not an installed one
        "UPSTREAM_LEDGER": upstream_env["UPSTREAM_LEDGER"],
    }
    params = StdioServerParameters(
        command=server["command"], args=server["args"], env=bare, cwd=str(tmp_path)
    )

    async def body() -> None:
        async with Client(params, read_timeout_seconds=60) as c:
            tools = {t.name for t in (await c.list_tools()).tools}
            assert "lookup_user" in tools
            found = await c.call_tool("lookup_user", {"email": "a@x"})
            assert found.structured_content == {"email": "a@x", "found": False}

    run(body)


def test_print_client_config_says_what_a_desktop_app_still_lacks(
    upstream_env: dict[str, str],
) -> None:
    env = {k: v for k, v in upstream_env.items() if k != "UNDOLOG_DSN"}
    printed = subprocess.run(
        [
            sys.executable,
            "-m",
            "undolog.cli",
            "mcp-proxy",
            "--config",
            "examples/mcp-proxy/policy.toml",
            "--print-client-config",
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 0, printed.stderr
    assert "undolog" in json.loads(printed.stdout)["mcpServers"]
    assert "no DSN given" in printed.stderr
    assert "upstreams.crm.command runs 'python' from the PATH" in printed.stderr
    assert "upstreams.crm.command names 'tests/mcp_upstream_server.py'" in printed.stderr


def test_print_client_config_notes_relative_paths_of_an_upstream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app starts the proxy in a working directory of its own: an upstream's
    arguments naming a file by a relative path (as the example policy's script), or a
    relative cwd, are read there, not where the configuration was printed. Only
    command[0] was checked: the printed configuration did not start, nothing noted."""
    monkeypatch.chdir(ROOT)
    python = json.dumps(sys.executable)
    config = tmp_path / "policy.toml"
    config.write_text(
        f'[upstreams.rel]\ncommand = [{python}, "tests/mcp_upstream_server.py", "-v", "."]\n'
        f'[upstreams.npx]\ncommand = [{python}, "-m", "x", "@scope/server", "./srv.js"]\n'
        f'[upstreams.cwd]\ncommand = [{python}, "server.py"]\ncwd = "tests"\n'
        f'[upstreams.fine]\ncommand = [{python}, "mcp_upstream_server.py"]\n'
        f"cwd = {json.dumps(str(ROOT / 'tests'))}\n"
        f"[upstreams.abs]\ncommand = [{python}, {json.dumps(str(ROOT / 'x.py'))}]\n"
    )
    said = warnings(load_policy(config), "postgresql:///x")
    assert said == [
        "upstreams.rel.command names 'tests/mcp_upstream_server.py' '.' by a relative "
        "path, which the upstream reads in the working directory the client starts the "
        "proxy in, not this one: give their absolute path in the policy (or an absolute "
        "upstreams.rel.cwd)",
        "upstreams.npx.command names './srv.js' by a relative path, which the upstream "
        "reads in the working directory the client starts the proxy in, not this one: "
        "give its absolute path in the policy (or an absolute upstreams.npx.cwd)",
        f"upstreams.cwd.cwd 'tests' is relative: it is taken from the working directory "
        f"the client starts the proxy in, not this one ({ROOT}): give its absolute path "
        "in the policy",
    ], said


@pytest.fixture
def proxies() -> Iterator[list[HttpProxy]]:
    started: list[HttpProxy] = []
    yield started
    for proxy in started:
        proxy.stop()


def test_the_worker_undoes_them_after_the_proxy_died(
    dsn: str,
    conn: psycopg.Connection[Any],
    upstream_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    proxies: list[HttpProxy],
) -> None:
    """The proxy is killed mid-session: `undolog worker --mcp-config` fills the stored
    mappings (projection, each) from the journal and undoes the calls through its own
    upstream process."""
    for key in ("MEMORY_FILE", "FILES_ROOT"):
        monkeypatch.setenv(key, upstream_env[key])
    notes = Path(upstream_env["FILES_ROOT"]) / "notes.txt"
    notes.write_text("a b c\n")
    proxy = HttpProxy(MEMORY_POLICY, dsn, Path(upstream_env["UPSTREAM_LEDGER"]))
    proxies.append(proxy)

    async def body() -> None:
        async with proxy.client() as c:
            made = await c.call_tool(
                "create_entities",
                {"entities": [{"name": "Eve", "entityType": "person", "observations": []}]},
            )
            assert not made.is_error, text(made)
            edited = await c.call_tool(
                "edit_file",
                {
                    "path": "notes.txt",
                    "edits": [
                        {"oldText": "a", "newText": "x"},
                        {"oldText": "c", "newText": "y"},
                    ],
                },
            )
            assert not edited.is_error, text(edited)
            proxy.kill()

    run(body)
    assert graph(upstream_env) == {"Eve": []} and notes.read_text() == "x b y\n"
    ((sid, _),) = sessions(conn)
    saga.rollback_session(conn, sid, "alice", "the proxy crashed")
    worker = subprocess.run(
        [*WORKER, "--once", "--dsn", dsn, "--mcp-config", str(MEMORY_POLICY)],
        env={**upstream_env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert worker.returncode == 0, worker.stderr
    assert f"session {sid}: compensated" in worker.stdout, worker.stdout + worker.stderr
    assert graph(upstream_env) == {}
    assert notes.read_text() == "a b c\n"


def test_a_tool_name_clients_may_refuse_is_named_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A desktop client, or the model API behind it, refuses a tool name outside
    [A-Za-z0-9_-]{1,64} (and then, some of them, every tool of the server): the proxy says
    which names, why, and how to hide one, when it lists the upstreams' tools."""
    long_name = "customer_relationship_manager_of_the_eastern_region_office"
    config = tmp_path / "policy.toml"
    command = json.dumps([sys.executable, str(ROOT / "tests" / "mcp_upstream_server.py")])
    config.write_text(
        f"[upstreams.{long_name}]\ncommand = {command}\n[upstreams.files]\ncommand = {command}\n"
    )
    policy = load_policy(config)

    def listed(*names: str) -> dict[str, types.Tool]:
        return {n: types.Tool(name=n, input_schema={"type": "object"}) for n in names}

    with caplog.at_level("WARNING", logger="undolog.mcp_proxy"):
        build_routes(policy, long_name, listed("lookup_user"))
        build_routes(policy, "files", listed("read.file", "write_file"))
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2, warned
    assert f"tool '{long_name}__lookup_user'" in warned[0]
    assert "71 characters long (1 to 64)" in warned[0]
    assert f"upstreams.{long_name}.hide = ['lookup_user']" in warned[0]
    assert "tool 'files__read.file'" in warned[1] and "holds '.'" in warned[1]
