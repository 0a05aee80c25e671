"""Replication between hosts (loopback only): sources and sinks in this process
on both event loops, a fake source for torn and corrupt frames, and separate
processes (the real ``aiochronicle replicate`` command) killed and restarted
mid-stream; the queues must end byte for byte equal."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import aiochronicle as ac
import aiochronicle._replicas._replication as rep
from aiochronicle._objects._queue import cycles_of

T0 = 1_637_251_500_000
HOUR = 3_600_000
SECRET = b"correct horse battery staple"
LOOPBACK = "127.0.0.1"
Run = Callable[..., Any]
#: the conftest ``run`` fixture runs these without asyncio's debug mode
LOOP_DEBUG = False


def _open(path: Path, clock: ac.TimeProvider | None = None, **kw: Any) -> ac.Queue:
    kw.setdefault("roll_cycle", ac.RollCycles.FAST_HOURLY)
    return ac.open_queue(path, time_provider=clock or ac.SetTimeProvider(T0),
                         block_size=256 << 10, **kw)


def _fill(q: ac.Queue, clock: ac.SetTimeProvider, hours: list[int], per_hour: int,
          tag: bytes = b"m") -> list[int]:
    """Append ``per_hour`` excerpts in each hour of ``hours`` (gaps allowed)."""
    app = q.appender()
    out = []
    for h in hours:
        clock.set_millis(T0 + h * HOUR)
        for i in range(per_hour):
            out.append(app.append(tag + b"-%d-%d-" % (h, i) + bytes(i % 50)))
    app.close()
    return out


def _excerpts(path: Path) -> list[tuple[int, bytes]]:
    with ac.open_queue(path, read_only=True) as q:
        return [(ex.index, ex.payload) for ex in q.tailer()]


def assert_same_queue(src: Path, sink: Path) -> int:
    """The same excerpts at the same indices, and every cycle file equal byte for
    byte from its start to the end of its data (header, index pages, excerpts,
    EOF marker).  Returns the number of excerpts."""
    a, b = _excerpts(src), _excerpts(sink)
    assert len(a) == len(b), f"{len(a)} excerpts at the source, {len(b)} at the sink"
    assert a == b
    with ac.open_queue(src, read_only=True) as qa, ac.open_queue(sink, read_only=True) as qb:
        cycles = [c for c in qa.cycles() if qa.excerpts_in_cycle(c)]
        assert cycles == [c for c in qb.cycles() if qb.excerpts_in_cycle(c)]
        for c in cycles:
            ends = []
            for q in (qa, qb):
                st = cycles_of(q).acquire(c)
                assert st is not None
                try:
                    pos, _count, eof = st.end()
                finally:
                    cycles_of(q).release(st)
                ends.append(pos + (4 if eof else 0))
            assert ends[0] == ends[1], f"cycle {c}: data ends at {ends}"
            with open(qa.cycle_path(c), "rb") as fa, open(qb.cycle_path(c), "rb") as fb:
                da, db = fa.read(ends[0]), fb.read(ends[0])
            assert da == db, f"cycle {c} differs at byte " \
                f"{next(i for i in range(len(da)) if da[i] != db[i])}"
    return len(a)


def _append_lock(path: Path) -> int | None:
    with ac.open_queue(path, read_only=True) as q:
        return q.table_store_get("chronicle.append.lock")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


# -- in one process ----------------------------------------------------------------------


def test_sink_mirrors_the_source_across_cycles_byte_for_byte(run: Run, tmp_path: Path) -> None:
    clock = ac.SetTimeProvider(T0)
    src_q = _open(tmp_path / "src", clock)
    written = _fill(src_q, clock, [0, 1, 4], 300)  # three cycles, one gap

    async def main() -> None:
        async with ac.ReplicationSource(src_q, port=0, secret=SECRET) as src:
            # the sink's clock is two days behind: the source's cycles decide
            sink = ac.ReplicationSink(tmp_path / "sink", port=src.port, secret=SECRET,
                                      name="s1", queue_options={
                                          "time_provider": ac.SetTimeProvider(T0 - 48 * HOUR)})
            async with sink:
                await sink.wait_for_index(written[-1], 10)
                held = sink.queue.table_store_get("chronicle.append.lock")
                assert held is not None and held & 0xFFFFFFFF == os.getpid()  # (+ PID ns tag)
                assert [s.name for s in src.sinks] == ["s1"]
                # live excerpts, then the acknowledgement of the last one
                app = src_q.appender()
                clock.set_millis(T0 + 5 * HOUR)
                for i in range(50):
                    written.append(app.append(b"live-%d" % i))
                assert await app.wait_replicated(timeout=10) >= written[-1]
                await sink.wait_for_index(written[-1], 10)
                assert src.sinks[0].acked_index == written[-1]
                assert src_q.table_store_get("chronicle.lastIndexReplicated") == written[-1]
                assert src_q.table_store_get(
                    "chronicle.lastAcknowledgedIndexReplicated") == written[-1]
                assert sink.source_last_index == written[-1]
            assert sink.excerpts_written == len(written)

    run(main())
    src_q.close()
    assert _append_lock(tmp_path / "sink") == -(1 << 63)  # released
    assert assert_same_queue(tmp_path / "src", tmp_path / "sink") == len(written)


def test_a_restarted_sink_resumes_without_gap_or_duplicate(run: Run, tmp_path: Path) -> None:
    clock = ac.SetTimeProvider(T0)
    src_q = _open(tmp_path / "src", clock)
    first = _fill(src_q, clock, [0], 1000)

    async def main() -> None:
        async with ac.ReplicationSource(src_q, port=0, secret=SECRET) as src:
            async with ac.ReplicationSink(tmp_path / "sink", port=src.port,
                                          secret=SECRET) as sink:
                await sink.wait_for_index(first[-1], 10)
            # the sink is down while the source moves on, days later
            later = _fill(src_q, clock, [30, 31], 500, b"later")
            async with ac.ReplicationSink(tmp_path / "sink", port=src.port,
                                          secret=SECRET) as sink:
                await sink.wait_for_index(later[-1], 10)
                assert sink.excerpts_written == len(later)
            # the source restarts (new object, same port): the sink reconnects
            port = src.port
        more = _fill(src_q, clock, [32], 100, b"more")
        sink = ac.ReplicationSink(tmp_path / "sink", port=port, secret=SECRET,
                                  min_backoff=0.02, max_backoff=0.1)
        async with sink:
            await _until_true(lambda: sink.failed_attempts >= 2)  # refused meanwhile
            assert not sink.connected and sink.connections == 0
            async with ac.ReplicationSource(src_q, port=port, secret=SECRET):
                await sink.wait_for_index(more[-1], 10)
                assert sink.connections == 1

    run(main())
    src_q.close()
    assert_same_queue(tmp_path / "src", tmp_path / "sink")


def test_several_sinks_and_a_chain_of_hops(run: Run, tmp_path: Path) -> None:
    clock = ac.SetTimeProvider(T0)
    src_q = _open(tmp_path / "src", clock)
    idx = _fill(src_q, clock, [0, 2], 400)

    async def main() -> None:
        async with ac.ReplicationSource(src_q, port=0, secret=SECRET) as src:
            s1 = ac.ReplicationSink(tmp_path / "s1", port=src.port, secret=SECRET, name="s1")
            s2 = ac.ReplicationSink(tmp_path / "s2", port=src.port, secret=SECRET, name="s2")
            async with s1, s2:
                # s1's queue served to the next hop, with another secret
                hop_q = await s1.wait_open(10)
                hop = await ac.ReplicationSource(hop_q, port=0, secret=b"hop").start()
                async with hop, ac.ReplicationSink(tmp_path / "s3", port=hop.port,
                                                   secret=b"hop", name="s3") as s3:
                    app = src_q.appender()
                    clock.set_millis(T0 + 3 * HOUR)
                    for i in range(200):
                        idx.append(app.append(b"x%d" % i))
                        if i % 50 == 0:
                            await asyncio.sleep(0)
                    for s in (s1, s2, s3):
                        await s.wait_for_index(idx[-1], 10)
                    assert sorted(x.name for x in src.sinks) == ["s1", "s2"]
                    # s3's acknowledgement lands in s1's queue, the middle hop
                    await _until_true(lambda: hop_q.table_store_get(
                        "chronicle.lastAcknowledgedIndexReplicated") == idx[-1], 10)

    run(main())
    src_q.close()
    for name in ("s1", "s2", "s3"):
        assert_same_queue(tmp_path / "src", tmp_path / name)


# -- security ------------------------------------------------------------------------------


def test_a_wrong_secret_gets_nothing(run: Run, tmp_path: Path) -> None:
    clock = ac.SetTimeProvider(T0)
    src_q = _open(tmp_path / "src", clock)
    _fill(src_q, clock, [0], 20, b"secret-data")

    async def main() -> None:
        async with ac.ReplicationSource(src_q, port=0, secret=SECRET) as src:
            sink = ac.ReplicationSink(tmp_path / "sink", port=src.port, secret=b"wrong",
                                      min_backoff=0.01, max_backoff=0.02, max_auth_failures=2)
            with pytest.raises(ac.ReplicationAuthError, match="refused"):
                await asyncio.wait_for(sink.run(), 10)
            # a raw client: the challenge, then the connection closes on a bad proof
            reader, writer = await asyncio.open_connection(LOOPBACK, src.port)
            kind, body = await rep.read_frame(reader, 1 << 16)
            assert kind == rep.HELLO and len(body) == rep._HELLO.size
            writer.write(rep.frame(rep.AUTH, rep._AUTH.pack(rep.MAGIC, rep.PROTOCOL_VERSION,
                                                            bytes(32), bytes(32)) + b"evil"))
            rest = await asyncio.wait_for(reader.read(), 5)
            assert rest == b""
            writer.close()
            # garbage instead of a frame: closed too, nothing sent but the challenge
            reader, writer = await asyncio.open_connection(LOOPBACK, src.port)
            await rep.read_frame(reader, 1 << 16)
            writer.write(b"GET / HTTP/1.1\r\n\r\n" * 10)
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()
            assert src.sinks == []
            # a sink without a secret, against a source that wants one: told at once
            with pytest.raises(ValueError, match="secret, TLS"):
                ac.ReplicationSink(tmp_path / "sink", port=src.port)

    run(main())
    src_q.close()
    assert not (tmp_path / "sink").exists()  # never opened: nothing was received


def _make_pki(d: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (openssl)."""
    assert shutil.which("openssl") is not None, "these tests make their certificates with openssl"

    def ossl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=test-ca")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for name in ("server", "client"):
        ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        ossl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", "san.ext")
    return {n: d / n for n in ("ca.pem", "server.pem", "server.key", "client.pem",
                               "client.key")}


