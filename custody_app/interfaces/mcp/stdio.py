"""The stdio transport with the guard in front: each line is checked before the SDK parses it,
and a refused one is answered on the wire by a JSON-RPC error; every line written out has the
characters `json_text` escapes (U+2028, U+2029, DEL, C1, bidi) escaped, which the SDK leaves raw."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, BinaryIO, cast

import anyio
import anyio.to_thread
from mcp.server.stdio import stdio_server

from custody_app.domain.escaping import escape_json
from custody_app.interfaces.mcp.guard import MAX_MESSAGE_BYTES, refusal

# How long the end of input waits for the replies to requests still being worked on.
DRAIN_SECONDS = 30.0


class _Wire:
    """stdout of the protocol: one lock, so a refusal and an SDK reply never interleave; each
    message is JSON text, re-escaped as `json_text` would write it (the same parsed value).
    It counts the requests handed to the SDK and not yet answered, so that the end of input
    waits for their replies instead of cutting them off."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.lock = anyio.Lock()
        self.pending: Counter[str] = Counter()

    async def write(self, text: str) -> None:
        self.answered(text)
        async with self.lock:
            await anyio.to_thread.run_sync(self.raw.write, escape_json(text).encode("utf-8"))

    def sent(self, line: bytes) -> None:
        """A message handed to the SDK: a request waits for its reply; a cancellation frees
        the request it cancels (the SDK answers it no more)."""
        message = json.loads(line)
        if "id" in message and "method" in message:
            self.pending[json.dumps(message["id"])] += 1
        elif message.get("method") == "notifications/cancelled":
            self._done(json.dumps((message.get("params") or {}).get("requestId")))

    def answered(self, text: str) -> None:
        try:
            message = json.loads(text)
        except ValueError:
            return
        if isinstance(message, dict) and ("result" in message or "error" in message):
            self._done(json.dumps(message.get("id")))

    def _done(self, key: str) -> None:
        if self.pending[key] > 0:
            self.pending[key] -= 1
        if self.pending[key] <= 0:
            del self.pending[key]

    async def drain(self) -> None:
        """Wait (at most DRAIN_SECONDS) until every request handed to the SDK is answered."""
        with anyio.move_on_after(DRAIN_SECONDS):
            while +self.pending:
                await anyio.sleep(0.01)

    async def flush(self) -> None:
        async with self.lock:
            await anyio.to_thread.run_sync(self.raw.flush)


class _GuardedLines:
    """stdin of the protocol, line by line; never holds more than MAX_MESSAGE_BYTES of a line."""

    def __init__(self, raw: BinaryIO, wire: _Wire) -> None:
        self.raw = raw
        self.wire = wire

    async def _readline(self, limit: int) -> bytes:
        return await anyio.to_thread.run_sync(self.raw.readline, limit, abandon_on_cancel=True)

    async def __aiter__(self) -> AsyncIterator[str]:
        while line := await self._readline(MAX_MESSAGE_BYTES + 1):
            truncated = len(line) > MAX_MESSAGE_BYTES and not line.endswith(b"\n")
            rest = line
            while truncated and rest and not rest.endswith(b"\n"):
                rest = await self._readline(MAX_MESSAGE_BYTES)  # skip the rest of the line
            refused = refusal(line, truncated=truncated)
            if refused is not None:
                if refused.answers_request:  # a notification is never answered, even refused
                    await self.wire.write(refused.text() + "\n")
                    await self.wire.flush()
                continue
            self.wire.sent(line)
            yield line.decode("utf-8", errors="replace")  # UTF-8: the guard checked it
        # End of input: the SDK stops at once when its input ends, dropping the requests it
        # is still working on; their replies come first.
        await self.wire.drain()


@contextmanager
def _claimed_stdio() -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """The protocol's own copies of fds 0 and 1, with fd 0 on /dev/null and fd 1 on stderr
    meanwhile, so stray reads and prints in handlers never touch the wire (as the SDK does)."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    try:
        # Buffered: an unbuffered readline() reads one byte per system call.
        yield os.fdopen(wire_in, "rb"), os.fdopen(wire_out, "wb")
    finally:
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        os.close(saved_in)
        os.close(saved_out)


@asynccontextmanager
async def guarded_stdio() -> AsyncIterator[tuple[Any, Any]]:
    """Like the SDK's stdio_server, with every line guarded before it is parsed."""
    with _claimed_stdio() as (raw_in, raw_out):
        wire = _Wire(raw_out)
        async with stdio_server(stdin=cast(Any, _GuardedLines(raw_in, wire)),
                                stdout=cast(Any, wire)) as streams:
            yield streams
