"""Replication between hosts: a source queue mirrored to sink queues over TCP.

A :class:`ReplicationSource` serves a queue; each :class:`ReplicationSink`
connects, says which index it holds last, and from then on receives every
excerpt and writes it to its own queue at the *same index* (a positioned
write, as Java's ``writeBytes(index, bytes)``), so indices mean the same thing
on every host.  The sink acknowledges what it has written; the source records
``chronicle.lastIndexReplicated`` (highest index sent) and
``chronicle.lastAcknowledgedIndexReplicated`` (highest index acknowledged) in
its ``metadata.cq4t`` as Java does.  While it runs, a sink holds its queue's
``chronicle.append.lock`` so other processes' appenders (ours and Java's)
refuse to write there.  A sink's queue can itself be served by a source: a
chain of hops.

The protocol (version 1), over asyncio streams (TCP, optionally TLS):

``frame``
    ``u32 length | u8 kind | body | u32 crc32(kind + body)``, little-endian;
    ``length`` counts kind, body and checksum.  A frame is acted on only once
    all of it has arrived and its checksum matches, so an excerpt cut off by a
    dropped connection is never written.

handshake
    source: ``HELLO`` (magic, version, flags, 32-byte nonce);
    sink: ``AUTH`` (magic, version, its nonce, HMAC-SHA256 proof of the shared
    secret over both nonces, its name); the source closes the connection
    without a word if the proof is wrong, else sends ``WELCOME`` (its own
    proof, then JSON: roll cycle, epoch, first and last index);
    sink: ``RESUME`` (its last index and the SHA-256 of that excerpt's
    payload); the source checks the excerpt against its own and answers
    ``START`` (the next index it sends) or ``ERROR`` (diverged, gap).

streaming
    source: ``DATA`` (first index, count, count+1 offsets, payloads: a run of
    consecutive indices), ``HEARTBEAT`` (its last index);
    sink: ``ACK`` (highest index written, and msynced with ``sync=True``),
    ``HEARTBEAT``.  Either side drops a connection silent for longer than its
    heartbeat timeout; the sink reconnects with exponential back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import json
import logging
import os
import random
import secrets
import socket
import ssl as ssl_
import struct
import sys
import time
import warnings
import zlib
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from types import TracebackType
from typing import Any

from .._core._errors import (
    AppendLockedError,
    ChronicleError,
    DivergenceError,
    IllegalIndexError,
    IncompatibleQueueError,
    ReplicationAuthError,
    ReplicationError,
    ReplicationGapError,
    ReplicationProtocolError,
    ReplicationTimeoutError,
)
from .._format._rollcycles import RollCycle, make_roll_cycle
from .._format._tablestore import Cell
from .._objects._queue import Appender, Queue, Tailer, cycles_of, open_queue
from .._storage._cycles import Cycles
from .._storage._excerpt import Batch
from .._storage._writelock import APPEND_LOCK, release_lock, take_lock
from .._waiting._pauser import Pauser

__all__ = [
    "DivergenceError",
    "IncompatibleQueueError",
    "ReplicationAuthError",
    "ReplicationError",
    "ReplicationGapError",
    "ReplicationProtocolError",
    "ReplicationSink",
    "ReplicationSource",
    "ReplicationTimeoutError",
    "SinkInfo",
]

log = logging.getLogger("aiochronicle.replication")

PROTOCOL_VERSION = 1
MAGIC = b"ACQR"
DEFAULT_PORT = 7399
LOOPBACK = "127.0.0.1"

LAST_SENT_KEY = "chronicle.lastIndexReplicated"
LAST_ACK_KEY = "chronicle.lastAcknowledgedIndexReplicated"

# frame kinds
HELLO = 0x01
AUTH = 0x02
WELCOME = 0x03
RESUME = 0x04
START = 0x05
DATA = 0x10
ACK = 0x11
HEARTBEAT = 0x12
ERROR = 0x7F

# error codes carried by ERROR frames
E_DIVERGED = 1
E_GAP = 2
E_INCOMPATIBLE = 3
E_PROTOCOL = 4
E_SHUTDOWN = 5

FLAG_SECRET = 1

_HEAD = struct.Struct("<IB")         # length, kind
_CRC = struct.Struct("<I")
_I64 = struct.Struct("<q")
_DATA_HEAD = struct.Struct("<qI")    # first index, count
_HELLO = struct.Struct("<4sHH32s")   # magic, version, flags, nonce
_AUTH = struct.Struct("<4sH32s32s")  # magic, version, nonce, proof (+ name)
_ERROR = struct.Struct("<H")         # code (+ UTF-8 message)
_TYPE_CRC = [zlib.crc32(bytes([k])) for k in range(256)]
HEAD_SIZE = _HEAD.size
#: frames before authentication are small; a longer one ends the connection
MAX_HANDSHAKE_FRAME = 16 << 10
#: the largest frame a sink accepts (an excerpt holds at most 1 GiB - 1)
MAX_FRAME = (1 << 30) + (1 << 20)
_LITTLE = sys.byteorder == "little"


# -- errors ------------------------------------------------------------------------------

class _Shutdown(ReplicationError):
    """The source is shutting down (the sink reconnects)."""


class _Rejected(ReplicationError):
    """The source closed the connection after the sink's AUTH frame."""


_ERRORS: dict[int, type[ReplicationError]] = {
    E_DIVERGED: DivergenceError,
    E_GAP: ReplicationGapError,
    E_INCOMPATIBLE: IncompatibleQueueError,
    E_PROTOCOL: ReplicationProtocolError,
    E_SHUTDOWN: _Shutdown,
}
_FATAL = (DivergenceError, ReplicationGapError, IncompatibleQueueError, ReplicationAuthError,
          AppendLockedError)


# -- frames --------------------------------------------------------------------------------

def frame(kind: int, body: bytes = b"") -> bytes:
    """One whole frame of ``kind`` carrying ``body``."""
    crc = zlib.crc32(body, _TYPE_CRC[kind])
    return _HEAD.pack(len(body) + 5, kind) + body + _CRC.pack(crc)


def data_frame(first: int, payloads: list[bytes]) -> bytes:
    """A DATA frame holding ``payloads`` as the excerpts ``first``, ``first + 1``, ..."""
    n = len(payloads)
    offsets = array("q", accumulate(map(len, payloads), initial=0))
    if not _LITTLE:
        offsets.byteswap()
    data = b"".join(payloads)
    head = _DATA_HEAD.pack(first, n)
    crc = zlib.crc32(data, zlib.crc32(offsets, zlib.crc32(head, _TYPE_CRC[DATA])))
    length = 5 + _DATA_HEAD.size + 8 * (n + 1) + len(data)
    return b"".join((_HEAD.pack(length, DATA), head, offsets, data, _CRC.pack(crc)))