def test_mutual_tls_without_a_secret(run: Run, tmp_path: Path) -> None:
    pki = _make_pki(tmp_path)
    clock = ac.SetTimeProvider(T0)
    src_q = _open(tmp_path / "src", clock)
    idx = _fill(src_q, clock, [0], 100)
    server_ctx = ac.ReplicationSource.ssl_context(pki["server.pem"], pki["server.key"],
                                                  cafile=pki["ca.pem"])
    with pytest.raises(ValueError, match="client certificates"):
        ac.ReplicationSource(src_q, ssl=ac.ReplicationSource.ssl_context(
            pki["server.pem"], pki["server.key"]))

    async def main() -> None:
        async with ac.ReplicationSource(src_q, port=0, ssl=server_ctx) as src:
            good = ac.ReplicationSink.ssl_context(pki["ca.pem"], pki["client.pem"],
                                                  pki["client.key"])
            async with ac.ReplicationSink(tmp_path / "sink", port=src.port, ssl=good) as sink:
                await sink.wait_for_index(idx[-1], 10)
            # no client certificate: the TLS handshake fails, no frame ever arrives
            bare = ac.ReplicationSink.ssl_context(pki["ca.pem"])
            sink = ac.ReplicationSink(tmp_path / "other", port=src.port, ssl=bare,
                                      min_backoff=0.05, max_backoff=0.05)
            async with sink:
                await _until_true(lambda: sink.failed_attempts >= 3)  # handshakes failed
                assert not sink.connected and sink.excerpts_written == 0
            # plain TCP against the TLS port: nothing readable comes back
            reader, writer = await asyncio.open_connection(LOOPBACK, src.port)
            writer.write(b"\0" * 64)
            with contextlib.suppress(ConnectionError):
                data = await asyncio.wait_for(reader.read(), 5)
                assert rep.MAGIC not in data
            writer.close()

    run(main())
    src_q.close()
    assert not (tmp_path / "other").exists()
    assert_same_queue(tmp_path / "src", tmp_path / "sink")


