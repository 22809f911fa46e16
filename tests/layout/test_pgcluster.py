"""tools/pgcluster.py's throwaway cluster: where its data files go when asked to keep them
in memory (and that it says so when they cannot), and the folders a killed run left
behind, which the next cluster removes when their server is gone. Real initdb and
postgres, in folders of the test's own (never the machine's /tmp or /dev/shm)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import pgcluster


@pytest.fixture
def folders(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """(the temporary folder, the memory folder) the cluster uses: two new folders the
    postgres system user can enter (a root test run's initdb runs as postgres)."""
    made = [Path(tempfile.mkdtemp(prefix="undolog-pgtest-")) for _ in range(2)]
    for path in made:
        path.chmod(0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(made[0]))
    monkeypatch.setattr(pgcluster, "MEMORY_DIR", made[1])
    monkeypatch.setattr(pgcluster, "_fallback_said", False, raising=False)
    yield made[0], made[1]
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _leftover(parent: Path, name: str, pid: int, port: int) -> Path:
    """A folder as a cluster leaves it: data/postmaster.pid naming ``pid`` and ``port``."""
    data = parent / f"undolog-pg-{name}" / "data"
    data.mkdir(parents=True)
    lines = [str(pid), str(data), "1700000000", str(port), str(data), "127.0.0.1", "0", "ready"]
    (data / "postmaster.pid").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return data.parent


def test_the_data_go_to_memory_with_room_and_a_dead_clusters_folders_are_removed(
    folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With room in MEMORY_DIR the data files go there (the WAL stays in the temporary
    folder). A test run killed with its server gone left the folders of its cluster:
    the next cluster removes them, both the data in memory and the WAL on disk; never a
    folder whose server lives (its pid, or, should the pid be another namespace's, its
    port answering), nor one with no postmaster.pid (being set up, or stopped)."""
    tmp, memory = folders
    monkeypatch.setattr(pgcluster, "MEMORY_ROOM", 1)
    gone = _dead_pid()
    dead = _leftover(tmp, "dead", gone, pgcluster.free_port())
    dead_memory = _leftover(memory, "deadmem", gone, pgcluster.free_port())
    wal_root = tmp / "undolog-pg-deadwal"
    (wal_root / "wal").mkdir(parents=True)
    (dead_memory / "data" / "pg_wal").symlink_to(wal_root / "wal")
    alive = _leftover(tmp, "alive", os.getpid(), pgcluster.free_port())
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        answering = _leftover(memory, "answering", gone, listening.getsockname()[1])
        starting = tmp / "undolog-pg-starting" / "data"
        starting.mkdir(parents=True)
        other = tmp / "someone-else" / "data"
        other.mkdir(parents=True)
        (other / "postmaster.pid").write_text(f"{gone}\n", encoding="utf-8")
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no fallback to say
            with (
                pgcluster.throwaway_cluster(data_in_memory=True) as cluster,
                psycopg.connect(cluster.dsn) as conn,
            ):
                assert conn.execute("SELECT 1").fetchone() == (1,)
                assert cluster.datadir.parent.parent == memory
                assert (cluster.datadir / "pg_wal").resolve().parent.parent == tmp
        for removed in (dead, dead_memory, wal_root):
            assert not removed.exists(), removed
        for kept in (alive, answering, starting.parent, other.parent):
            assert kept.exists(), kept
    assert sorted(p.name for p in [*tmp.iterdir(), *memory.iterdir()]) == [
        "someone-else",
        "undolog-pg-alive",
        "undolog-pg-answering",
        "undolog-pg-starting",
    ]


def test_data_asked_in_memory_that_go_to_disk_say_so_once(
    folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """MEMORY_DIR short of room, or not there: the data files go to disk, as before, and
    the run says so once (a warning: on stderr, and in pytest's summary), not silently."""
    tmp, memory = folders
    monkeypatch.setattr(pgcluster, "MEMORY_ROOM", 2**62)
    with (
        pytest.warns(pgcluster.MemoryFallback, match="on disk, not in memory") as said,
        pgcluster.throwaway_cluster(data_in_memory=True) as cluster,
    ):
        assert cluster.datadir.parent.parent == tmp
    assert len(said) == 1 and "free, under" in str(said[0].message)
    assert list(memory.iterdir()) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pgcluster._memory_dir() is None  # said once
    monkeypatch.setattr(pgcluster, "_fallback_said", False)
    monkeypatch.setattr(pgcluster, "MEMORY_DIR", memory / "missing")
    with pytest.warns(pgcluster.MemoryFallback, match="cannot be used"):
        assert pgcluster._memory_dir() is None