_SINGLE = struct.Struct("<IBqIqq")  # a DATA frame of one excerpt: head, offsets 0 and n
_ONE = struct.Struct("<qIqq")  # the body of such a frame, up to the payload


def single_frame(index: int, payload: bytes) -> bytes:
    """A DATA frame holding one excerpt (the latency path)."""
    n = len(payload)
    head = _SINGLE.pack(_SINGLE.size + n, DATA, index, 1, 0, n)
    crc = zlib.crc32(payload, zlib.crc32(memoryview(head)[4:]))
    return b"".join((head, payload, _CRC.pack(crc)))


def packed_frame(first: int, n: int, offsets: array[int], data: memoryview) -> bytes:
    """A DATA frame of ``n`` excerpts laid out as a :class:`Batch` holds them
    (``offsets[0] == 0``), indices ``first .. first + n - 1``."""
    if not _LITTLE:
        offsets = array("q", offsets)
        offsets.byteswap()
    head = _DATA_HEAD.pack(first, n)
    crc = zlib.crc32(data, zlib.crc32(offsets, zlib.crc32(head, _TYPE_CRC[DATA])))
    length = 5 + _DATA_HEAD.size + 8 * (n + 1) + len(data)
    return b"".join((_HEAD.pack(length, DATA), head, offsets, data, _CRC.pack(crc)))


def error_frame(code: int, message: str) -> bytes:
    return frame(ERROR, _ERROR.pack(code) + message.encode()[:4000])


async def read_frame(reader: asyncio.StreamReader, max_len: int) -> tuple[int, memoryview]:
    """The next whole frame: (kind, body).  Raises ReplicationProtocolError on a
    bad length or checksum, IncompleteReadError when the stream ends first."""
    head = await reader.readexactly(HEAD_SIZE)
    length, kind = _HEAD.unpack(head)
    if length < 5 or length > max_len:
        raise ReplicationProtocolError(f"frame length {length} out of bounds (max {max_len})")
    rest = await reader.readexactly(length - 1)
    n = length - 5
    body = memoryview(rest)[:n]
    if zlib.crc32(body, _TYPE_CRC[kind]) != _CRC.unpack_from(rest, n)[0]:
        raise ReplicationProtocolError(f"checksum mismatch in a frame of kind {kind:#x}")
    return kind, body


class FrameReader:
    """Reads frames from a stream in chunks: one ``await`` per chunk however
    many frames it holds, and frames inside a chunk are memoryviews of it (no
    copy).  Every read of a connection must go through the same FrameReader."""

    CHUNK = 1 << 20

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self._chunk = b""
        self._view = memoryview(self._chunk)
        self._pos = 0

    async def read(self, max_len: int) -> tuple[int, memoryview]:
        """The next whole frame: (kind, body); as :func:`read_frame`."""
        chunk, pos = self._chunk, self._pos
        if len(chunk) - pos >= HEAD_SIZE:
            length, kind = _HEAD.unpack_from(chunk, pos)
            end = pos + 4 + length
            if 5 <= length <= max_len and end <= len(chunk):
                self._pos = end
                body = self._view[pos + HEAD_SIZE:end - 4]
                if zlib.crc32(body, _TYPE_CRC[kind]) != _CRC.unpack_from(chunk, end - 4)[0]:
                    raise ReplicationProtocolError(
                        f"checksum mismatch in a frame of kind {kind:#x}")
                return kind, body
        await self._fill(max_len)
        return await self.read(max_len)

    async def _fill(self, max_len: int) -> None:
        """Read until the buffer starts with a whole frame (or raise)."""
        rest = self._chunk[self._pos:]
        while True:
            if len(rest) >= HEAD_SIZE:
                length, _ = _HEAD.unpack_from(rest)
                if length < 5 or length > max_len:
                    raise ReplicationProtocolError(
                        f"frame length {length} out of bounds (max {max_len})")
                missing = 4 + length - len(rest)
                if missing <= 0:
                    return
            else:
                missing = HEAD_SIZE - len(rest)
            if missing > self.CHUNK:
                more = await self._reader.readexactly(missing)
            else:
                more = await self._reader.read(self.CHUNK)
                if not more:
                    raise asyncio.IncompleteReadError(rest, len(rest) + missing)
            rest = rest + more if rest else more
            # keep what has arrived even if this task is cancelled
            self._chunk, self._view, self._pos = rest, memoryview(rest), 0


def _raise_error_frame(body: memoryview) -> None:
    if len(body) < _ERROR.size:
        raise ReplicationProtocolError("short ERROR frame")
    (code,) = _ERROR.unpack_from(body)
    message = bytes(body[_ERROR.size:]).decode("utf-8", "replace")
    raise _ERRORS.get(code, ReplicationError)(f"source: {message}")


def _secret_bytes(secret: bytes | str | None) -> bytes | None:
    if secret is None:
        return None
    raw = secret.encode() if isinstance(secret, str) else bytes(secret)
    if not raw:
        raise ValueError("the shared secret is empty")
    return raw


def _proof(secret: bytes, role: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, b"aiochronicle-replication-1 " + role + b"".join(parts),
                    hashlib.sha256).digest()


def _check_security(secret: bytes | None, context: ssl_.SSLContext | None, server: bool) -> None:
    if secret is not None:
        return
    if context is None:
        raise ValueError("replication needs a shared secret, TLS, or both")
    if server and context.verify_mode != ssl_.CERT_REQUIRED:
        raise ValueError("TLS without client certificates authenticates no sink: give the "
                         "source a shared secret too, or a context that requires client "
                         "certificates (ReplicationSource.ssl_context(..., cafile=...))")


def _digest(payload: bytes | memoryview) -> bytes:
    return hashlib.sha256(payload).digest()


def _describe(queue: Queue) -> dict[str, Any]:
    rc = queue.roll_cycle
    return {
        "version": PROTOCOL_VERSION,
        "roll_cycle": {"name": rc.name, "format": rc.format, "length_ms": rc.length_ms,
                       "index_count": rc.index_count, "index_spacing": rc.index_spacing,
                       "cycle_shift": rc.cycle_shift, "default_epoch": rc.default_epoch},
        "epoch": queue.epoch,
        "week_rule": queue.week_rule,
        "source_id": queue.source_id,
        "first_index": queue.first_index,
        "last_index": queue.last_index,
    }