# -- faults ----------------------------------------------------------------------------------


def test_a_diverged_sink_stops_with_a_clear_error(run: Run, tmp_path: Path) -> None:
    clock = ac.SetTimeProvider(T0)
    src_q = _open(tmp_path / "src", clock)
    _fill(src_q, clock, [0], 10, b"A")
    with _open(tmp_path / "sink", ac.SetTimeProvider(T0)) as other:  # same indices, other bytes
        _fill(other, ac.SetTimeProvider(T0), [0], 5, b"B")
    with _open(tmp_path / "ahead", ac.SetTimeProvider(T0)) as other:  # more than the source
        _fill(other, ac.SetTimeProvider(T0), [0], 12, b"A")
    before = _excerpts(tmp_path / "sink")

    async def main() -> None:
        async with ac.ReplicationSource(src_q, port=0, secret=SECRET) as src:
            for name, pattern in (("sink", "differs"), ("ahead", "ends at")):
                sink = ac.ReplicationSink(tmp_path / name, port=src.port, secret=SECRET)
                with pytest.raises(ac.DivergenceError, match=pattern):
                    await asyncio.wait_for(sink.run(), 10)

    run(main())
    src_q.close()
    assert _excerpts(tmp_path / "sink") == before
    assert _append_lock(tmp_path / "sink") == -(1 << 63)


