"""What the fuzzes of bench/ share (fuzz_sql_api.py, fuzz_mcp_proxy.py,
fuzz_dashboard.py): their command line, their run over seeds, each seed on a database of
its own, and a server of the project's started as a child process for a face's fuzz."""

from __future__ import annotations

import argparse
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Protocol, TypeVar

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "tools")]


def databases(dsn: str | None, prefix: str = "fuzz") -> Iterator[Callable[[], str]]:
    """Databases for one seed each, cloned from a template the engine is installed in, on
    --dsn's server or a throwaway cluster."""
    from pgcluster import throwaway_cluster
    from undolog.migrations import migrate

    def run(base: str) -> Iterator[Callable[[], str]]:
        with psycopg.connect(base, autocommit=True) as admin:
            tmpl = f"{prefix}_template_{secrets.token_hex(3)}"
            admin.execute(f'CREATE DATABASE "{tmpl}"')
            with psycopg.connect(
                psycopg.conninfo.make_conninfo(base, dbname=tmpl), autocommit=True
            ) as c:
                migrate(c)
            made: list[str] = []

            def make() -> str:
                name = f"{prefix}_{secrets.token_hex(4)}"
                admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{tmpl}"')
                made.append(name)
                return psycopg.conninfo.make_conninfo(base, dbname=name)

            try:
                yield make
            finally:
                for name in [*made, tmpl]:
                    admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    if dsn:
        yield from run(dsn)
        return
    with throwaway_cluster(data_in_memory=True) as cluster:
        yield from run(cluster.dsn)


def fuzz_arguments(description: str, steps: int, argv: list[str] | None) -> argparse.Namespace:
    """A fuzz's command line: which seeds, how many steps of each, for how long, on which
    server, traced or not."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seed", type=int, help="the first seed (default: random)")
    parser.add_argument("--seeds", type=int, default=1, help="seeds to run, one after another")
    parser.add_argument("--steps", type=int, default=steps, help="steps of each seed")
    parser.add_argument("--seconds", type=float, help="run seeds until this many seconds")
    parser.add_argument("--dsn", help="a superuser's DSN of a server (default: a throwaway one)")
    parser.add_argument("--trace", action="store_true", help="print every step")
    return parser.parse_args(argv)


class Seeded(Protocol):
    """What a seed's run answers (each fuzz's Fuzz)."""

    step_no: int
    violations: list[str]


F = TypeVar("F", bound=Seeded)


class Seeds:
    """A fuzz's run over the seeds its command line asks for (fuzz_arguments), one after
    another, each on a database of its own (databases()): --seeds of them from --seed
    (random when not given), or, with --seconds, as many as start before the deadline. Each
    seed's line is printed as it ends; done() prints the run's violations and its total."""

    def __init__(self, args: argparse.Namespace, prefix: str) -> None:
        self.args = args
        self.prefix = prefix
        self.start = time.monotonic()
        self.steps = 0
        self.found: list[str] = []

    def run(self, one: Callable[[str, int, int, bool, float | None], F]) -> Iterator[F]:
        """Each seed's run of ``one`` (a fuzz's fuzz()), as it ends."""
        args = self.args
        first = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
        deadline = self.start + args.seconds if args.seconds else None
        for make in databases(args.dsn, self.prefix):
            seed = first
            while True:
                f = one(make(), seed, args.steps, args.trace, deadline)
                self.steps += f.step_no
                self.found += [f"seed {seed} {v}" for v in f.violations]
                print(f"seed {seed}: {f.step_no} steps, {len(f.violations)} violations", flush=True)
                for v in f.violations:
                    print(f"  ! {v}", flush=True)
                yield f
                seed += 1
                if deadline is not None:
                    if time.monotonic() > deadline:
                        break
                elif seed - first >= args.seeds:
                    break

    def done(self) -> int:
        """Prints the run's violations and its total; answers the exit status (1: any)."""
        for v in self.found:
            print("VIOLATION", v)
        took = time.monotonic() - self.start
        print(f"total {self.steps} steps {len(self.found)} violations in {took:.0f} s")
        return 1 if self.found else 0


class ChildServer:
    """``undolog ARGS --port``/``--http`` on a free port as a child process, its stderr in
    ``log``, started once it listens (a face's fuzz: the dashboard, the MCP proxy). ``env``
    is added to this process's environment (None removes a name)."""

    def __init__(
        self,
        what: str,
        args: list[str],
        listen: Callable[[int], list[str]],
        log: Path,
        env: Mapping[str, str | None] = {},
    ) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.env = {**os.environ, "PYTHONPATH": str(ROOT / "python")}
        for name, value in env.items():
            if value is None:
                self.env.pop(name, None)
            else:
                self.env[name] = value
        self.logfile = log
        self.log: IO[str] = log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "undolog.cli", *args, *listen(self.port)],
            env=self.env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the {what} did not start: {log.read_text()[-3000:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"the {what} did not start listening")

    def stop(self) -> int | None:
        """SIGINT, as a person's Ctrl-C; killed if not ended within 30 s. Its exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        return self.process.returncode