def _why(exc: BaseException) -> str:
    if isinstance(exc, asyncio.IncompleteReadError):
        return "connection closed by the peer"
    return str(exc) or type(exc).__name__


def _fmt(index: int | None) -> str:
    return "none" if index is None or index < 0 else f"{index:#x}"


async def _heartbeats(interval: float, timeout: float | None, send: Callable[[], None],
                      last_recv: Callable[[], float], what: str) -> None:
    """Send a heartbeat every ``interval`` s; raise TimeoutError when nothing
    has come from the peer for ``timeout`` s."""
    step = interval if timeout is None else min(interval, timeout / 2)
    last_sent = time.monotonic()
    while True:
        await asyncio.sleep(step)
        now = time.monotonic()
        if timeout is not None and now - last_recv() > timeout:
            raise TimeoutError(f"nothing from the {what} for {timeout:g}s")
        if now - last_sent >= interval * 0.9:
            send()
            last_sent = now


def _check_heartbeat(interval: float, timeout: float | None) -> None:
    if interval <= 0 or (timeout is not None and timeout <= interval):
        raise ValueError("need 0 < heartbeat_interval < heartbeat_timeout")


def _tls(ctx: ssl_.SSLContext, certfile: str | os.PathLike[str] | None,
         keyfile: str | os.PathLike[str] | None) -> ssl_.SSLContext:
    """``ctx`` held to TLS 1.2 or later, presenting ``certfile`` when given."""
    ctx.minimum_version = ssl_.TLSVersion.TLSv1_2
    if certfile is not None:
        ctx.load_cert_chain(certfile, keyfile)
    return ctx


def _opened(queue: Queue | None, not_yet: str) -> Queue:
    """``queue``; ReplicationError(``not_yet``) while it is None."""
    if queue is None:
        raise ReplicationError(not_yet)
    return queue


def _no_delay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def _until_first_done(tasks: Sequence[asyncio.Task[None]]) -> None:
    """Wait for the first of ``tasks`` to end, cancel the others, and raise
    what an ended one raised."""
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
    for t in done:
        exc = t.exception()
        if exc is not None:
            raise exc


# -- source --------------------------------------------------------------------------------

@dataclass
class SinkInfo:
    """One connected sink, as its source sees it.

    Attributes:
        name: the name the sink gave (default ``host:pid``).
        peer: its address.
        sent_index: the highest index sent to it (-1: none yet).
        acked_index: the highest index it acknowledged (-1: none yet).
        connected_at: ``time.time()`` when it authenticated.
    """

    name: str
    peer: str
    sent_index: int = -1
    acked_index: int = -1
    connected_at: float = 0.0