def test_gap_and_incompatible_queue_are_named_errors(run: Run, tmp_path: Path) -> None:
    clock = ac.SetTimeProvider(T0)
    src_q = _open(tmp_path / "src", clock)
    _fill(src_q, clock, [0], 10)

    async def main() -> None:
        async with ac.ReplicationSource(src_q, port=0, secret=SECRET) as src:
            async with ac.ReplicationSink(tmp_path / "sink", port=src.port,
                                          secret=SECRET) as sink:
                await sink.wait_for_index(src_q.last_index or 0, 10)
            # the source moves on and its first cycle is deleted (retention)
            later = _fill(src_q, clock, [5], 10)
            first_cycle = src_q.cycles()[0]
            src_q.close()
            os.remove(tmp_path / "src" / (cycles_of(src_q).namer.name(first_cycle) + ".cq4"))
        with _open(tmp_path / "src", clock) as q2:
            q2.refresh_directory_listing()
            async with ac.ReplicationSource(q2, port=0, secret=SECRET) as src:
                sink = ac.ReplicationSink(tmp_path / "sink", port=src.port, secret=SECRET)
                with pytest.raises(ac.ReplicationGapError, match="no longer holds"):
                    await asyncio.wait_for(sink.run(), 10)
                # a sink queue of another roll cycle
                with _open(tmp_path / "daily", roll_cycle=ac.RollCycles.FAST_DAILY):
                    pass
                sink = ac.ReplicationSink(tmp_path / "daily", port=src.port, secret=SECRET)
                with pytest.raises(ac.IncompatibleQueueError, match="FAST_HOURLY"):
                    await asyncio.wait_for(sink.run(), 10)
                # an empty sink starts at the source's (new) first excerpt
                async with ac.ReplicationSink(tmp_path / "fresh", port=src.port,
                                              secret=SECRET) as sink:
                    await sink.wait_for_index(later[-1], 10)
                    assert sink.excerpts_written == len(later)

    run(main())


class _FakeSource:
    """A hand-driven source: real handshake, then the frames a test scripts."""

    def __init__(self, queue: ac.Queue, script: list[Callable[..., Awaitable[None]]]) -> None:
        self.queue = queue
        self.script = script
        self.resumes: list[int] = []
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.CancelledError):  # (3.11 streams report it)
            await self._handle(reader, writer)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonce = secrets.token_bytes(32)
        writer.write(rep.frame(rep.HELLO, rep._HELLO.pack(rep.MAGIC, rep.PROTOCOL_VERSION,
                                                          rep.FLAG_SECRET, nonce)))
        _, body = await rep.read_frame(reader, 1 << 16)
        _, _, peer_nonce, _ = rep._AUTH.unpack_from(body)
        mine = rep._proof(SECRET, b"source", peer_nonce, nonce)
        writer.write(rep.frame(rep.WELCOME, mine + json.dumps(rep._describe(self.queue))
                               .encode()))
        _, body = await rep.read_frame(reader, 1 << 16)
        (last,) = rep._I64.unpack_from(body)
        self.resumes.append(last)
        writer.write(rep.frame(rep.START, rep._I64.pack(last + 1)))
        step = self.script.pop(0) if self.script else None
        if step is not None:
            await step(writer, last)
        with contextlib.suppress(Exception):
            await writer.drain()
        writer.close()


