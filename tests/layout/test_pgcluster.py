"""tools/pgcluster.py's throwaway cluster: where its data files go when asked to keep them
in memory (and that it says so when they cannot), and the folders a killed run left
behind, which the next cluster removes when nobody uses them (their lock free, their
server gone), and nothing else. Real initdb and postgres, in folders of the test's own
(never the machine's /tmp or /dev/shm)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
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


def _leftover(parent: Path, name: str, pid: int | None) -> Path:
    """A folder as a killed run leaves it: its LOCK (nobody holds it) naming its data
    folder, and data/postmaster.pid naming ``pid`` (none when None)."""
    data = parent / f"undolog-pg-{name}" / "data"
    data.mkdir(parents=True)
    (data.parent / pgcluster.LOCK).write_text(str(data), encoding="utf-8")
    if pid is not None:
        lines = [str(pid), str(data), "1700000000", "5432", str(data), "127.0.0.1", "0", "ready"]
        (data / "postmaster.pid").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return data.parent


@contextlib.contextmanager
def _held(folder: Path) -> Iterator[None]:
    """``folder``'s LOCK held, as by the live process that made its cluster."""
    with (folder / pgcluster.LOCK).open("rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def test_the_data_go_to_memory_with_room_and_a_dead_clusters_folders_are_removed(
    folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With room in MEMORY_DIR the data files go there (the WAL stays in the temporary
    folder). A test run killed left the folders of its cluster: the next cluster removes
    them, in both folders, when nobody holds their LOCK and no live process is their
    server; never one whose LOCK is held (its cluster lives), nor an orphaned server's
    (its pid lives: left, and said how to stop it), nor one without LOCK, nor a
    folder not named undolog-pg-*."""
    tmp, memory = folders
    monkeypatch.setattr(pgcluster, "MEMORY_ROOM", 1)
    gone = _dead_pid()
    dead = _leftover(tmp, "dead", gone)
    dead_memory = _leftover(memory, "deadmem", None)
    alive = _leftover(tmp, "alive", gone)
    alive_memory = _leftover(memory, "alivemem", None)
    orphan = _leftover(memory, "orphan", os.getpid())
    no_lock = tmp / "undolog-pg-nolock" / "data"
    no_lock.mkdir(parents=True)
    other = _leftover(tmp, "x", gone).rename(tmp / "someone-else")
    with _held(alive), _held(alive_memory), warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to say
        with (
            pgcluster.throwaway_cluster(data_in_memory=True) as cluster,
            psycopg.connect(cluster.dsn) as conn,
        ):
            assert conn.execute("SELECT 1").fetchone() == (1,)
            assert cluster.datadir.parent.parent == memory
            # its parallel queries' shared memory in the data folder, removed with it
            assert conn.execute("SHOW dynamic_shared_memory_type").fetchone() == ("mmap",)
            assert (cluster.datadir / "pg_wal").resolve().parent.parent == tmp
    for removed in (dead, dead_memory):
        assert not removed.exists(), removed
    assert sorted(p.name for p in [*tmp.iterdir(), *memory.iterdir()]) == [
        "someone-else",
        "undolog-pg-alive",
        "undolog-pg-alivemem",
        "undolog-pg-nolock",
        "undolog-pg-orphan",
    ]
    assert orphan.exists() and other.exists() and no_lock.exists()
    said = capsys.readouterr().err
    assert f"left {orphan}: a killed run's server still runs there (pid {os.getpid()})" in said
    assert f"pg_ctl -D {orphan / 'data'} stop" in said


def test_a_live_clusters_folders_survive_a_planted_leftover(
    folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The review's attack: a planted folder (dead by every sign) whose data/pg_wal points
    at a live cluster's folder (data in memory, WAL on disk), another planted folder that
    is a symlink to one, and one whose LOCK is a symlink to the live one's: the cleanup
    follows none of them and removes nothing of the live cluster. Its LOCKs are held
    by this process, not by its server (which does not inherit them)."""
    tmp, memory = folders
    monkeypatch.setattr(pgcluster, "MEMORY_ROOM", 1)
    gone = _dead_pid()
    with (
        pgcluster.throwaway_cluster(data_in_memory=True) as cluster,
        psycopg.connect(cluster.dsn, autocommit=True) as conn,
    ):
        data_root = cluster.datadir.parent
        wal_root = (cluster.datadir / "pg_wal").resolve().parent
        planted = _leftover(tmp, "evil", gone)
        (planted / "data" / "pg_wal").symlink_to(wal_root / "wal")
        (planted / "data" / "memory").symlink_to(data_root)
        (tmp / "undolog-pg-link").symlink_to(data_root)
        (memory / "undolog-pg-link").symlink_to(wal_root)
        relock = _leftover(memory, "relock", gone)
        (relock / pgcluster.LOCK).unlink()
        (relock / pgcluster.LOCK).symlink_to(data_root / pgcluster.LOCK)
        pgcluster._remove_dead_leftovers()
        assert sorted(wal_root.iterdir()) == [wal_root / pgcluster.LOCK, wal_root / "wal"]
        assert (cluster.datadir / "PG_VERSION").exists()
        assert not planted.exists()  # ours, and dead: removed, not what it points at
        assert relock.exists()
        assert (tmp / "undolog-pg-link").is_symlink()
        assert (memory / "undolog-pg-link").is_symlink()
        conn.execute("CREATE TABLE survived AS SELECT 1 AS one")
        assert conn.execute("SELECT one FROM survived").fetchone() == (1,)
        server = int((cluster.datadir / "postmaster.pid").read_text().split()[0])
        fds = Path(f"/proc/{server}/fd")
        if fds.exists():
            held = {os.readlink(fd) for fd in fds.iterdir()}
            assert not {str(data_root / pgcluster.LOCK), str(wal_root / pgcluster.LOCK)} & held
        for root in (data_root, wal_root):
            with (root / pgcluster.LOCK).open("rb") as lock, pytest.raises(BlockingIOError):
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert not data_root.exists() and not wal_root.exists()


def test_clean_removes_the_dead_leftovers_alone(folders: tuple[Path, Path]) -> None:
    """``pgcluster.py clean`` removes what the next cluster would, starting none."""
    tmp, memory = folders
    dead = [_leftover(tmp, "dead", _dead_pid()), _leftover(memory, "deadmem", None)]
    alive = _leftover(memory, "alive", None)
    with _held(alive):
        assert pgcluster.main(["clean"]) == 0
    assert not any(folder.exists() for folder in dead)
    assert alive.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another uid needs root")
def test_a_leftover_of_another_user_is_left(folders: tuple[Path, Path]) -> None:
    """A dead leftover by every other sign, but owned by nobody (not this user, nor the
    postgres system user to whom a root run gives its folders): left, in both folders;
    and one of ours whose LOCK is another user's is left too."""
    tmp, memory = folders
    gone = _dead_pid()
    nobody = pwd.getpwnam("nobody").pw_uid
    theirs = [_leftover(tmp, "theirs", gone), _leftover(memory, "theirsmem", None)]
    for folder in theirs:
        os.chown(folder, nobody, -1)
    their_lock = _leftover(tmp, "theirlock", gone)
    os.chown(their_lock / pgcluster.LOCK, nobody, -1)
    ours = _leftover(memory, "ours", gone)
    shutil.chown(ours, "postgres")
    pgcluster._remove_dead_leftovers()
    assert all(folder.exists() for folder in [*theirs, their_lock])
    assert not ours.exists()


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