class _SourceConnection:
    """One sink connected to a source."""

    def __init__(self, source: ReplicationSource, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, sent: Cell, acked: Cell) -> None:
        """A connection of ``source``; ``sent`` and ``acked`` are the source
        queue's ``replication.lastSent``/``lastAcknowledged`` cells."""
        self.source = source
        self.sent = sent
        self.acked = acked
        self.frames = FrameReader(reader)
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.info = SinkInfo(name="?", peer=f"{peer[0]}:{peer[1]}" if peer else "?")
        self.last_recv = time.monotonic()
        self.tailer: Tailer | None = None

    def send(self, data: bytes) -> None:
        if self.writer.transport.is_closing():
            raise ConnectionResetError("the sink's connection is closed")
        self.writer.write(data)

    async def run(self) -> None:
        src = self.source
        try:
            name = await asyncio.wait_for(self._handshake(), src.handshake_timeout)
        except (asyncio.IncompleteReadError, ReplicationProtocolError, TimeoutError,
                ConnectionError, UnicodeDecodeError):
            name = None
        if name is None:
            log.warning("replication source: %s failed authentication; closed",
                        self.info.peer)
            return
        self.info.name = name
        self.info.connected_at = time.time()
        kind, body = await asyncio.wait_for(self.frames.read(MAX_HANDSHAKE_FRAME),
                                            src.handshake_timeout)
        if kind != RESUME or len(body) != 8 + 32:
            self.send(error_frame(E_PROTOCOL, "expected RESUME"))
            return
        (last,) = _I64.unpack_from(body)
        tailer = self.tailer = src.queue.tailer(pauser=src.pauser())
        try:
            problem = self._position(tailer, last, bytes(body[8:]))
            if problem is not None:
                code, message = problem
                log.error("replication source: sink %s (%s): %s", name, self.info.peer, message)
                self.send(error_frame(code, message))
                await self.writer.drain()
                return
            self.info.sent_index = last
            self.send(frame(START, _I64.pack(tailer.index)))
            log.info("replication source: sink %s (%s) resumes after %s", name,
                     self.info.peer, _fmt(last))
            await self._stream(tailer)
        finally:
            tailer.close()

    async def _handshake(self) -> str | None:
        src = self.source
        nonce = secrets.token_bytes(32)
        flags = FLAG_SECRET if src.secret is not None else 0
        self.send(frame(HELLO, _HELLO.pack(MAGIC, PROTOCOL_VERSION, flags, nonce)))
        kind, body = await self.frames.read(MAX_HANDSHAKE_FRAME)
        if kind != AUTH or len(body) < _AUTH.size:
            return None
        magic, version, peer_nonce, proof = _AUTH.unpack_from(body)
        if magic != MAGIC or version != PROTOCOL_VERSION:
            return None
        raw_name = bytes(body[_AUTH.size:])
        mine = b""
        if src.secret is not None:
            expected = _proof(src.secret, b"sink", nonce, peer_nonce, raw_name)
            if not hmac.compare_digest(expected, proof):
                return None
            mine = _proof(src.secret, b"source", peer_nonce, nonce)
        name = raw_name.decode("utf-8", "replace")[:200] or self.info.peer
        desc = json.dumps(_describe(src.queue)).encode()
        self.send(frame(WELCOME, mine.ljust(32, b"\0") + desc))
        return name

    def _position(self, tailer: Tailer, last: int, digest: bytes) -> tuple[int, str] | None:
        """Put ``tailer`` just after the sink's last excerpt; or say why not."""
        q = self.source.queue
        if last < 0:
            tailer.to_start()
            return None
        if tailer.move_to_index(last):
            ex = tailer.read_nowait()
            if ex is None or ex.index != last:
                return E_PROTOCOL, f"cannot read back excerpt {last:#x}"
            if _digest(ex.payload) != digest:
                return E_DIVERGED, (f"the sink's excerpt {last:#x} differs from the source's: "
                                    "the queues diverged")
            return None
        first, end = q.first_index, q.last_index
        if end is None or last > end:
            return E_DIVERGED, (f"the sink holds excerpts up to {last:#x} but the source ends "
                                f"at {_fmt(end)}: the queues diverged")
        if first is not None and last < first:
            return E_GAP, (f"the source no longer holds the sink's last excerpt {last:#x} "
                           f"(its first is {first:#x}): the sink cannot resume without a gap")
        return E_DIVERGED, (f"the sink holds an excerpt at {last:#x} the source never had: "
                            "the queues diverged")

    async def _stream(self, tailer: Tailer) -> None:
        src = self.source
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(self._send_loop(tailer)),
                 loop.create_task(self._receive_loop()),
                 loop.create_task(_heartbeats(src.heartbeat_interval, src.heartbeat_timeout,
                                              self._heartbeat, lambda: self.last_recv,
                                              f"sink {self.info.name}"))]
        await _until_first_done(tasks)

    def _heartbeat(self) -> None:
        last = self.source.queue.last_index
        self.send(frame(HEARTBEAT, _I64.pack(-1 if last is None else last)))

    async def _send_loop(self, tailer: Tailer) -> None:
        """Excerpts one by one while they trickle in (each is sent the moment it
        is read); a backlog in batches read with ``read_many`` that grow while
        they come back full (a sink far behind gets frames of up to
        ``max_batch_count`` excerpts / ``max_batch_bytes``)."""
        src = self.source
        send = self.send
        writer = self.writer
        transport = writer.transport
        read = tailer.read_nowait
        sent = self.sent
        info = self.info
        max_n, max_b = src.max_batch_count, src.max_batch_bytes
        low_n, low_b = min(64, max_n), min(16 << 10, max_b)
        n_cap, b_cap = low_n, low_b
        high = src.write_buffer_high
        busy = 0
        while True:
            ex = read()
            if ex is None:
                n_cap, b_cap = low_n, low_b
                busy = 0
                ex = await tailer.read()
                send(single_frame(ex.index, ex.payload))
                last = ex.index
            else:
                # more than one waiting: this one and what follows, one write
                frames = [single_frame(ex.index, ex.payload)]
                last = ex.index
                batch = tailer.read_many(n_cap, b_cap)
                k = len(batch)
                if k:
                    last = self._batch_frames(batch, frames)
                if transport.is_closing():
                    raise ConnectionResetError("the sink's connection is closed")
                writer.writelines(frames)
                busy += 1
                if k >= n_cap or len(batch.data) * 2 >= b_cap:
                    n_cap, b_cap = min(n_cap * 4, max_n), min(b_cap * 4, max_b)
                    busy = 16
                if transport.get_write_buffer_size() > high:
                    busy = 0
                    await writer.drain()
                elif busy >= 16:  # a backlog: let acks and heartbeats in
                    busy = 0
                    await asyncio.sleep(0)
            sent.max64(last)
            info.sent_index = last

    @staticmethod
    def _batch_frames(batch: Batch, frames: list[bytes]) -> int:
        """Append the DATA frames of ``batch`` to ``frames``; its last index."""
        idx = batch.indices
        n = len(idx)
        first = idx[0]
        if idx[n - 1] - first == n - 1:
            frames.append(packed_frame(first, n, batch.offsets, batch.data))
            return int(idx[n - 1])
        # indices jump (a new cycle): one frame per run
        offs, data = batch.offsets, batch.data
        start = 0
        for i in range(1, n + 1):
            if i == n or idx[i] != idx[i - 1] + 1:
                frames.append(data_frame(idx[start], [bytes(data[offs[j]:offs[j + 1]])
                                                      for j in range(start, i)]))
                start = i
        return int(idx[n - 1])

    async def _receive_loop(self) -> None:
        read = self.frames.read
        acked = self.acked
        info = self.info
        while True:
            kind, body = await read(MAX_HANDSHAKE_FRAME)
            self.last_recv = time.monotonic()
            if kind == ACK and len(body) == 8:
                (index,) = _I64.unpack_from(body)
                if index > info.acked_index:
                    info.acked_index = index
                    acked.max64(index)
            elif kind == HEARTBEAT:
                pass
            elif kind == ERROR:
                try:
                    _raise_error_frame(body)
                except ReplicationError as exc:
                    log.error("replication source: sink %s reports: %s", info.name, exc)
                return
            else:
                raise ReplicationProtocolError(f"unexpected frame kind {kind:#x} from a sink")