def test_a_torn_or_corrupt_frame_is_never_written(run: Run, tmp_path: Path) -> None:
    clock = ac.SetTimeProvider(T0)
    model = _open(tmp_path / "model", clock)  # the source's layout; its files are not sent
    rc = model.roll_cycle
    i0 = rc.to_index(rc.current_cycle(T0, 0), 0)

    async def whole_then_torn(w: asyncio.StreamWriter, last: int) -> None:
        w.write(rep.data_frame(i0, [b"one", b"two"]))
        torn = rep.data_frame(i0 + 2, [b"three" * 100])
        w.write(torn[: len(torn) - 7])  # all but the end of the payload and the checksum
        await w.drain()
        await asyncio.sleep(0.1)

    async def corrupt(w: asyncio.StreamWriter, last: int) -> None:
        bad = bytearray(rep.data_frame(last + 1, [b"three", b"four"]))
        bad[-6] ^= 0xFF  # a payload byte
        w.write(bytes(bad))

    async def rest(w: asyncio.StreamWriter, last: int) -> None:
        w.write(rep.data_frame(last + 1, [b"three", b"four"]))
        await asyncio.sleep(1.0)

    fake = _FakeSource(model, [whole_then_torn, corrupt, rest])

    async def main() -> None:
        server = await asyncio.start_server(fake.handle, LOOPBACK, 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            sink = ac.ReplicationSink(tmp_path / "sink", port=port, secret=SECRET,
                                      min_backoff=0.01, max_backoff=0.02)
            async with sink:
                await sink.wait_for_index(i0 + 3, 10)
            assert fake.resumes == [-1, i0 + 1, i0 + 1]

    run(main())
    model.close()
    assert _excerpts(tmp_path / "sink") == [(i0, b"one"), (i0 + 1, b"two"),
                                            (i0 + 2, b"three"), (i0 + 3, b"four")]


def test_a_silent_source_is_dropped_and_the_sink_reconnects(run: Run, tmp_path: Path) -> None:
    model = _open(tmp_path / "model")
    rc = model.roll_cycle
    i0 = rc.to_index(rc.current_cycle(T0, 0), 0)

    async def silent(w: asyncio.StreamWriter, last: int) -> None:
        w.write(rep.data_frame(i0, [b"before the silence"]))
        await asyncio.sleep(10)  # no heartbeat, no data: a hung source

    async def talks(w: asyncio.StreamWriter, last: int) -> None:
        w.write(rep.data_frame(last + 1, [b"after"]))
        await asyncio.sleep(10)

    fake = _FakeSource(model, [silent, talks])

    async def main() -> None:
        server = await asyncio.start_server(fake.handle, LOOPBACK, 0)
        async with server:
            sink = ac.ReplicationSink(tmp_path / "sink", port=server.sockets[0].getsockname()[1],
                                      secret=SECRET, heartbeat_interval=0.1,
                                      heartbeat_timeout=0.5, min_backoff=0.01)
            t0 = time.monotonic()
            async with sink:
                await sink.wait_for_index(i0 + 1, 10)
            assert time.monotonic() - t0 < 5
            assert fake.resumes == [-1, i0] and sink.connections == 2

    run(main())
    model.close()
    assert _excerpts(tmp_path / "sink") == [(i0, b"before the silence"), (i0 + 1, b"after")]


def test_a_silent_sink_is_dropped_by_the_source(run: Run, tmp_path: Path) -> None:
    clock = ac.SetTimeProvider(T0)
    q = _open(tmp_path / "src", clock)
    _fill(q, clock, [0], 3)

    async def main() -> None:
        async with ac.ReplicationSource(q, port=0, secret=SECRET, heartbeat_interval=0.1,
                                        heartbeat_timeout=0.5) as src:
            reader, writer = await asyncio.open_connection(LOOPBACK, src.port)
            _, body = await rep.read_frame(reader, 1 << 16)
            _, _, _, nonce = rep._HELLO.unpack(body)
            mine = secrets.token_bytes(32)
            proof = rep._proof(SECRET, b"sink", nonce, mine, b"mute")
            writer.write(rep.frame(rep.AUTH, rep._AUTH.pack(rep.MAGIC, rep.PROTOCOL_VERSION,
                                                            mine, proof) + b"mute"))
            await rep.read_frame(reader, 1 << 16)  # WELCOME
            writer.write(rep.frame(rep.RESUME, rep._I64.pack(-1) + bytes(32)))
            kinds = []
            with contextlib.suppress(asyncio.IncompleteReadError):
                while True:  # START, DATA, heartbeats ... then the source hangs up
                    kind, _ = await asyncio.wait_for(rep.read_frame(reader, 1 << 20), 5)
                    kinds.append(kind)
            assert kinds[:2] == [rep.START, rep.DATA] and rep.HEARTBEAT in kinds
            assert src.sinks == []
            writer.close()

    run(main())
    q.close()


def test_frames_survive_any_split_and_a_bad_checksum_is_caught(run: Run) -> None:
    rng = random.Random(8)
    payloads = [bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 40, 3000))))
                for _ in range(200)]
    stream = b"".join(rep.single_frame(i, p) if i % 3 else rep.data_frame(i, [p, p])
                      for i, p in enumerate(payloads))
    big = rep.data_frame(10**6, [bytes(range(256)) * 9000])  # > one 1 MiB chunk
    stream += big + rep.frame(rep.HEARTBEAT, rep._I64.pack(7))

    async def main() -> None:
        reader = asyncio.StreamReader(limit=1 << 22)
        frames = rep.FrameReader(reader)
        pos = 0
        while pos < len(stream):  # arrive in pieces of 1 byte to 300 KiB
            n = rng.choice((1, 3, 5, 17, 4096, 300 << 10))
            reader.feed_data(stream[pos:pos + n])
            pos += n
        reader.feed_eof()
        got = []
        while True:
            try:
                kind, body = await frames.read(rep.MAX_FRAME)
            except asyncio.IncompleteReadError:
                break
            got.append((kind, bytes(body)))
        assert len(got) == len(payloads) + 2
        assert got[-1] == (rep.HEARTBEAT, rep._I64.pack(7))
        assert rep.frame(got[-2][0], got[-2][1]) == big
        for i, p in enumerate(payloads):
            want = rep.single_frame(i, p) if i % 3 else rep.data_frame(i, [p, p])
            assert rep.frame(*got[i]) == want
        bad = bytearray(rep.single_frame(1, b"payload"))
        bad[-8] ^= 1
        reader = asyncio.StreamReader()
        reader.feed_data(bytes(bad))
        with pytest.raises(ac.ReplicationProtocolError, match="checksum"):
            await rep.FrameReader(reader).read(1 << 16)
        reader = asyncio.StreamReader()
        reader.feed_data(rep.frame(rep.DATA, bytes(100)))
        with pytest.raises(ac.ReplicationProtocolError, match="out of bounds"):
            await rep.FrameReader(reader).read(64)

    run(main())


# -- acknowledgements ----------------------------------------------------------------------


