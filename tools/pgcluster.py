"""A private PostgreSQL cluster: throwaway for tests, the pgTAP run, the demo and the
benchmarks; persistent for a newcomer's local database (``make db``).

initdb refuses to run as root and CI runs as root, so when we are root the cluster is
created and started as the ``postgres`` system user (``runuser``); as anyone else it runs
as that user. Either way it listens on 127.0.0.1 only and trusts local connections, but
for the members of PASSWORD_LOGINS, which log in by password (the dashboard's logins:
the dashboard lets no one in that the server did not ask for a password).

    python tools/pgcluster.py run -- CMD ARGS...   # throwaway: CMD with PG* and UNDOLOG_DSN set
    python tools/pgcluster.py start [--dir .pgdata] # persistent: create once, start, and
                                                    # print the `export UNDOLOG_DSN=...` line
    python tools/pgcluster.py stop [--dir .pgdata]  # stop it (the data stays in --dir)
    python tools/pgcluster.py clean                 # remove the folders of throwaway
                                                    # clusters nobody uses (killed runs')
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import itertools
import os
import pwd
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Cluster:
    host: str
    port: int
    user: str
    datadir: Path

    @property
    def dsn(self) -> str:
        return f"host={self.host} port={self.port} user={self.user} dbname=postgres"

    def env(self) -> dict[str, str]:
        return {
            "PGHOST": self.host,
            "PGPORT": str(self.port),
            "PGUSER": self.user,
            "PGDATABASE": "postgres",
            "UNDOLOG_DSN": self.dsn,
        }


# The group role whose members a cluster made here asks for a password (scram-sha-256)
# where it trusts every other local login: the dashboard's demo logins (undolog.demos.
# dashboard.PASSWORD_LOGINS, the same name), as a dashboard login must be.
PASSWORD_LOGINS = "undolog_password_logins"
HBA_PASSWORD_LINES = (
    "# undolog (tools/pgcluster.py): the members of this group log in by password\n"
    f"local all +{PASSWORD_LOGINS} scram-sha-256\n"
    f"host all +{PASSWORD_LOGINS} 127.0.0.1/32 scram-sha-256\n"
    f"host all +{PASSWORD_LOGINS} ::1/128 scram-sha-256\n"
)


def _ask_passwords(datadir: Path) -> bool:
    """Put HBA_PASSWORD_LINES ahead of initdb's trust lines in ``datadir``'s pg_hba.conf
    (rewritten in place: it keeps its owner, the cluster's), unless they are there
    already (a cluster made before they existed gets them the next time it is started).
    Answers whether it added them."""
    hba = datadir / "pg_hba.conf"
    original = hba.read_text(encoding="utf-8")
    if HBA_PASSWORD_LINES in original:
        return False
    with hba.open("w", encoding="utf-8") as f:
        f.write(HBA_PASSWORD_LINES + original)
    return True


def bindir() -> Path:
    """Folder of initdb/pg_ctl: PG_BINDIR, else pg_config's answer, else PATH, else
    Debian's /usr/lib/postgresql/15/bin (the demo installs the server without pg_config)."""
    if os.environ.get("PG_BINDIR"):
        return Path(os.environ["PG_BINDIR"])
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=True)
        return Path(out.stdout.strip())
    initdb = shutil.which("initdb")
    debian = Path(f"/usr/lib/postgresql/{os.environ.get('PG_MAJOR', '15')}/bin")
    if initdb is None and (debian / "initdb").exists():
        return debian
    if initdb is None:
        raise RuntimeError("no PostgreSQL binaries found: install postgresql-15 or set PG_BINDIR")
    return Path(initdb).parent