class ReplicationSource:
    """Serves a queue to replication sinks over TCP (asyncio; uvloop works).

    Args:
        queue: the queue to serve, or its directory (opened here, with
            ``queue_options``, and closed by :meth:`close`).
        host, port: where to listen (default loopback only, port 7399; 0 picks
            a free port, see :attr:`port`).
        secret: shared secret the sinks must prove they know (HMAC-SHA256
            challenge-response both ways).
        ssl: a server TLS context (:meth:`ssl_context`).  At least one of
            ``secret`` and ``ssl`` is required; ``ssl`` alone must require
            client certificates.
        pauser: makes the pauser each sink's tailer waits with (default
            ``Pauser.balanced``; ``Pauser.busy`` for the lowest latency,
            ``Pauser.notify`` to idle cheaply when the writers are aiochronicle).
        heartbeat_interval, heartbeat_timeout: seconds between heartbeats, and
            of silence after which a sink is dropped (None: never).
        max_batch_count, max_batch_bytes: at most this many excerpts (bytes)
            per DATA frame (a larger excerpt goes alone).
    """

    def __init__(self, queue: Queue | str | os.PathLike[str], *, host: str = LOOPBACK,
                 port: int = DEFAULT_PORT, secret: bytes | str | None = None,
                 ssl: ssl_.SSLContext | None = None,
                 pauser: Callable[[], Pauser] | None = None,
                 heartbeat_interval: float = 1.0, heartbeat_timeout: float | None = 5.0,
                 handshake_timeout: float = 5.0, max_batch_count: int = 4096,
                 max_batch_bytes: int = 256 << 10,
                 queue_options: dict[str, Any] | None = None) -> None:
        self.secret = _secret_bytes(secret)
        _check_security(self.secret, ssl, server=True)
        _check_heartbeat(heartbeat_interval, heartbeat_timeout)
        if max_batch_count < 1 or max_batch_bytes < 1:
            raise ValueError("max_batch_count and max_batch_bytes must be positive")
        self._queue_arg = queue
        self._queue: Queue | None = queue if isinstance(queue, Queue) else None
        self._owns_queue = not isinstance(queue, Queue)
        self._queue_options = dict(queue_options or {})
        self.host = host
        self._port = port
        self.ssl = ssl
        self.pauser: Callable[[], Pauser] = pauser or Pauser.balanced
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.handshake_timeout = handshake_timeout
        self.max_batch_count = max_batch_count
        self.max_batch_bytes = max_batch_bytes
        self.write_buffer_high = 4 << 20
        self._server: asyncio.Server | None = None
        self._conns: set[_SourceConnection] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._sent_cell: Cell | None = None
        self._ack_cell: Cell | None = None
        self._closed = False

    @staticmethod
    def ssl_context(certfile: str | os.PathLike[str], keyfile: str | os.PathLike[str] | None = None,
                    cafile: str | os.PathLike[str] | None = None) -> ssl_.SSLContext:
        """A server TLS context with this certificate; with ``cafile`` it
        requires sinks to present a certificate signed by that CA."""
        ctx = _tls(ssl_.SSLContext(ssl_.PROTOCOL_TLS_SERVER), certfile, keyfile)
        if cafile is not None:
            ctx.load_verify_locations(cafile)
            ctx.verify_mode = ssl_.CERT_REQUIRED
        return ctx

    @property
    def queue(self) -> Queue:
        """The queue served (once started)."""
        return _opened(self._queue, "the source has not started")

    @property
    def port(self) -> int:
        """The port listened on (the one picked when started with port 0)."""
        if self._server is not None and self._server.sockets:
            return int(self._server.sockets[0].getsockname()[1])
        return self._port

    @property
    def sinks(self) -> list[SinkInfo]:
        """The sinks connected now."""
        return [c.info for c in self._conns if c.info.connected_at]

    async def start(self) -> ReplicationSource:
        """Open the queue (if given a path) and start listening."""
        if self._server is not None:
            return self
        if self._queue is None:
            self._queue = open_queue(self._queue_arg, **self._queue_options)  # type: ignore[arg-type]
        q = self._queue
        meta = cycles_of(q).meta
        if meta is None or q.read_only:
            raise ReplicationError(f"a replication source needs a writable queue: {q.path}")
        # byte pointers for cq_max64 (valid while the queue is open)
        self._sent_cell = meta.cell(LAST_SENT_KEY, -1)
        self._ack_cell = meta.cell(LAST_ACK_KEY, -1)
        self._server = await asyncio.start_server(self._handle, self.host, self._port,
                                                  ssl=self.ssl, limit=4 << 20)
        log.info("replication source: serving %s on %s:%d", q.path, self.host, self.port)
        return self

    async def serve_forever(self) -> None:
        """Start (if needed) and serve until cancelled or closed."""
        await self.start()
        assert self._server is not None
        with contextlib.suppress(asyncio.CancelledError):
            await self._server.serve_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        _no_delay(writer)
        writer.transport.set_write_buffer_limits(high=self.write_buffer_high)
        assert self._sent_cell is not None and self._ack_cell is not None  # (set by start)
        conn = _SourceConnection(self, reader, writer, self._sent_cell, self._ack_cell)
        self._conns.add(conn)
        try:
            await conn.run()
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                writer.write(error_frame(E_SHUTDOWN, "the source is shutting down"))
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError) as exc:
            log.info("replication source: sink %s (%s) disconnected: %s", conn.info.name,
                     conn.info.peer, _why(exc))
        except ChronicleError as exc:
            log.error("replication source: sink %s (%s): %s", conn.info.name,
                      conn.info.peer, exc)
        except Exception:
            log.exception("replication source: sink %s (%s) failed", conn.info.name,
                          conn.info.peer)
        finally:
            self._conns.discard(conn)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)
            if task is not None:
                self._handlers.discard(task)

    async def close(self) -> None:
        """Stop listening, drop every sink and close the queue if it was opened here."""
        if self._closed:
            return
        self._closed = True
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for task in list(self._handlers):
            task.cancel()
        for task in list(self._handlers):
            with contextlib.suppress(BaseException):
                await task
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2.0)
        if self._owns_queue and self._queue is not None:
            self._queue.close()

    async def __aenter__(self) -> ReplicationSource:
        return await self.start()

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()


# -- sink ----------------------------------------------------------------------------------

