"""What a newcomer copies in the first hour works as copied: the README's example and
the tutorial's first block run on their own, no page sends to a package index for
`undolog[...]` (the package is not published), and no shown shell block carries a
script's shebang or `set -e` (pasted into a terminal, `set -e` closes it at the first
failing command)."""

from __future__ import annotations

import io
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_docs_examples import DOCS, EXAMPLES, ROOT, shell_env

from undolog import EngineNotInstalled, InvalidArgument, UndoLog, UndoLogError, engine
from undolog import cli as cli_module
from undolog.cli import _output, main
from undolog.ids import short_id
from undolog.migrations import engine_version, migrate

FENCE = re.compile(r"^```(\S*)\s*$")
SNIPPET_START = re.compile(r"#\s*--8<--\s*\[start:(\w+)\]")
SNIPPET_END = re.compile(r"#\s*--8<--\s*\[end:(\w+)\]")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every top-level fenced block of a Markdown page."""
    blocks: list[tuple[str, str]] = []
    lang: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        fence = FENCE.match(line)
        if fence and lang is None:
            lang, body = fence.group(1), []
        elif line.strip() == "```" and lang is not None:
            blocks.append((lang, "\n".join(body) + "\n"))
            lang = None
        elif lang is not None:
            body.append(line)
    return blocks


def snippet(path: Path, name: str) -> str:
    """The lines between ``# --8<-- [start:name]`` and ``[end:name]``, as the page shows."""
    out: list[str] = []
    inside = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if (m := SNIPPET_START.search(line)) and m.group(1) == name:
            inside = True
        elif (m := SNIPPET_END.search(line)) and m.group(1) == name:
            break
        elif inside:
            out.append(line)
    assert out, f"no snippet {name} in {path}"
    return "\n".join(out) + "\n"


