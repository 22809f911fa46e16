"""A stdio upstream's process as an MCP client transport that remembers how it ended.

The SDK's own stdio transport keeps its process to itself: when an upstream exits before
it answers ``initialize`` (a missing API key, a bad argument), all the proxy could say
was the client's "unhandled errors in a TaskGroup". This one runs the command itself, so
that the proxy can report the command, its exit code and the last lines of its stderr.
Its stderr is still passed on to the proxy's own, line by line, as the SDK does.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import shlex
import shutil
import subprocess
import sys
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Mapping

import anyio
import anyio.to_thread
import mcp_types as types
from anyio.abc import ObjectSendStream, Process
from mcp.client._transport import TransportStreams
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

STDERR_TAIL_LINES = 20
EXIT_GRACE_SECONDS = 2.0  # after stdin closes, as the MCP spec's shutdown asks
KILL_GRACE_SECONDS = 2.0  # after SIGTERM to the process group, before SIGKILL
# One JSON-RPC message is one line, from an upstream or on the proxy's own stdin, at most
# this long (room for calls well over the journal's 1 MiB limit, which it refuses clearly):
# a longer one is dropped (from an upstream, the call it answers is then outcome unknown;
# on stdin, it is answered with a JSON-RPC parse error)
LINE_LIMIT = 64 * 1024 * 1024


class UpstreamProcess:
    """One run of a stdio upstream: ``open()`` is the transport (use it once)."""

    def __init__(self, command: list[str], env: Mapping[str, str] | None, cwd: str | None) -> None:
        self.command = command
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.returncode: int | None = None
        self.tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)

    def why(self, exc: BaseException) -> str:
        """Why the upstream did not answer: its command, how it ended, its stderr's end."""
        command = shlex.join(self.command)
        if isinstance(exc, FileNotFoundError | PermissionError | NotADirectoryError):
            path = (self.env or os.environ).get("PATH", "")
            reason = exc.strerror
            if os.sep not in self.command[0] and shutil.which(self.command[0], path=path) is None:
                # exec reports EACCES when a PATH folder is closed to this login (root's
                # ~/.cargo/bin, say) even though the command is simply not installed
                reason = os.strerror(errno.ENOENT)
            return (
                f"cannot run `{command}`: {reason} ({self.command[0]!r}; "
                f"PATH={path[:300]!r}): give the command's absolute path, or install it"
            )
        if self.returncode is not None:
            how = (
                f"was killed by signal {-self.returncode}"
                if self.returncode < 0
                else f"exited with code {self.returncode}"
            )
            said = f"`{command}` {how} before it answered"
        else:
            said = f"`{command}` did not answer ({describe(exc)})"
        lines = [line for line in self.tail if line.strip()]
        if not lines:
            return f"{said}; it wrote nothing to stderr"
        return f"{said}; the end of its stderr:\n    " + "\n    ".join(lines)

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[TransportStreams]:
        stderr_done = anyio.Event()
        process = await anyio.open_process(
            self.command,
            env=self.env,
            cwd=self.cwd,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: stopped whole
        )
        read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

        async def from_stdout() -> None:
            assert process.stdout is not None
            try:
                async with read_writer:
                    async for line in bounded_lines(process.stdout, LINE_LIMIT):
                        if line is None:
                            await read_writer.send(
                                ValueError(f"upstream message over {LINE_LIMIT} bytes: dropped")
                            )
                        elif line.strip():
                            await read_writer.send(_parse(line))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                pass  # the session went away, or shutdown closed the pipe
            # keep reading (and dropping) so that an upstream blocked writing can exit
            with contextlib.suppress(Exception):
                async for _ in process.stdout:
                    pass

        async def to_stdin() -> None:
            assert process.stdin is not None
            try:
                async with write_reader:
                    async for message in write_reader:
                        data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                        await process.stdin.send((data + "\n").encode())
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                # the upstream stopped reading: end the session's reads too, so that a
                # request waiting for an answer learns the connection is gone
                await read_writer.aclose()

        async def from_stderr() -> None:
            assert process.stderr is not None
            decoder = codecs.getincrementaldecoder("utf-8")("replace")
            partial = ""
            try:
                async for chunk in process.stderr:
                    text = decoder.decode(chunk)
                    # in a thread: a reader of the proxy's stderr that falls behind then
                    # holds up this upstream (as with the SDK), not the proxy's loop
                    await anyio.to_thread.run_sync(_pass_on, text, abandon_on_cancel=True)
                    *lines, partial = (partial + text).split("\n")
                    self.tail.extend(lines)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                pass
            finally:
                if partial:
                    self.tail.append(partial)
                stderr_done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(from_stdout)
            tg.start_soon(to_stdin)
            tg.start_soon(from_stderr)
            try:
                yield read_stream, write_stream
            finally:
                with anyio.CancelScope(shield=True):
                    await self._stop(process, write_stream, stderr_done)
                    await read_stream.aclose()
                tg.cancel_scope.cancel()

    async def _stop(
        self,
        process: Process,
        write_stream: ObjectSendStream[SessionMessage],
        stderr_done: anyio.Event,
    ) -> None:
        """Close stdin, give the upstream a moment to exit, then stop its process group."""
        await write_stream.aclose()
        assert process.stdin is not None
        with contextlib.suppress(Exception):
            await process.stdin.aclose()
        if not await _exited(process, EXIT_GRACE_SECONDS):
            await terminate_posix_process_tree(process, KILL_GRACE_SECONDS)
            await _exited(process, KILL_GRACE_SECONDS)
        self.returncode = process.returncode
        with anyio.move_on_after(1.0):  # the last of its stderr, unless a child holds it
            await stderr_done.wait()
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                with contextlib.suppress(Exception):
                    await pipe.aclose()


async def _exited(process: Process, timeout: float) -> bool:
    # returncode, polled: process.wait() would also wait for the pipes to close, which a
    # child of the upstream may hold open
    with anyio.move_on_after(timeout):
        while process.returncode is None:
            await anyio.sleep(0.01)
    return process.returncode is not None


async def bounded_lines(chunks: AsyncIterable[bytes], limit: int) -> AsyncIterator[bytes | None]:
    """The lines of a byte stream (without their newlines), each at most ``limit`` bytes;
    None in place of a longer one, whose bytes are dropped as they come, up to its
    newline: the line after it is read whole. A last line without its newline is a line.

    One buffer, scanned only where a chunk added to it: a long line (a big message) costs
    its length, not its length times its chunks; memory stays under ``limit`` plus a
    chunk. (asyncio's StreamReader.readline, over its limit, has already dropped the
    line when the newline was in its buffer: reading on "to drop the rest" then drops
    the next message too.)"""
    buffer = bytearray()
    dropping = False  # the rest of a line over the limit, up to its newline
    async for chunk in chunks:
        scan, start = len(buffer), 0
        buffer += chunk
        while (end := buffer.find(b"\n", scan)) != -1:
            line, start = bytes(buffer[start:end]), end + 1
            scan = start
            if dropping:
                dropping = False
            else:
                yield line if len(line) <= limit else None
        del buffer[:start]
        if len(buffer) > limit:
            buffer.clear()
            if not dropping:
                dropping = True
                yield None
    if buffer and not dropping:
        yield bytes(buffer)


def _pass_on(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:  # handed to the session, which reports it
        return exc


def innermost(exc: BaseException) -> BaseException:
    """The first real error inside exception groups (what "unhandled errors in a
    TaskGroup" was about)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException) -> str:
    exc = innermost(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