class _SinkWriter:
    """Writes DATA runs to the sink queue at the source's indices."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.app: Appender = queue.appender()
        self._check: Tailer | None = None

    def close(self) -> None:
        self.app.close()
        if self._check is not None:
            self._check.close()

    def write_one(self, index: int, payload: memoryview) -> None:
        """Write one excerpt at ``index`` (a replayed one must be the same bytes)."""
        try:
            if self.app.write_at(index, payload):
                return
        except IllegalIndexError as exc:
            raise DivergenceError(f"cannot write the source's excerpt here: {exc}",
                                  index) from None
        self._replay(index, 1, array("q", (0, len(payload))), payload)

    def write_run(self, first: int, n: int, offsets: array[int], data: memoryview) -> None:
        """Write excerpts ``first .. first + n - 1`` (payload i is
        ``data[offsets[i]:offsets[i + 1]]``)."""
        try:
            if not self.app.write_packed_at(first, data, offsets):
                self._replay(first, n, offsets, data)
        except IllegalIndexError as exc:
            raise DivergenceError(f"cannot write the source's excerpt here: {exc}",
                                  first) from None

    def _replay(self, first: int, n: int, offsets: array[int], data: memoryview) -> None:
        """Some excerpts of the run exist already: they must be the same bytes."""
        for i in range(n):
            if i and self.app.write_packed_at(first + i, data, offsets[i:]):
                return
            payload = data[offsets[i]:offsets[i + 1]]
            t = self._check
            if t is None:
                t = self._check = self.queue.tailer()
            ex = t.read_nowait() if t.move_to_index(first + i) else None
            if ex is None or ex.payload != payload:
                raise DivergenceError(f"the sink's excerpt {first + i:#x} differs from the "
                                      "source's: the queues diverged", first + i)

    def sync(self) -> None:
        self.app.sync()


class ReplicationSink:
    """Mirrors a source's queue into a local queue, at the same indices.

    ``await sink.run()`` connects, resumes after the local queue's last excerpt
    and applies what the source sends until :meth:`stop`; it reconnects with
    exponential back-off when the connection drops or the source restarts.
    It ends with an error when the queues diverged (:class:`DivergenceError`),
    the source lacks what comes next (:class:`ReplicationGapError`), the
    queues are laid out differently (:class:`IncompatibleQueueError`), or
    authentication keeps failing (:class:`ReplicationAuthError`).

    While running, the sink holds the local queue's ``chronicle.append.lock``
    so appenders of other processes are refused.  A new local queue takes the
    source's roll cycle and epoch.

    Args:
        queue: the local queue or its directory (opened with ``queue_options``
            once the source has said its roll cycle, closed when the sink stops).
        host, port: the source (default loopback, port 7399).
        secret, ssl: as the source's; ``ssl`` is a client context
            (:meth:`ssl_context`), ``server_hostname`` what the source's
            certificate must name (default ``host``).
        name: how the source logs this sink (default ``hostname:pid``).
        sync: msync what was written before acknowledging it.
        ack_interval: at most one ACK per this many seconds while excerpts
            stream in (the first after a pause goes at once); default 0: one per
            burst of frames that arrived together.
        heartbeat_interval, heartbeat_timeout: as the source's.
        min_backoff, max_backoff: reconnect delays (seconds, doubled each time).
        max_auth_failures: connections in a row closed right after the AUTH
            frame before giving up with ReplicationAuthError.
    """

    def __init__(self, queue: Queue | str | os.PathLike[str], host: str = LOOPBACK,
                 port: int = DEFAULT_PORT, *, secret: bytes | str | None = None,
                 ssl: ssl_.SSLContext | None = None, server_hostname: str | None = None,
                 name: str | None = None, sync: bool = False,
                 heartbeat_interval: float = 1.0, heartbeat_timeout: float | None = 5.0,
                 ack_interval: float = 0.0, connect_timeout: float = 5.0,
                 min_backoff: float = 0.05,
                 max_backoff: float = 2.0, max_auth_failures: int = 3,
                 queue_options: dict[str, Any] | None = None) -> None:
        self.secret = _secret_bytes(secret)
        _check_security(self.secret, ssl, server=False)
        _check_heartbeat(heartbeat_interval, heartbeat_timeout)
        if not 0 < min_backoff <= max_backoff:
            raise ValueError("need 0 < min_backoff <= max_backoff")
        self._queue_arg = queue
        self._queue: Queue | None = queue if isinstance(queue, Queue) else None
        self._owns_queue = not isinstance(queue, Queue)
        self._queue_options = dict(queue_options or {})
        self.host = host
        self.port = port
        self.ssl = ssl
        self.server_hostname = server_hostname
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.sync = sync
        if ack_interval < 0:
            raise ValueError("ack_interval must not be negative")
        self.ack_interval = ack_interval
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.connect_timeout = connect_timeout
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self.max_auth_failures = max_auth_failures
        #: the index of the last excerpt written here (-1: none)
        self.last_index = -1
        #: the source's last index, as of its last heartbeat or WELCOME
        self.source_last_index = -1
        #: connections made, and excerpts written, since the sink started
        self.connections = 0
        self.excerpts_written = 0
        #: attempts that ended before streaming (refused, TLS or handshake
        #: failures, a source that went away at once) since the sink started
        self.failed_attempts = 0
        self._writer: _SinkWriter | None = None
        self._locked = False
        self._stopping = False
        self._stop_event: asyncio.Event | None = None
        self._session_task: asyncio.Task[None] | None = None
        self._run_task: asyncio.Task[None] | None = None
        self._connected: asyncio.Event | None = None
        self._opened: asyncio.Event | None = None
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._ack_scheduled = False
        self._acked = -1
        self._ack_time = 0.0
        self._out: asyncio.StreamWriter | None = None
        self._last_recv = 0.0

    @staticmethod
    def ssl_context(cafile: str | os.PathLike[str] | None = None,
                    certfile: str | os.PathLike[str] | None = None,
                    keyfile: str | os.PathLike[str] | None = None) -> ssl_.SSLContext:
        """A client TLS context trusting ``cafile`` (default: the system's CAs),
        presenting ``certfile`` to sources that require a client certificate."""
        return _tls(ssl_.create_default_context(ssl_.Purpose.SERVER_AUTH, cafile=cafile),
                    certfile, keyfile)

    # -- state -----------------------------------------------------------------
    @property
    def queue(self) -> Queue:
        """The local queue (once opened, after the first handshake)."""
        return _opened(self._queue, "the sink's queue is not open yet")

    @property
    def connected(self) -> bool:
        """True while streaming from the source."""
        return self._connected is not None and self._connected.is_set()

    def _events(self) -> None:
        if self._stop_event is None:
            self._stop_event = asyncio.Event()
            self._connected = asyncio.Event()
            self._opened = asyncio.Event()

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Wait until the sink streams from its source."""
        self._events()
        assert self._connected is not None
        await asyncio.wait_for(self._connected.wait(), timeout)

    async def wait_open(self, timeout: float | None = None) -> Queue:
        """Wait until the local queue is open (e.g. to serve it to the next hop)."""
        self._events()
        assert self._opened is not None
        await asyncio.wait_for(self._opened.wait(), timeout)
        return self.queue

    async def wait_for_index(self, index: int, timeout: float | None = None) -> None:
        """Wait until the excerpt at ``index`` (or a later one) was written here."""
        if self.last_index >= index:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (index, fut)
        self._waiters.append(entry)
        try:
            await asyncio.wait_for(fut, timeout)
        finally:
            with contextlib.suppress(ValueError):
                self._waiters.remove(entry)

    # -- running ---------------------------------------------------------------
    async def start(self) -> ReplicationSink:
        """Run in a background task (see :meth:`run`); :meth:`close` stops it."""
        self._events()
        if self._run_task is None:
            self._run_task = asyncio.get_running_loop().create_task(self.run())
        return self

    async def close(self) -> None:
        """Stop and wait until stopped; re-raises a fatal error of :meth:`run`."""
        self.stop()
        task = self._run_task
        if task is not None:
            await task

    async def __aenter__(self) -> ReplicationSink:
        return await self.start()

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.stop()
        task = self._run_task
        if task is not None:
            if et is None:
                await task
            else:
                with contextlib.suppress(BaseException):
                    await task

    def stop(self) -> None:
        """Ask :meth:`run` to return (call it on the sink's event loop)."""
        self._stopping = True
        if self._stop_event is not None:
            self._stop_event.set()
        if self._session_task is not None:
            self._session_task.cancel()

    async def run(self) -> None:
        """Replicate until :meth:`stop`; raises the errors that end replication."""
        self._events()
        assert self._stop_event is not None
        self._stopping = False
        self._stop_event.clear()
        backoff = self.min_backoff
        rejected = 0
        loop = asyncio.get_running_loop()
        try:
            while not self._stopping:
                self._session_task = loop.create_task(self._session())
                streamed = False
                try:
                    await self._session_task
                except asyncio.CancelledError:
                    if not self._stopping:
                        raise
                except _Rejected:
                    rejected += 1
                    log.warning("replication sink %s: %s:%d closed the connection after "
                                "authentication (%d of %d): wrong secret?", self.name,
                                self.host, self.port, rejected, self.max_auth_failures)
                    if rejected >= self.max_auth_failures:
                        raise ReplicationAuthError(
                            f"the source at {self.host}:{self.port} refused the sink "
                            f"{rejected} times in a row: wrong shared secret?") from None
                except _FATAL:
                    raise
                except (OSError, asyncio.IncompleteReadError, TimeoutError,
                        ReplicationProtocolError, _Shutdown, ssl_.SSLError) as exc:
                    log.info("replication sink %s: connection to %s:%d lost: %s", self.name,
                             self.host, self.port, _why(exc))
                finally:
                    self._session_task = None
                    assert self._connected is not None
                    if self._connected.is_set():
                        streamed = True
                        rejected = 0
                    elif not self._stopping:
                        self.failed_attempts += 1
                    self._connected.clear()
                if self._stopping:
                    break
                if streamed:
                    backoff = self.min_backoff
                delay = backoff * (0.5 + random.random())
                backoff = min(backoff * 2, self.max_backoff)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop_event.wait(), delay)
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(ReplicationError("the sink stopped"))
        self._waiters.clear()
        w, self._writer = self._writer, None
        q = self._queue
        if w is not None and q is not None and not q.closed:
            with contextlib.suppress(ChronicleError):
                if self.sync:
                    w.sync()
            w.close()
        if q is not None and not q.closed:
            self._unlock(cycles_of(q))
        if q is not None and self._owns_queue:
            q.close()
            self._queue = None

    # -- the local queue -------------------------------------------------------
    def _open(self, desc: dict[str, Any]) -> None:
        """Open (or check) the local queue against the source's description."""
        want: RollCycle = desc["want"]
        epoch: int = desc["epoch"]
        if self._queue is None:
            opts = {"roll_cycle": want, "epoch": epoch,
                    "week_rule": str(desc.get("week_rule", "US")),
                    "index_count": want.index_count, "index_spacing": want.index_spacing}
            opts.update(self._queue_options)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._queue = open_queue(self._queue_arg, **opts)  # type: ignore[arg-type]
        q = self._queue
        self._check_layout(q.roll_cycle, q.epoch, want, epoch)
        if self._writer is None:
            if q.read_only or cycles_of(q).meta is None:
                raise IncompatibleQueueError(f"the sink's queue {q.path} is read-only")
            self._lock(cycles_of(q))
            self._writer = _SinkWriter(q)
            assert self._opened is not None
            self._opened.set()

    def _check_layout(self, have: RollCycle, have_epoch: int, want: RollCycle,
                      want_epoch: int) -> None:
        if (have.format, have.length_ms, have.cycle_shift, have_epoch) != (
                want.format, want.length_ms, want.cycle_shift, want_epoch):
            raise IncompatibleQueueError(
                f"the sink's queue {self._queue_arg} has roll cycle {have.name} "
                f"({have.format!r}, {have.length_ms} ms, shift {have.cycle_shift}, epoch "
                f"{have_epoch}); the source's is {want.name} ({want.format!r}, "
                f"{want.length_ms} ms, shift {want.cycle_shift}, epoch {want_epoch})")

    def _lock(self, files: Cycles) -> None:
        """Hold ``chronicle.append.lock`` (value: our PID) while we are a sink."""
        meta = files.meta
        assert meta is not None
        holder = take_lock(meta, APPEND_LOCK)  # a dead holder's is taken over
        if holder is not None:
            who = "this process" if holder == os.getpid() else f"live process {holder}"
            raise AppendLockedError(f"{files.path} is already a replication sink: "
                                    f"chronicle.append.lock is held by {who}")
        self._locked = True

    def _unlock(self, files: Cycles) -> None:
        if not self._locked or files.meta is None:
            return
        self._locked = False
        release_lock(files.meta, APPEND_LOCK)

    def _resume_point(self) -> tuple[int, bytes]:
        q = self.queue
        last = q.last_index
        if last is None:
            return -1, bytes(32)
        t = q.tailer()
        try:
            ex = t.read_nowait() if t.move_to_index(last) else None
        finally:
            t.close()
        if ex is None or ex.index != last:
            raise ReplicationError(f"cannot read back the sink's last excerpt {last:#x}")
        return last, _digest(ex.payload)

    # -- one connection ----------------------------------------------------------
    async def _session(self) -> None:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, ssl=self.ssl, limit=4 << 20,
                                    server_hostname=(self.server_hostname or self.host)
                                    if self.ssl is not None else None),
            self.connect_timeout)
        _no_delay(writer)
        self._out = writer
        frames = FrameReader(reader)
        try:
            desc = await asyncio.wait_for(self._handshake(frames, writer),
                                          self.connect_timeout)
            self._open(desc)
            last, digest = self._resume_point()
            self.last_index = self._acked = last
            writer.write(frame(RESUME, _I64.pack(last) + digest))
            kind, body = await asyncio.wait_for(frames.read(MAX_HANDSHAKE_FRAME),
                                                self.connect_timeout)
            if kind == ERROR:
                _raise_error_frame(body)
            if kind != START or len(body) != 8:
                raise ReplicationProtocolError(f"expected START, got kind {kind:#x}")
            self.connections += 1
            assert self._connected is not None
            self._connected.set()
            log.info("replication sink %s: streaming from %s:%d after %s", self.name,
                     self.host, self.port, _fmt(last))
            await self._stream(frames, writer)
        except DivergenceError as exc:
            with contextlib.suppress(Exception):
                writer.write(error_frame(E_DIVERGED, str(exc)))
            raise
        finally:
            self._out = None
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _handshake(self, frames: FrameReader,
                         writer: asyncio.StreamWriter) -> dict[str, Any]:
        kind, body = await frames.read(MAX_HANDSHAKE_FRAME)
        if kind == ERROR:
            _raise_error_frame(body)
        if kind != HELLO or len(body) != _HELLO.size:
            raise ReplicationProtocolError("not an aiochronicle replication source")
        magic, version, flags, nonce = _HELLO.unpack(body)
        if magic != MAGIC:
            raise ReplicationProtocolError("not an aiochronicle replication source")
        if version != PROTOCOL_VERSION:
            raise IncompatibleQueueError(f"the source speaks protocol version {version}, this "
                                         f"sink {PROTOCOL_VERSION}")
        if bool(flags & FLAG_SECRET) != (self.secret is not None):
            raise ReplicationAuthError(
                "the source requires a shared secret" if flags & FLAG_SECRET
                else "the source does not use a shared secret; this sink requires one")
        mine = secrets.token_bytes(32)
        raw_name = self.name.encode()[:200]
        proof = (_proof(self.secret, b"sink", nonce, mine, raw_name)
                 if self.secret is not None else bytes(32))
        writer.write(frame(AUTH, _AUTH.pack(MAGIC, PROTOCOL_VERSION, mine, proof) + raw_name))
        try:
            kind, body = await frames.read(MAX_HANDSHAKE_FRAME)
        except (asyncio.IncompleteReadError, ConnectionResetError):
            raise _Rejected("closed after AUTH") from None
        if kind == ERROR:
            _raise_error_frame(body)
        if kind != WELCOME or len(body) < 32:
            raise ReplicationProtocolError(f"expected WELCOME, got kind {kind:#x}")
        if self.secret is not None and not hmac.compare_digest(
                bytes(body[:32]), _proof(self.secret, b"source", mine, nonce)):
            raise ReplicationAuthError("the source could not prove it knows the shared secret")
        try:
            desc: dict[str, Any] = json.loads(bytes(body[32:]))
            r = desc["roll_cycle"]
            want = make_roll_cycle(str(r["name"]), str(r["format"]), int(r["length_ms"]),
                                   int(r["index_count"]), int(r["index_spacing"]),
                                   int(r["default_epoch"]))
            shift = int(r.get("cycle_shift", want.cycle_shift))
            if shift != want.cycle_shift:
                # index_count/index_spacing overrides keep the cycle's own shift
                if not 32 <= shift < 64:
                    raise ValueError(f"cycle_shift {shift}")
                mask = (1 << shift) - 1
                want = dataclasses.replace(want, cycle_shift=shift, sequence_mask=mask,
                                           max_messages_per_cycle=min(
                                               mask, want.index_count ** 2 * want.index_spacing))
            desc["want"] = want
            desc["epoch"] = int(desc["epoch"])
            last = desc.get("last_index")
            self.source_last_index = -1 if last is None else int(last)
        except (ValueError, KeyError, TypeError) as exc:
            raise ReplicationProtocolError(f"malformed WELCOME: {exc!r}") from None
        return desc

    async def _stream(self, frames: FrameReader, writer: asyncio.StreamWriter) -> None:
        self._last_recv = time.monotonic()
        loop = asyncio.get_running_loop()
        beat = loop.create_task(_heartbeats(
            self.heartbeat_interval, self.heartbeat_timeout,
            lambda: None if writer.transport.is_closing() else writer.write(
                frame(HEARTBEAT, _I64.pack(self.last_index))),
            lambda: self._last_recv, f"source {self.host}:{self.port}"))
        receive = loop.create_task(self._receive(frames))
        await _until_first_done((beat, receive))

    async def _receive(self, frames: FrameReader) -> None:
        writer = self._writer
        assert writer is not None
        loop = asyncio.get_running_loop()
        read = frames.read
        head = _DATA_HEAD.size
        one = _ONE.unpack_from
        one_size = _ONE.size
        unyielded = 0
        while True:
            kind, body = await read(MAX_FRAME)
            self._last_recv = time.monotonic()
            unyielded += 1
            if unyielded >= 64:
                # frames that were all buffered already never suspend the read:
                # let the ACK and the heartbeats out
                unyielded = 0
                await asyncio.sleep(0)
            if kind == DATA:
                size = len(body)
                if size < one_size:
                    raise ReplicationProtocolError("short DATA frame")
                first, n, o0, o1 = one(body)
                if n == 1:  # the latency path: one excerpt
                    if o0 != 0 or o1 != size - one_size:
                        raise ReplicationProtocolError("DATA frame offsets do not match its size")
                    writer.write_one(first, body[one_size:])
                else:
                    end = head + 8 * (n + 1)
                    if n < 1 or size < end:
                        raise ReplicationProtocolError("malformed DATA frame")
                    offsets = array("q")
                    offsets.frombytes(body[head:end])
                    if not _LITTLE:
                        offsets.byteswap()
                    data = body[end:]
                    if offsets[0] != 0 or offsets[n] != len(data):
                        raise ReplicationProtocolError("DATA frame offsets do not match its size")
                    writer.write_run(first, n, offsets, data)
                last = first + n - 1
                self.last_index = last
                self.excerpts_written += n
                if last > self.source_last_index:
                    self.source_last_index = last
                if self._waiters:
                    self._wake(last)
                if not self._ack_scheduled:
                    self._ack_scheduled = True
                    loop.call_soon(self._flush_ack)
            elif kind == HEARTBEAT and len(body) == 8:
                (src_last,) = _I64.unpack_from(body)
                self.source_last_index = max(self.source_last_index, src_last)
            elif kind == ERROR:
                _raise_error_frame(body)
            else:
                raise ReplicationProtocolError(f"unexpected frame kind {kind:#x}")

    def _flush_ack(self) -> None:
        """Acknowledge what was written.  Runs once the receive loop has
        drained what had arrived, so a burst gets one ACK; and at most once per
        ``ack_interval`` (a stream gets one ACK per interval, the first excerpt
        after a pause one at once)."""
        out = self._out
        last = self.last_index
        if out is None or last <= self._acked or out.transport.is_closing():
            self._ack_scheduled = False
            return
        now = time.monotonic()
        wait = self._ack_time + self.ack_interval - now
        if wait > 0:
            asyncio.get_running_loop().call_later(wait, self._flush_ack)
            return
        self._ack_scheduled = False
        if self.sync and self._writer is not None:
            self._writer.sync()
        self._acked = last
        self._ack_time = now
        out.write(frame(ACK, _I64.pack(last)))

    def _wake(self, last: int) -> None:
        keep = []
        for target, fut in self._waiters:
            if target <= last:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((target, fut))
        self._waiters[:] = keep