def run_python(code: str, dsn: str, tmp_path: Path) -> str:
    script = tmp_path / "copied.py"
    script.write_text(code, encoding="utf-8")
    out = subprocess.run(
        [sys.executable, str(script)],
        env=shell_env(dsn),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def readme_example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## A short example", 1)[1]
    return next(body for lang, body in fenced_blocks(section) if lang == "python")


def test_the_readme_example_runs_as_copied(dsn: str, tmp_path: Path) -> None:
    out = run_python(readme_example(), dsn, tmp_path)
    assert "opened ada@example.com on plan team" in out
    assert "undo: closed bob@example.com" in out


def test_the_tutorials_first_block_runs_on_its_own(dsn: str, tmp_path: Path) -> None:
    # Step 1 alone: the tools and their imports, declared and called outside a session.
    code = snippet(EXAMPLES / "first_agent.py", "tools") + "print(lookup_plan(team_size=3))\n"
    assert run_python(code, dsn, tmp_path).strip() == "team"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def test_no_page_installs_the_unpublished_package_by_name() -> None:
    # `pip install 'undolog[mcp]'` asks the index for a package that is not there;
    # `-e '.[mcp]'` (the clone) and `'dist/undolog-...whl[mcp]'` (the wheel) work today.
    by_name = re.compile(r"""pip install\s+(-U\s+)?["']?undolog(\[|["'\s]|$)""", re.M)
    offenders = [
        f"{page.relative_to(ROOT)}: {m.group(0)}"
        for page in pages()
        for m in by_name.finditer(page.read_text(encoding="utf-8"))
        if "published"
        not in page.read_text(encoding="utf-8")[max(0, m.start() - 200) : m.start()].lower()
    ]
    assert offenders == []


def test_no_shown_shell_block_carries_a_shebang_or_set_e() -> None:
    offenders: list[str] = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        shown = [body for lang, body in fenced_blocks(text) if lang in {"sh", "bash", "console"}]
        # the pages include their shell blocks from examples/*.sh between snippet marks
        for m in re.finditer(r'--8<--\s+"(examples/[^":]+\.sh):(\w+)"', text):
            shown.append(snippet(ROOT / m.group(1), m.group(2)))
        for m in re.finditer(r'--8<--\s+"(examples/[^":]+\.sh)"\s*$', text, re.M):
            shown.append((ROOT / m.group(1)).read_text(encoding="utf-8"))
        for body in shown:
            for line in body.splitlines():
                if line.startswith("#!") or re.match(r"\s*set -[a-z]*e", line):
                    offenders.append(f"{page.relative_to(ROOT)}: {line}")
    assert offenders == []


@pytest.fixture
def empty_dsn(fresh_db: Callable[..., str]) -> str:
    """A real database of the same cluster with no engine in it."""
    return fresh_db()


def test_the_binding_on_a_database_without_the_engine_says_run_migrate(empty_dsn: str) -> None:
    ul = UndoLog(empty_dsn)
    with (
        pytest.raises(EngineNotInstalled, match=r"run `undolog migrate`") as got,
        ul.session(agent="newcomer"),
    ):
        pass
    assert isinstance(got.value, UndoLogError)
    assert isinstance(got.value.__cause__, psycopg.Error)


def test_the_binding_on_an_older_engine_says_run_migrate_with_this_package(
    fresh_db: Callable[..., str],
) -> None:
    """A package newer than the engine calls a function the engine does not have yet:
    PostgreSQL's 42883 ("function undolog.heartbeat(uuid) does not exist", the code of a
    wrong argument type too) said nothing of what to do. Here the engine lacks the
    heartbeat of a newer release."""
    dsn = fresh_db()
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
        conn.execute("DROP FUNCTION undolog.heartbeat(uuid)")
        with pytest.raises(InvalidArgument, match=r"undolog\.heartbeat") as got:
            engine.heartbeat(conn, engine.begin_session(conn, agent="newer"))
    said = " ".join(got.value.__notes__)
    assert "older than this package" in said and "run `undolog migrate` with it" in said


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def agent_login(conn: Any, dsn: str) -> Iterator[str]:
    """A login that holds undolog_agent only."""
    conn.execute("CREATE ROLE first_hour_agent LOGIN IN ROLE undolog_agent")
    yield psycopg.conninfo.make_conninfo(dsn, user="first_hour_agent")
    conn.execute("DROP OWNED BY first_hour_agent")
    conn.execute("DROP ROLE first_hour_agent")


@pytest.mark.parametrize(
    ("argv", "role"),
    [
        (["approvals", "approve", str(uuid.uuid4()), "--by", "a"], "undolog_approver"),
        (["recover"], "undolog_operator"),
    ],
)
def test_an_agent_login_is_told_the_role_it_lacks(
    agent_login: str, argv: list[str], role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, *argv, "--dsn", agent_login)
    assert code == 1 and "permission denied" in err
    assert f"grant the login {role}" in err
    assert "one of undolog_agent" not in err


def test_status_without_the_engine_is_one_line(
    empty_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(capsys, "status", "--dsn", empty_dsn)
    assert code == 1
    assert out == "the UndoLog engine is not installed in this database: run `undolog migrate`\n"


def test_a_table_fits_the_terminal_and_cuts_at_a_word(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    widths = _output.fit([36, 12, 60, 60, 19], 100)
    assert sum(widths) + 2 * 4 <= 100 and min(widths) >= _output.MIN_COLUMN
    assert _output.fit([36, 60], None) == [36, 60], "a pipe gets whole cells"
    detail = "compensation delete_user failed: the refund API is down for maintenance"
    cut = _output.cut(detail, 40)
    assert len(cut) <= 40 and cut.endswith("…")
    assert detail.startswith(cut[:-1]) and detail[len(cut) - 1] == " ", "cut at a word"
    monkeypatch.setattr(_output, "terminal_width", lambda: 80)
    rows = [{"a": "x" * 60, "b": "y " * 40, "c": "z"}]
    args = cli_module.build_parser().parse_args(["sessions", "list"])
    args.json = False
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    _output.emit(args, rows, ["a", "b", "c"])
    assert max(len(line) for line in out.getvalue().splitlines()) <= 80
    # what was cut may be what matters: the hint says where it is whole
    assert err.getvalue() == "hint: cells marked … are cut; --json prints them whole\n"
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    _output.emit(args, [{"a": "x", "b": "y", "c": "z"}], ["a", "b", "c"])
    assert err.getvalue() == "", "nothing cut, no hint"


def test_an_unknown_option_sends_to_the_subcommands_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = cli(capsys, "approvals", "list", "--state", "bogus")
    assert code == 2 and "see `undolog approvals list --help`" in err


def test_a_bad_id_is_reported_in_plain_english(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "approvals", "approve", "zz", "--by", "a", "--dsn", dsn)
    assert code == 2 and "'zz' is not an approval id" in err


def test_roles_sql_runs_twice(dsn: str) -> None:
    # two pages run it against the same database
    for _ in range(2):
        subprocess.run(
            ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", str(EXAMPLES / "roles.sql")],
            env=shell_env(dsn),
            check=True,
            capture_output=True,
        )


def test_short_ids_of_the_same_millisecond_differ_and_resolve(
    conn: Any, dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from undolog import engine

    sids = [engine.begin_session(conn, agent="same-ms") for _ in range(5)]
    shorts = {short_id(s) for s in sids}
    assert len(shorts) == len(sids), "UUIDv7 ids of one moment share their start, not end"
    code, out, _ = cli(capsys, "sessions", "show", short_id(sids[2]), "--dsn", dsn)
    assert code == 0 and str(sids[2]) in out


def test_a_failed_calls_timeline_says_what_pending_means(
    conn: Any, dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from undolog import engine

    sid = engine.begin_session(conn, agent="fails")
    hit = engine.intercept(
        conn, sid, 0, "send_email", "compensable", {"to": "x"}, {"name": "retract"}
    )
    assert hit.effect_id is not None
    engine.fail(conn, hit.effect_id, "ConnectionError: " + "cannot deliver " * 10)
    code, out, _ = cli(capsys, "sessions", "show", str(sid), "--dsn", dsn)
    assert code == 0
    assert "executing → pending: the call raised, took no effect" in out


def test_version_names_the_engine_when_a_database_is_reachable(dsn: str, empty_dsn: str) -> None:
    def version(url: str) -> list[str]:
        out = subprocess.run(
            [sys.executable, "-m", "undolog.cli", "--version"],
            env={**shell_env(None), "UNDOLOG_DSN": url},
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.splitlines()

    package = f"undolog {engine_version()}"
    assert version(dsn) == [package, f"engine in this database: {engine_version()}"]
    assert version(empty_dsn)[1].startswith("engine in this database: not installed")
    assert version("host=127.0.0.1 port=1") == [package]


def missing_packages(tmp_path: Path, purpose: str) -> list[str]:
    """What install-system-deps.sh would install on a machine with Python and nothing of
    PostgreSQL 99 (no such release: none of it is there)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    python = bin_ / "python3"
    if not python.exists():
        python.symlink_to(sys.executable)
    out = subprocess.run(
        ["/bin/bash", str(ROOT / "tools/install-system-deps.sh"), "--for", purpose, "--print"],
        env={"PATH": str(bin_), "PG_MAJOR": "99"},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


def test_the_demo_installs_the_server_only_and_the_tests_their_tools(tmp_path: Path) -> None:
    assert missing_packages(tmp_path, "demo") == ["postgresql-99"]
    for_test = missing_packages(tmp_path, "test")
    assert for_test[0] == "postgresql-99" and "postgresql-99-pgtap" in for_test
    assert "libtap-parser-sourcehandler-pgtap-perl" in for_test


def test_make_demo_installs_the_package_without_the_development_extras(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    plan = subprocess.run(
        ["make", "-n", "-W", "pyproject.toml", "demo", f"VENV={venv}"],
        cwd=ROOT,
        env={k: v for k, v in shell_env(None).items() if k != "UNDOLOG_DSN"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "install-system-deps.sh --for demo" in plan
    assert f"{venv}/bin/pip install --disable-pip-version-check --progress-bar on -e .\n" in plan
    assert ".[dev]" not in plan and "--quiet" not in plan


APP = "examples.first_agent:ul"


def test_the_worker_on_a_database_without_the_engine_stops_and_says_why(empty_dsn: str) -> None:
    # a configuration fault no retry fixes: the worker exits 2 rather than retry forever
    out = subprocess.run(
        [sys.executable, "-m", "undolog.cli", "worker", "--once", "--app", APP],
        env={**shell_env(None), "UNDOLOG_DSN": empty_dsn},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "run `undolog migrate`" in out.stderr


# --- what the first-hour pages show is what the programs print ------------------------------


def page_block_after(page: Path, lead: str) -> str:
    """The fenced block that follows the paragraph ending with ``lead`` on ``page``."""
    text = page.read_text(encoding="utf-8")
    after = text[text.index(lead) + len(lead) :]
    fence = re.search(r"^( *)```\S*\n(.*?)^\1```", after, re.M | re.S)
    assert fence is not None, f"{page}: no block after {lead!r}"
    indent = len(fence.group(1))  # a block inside a list item is indented with it
    return "".join(line[indent:] for line in fence.group(2).splitlines(keepends=True))


def test_the_first_agent_page_shows_what_the_example_prints(dsn: str, tmp_path: Path) -> None:
    shown = page_block_after(DOCS / "tutorials" / "first-agent.md", "Run it:\n")
    assert "first_agent" in shown  # the include of the command; the output follows it
    printed = page_block_after(DOCS / "tutorials" / "first-agent.md", "It prints:\n")
    # "…" stands for an id that differs on every run
    pattern = "\n".join(
        ".+".join(re.escape(part) for part in line.split("…")) for line in printed.splitlines()
    )
    out = run_python((EXAMPLES / "first_agent.py").read_text(encoding="utf-8"), dsn, tmp_path)
    assert re.fullmatch(pattern + "\n", out), (
        f"the page shows\n{printed}\nthe example prints\n{out}"
    )


def test_the_pages_show_the_line_make_db_prints() -> None:
    from pgcluster import Cluster, export_line

    shown = page_block_after(
        DOCS / "how-to" / "local-database.md", "standard output, for example:\n"
    )
    line = shown.strip()
    port = re.search(r"PGPORT=(\d+)", line)
    assert port is not None
    cluster = Cluster(host="127.0.0.1", port=int(port.group(1)), user="you", datadir=ROOT)
    assert line == export_line(cluster)
    # the quickstart names the same variables, in the same order
    quickstart = (DOCS / "quickstart.md").read_text(encoding="utf-8")
    named = re.search(r"`export ((?:\w+=\.\.\. ?)+)`", quickstart)
    assert named is not None
    exported = [word.split("=", 1)[0] for word in shlex.split(line)[1:]]
    assert re.findall(r"(\w+)=", named.group(1)) == exported


def closed_cwd(tmp_path: Path) -> Path:
    """A folder no other user may enter: where a root's clone under /root stands."""
    folder = tmp_path / "closed"
    folder.mkdir(mode=0o700)
    return folder


def test_make_db_elsewhere_names_the_command_that_stops_it(tmp_path: Path) -> None:
    # a folder the postgres system user can reach (as root the cluster runs as postgres)
    folder = Path(tempfile.mkdtemp(prefix="undolog-db-"))
    folder.chmod(0o755)
    datadir = folder / "pgdata"
    env = {k: v for k, v in shell_env(None).items() if k != "DB_DIR"}
    try:
        # from the clone, through make: the hint is the make command, with DB_DIR
        started = subprocess.run(
            ["make", "-s", "db", f"DB_DIR={datadir}"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert started.stdout.startswith("export ")
        hint = f"stop it with: make db-stop DB_DIR={datadir}"
        assert hint in started.stderr
        assert "could not change directory" not in started.stderr
        # from a folder of its own (closed to others), by the tool's path: its own command
        tool = ROOT / "tools" / "pgcluster.py"
        again = subprocess.run(
            [sys.executable, str(tool), "start", "--dir", str(datadir)],
            cwd=closed_cwd(tmp_path),
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert again.stdout == started.stdout
        assert f"stop it with: python3 {tool} stop --dir {datadir}" in again.stderr
        # the hint, as printed, stops it
        stopped = subprocess.run(
            ["make", "-s", "db-stop", f"DB_DIR={datadir}"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert f"stopped the PostgreSQL in {datadir}" in stopped.stderr
        assert f"(make db DB_DIR={datadir} starts it again)" in stopped.stderr
    finally:
        subprocess.run(
            [sys.executable, str(ROOT / "tools" / "pgcluster.py"), "stop", "--dir", str(datadir)],
            env=env,
            capture_output=True,
            check=False,
        )
        shutil.rmtree(folder, ignore_errors=True)


def test_make_db_on_an_older_cluster_asks_the_password_logins_for_theirs() -> None:
    """A .pgdata made before make db asked undolog_password_logins for their password
    (pg_hba.conf without those lines) gets them when started again, and a running server
    is reloaded: a member's login without its password is refused from then on."""
    from pgcluster import HBA_PASSWORD_LINES, PASSWORD_LOGINS

    folder = Path(tempfile.mkdtemp(prefix="undolog-db-"))
    folder.chmod(0o755)
    datadir = folder / "pgdata"
    tool = [sys.executable, str(ROOT / "tools" / "pgcluster.py")]
    env = {k: v for k, v in shell_env(None).items() if k != "DB_DIR"}

    def start() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*tool, "start", "--dir", str(datadir)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )

    try:
        first = start()
        assert "now asks" not in first.stderr  # a new cluster has them from initdb on
        hba = datadir / "pg_hba.conf"
        hba.write_text(hba.read_text().replace(HBA_PASSWORD_LINES, ""))  # as before 802a8df
        cluster = dict(kv.split("=", 1) for kv in shlex.split(first.stdout.removeprefix("export ")))
        member = f"hba_member_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(cluster["UNDOLOG_DSN"], autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {PASSWORD_LOGINS} NOLOGIN")
            conn.execute(
                f"CREATE ROLE {member} LOGIN PASSWORD 'a-long-secret' IN ROLE {PASSWORD_LOGINS}"
            )
            conn.execute("SELECT pg_reload_conf()")  # the stripped file, in force
        as_member = f"{cluster['UNDOLOG_DSN']} user={member} passfile=/dev/null"
        psycopg.connect(as_member).close()  # trusted: no password asked

        again = start()  # the server runs: its rules are reloaded
        assert f"pg_hba.conf now asks the members of {PASSWORD_LOGINS}" in again.stderr
        assert again.stdout == first.stdout
        assert hba.read_text().startswith(HBA_PASSWORD_LINES)
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(as_member).close()
        psycopg.connect(f"{as_member} password=a-long-secret").close()
        assert "now asks" not in start().stderr  # once
    finally:
        subprocess.run(
            [*tool, "stop", "--dir", str(datadir)], env=env, capture_output=True, check=False
        )
        shutil.rmtree(folder, ignore_errors=True)


def test_ctrl_c_stops_the_throwaway_database_without_a_traceback(tmp_path: Path) -> None:
    """`make dashboard-demo` says "Ctrl-C stops it": the terminal sends SIGINT to the whole
    process group, pgcluster.py run included. It waits for the command to end, then stops
    and removes the cluster, and prints no traceback."""
    command = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, lambda *_: sys.exit(0))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    python_c = [sys.executable, "-c", command]
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tools" / "pgcluster.py"), "run", "--", *python_c],
        cwd=closed_cwd(tmp_path),
        env=shell_env(None),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as a terminal's job
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "could not change directory" not in err
    started = re.search(r"throwaway PostgreSQL on 127\.0\.0\.1:(\d+)", err)
    assert started is not None
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(
            f"host=127.0.0.1 port={started.group(1)} dbname=postgres", connect_timeout=5
        )


def test_make_dist_needs_only_build(tmp_path: Path) -> None:
    # install.md: a wheel for your own project; not Chromium, Node.js and every extra
    plan = subprocess.run(
        ["make", "-n", "dist", f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT,
        env=shell_env(None),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "-m build --outdir dist ." in plan
    assert "install-system-deps" not in plan and ".[dev]" not in plan and "npm" not in plan


def test_make_demo_on_a_given_database_says_how_to_get_a_throwaway_one() -> None:
    plan = subprocess.run(
        ["make", "-n", "demo"], cwd=ROOT, env=shell_env(None), capture_output=True, text=True
    ).stdout
    assert "unset UNDOLOG_DSN: a throwaway PostgreSQL" in plan


NPM_REFUSED = """#!/bin/sh
echo "npm http fetch GET https://registry.npmjs.org/x failed with SELF_SIGNED_CERT_IN_CHAIN" >&2
exit 1
"""
NPM_SILENT = "#!/bin/sh\nexec sleep 30\n"
NPM_WORKS = '#!/bin/sh\necho "npm $*"\n'


@pytest.mark.parametrize(
    ("npm", "rc", "told"),
    [
        (NPM_REFUSED, 1, "export NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt"),
        (NPM_SILENT, 1, "npm install did not finish in 1 s (UNDOLOG_NPM_TIMEOUT"),
        (NPM_WORKS, 0, "@modelcontextprotocol/server-memory@"),
    ],
    ids=["certificate refused", "registry silent", "installed"],
)
def test_the_mcp_servers_install_is_bounded_and_says_what_to_do(
    tmp_path: Path, npm: str, rc: int, told: str
) -> None:
    """make test's npm install of the reference MCP servers shows each request, stops
    after UNDOLOG_NPM_TIMEOUT seconds, and a failure names the next step."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "npm").write_text(npm)
    (bin_ / "npm").chmod(0o755)
    out = subprocess.run(
        ["/bin/bash", str(ROOT / "tools/install-mcp-servers.sh"), str(tmp_path / "servers")],
        env={**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "UNDOLOG_NPM_TIMEOUT": "1"},
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert out.returncode == rc, out.stderr
    assert told in out.stdout + out.stderr
    if rc == 0:
        assert "--loglevel=http" in out.stdout and "--prefix" in out.stdout