def test_read_after_replica_acknowledged(run: Run, tmp_path: Path) -> None:
    clock = ac.SetTimeProvider(T0)
    q = _open(tmp_path / "src", clock)
    idx = _fill(q, clock, [0, 1], 5)
    t = q.tailer(read_after_replica_acknowledged=True)
    named = q.tailer("audit", read_after_replica_acknowledged=True)
    plain = q.tailer()
    assert t.read_after_replica_acknowledged and not plain.read_after_replica_acknowledged
    assert t.read_nowait() is None and len(t.read_many()) == 0
    q.table_store_put("chronicle.lastAcknowledgedIndexReplicated", idx[2])
    assert [ex.index for ex in t] == idx[:3]
    assert [ex.index for ex in named] == idx[:3]
    assert named.index == idx[3]
    q.table_store_put("chronicle.lastAcknowledgedIndexReplicated", idx[6])  # the next cycle
    assert _drain(t) == idx[3:7]
    assert t.read_nowait() is None
    assert _drain(plain) == idx  # untouched
    t.read_after_replica_acknowledged = False
    assert t.read_nowait() is not None
    t.read_after_replica_acknowledged = True
    assert t.read_nowait() is None
    assert [ex.index for ex in named] == idx[3:7]
    # a thread waits until the acknowledgement moves
    got: list[Any] = []
    waiting = threading.Event()

    def wait() -> None:
        waiting.set()
        got.append(named.read_blocking(5))

    th = threading.Thread(target=wait)
    th.start()
    assert waiting.wait(5)
    q.table_store_put("chronicle.lastAcknowledgedIndexReplicated", idx[7])
    th.join(5)
    assert got and got[0].index == idx[7]

    async def main() -> None:
        waiter = q.tailer(read_after_replica_acknowledged=True, pauser=ac.Pauser.sleepy(2))
        waiter.move_to_index(idx[-1])
        task = asyncio.ensure_future(waiter.read())
        for _ in range(10):  # loop turns: the read starts, finds nothing and parks
            await asyncio.sleep(0)
        assert not task.done()
        # a real sink acknowledges everything
        async with ac.ReplicationSource(q, port=0, secret=SECRET) as src, \
                ac.ReplicationSink(tmp_path / "sink", port=src.port, secret=SECRET):
            ex = await asyncio.wait_for(task, 10)
            assert ex.index == idx[-1]
        seen = [ex.index async for ex in _until(named, idx[-1])]
        assert seen == idx[8:]
        waiter.close()

    run(main())
    q.close()


def _drain(t: ac.Tailer) -> list[int]:
    out: list[int] = []
    while b := t.read_many():
        out += b.indices.tolist()
    return out


async def _until(t: ac.Tailer, last: int) -> Any:
    while True:
        ex = await asyncio.wait_for(t.read(), 5)
        yield ex
        if ex.index >= last:
            return


def test_wait_replicated_times_out_then_returns(run: Run, tmp_path: Path) -> None:
    clock = ac.SetTimeProvider(T0)
    q = _open(tmp_path / "src", clock)
    app = q.appender()
    with pytest.raises(ValueError, match="not written"):
        app.wait_replicated_blocking(timeout=0.01)
    index = app.append(b"must be replicated")
    with pytest.raises(ac.ReplicationTimeoutError, match="none acknowledged"):
        app.wait_replicated_blocking(timeout=0.05)

    async def main() -> None:
        with pytest.raises(TimeoutError):  # ReplicationTimeoutError is one
            await app.wait_replicated(timeout=0.05)
        async with ac.ReplicationSource(q, port=0, secret=SECRET) as src, \
                ac.ReplicationSink(tmp_path / "sink", port=src.port, secret=SECRET):
            assert await app.wait_replicated(index, timeout=10) == index
            later = app.append(b"later")
            done = await asyncio.to_thread(app.wait_replicated_blocking, later, 10)
            assert done == later

    run(main())
    q.close()


def test_acknowledgements_can_be_spaced_out(run: Run, tmp_path: Path) -> None:
    clock = ac.SetTimeProvider(T0)
    q = _open(tmp_path / "src", clock)
    app = q.appender()

    async def main() -> None:
        async with ac.ReplicationSource(q, port=0, secret=SECRET) as src, \
                ac.ReplicationSink(tmp_path / "sink", port=src.port, secret=SECRET,
                                   ack_interval=0.05) as sink:
            await sink.wait_connected(10)
            acks = []
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            for i in range(40):
                app.append(b"%d" % i)
                await asyncio.sleep(0.005)
                acks.append(q.table_store_get("chronicle.lastAcknowledgedIndexReplicated"))
            elapsed = loop.time() - t0
            # the last one is acknowledged too, once the interval has passed
            assert await app.wait_replicated(timeout=10) == app.last_index_appended
            # at most one acknowledgement per ack_interval (plus the value before
            # the first and one at the edge), not one per excerpt; and some came
            assert 2 <= len(set(acks)) <= elapsed / 0.05 + 2, (len(set(acks)), elapsed)

    run(main())
    q.close()


