"""A throwaway PostgreSQL cluster for tests, the pgTAP run, the demo and the benchmarks.

initdb refuses to run as root and CI runs as root, so when we are root the cluster is
created and started as the ``postgres`` system user (``runuser``); as anyone else it runs
as that user. Either way it listens on 127.0.0.1 on a free port, trusts local
connections, and is removed when the context ends.

    python tools/pgcluster.py run -- CMD ARGS...   # runs CMD with PG* and UNDOLOG_DSN set
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


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


def bindir() -> Path:
    """Folder of initdb/pg_ctl: PG_BINDIR, else pg_config's answer, else PATH."""
    if os.environ.get("PG_BINDIR"):
        return Path(os.environ["PG_BINDIR"])
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=True)
        return Path(out.stdout.strip())
    initdb = shutil.which("initdb")
    if initdb is None:
        raise RuntimeError("no PostgreSQL binaries found: install postgresql-15 or set PG_BINDIR")
    return Path(initdb).parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_cluster_owner(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


@contextlib.contextmanager
def throwaway_cluster(*settings: str) -> Iterator[Cluster]:
    """Start a private cluster; ``settings`` are extra ``-c name=value`` server options."""
    bin_ = bindir()
    root = Path(tempfile.mkdtemp(prefix="undolog-pg-"))
    datadir = root / "data"
    datadir.mkdir()
    is_root = os.geteuid() == 0
    if is_root:
        shutil.chown(root, "postgres")
        shutil.chown(datadir, "postgres")
    user = "postgres" if is_root else os.environ.get("USER") or "postgres"
    port = free_port()
    try:
        subprocess.run(
            _as_cluster_owner(
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
                ]
            ),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        options = " ".join(
            [
                f"-p {port}",
                f"-k {datadir}",
                "-c listen_addresses=127.0.0.1",
                "-c max_connections=120",
                *(f"-c {s}" for s in settings),
            ]
        )
        subprocess.run(
            _as_cluster_owner(
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
                ]
            ),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        yield Cluster(host="127.0.0.1", port=port, user=user, datadir=datadir)
    finally:
        subprocess.run(
            _as_cluster_owner([str(bin_ / "pg_ctl"), "-D", str(datadir), "-m", "fast", "stop"]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "run" or argv[1] != "--":
        print("usage: pgcluster.py run -- CMD [ARGS...]", file=sys.stderr)
        return 2
    with throwaway_cluster() as cluster:
        env = {**os.environ, **cluster.env()}
        print(f"pgcluster: throwaway PostgreSQL on {cluster.host}:{cluster.port}", file=sys.stderr)
        return subprocess.run(argv[2:], env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