def schema_dump(dsn: str) -> str:
    """``pg_dump --schema-only`` of schema undolog, without comments and without pg_dump's
    per-run ``\\restrict`` token (TOOLCHAIN.md), so that two dumps compare equal."""
    out = subprocess.run(
        [str(bindir() / "pg_dump"), "--schema-only", "--schema=undolog", "--no-owner", dsn],
        capture_output=True,
        text=True,
        check=True,
    )
    return "\n".join(
        line
        for line in out.stdout.splitlines()
        if not line.startswith(("--", "\\restrict", "\\unrestrict"))
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_cluster_owner(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


def _run_as_owner(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """``cmd`` as the cluster's owner. As root it runs from ``/``: the postgres system user
    may not enter the current folder (a clone under /root), and initdb and pg_ctl would
    each print "could not change directory to ...: Permission denied"."""
    if os.geteuid() == 0:
        kwargs.setdefault("cwd", "/")
    return subprocess.run(_as_cluster_owner(cmd), **kwargs)


# Where a cluster keeps its data files when asked to keep them in memory: a tmpfs, with
# room to spare (a container's /dev/shm may hold 64 MB; the suite's databases need more).
MEMORY_DIR = Path("/dev/shm")
MEMORY_ROOM = 2 * 1024**3


class MemoryFallback(UserWarning):
    """Data files asked to be kept in memory went to disk: MEMORY_DIR is not writable, or
    has less than MEMORY_ROOM free. The cluster works as well; its CREATE DATABASE costs
    more CPU (see throwaway_cluster)."""


_fallback_said = False


def _memory_dir() -> Path | None:
    """MEMORY_DIR when this user may write there and it has MEMORY_ROOM free, else None,
    which the process is told once (a MemoryFallback warning: on stderr, and in pytest's
    warnings summary when a test run's cluster falls back)."""
    global _fallback_said
    why: str | None = None
    try:
        room = os.statvfs(MEMORY_DIR)
    except OSError as exc:
        why = f"{MEMORY_DIR} cannot be used ({exc.strerror or exc})"
    else:
        free = room.f_bavail * room.f_frsize
        if not os.access(MEMORY_DIR, os.W_OK):
            why = f"{MEMORY_DIR} is not writable"
        elif free < MEMORY_ROOM:
            gb = 1024**3
            why = f"{MEMORY_DIR} has {free / gb:.1f} GB free, under {MEMORY_ROOM / gb:.0f} GB"
    if why is None:
        return MEMORY_DIR
    if not _fallback_said:
        _fallback_said = True
        warnings.warn(
            f"pgcluster: the throwaway cluster's data files are on disk, not in memory: "
            f"{why}; it works as well, but each CREATE DATABASE costs more CPU",
            MemoryFallback,
            stacklevel=2,
        )
    return None


# The folders a throwaway cluster makes: the data (and the WAL) in the temporary folder,
# or the data in MEMORY_DIR and the WAL in the temporary folder. Each holds LOCK, which
# the process that made the cluster keeps locked (flock) while the cluster lives; it
# names the cluster's data folder, whose postmaster.pid tells whether a server runs.
PREFIX = "undolog-pg-"
LOCK = "cluster.lock"


def _folder_owners() -> set[int]:
    """Who may own a throwaway cluster's folder: this user; as root, also postgres, to
    whom throwaway_cluster gives its folders."""
    if os.geteuid() != 0:
        return {os.geteuid()}
    try:
        return {0, pwd.getpwnam("postgres").pw_uid}
    except KeyError:  # no postgres user: no throwaway cluster of root's got that far
        return {0}


def _live_pid(datadir: str) -> int | None:
    """The pid that ``datadir``'s postmaster.pid names, if it is a process of this PID
    namespace (whoever's), else None (no postmaster.pid, unreadable, or its pid gone)."""
    try:
        pid = int((Path(datadir) / "postmaster.pid").read_text(encoding="utf-8").split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:  # another user's process: it lives
        pass
    return pid


def _is_dead_leftover(folder: Path, owners: set[int]) -> bool:
    """Whether ``folder`` is a throwaway cluster's folder that nobody uses: a directory
    (not a symlink) owned by one of ``owners``, whose LOCK (a file of theirs, not a
    symlink) no process holds, and whose data folder (that LOCK names) has no
    postmaster.pid naming a live process. A server that outlived its killed run is
    left, and this says on stderr how to stop it."""
    try:
        st = folder.lstat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid not in owners:
            return False
        fd = os.open(folder / LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as lock:
        try:
            lock_st = os.fstat(fd)
            if not stat.S_ISREG(lock_st.st_mode) or lock_st.st_uid not in owners:
                return False
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # held: the cluster lives
        datadir = lock.read().decode("utf-8", "replace").strip()
    pid = _live_pid(datadir) if datadir else None
    if pid is not None and Path(datadir).parent == folder:
        ctl = "pg_ctl"
        with contextlib.suppress(RuntimeError, OSError, subprocess.CalledProcessError):
            ctl = str(bindir() / "pg_ctl")
        stop = shlex.join(_as_cluster_owner([ctl, "-D", datadir, "stop"]))
        print(
            f"pgcluster: left {folder}: a killed run's server still runs there (pid {pid}); "
            f"stop it ({stop}) and the next throwaway cluster removes its folders",
            file=sys.stderr,
        )
    return pid is None


def _remove_dead_leftovers() -> None:
    """Remove the folders of throwaway clusters that nobody uses (a test run killed, so
    that it neither stopped its server nor removed them): each ``undolog-pg-*`` folder
    directly in the temporary folder or MEMORY_DIR that _is_dead_leftover. Each folder
    is judged on its own (a cluster's data in memory and its WAL on disk are two),
    and no symlink is followed (shutil.rmtree unlinks the ones inside)."""
    owners = _folder_owners()
    for parent in {Path(tempfile.gettempdir()), MEMORY_DIR}:
        try:
            found = [p for p in parent.iterdir() if p.name.startswith(PREFIX)]
        except OSError:
            continue
        for folder in found:
            if _is_dead_leftover(folder, owners):
                shutil.rmtree(folder, ignore_errors=True)


def _hold_lock(folder: Path, datadir: Path) -> int:
    """Create ``folder``'s LOCK, naming ``datadir``, locked: the fd the caller keeps open
    (and closes) while the cluster lives. It is written and locked under another name,
    then renamed, so that no cleanup sees it unlocked or empty. No child inherits it
    (Python's fds are not inheritable, and subprocess closes the others: close_fds)."""
    part = folder / f"{LOCK}.part"
    fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, str(datadir).encode())
    part.rename(folder / LOCK)
    return fd


@contextlib.contextmanager
def throwaway_cluster(*settings: str, data_in_memory: bool = False) -> Iterator[Cluster]:
    """Start a private cluster; ``settings`` are extra ``-c name=value`` server options.

    ``data_in_memory``: the data files in a tmpfs (MEMORY_DIR, when it has room), the
    write-ahead log on disk as always, flushed at every commit (fsync stays on). For the
    test suite, which creates and drops a database for each of its tests, some 550 files
    each time: on an ext4 without a journal (this team's machines) each new inode is
    checked against the recently deleted ones, and a CREATE DATABASE took 300-450 ms of
    CPU after a few hundred of them (40 ms on tmpfs). A commit's durability is its WAL
    flush, which this keeps; a crash of the server recovers the data files from the WAL
    as on disk (they outlive any process; only a reboot would lose them, and with them
    a cluster thrown away anyway). Data asked in memory that go to disk (no room there)
    are said once (MemoryFallback). Each of its folders holds a LOCK that this process
    keeps locked while the cluster lives. First it removes the folders of throwaway
    clusters that nobody uses (_remove_dead_leftovers: a killed run's)."""
    bin_ = bindir()
    _remove_dead_leftovers()
    root = Path(tempfile.mkdtemp(prefix=PREFIX))
    memory = _memory_dir() if data_in_memory else None
    data_root = root
    datadir = root / "data"
    is_root = os.geteuid() == 0
    user = "postgres" if is_root else os.environ.get("USER") or "postgres"
    port = free_port()
    locks: list[int] = []  # each folder's LOCK, held until both are removed
    try:  # from here on, a failure removes both folders
        if memory:
            data_root = Path(tempfile.mkdtemp(prefix=PREFIX, dir=memory))
            datadir = data_root / "data"
        for folder in {root, data_root}:  # a folder without LOCK yet: no cleanup's
            locks.append(_hold_lock(folder, datadir))
        datadir.mkdir()
        if is_root:
            for path in {root, data_root, datadir}:
                shutil.chown(path, "postgres")
        _run_as_owner(
            [
                str(bin_ / "initdb"),
                "-D",
                str(datadir),
                "-A",
                "trust",
                "-U",
                user,
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
                *(["--waldir", str(root / "wal")] if memory else []),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        _ask_passwords(datadir)
        options = " ".join(
            [
                f"-p {port}",
                f"-k {datadir}",
                "-c listen_addresses=127.0.0.1",
                "-c max_connections=120",
                # Shared memory for parallel queries in files of the data folder (in
                # memory here), not in /dev/shm/PostgreSQL.*: a killed run's server left
                # its segments there for good (86 of them, 45 MB, after a day of runs);
                # in the data folder they go with it (_remove_dead_leftovers).
                *(["-c dynamic_shared_memory_type=mmap"] if memory else []),
                *(f"-c {s}" for s in settings),
            ]
        )
        _run_as_owner(
            [
                str(bin_ / "pg_ctl"),
                "-D",
                str(datadir),
                "-l",
                str(datadir / "server.log"),
                "-o",
                options,
                "-w",
                "start",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        yield Cluster(host="127.0.0.1", port=port, user=user, datadir=datadir)
    finally:
        _run_as_owner(
            [str(bin_ / "pg_ctl"), "-D", str(datadir), "-m", "fast", "stop"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        # Each folder's contents first, its LOCK last: a run killed meanwhile leaves a
        # folder that the next cleanup still knows (one without LOCK is never removed).
        for folder in {root, data_root}:
            for child in folder.iterdir() if folder.is_dir() else ():
                if child.name != LOCK:
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child, ignore_errors=True)
                    else:
                        child.unlink(missing_ok=True)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(data_root, ignore_errors=True)
        for fd in locks:
            os.close(fd)


# The line start() appends to postgresql.conf; its port is read back on later starts.
PORT_MARK = "# undolog local database (tools/pgcluster.py start)"
DEFAULT_DIR = ".pgdata"
# The clone: where `make db` keeps its cluster by default.
CLONE = Path(__file__).resolve().parents[1]


def crash_and_restart(cluster: Cluster, options: str) -> None:
    """``pg_ctl stop -m immediate`` (no shutdown checkpoint: crash recovery on start), then
    start again with the server ``options`` it ran with."""
    ctl = str(bindir() / "pg_ctl")
    data = str(cluster.datadir)
    _run_as_owner(
        [ctl, "-D", data, "-m", "immediate", "stop"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    _run_as_owner(
        [ctl, "-D", data, "-l", f"{data}/server.log", "-o", options, "-w", "start"],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def _cluster_user() -> str:
    return "postgres" if os.geteuid() == 0 else os.environ.get("USER") or "postgres"


def _recorded_port(datadir: Path) -> int | None:
    lines = (datadir / "postgresql.conf").read_text(encoding="utf-8").splitlines()
    for mark, setting in itertools.pairwise(lines):
        if mark == PORT_MARK and setting.startswith("port = "):
            return int(setting.removeprefix("port = "))
    return None


def _is_running(datadir: Path) -> bool:
    status = _run_as_owner(
        [str(bindir() / "pg_ctl"), "-D", str(datadir), "status"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return status.returncode == 0


def _create(datadir: Path, user: str) -> int:
    """initdb into ``datadir`` and pin where the server listens (a port free now)."""
    datadir.mkdir(parents=True, exist_ok=True)
    datadir.chmod(0o700)
    if os.geteuid() == 0:
        shutil.chown(datadir, "postgres")
        reachable = _run_as_owner(["test", "-w", str(datadir)], check=False)
        if reachable.returncode != 0:
            raise RuntimeError(
                f"the postgres system user cannot reach {datadir}: a folder above it is "
                "closed to others (chmod o+x it), or keep the data where postgres can reach "
                "it (make db DB_DIR=/some/where, or --dir)"
            )
    initdb = [str(bindir() / "initdb"), "-D", str(datadir), "-A", "trust", "-U", user]
    _run_as_owner(
        [*initdb, "-E", "UTF8", "--locale=C"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    _ask_passwords(datadir)
    port = free_port()
    with (datadir / "postgresql.conf").open("a", encoding="utf-8") as conf:
        conf.write(
            f"\n{PORT_MARK}\nport = {port}\nlisten_addresses = '127.0.0.1'\n"
            f"unix_socket_directories = '{datadir}'\nmax_connections = 120\n"
        )
    return port


def start_local(directory: Path) -> Cluster:
    """Start the persistent cluster in ``directory``, creating it on the first call.
    Idempotent: a cluster that already runs is left as it is."""
    datadir = directory.resolve()
    user = _cluster_user()
    if not (datadir / "PG_VERSION").exists():
        if datadir.exists() and any(datadir.iterdir()):
            raise RuntimeError(f"{datadir} is not empty and holds no PostgreSQL cluster")
        port = _create(datadir, user)
    else:
        recorded = _recorded_port(datadir)
        if recorded is None:
            raise RuntimeError(f"{datadir} was not created by pgcluster.py start")
        port = recorded
        if _ask_passwords(datadir):
            print(
                f"pgcluster: {datadir}/pg_hba.conf now asks the members of {PASSWORD_LOGINS} "
                "for their password (the dashboard lets in only a login asked for it)",
                file=sys.stderr,
            )
            if _is_running(datadir):
                _run_as_owner(
                    [str(bindir() / "pg_ctl"), "-D", str(datadir), "reload"],
                    stdout=subprocess.DEVNULL,
                    check=True,
                )
    if not _is_running(datadir):
        started = _run_as_owner(
            [
                str(bindir() / "pg_ctl"),
                "-D",
                str(datadir),
                "-l",
                str(datadir / "server.log"),
                "-w",
                "start",
            ],
            stdout=subprocess.DEVNULL,
            check=False,
        )
        if started.returncode != 0:
            raise RuntimeError(
                f"PostgreSQL did not start (is port {port} taken?); see {datadir}/server.log"
            )
    return Cluster(host="127.0.0.1", port=port, user=user, datadir=datadir)


def stop_local(directory: Path) -> bool:
    """Stop the persistent cluster; answers False when it was not running."""
    datadir = directory.resolve()
    if not (datadir / "PG_VERSION").exists() or not _is_running(datadir):
        return False
    _run_as_owner(
        [str(bindir() / "pg_ctl"), "-D", str(datadir), "-m", "fast", "stop"],
        stdout=subprocess.DEVNULL,
        check=True,
    )
    return True


def command_for(action: str, datadir: Path) -> str:
    """The command that starts or stops the cluster in ``datadir`` again, as the reader
    reached it: ``make db``/``make db-stop`` (with ``DB_DIR`` when it is not the clone's
    .pgdata) under make, else this tool by its path."""
    if os.environ.get("MAKELEVEL"):
        target = "db" if action == "start" else "db-stop"
        if datadir == CLONE / DEFAULT_DIR:
            return f"make {target}"
        return f"make {target} DB_DIR={shlex.quote(str(datadir))}"
    tool = shlex.quote(str(Path(__file__).resolve()))
    return f"python3 {tool} {action} --dir {shlex.quote(str(datadir))}"


def run_command(argv: list[str], env: dict[str, str]) -> int:
    """``argv`` to its end. Ctrl-C reaches it too (the terminal signals the whole process
    group): wait for it to shut down rather than end with a traceback, then the caller
    stops the cluster. A second Ctrl-C, or 30 s, and it is killed."""
    proc = subprocess.Popen(argv, env=env)
    interrupted = False
    while True:
        try:
            code = proc.wait(timeout=30 if interrupted else None)
            return code if code >= 0 else 128 - code
        except KeyboardInterrupt:
            if interrupted:
                proc.kill()
            interrupted = True
        except subprocess.TimeoutExpired:
            proc.kill()


def export_line(cluster: Cluster) -> str:
    """One shell line that points UndoLog, psql and libpq at the cluster."""
    env = cluster.env()
    return "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))


def main(argv: list[str]) -> int:
    if argv[:1] == ["run"]:
        if len(argv) < 3 or argv[1] != "--":
            print("usage: pgcluster.py run -- CMD [ARGS...]", file=sys.stderr)
            return 2
        with throwaway_cluster() as cluster:
            # THROWAWAY_DSN names the database this run made and will delete: what
            # `undolog dashboard --demo` needs to know before it creates password logins
            env = {**os.environ, **cluster.env(), "UNDOLOG_THROWAWAY_DSN": cluster.dsn}
            print(
                f"pgcluster: throwaway PostgreSQL on {cluster.host}:{cluster.port}",
                file=sys.stderr,
            )
            return run_command(argv[2:], env)
    if argv == ["clean"]:
        _remove_dead_leftovers()
        return 0
    parser = argparse.ArgumentParser(
        prog="pgcluster.py",
        description="A local PostgreSQL that stays (or: run -- CMD; or: clean).",
    )
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument(
        "--dir", type=Path, default=Path(DEFAULT_DIR), help="data folder (default: .pgdata)"
    )
    args = parser.parse_args(argv)
    try:
        if args.action == "start":
            cluster = start_local(args.dir)
            # stdout carries only the export line, so that eval "$(...)" works
            print(export_line(cluster))
            print(
                f"pgcluster: PostgreSQL on {cluster.host}:{cluster.port}, data in "
                f"{cluster.datadir}; stop it with: {command_for('stop', cluster.datadir)}",
                file=sys.stderr,
            )
        elif stop_local(args.dir):
            datadir = args.dir.resolve()
            print(
                f"pgcluster: stopped the PostgreSQL in {datadir}; UNDOLOG_DSN in your shell "
                f"still points at it ({command_for('start', datadir)} starts it again)",
                file=sys.stderr,
            )
        else:
            print(f"pgcluster: no PostgreSQL running in {args.dir.resolve()}", file=sys.stderr)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"pgcluster: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