def test_the_sink_queue_refuses_other_writers(run: Run, tmp_path: Path) -> None:
    clock = ac.SetTimeProvider(T0)
    q = _open(tmp_path / "src", clock)
    _fill(q, clock, [0], 3)
    script = textwrap.dedent(f"""
        import aiochronicle as ac
        with ac.open_queue({str(tmp_path / 'sink')!r}) as q:
            try:
                q.appender().append(b"local")
            except ac.AppendLockedError as exc:
                print("refused:", exc)
    """)

    async def main() -> None:
        src = await ac.ReplicationSource(q, port=0, secret=SECRET).start()
        async with src, ac.ReplicationSink(tmp_path / "sink", port=src.port,
                                           secret=SECRET) as sink:
            await sink.wait_for_index(q.last_index or 0, 10)
            out = await asyncio.to_thread(
                subprocess.run, [sys.executable, "-c", script], capture_output=True,
                text=True, timeout=60)
            assert "refused:" in out.stdout and "replication sink" in out.stdout, out
            second = ac.ReplicationSink(sink.queue, port=src.port, secret=SECRET)
            with pytest.raises(ac.AppendLockedError, match="already a replication sink"):
                await asyncio.wait_for(second.run(), 10)

    run(main())
    q.close()
    # refused before touching anything: no cycle file of the child's clock, no EOF
    assert sorted(os.listdir(tmp_path / "sink")) == sorted(os.listdir(tmp_path / "src"))
    assert_same_queue(tmp_path / "src", tmp_path / "sink")


def test_a_sink_takes_over_the_append_lock_of_a_dead_sink(run: Run, tmp_path: Path) -> None:
    clock = ac.SetTimeProvider(T0)
    q = _open(tmp_path / "src", clock)
    _fill(q, clock, [0], 3)
    # a sink that died holding the append lock of its queue
    with _open(tmp_path / "sink", clock) as sq:
        sq.appender()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with ac.open_queue(tmp_path / "sink") as sq:
        sq.table_store_put("chronicle.append.lock", dead.pid)
    assert _append_lock(tmp_path / "sink") == dead.pid

    async def main() -> None:
        async with ac.ReplicationSource(q, port=0, secret=SECRET) as src, \
                ac.ReplicationSink(tmp_path / "sink", port=src.port, secret=SECRET) as sink:
            await sink.wait_for_index(q.last_index or 0, 10)
            held = sink.queue.table_store_get("chronicle.append.lock")
            assert held is not None and held & 0xFFFFFFFF == os.getpid()  # (+ PID ns tag)

    run(main())
    q.close()
    assert _append_lock(tmp_path / "sink") == -(1 << 63)  # released
    assert_same_queue(tmp_path / "src", tmp_path / "sink")


# -- separate processes, killed and restarted ------------------------------------------------

WRITER = textwrap.dedent("""
    import os, struct, sys, threading, time
    import aiochronicle as ac
    path, rate = sys.argv[1], float(sys.argv[2])
    # appends at `rate` a second until a line on stdin says stop (a handshake, so the
    # faults happen mid-stream however slow the machine), then prints the count
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    with ac.open_queue(path, roll_cycle=ac.RollCycles.TEST_SECONDLY,
                       block_size=1 << 20) as q:
        app = q.appender()
        t0 = time.monotonic()
        i = 0
        while not stop.is_set():
            due = t0 + i / rate
            while time.monotonic() < due:
                time.sleep(0.0005)
            app.append(struct.pack("<q", i) + os.urandom(8 + i % 120))
            i += 1
    print("done", i, flush=True)
""")


async def _until_true(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait (on the loop) until ``cond()`` holds; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        assert loop.time() < deadline, "the awaited condition never held"
        await asyncio.sleep(0.005)


class _Proc:
    """A child process with its output in files (for the failure message)."""

    def __init__(self, name: str, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.name = name
        self.args = args
        self.cwd = cwd
        self.env = env
        self.starts = 0
        self.p: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self.starts += 1
        out = open(self.cwd / f"{self.name}.{self.starts}.log", "wb")  # noqa: SIM115
        self.p = subprocess.Popen(self.args, cwd=self.cwd, env=self.env, stdout=out,
                                  stderr=subprocess.STDOUT)
        out.close()

    def kill(self) -> None:
        assert self.p is not None
        self.p.kill()
        self.p.wait()

    def stop(self) -> int:
        assert self.p is not None
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(15)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return self.p.wait()

    def logs(self) -> str:
        return "".join(f"--- {p.name}\n{p.read_text(errors='replace')}"
                       for p in sorted(self.cwd.glob(f"{self.name}.*.log")))


@pytest.mark.slow
def test_processes_killed_and_restarted_mid_stream_end_identical(tmp_path: Path) -> None:
    """A writer process appends while `aiochronicle replicate` processes serve
    (source) and mirror it (sink1, which serves sink3 as the next hop; sink2);
    sink2, the source and sink1 are each killed with SIGKILL mid-stream and
    restarted.  At the end every sink equals the source byte for byte."""
    env = dict(os.environ, AIOCHRONICLE_REPLICATION_SECRET=SECRET.decode(),
               PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    cli = [sys.executable, "-m", "aiochronicle", "replicate"]
    p_src, p_hop = _free_port(), _free_port()
    rate = 4_000.0
    writer = subprocess.Popen([sys.executable, "-c", WRITER, "src", str(rate)],
                              cwd=tmp_path, env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    assert writer.stdin is not None and writer.stdout is not None
    total = -1
    procs: dict[str, _Proc] = {}
    try:
        procs["source"] = _Proc("source", [*cli, "serve", "src", "--listen",
                                           f"127.0.0.1:{p_src}", "-v",
                                           "--roll-cycle", "TEST_SECONDLY"], tmp_path, env)
        procs["sink1"] = _Proc("sink1", [*cli, "sink", "s1", "--source", f"127.0.0.1:{p_src}",
                                         "--serve", f"127.0.0.1:{p_hop}", "--name", "sink1",
                                         "-v"], tmp_path, env)
        procs["sink2"] = _Proc("sink2", [*cli, "sink", "s2", "--source", f"127.0.0.1:{p_src}",
                                         "--name", "sink2", "-v"], tmp_path, env)
        procs["sink3"] = _Proc("sink3", [*cli, "sink", "s3", "--source", f"127.0.0.1:{p_hop}",
                                         "--name", "sink3", "-v"], tmp_path, env)
        def count(name: str) -> int:
            with contextlib.suppress(ac.ChronicleError, FileNotFoundError), \
                    ac.open_queue(tmp_path / name, read_only=True) as q:
                return q.entry_count()
            return 0

        def when(name: str, n: int) -> None:
            """Wait until queue ``name`` holds ``n`` excerpts; the writer must
            still be writing (so what follows happens mid-stream)."""
            deadline = time.monotonic() + 60  # generous: five processes on two CPUs
            while count(name) < n:
                assert time.monotonic() < deadline, f"{name} stuck at {count(name)}\n" + \
                    "".join(p.logs() for p in procs.values())
                time.sleep(0.02)
            assert writer.poll() is None, "the writer stopped before the faults"

        when("s2", 1500)
        procs["sink2"].kill()
        procs["sink2"].start()
        when("s2", count("s2") + 1000)  # caught up and streaming again
        procs["source"].kill()
        procs["source"].start()
        when("s3", count("s1") + 500)
        procs["sink1"].kill()  # the middle hop: sink3 loses its source too
        procs["sink1"].start()
        when("src", count("src") + 4000)  # the writer goes on after the last fault
        writer.stdin.write(b"stop\n")
        writer.stdin.close()
        done = writer.stdout.readline().split()
        assert writer.wait(60) == 0 and done[0] == b"done", done
        total = int(done[1])
        with ac.open_queue(tmp_path / "src", read_only=True) as q:
            last = q.last_index
        assert last is not None
        # generous: a hop that lost its source reconnects with back-off, and a
        # loaded CI machine may miss heartbeats on the way
        deadline = time.monotonic() + 90
        for name in ("s1", "s2", "s3"):
            while True:
                with contextlib.suppress(ac.ChronicleError, FileNotFoundError), \
                        ac.open_queue(tmp_path / name, read_only=True) as q:
                    if q.last_index == last:
                        break
                assert time.monotonic() < deadline, \
                    f"{name} did not catch up\n" + "".join(p.logs() for p in procs.values())
                time.sleep(0.2)
        with ac.open_queue(tmp_path / "src", read_only=True) as q:
            assert q.table_store_get("chronicle.lastIndexReplicated") == last
    finally:
        if writer.poll() is None:
            writer.kill()
        codes = {name: p.stop() for name, p in procs.items()}
    logs = "".join(p.logs() for p in procs.values())
    assert codes == dict.fromkeys(procs, 0), logs
    assert "Traceback" not in logs, logs
    for name in ("s1", "s2", "s3"):
        assert assert_same_queue(tmp_path / "src", tmp_path / name) == total
        assert _append_lock(tmp_path / name) == -(1 << 63)  # released on SIGTERM
    with ac.open_queue(tmp_path / "src", read_only=True) as q:
        assert q.table_store_get("chronicle.lastAcknowledgedIndexReplicated") == last
    # each restarted process resumed where it was: no sink started over
    assert "resumes after none" not in procs["source"].logs().split("--- source.2")[1]
    for name in ("sink1", "sink3"):
        assert procs[name].logs().count("streaming from") >= 2


def test_cli_refuses_to_run_without_a_secret_or_tls(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AIOCHRONICLE_REPLICATION_SECRET"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-m", "aiochronicle", "replicate", "serve",
                          str(tmp_path / "q"), "--listen", "0"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert out.returncode == 2
    assert "shared secret" in out.stderr and out.stderr.count("\n") == 1
    (tmp_path / "empty").write_text("\n")
    out = subprocess.run([sys.executable, "-m", "aiochronicle", "replicate", "sink",
                          str(tmp_path / "s"), "--source", "127.0.0.1:1", "--secret-file",
                          str(tmp_path / "empty")], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.returncode == 2 and "empty" in out.stderr
