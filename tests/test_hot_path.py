"""The per-message calls through the CPython C API (``native/hot.c``):
``Appender.append`` and ``Tailer.read_nowait`` take every buffer type, fall back
to the Python slow path for everything else, and behave exactly as the
cffi path did; the module is also run under AddressSanitizer."""

from __future__ import annotations

import array
import fcntl
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

import aiochronicle as ac

T0 = 1_700_000_000_000
ROOT = Path(__file__).resolve().parents[1]


def test_append_takes_every_contiguous_buffer(tmp_path: Path) -> None:
    ba = bytearray(b"bytearray!")
    payloads = [b"bytes", ba, memoryview(b"a memoryview"), array.array("B", b"array"),
                memoryview(b"xxsliceyy")[2:7], "text as utf-8 \u00e9", b""]
    with ac.open_queue(tmp_path / "q", time_provider=ac.SetTimeProvider(T0)) as q:
        app = q.appender()
        idx = [app.append(p) for p in payloads]
        ba[:] = b"XXXXXXXXXX"  # the excerpt is a copy, not a view
        got = list(q.tailer())
    assert [e.index for e in got] == idx == list(range(idx[0], idx[0] + len(payloads)))
    assert [e.payload for e in got[:6]] == [b"bytes", b"bytearray!", b"a memoryview",
                                            b"array", b"slice",
                                            "text as utf-8 \u00e9".encode()]
    assert all(type(e) is ac.Excerpt and isinstance(e.payload, bytes) for e in got)
    assert got[0]._fields == ("index", "payload")


def test_append_refuses_what_is_not_a_payload(tmp_path: Path) -> None:
    with ac.open_queue(tmp_path / "q") as q:
        app = q.appender()
        with pytest.raises(TypeError):
            app.append(12345)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            app.append()  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            app.append(b"a", b"b")  # type: ignore[call-arg]
        strided = memoryview(b"abcdefgh")[::2]  # not contiguous
        with pytest.raises((TypeError, ValueError, BufferError)):
            app.append(strided)
        assert q.last_index is None  # nothing was written
    with pytest.raises(ac.QueueClosedError):
        app.append(b"after close")


def test_read_nowait_large_payloads_rolls_and_directions(tmp_path: Path) -> None:
    clock = ac.SetTimeProvider(T0)
    big = os.urandom(300_000)  # past the tailer's scratch buffer
    with ac.open_queue(tmp_path / "q", roll_cycle=ac.RollCycles.TEST_SECONDLY,
                       time_provider=clock) as q:
        app = q.appender()
        t = q.tailer()
        assert t.read_nowait() is None
        a = app.append(b"small")
        b = app.append(big)
        clock.advance_millis(1000)
        c = app.append(b"next cycle")
        assert t.read_nowait() == ac.Excerpt(a, b"small")
        assert t.read_nowait() == ac.Excerpt(b, big)
        assert t.read_nowait() == ac.Excerpt(c, b"next cycle")
        assert t.read_nowait() is None
        t.direction = ac.TailerDirection.BACKWARD
        assert t.move_to_index(c)
        assert [e.index for e in iter(t.read_nowait, None)] == [c, b, a]
        t.direction = ac.TailerDirection.FORWARD
        t.to_start()
        assert [e.index for e in iter(t.read_nowait, None)] == [a, b, c]
    with pytest.raises(ac.QueueClosedError):
        t.read_nowait()


def test_read_blocking_reads_in_c_only_where_read_nowait_is_the_c_one(tmp_path: Path) -> None:
    clock = ac.SetTimeProvider(T0)
    big = os.urandom(300_000)
    with ac.open_queue(tmp_path / "q", roll_cycle=ac.RollCycles.TEST_SECONDLY,
                       time_provider=clock) as q:
        app = q.appender()
        t = q.tailer()
        named = q.tailer("svc")
        backward = q.tailer(direction=ac.TailerDirection.BACKWARD)
        a = app.append(b"small")
        b = app.append(big)
        clock.advance_millis(1000)
        c = app.append(b"next cycle")  # a roll: C hands it to Python
        assert [t.read_blocking(timeout=1) for _ in range(3)] == [
            ac.Excerpt(a, b"small"), ac.Excerpt(b, big), ac.Excerpt(c, b"next cycle")]
        # nothing there: the wait (Python) gets the arguments, by keyword or not
        assert t.read_blocking(0.01) is None
        assert t.read_blocking(timeout=0.01) is None
        with pytest.raises(TypeError):
            t.read_blocking(0.01, 0.01)  # type: ignore[call-arg]
        # a named tailer's read marks the excerpt in hand (Python's read_nowait)
        ex = named.read_blocking(timeout=1)
        assert ex == ac.Excerpt(a, b"small")
        assert q.table_store_get("index.svc") == a
        assert named.read_blocking(timeout=1) == ac.Excerpt(b, big)
        assert q.table_store_get("index.svc") == b
        assert backward.move_to_index(c)
        assert [backward.read_blocking(timeout=1).index for _ in range(3)] == [c, b, a]
        t.close()
        with pytest.raises(ac.QueueClosedError):
            t.read_blocking(timeout=1)


def test_sync_mode_and_python_clock_appenders(tmp_path: Path) -> None:
    class Clock:
        def __init__(self) -> None:
            self.now = T0

        def current_time_millis(self) -> int:
            return self.now

    clock = Clock()
    with ac.open_queue(tmp_path / "q", roll_cycle=ac.RollCycles.TEST_SECONDLY,
                       time_provider=clock) as q:
        app = q.appender()
        i0 = app.append(b"a")
        clock.now += 1000  # the Python clock is read before each append
        i1 = app.append(b"b")
        assert q.roll_cycle.to_cycle(i1) == q.roll_cycle.to_cycle(i0) + 1
    with ac.open_queue(tmp_path / "s", time_provider=ac.SetTimeProvider(T0),
                       sync=ac.SyncMode.SYNC, sync_every=2) as q:
        app = q.appender()
        idx = [app.append(b"s%d" % i) for i in range(3)]
        assert q.table_store_get("chronicle.lastIndexMSynced") == idx[1]


#: the lines a script run with :func:`sanitized_hot`'s file (``sys.argv[1]``)
#: starts with: both modules of that one file loaded before aiochronicle
#: (``hot`` is the C API module)
LOAD_SANITIZED = """
import importlib.machinery, importlib.util, sys
def _load_ext(name, path):
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    loader.exec_module(mod)
    return mod
_load_ext("aiochronicle._core._cq", sys.argv[1])
hot = _load_ext("aiochronicle._core._hot", sys.argv[1])
"""


SANITIZED_RUN = LOAD_SANITIZED + textwrap.dedent(
    """
    import os, tempfile
    import aiochronicle as ac
    d = tempfile.mkdtemp()
    clock = ac.SetTimeProvider(1_700_000_000_000)
    with ac.open_queue(d, roll_cycle=ac.RollCycles.TEST_SECONDLY, time_provider=clock) as q:
        app = q.appender()
        t = q.tailer()
        sent = []
        for i in range(3000):
            p = os.urandom(i % 700) if i % 5 else bytearray(os.urandom(5000))
            sent.append(bytes(p))
            app.append(p if i % 3 else memoryview(p))
            if i % 1000 == 999:
                clock.advance_millis(1000)
        got = [ex.payload for ex in iter(t.read_nowait, None)]
        assert got == sent, (len(got), len(sent))
        t.to_start()
        got = [ex.payload for ex in iter(lambda: t.read_blocking(timeout=0.001), None)]
        assert got == sent, (len(got), len(sent))
        # async for: excerpts there (the native first step), waits handed over
        # to the coroutine (its steps, throw and close passed through)
        import asyncio
        async def drain():
            t.to_start()
            seen = []
            while True:
                try:
                    async with asyncio.timeout(0.01):
                        seen.append((await anext(t)).payload)
                except TimeoutError:
                    return seen
        assert asyncio.run(drain()) == sent
        aw = t.__anext__()
        aw.close()
        del aw
        # the common msgpack call, dispatched in C, with a handler raising once
        import msgspec
        class Sink:
            def __init__(self):
                self.got, self.boom = [], True
            def on_value(self, v: int) -> None:
                if v == 7 and self.boom:
                    self.boom = False
                    raise RuntimeError(v)
                self.got.append(v)
        w = ac.open_queue(d + "m")
        wa = w.appender()
        for v in range(50):
            wa.append(msgspec.msgpack.encode(["on_value", v]))
        wa.append(msgspec.msgpack.encode(["on_value", "not an int"]))
        sink = Sink()
        r = w.tailer().method_reader(sink, on_error=lambda e, ex: None)
        try:
            r.read_available()
        except RuntimeError:
            pass
        while r.read_one():
            pass
        assert sink.got == [v for v in range(50) if v != 7], sink.got
        w.close()
        # method writers' calls encoded and appended in C (WriterMethod), in
        # each codec, across rolls, past the stack buffer and the kept
        # bytearray's limit, by keyword (the Python method) and with an
        # argument that does not encode; read back through read_one()
        class Calls:
            def on_value(self, v: int) -> None: ...
            def on_pair(self, a: int, b: str) -> None: ...
            def on_none(self) -> None: ...
        class Got(Calls):
            def __init__(self):
                self.got = []
            def on_value(self, v: int) -> None:
                self.got.append(v)
            def on_pair(self, a: int, b: str) -> None:
                self.got.append((a, len(b)))
            def on_none(self) -> None:
                self.got.append(None)
        for codec in ("msgpack", "json", "binary_wire"):
            with ac.open_queue(d + codec, roll_cycle=ac.RollCycles.TEST_SECONDLY,
                               time_provider=clock) as mq:
                mw = mq.appender().method_writer(Calls, codec=codec)
                want = []
                for i in range(400):
                    mw.on_value(i)
                    mw.on_pair(i, "x" * (i * 250))
                    want += [i, (i, i * 250)]
                    if i % 100 == 99:
                        clock.advance_millis(1000)
                mw.on_none()
                mw.on_value(v=-1)
                want += [None, -1]
                try:
                    mw.on_value(object())
                except (TypeError, ac.ChronicleError):
                    pass
                seen = Got()
                mr = mq.tailer().method_reader(seen)
                while mr.read_one():
                    pass
                assert seen.got == want, (codec, len(seen.got), len(want))
        try:
            app.append(memoryview(b"abcdef")[::2])
        except (TypeError, ValueError, BufferError):
            pass
    app.close()
    try:
        t.read_nowait()
    except ac.QueueClosedError:
        pass
    print("ok", len(got))
    """
)


def hot_sources() -> list[str]:
    """The C sources of the one native extension (aiochronicle._core._cq and
    aiochronicle._core._hot), as native/build_ffi.py names them."""
    spec = importlib.util.spec_from_file_location("_aiochronicle_build_ffi",
                                                  ROOT / "native" / "build_ffi.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return list(mod.HOT_SOURCES)


def sanitized_hot(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The one native extension (aiochronicle._core._cq with aiochronicle._core._hot in
    it) built with AddressSanitizer and UBSan by setup.py, once per run (the
    first test to need it builds it under a lock in the directory every
    pytest-xdist worker's temporary directories share; the others take it),
    and the environment to run Python with it (libasan preloaded); scripts
    load it with :data:`LOAD_SANITIZED`."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    assert cc is not None, "a C compiler is needed"
    libasan = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True,
                             text=True).stdout.strip()
    assert os.path.isabs(libasan) and os.path.exists(libasan), "libasan is missing"
    shared = tmp_path.parent  # the run's (or this worker's) base temporary directory
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # popen-gwN's parent: one per run
    lib = shared / "sanitized-lib"
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    with open(shared / "sanitized-lib.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not list((lib / "aiochronicle" / "_core").glob("_cq*" + suffix)):
                tmp = shared / "sanitized-lib.tmp"
                shutil.rmtree(tmp, ignore_errors=True)
                r = subprocess.run(
                    [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(tmp),
                     "--build-temp", str(shared / "sanitized-tmp")],
                    capture_output=True, text=True, timeout=600, cwd=ROOT,
                    env=dict(os.environ, AIOCHRONICLE_SANITIZE="1"))
                assert r.returncode == 0, r.stderr[-3000:]
                tmp.rename(lib)  # whole, or not there at all
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    (so,) = (lib / "aiochronicle" / "_core").glob("_cq*" + suffix)
    # this checkout's package (the scripts run in tmp_path: a relative PYTHONPATH
    # would miss it), with the sanitized extension loaded in place of its own
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = dict(os.environ, LD_PRELOAD=libasan, ASAN_OPTIONS="detect_leaks=0:halt_on_error=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1", PYTHONPATH=path)
    return so, env


def run_sanitized(tmp_path: Path, script: str) -> list[str]:
    """Run ``script`` with the sanitized C API module; its stdout words (it must
    exit cleanly with no sanitizer report)."""
    so, env = sanitized_hot(tmp_path)
    r = subprocess.run([sys.executable, "-c", script, str(so)], capture_output=True,
                       text=True, timeout=600, env=env, cwd=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-5000:]
    assert "ERROR: AddressSanitizer" not in out and "runtime error:" not in out, out[-5000:]
    return r.stdout.split()


@pytest.mark.checkout
def test_hot_module_under_address_sanitizer(tmp_path: Path) -> None:
    assert run_sanitized(tmp_path, SANITIZED_RUN) == ["ok", "3000"]


# with an argument: the sanitized build of the native extension
_IF_SANITIZED = "import sys\nif len(sys.argv) > 1:\n" + textwrap.indent(LOAD_SANITIZED, "    ")
GROWTH_RACE = _IF_SANITIZED + textwrap.dedent(
    """
    import tempfile, threading
    import aiochronicle as ac
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    d = tempfile.mkdtemp()
    N, WRITERS, READERS = 6000, 2, 2
    errors = []
    # the smallest block: the one cycle file grows (and is remapped) all the time
    with ac.open_queue(d, block_size=64 << 10) as q:
        pre = q.pretoucher(headroom=256 << 10).start(interval=0.0005)
        def write(w):
            try:
                app = q.appender()
                for i in range(N):
                    app.append(b"%d:%06d:" % (w, i) + bytes(100 + i % 900))
            except BaseException as exc:
                errors.append(exc)
        def read(out):
            try:
                t = q.tailer()
                while len(out) < N * WRITERS:
                    ex = t.read_nowait()
                    if ex is not None:
                        out.append(ex)
            except BaseException as exc:
                errors.append(exc)
        got = [[] for _ in range(READERS)]
        threads = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
        threads += [threading.Thread(target=read, args=(g,)) for g in got]
        for th in threads:
            th.start()
        for th in threads:
            th.join(300)
        pre.stop()
        assert not errors, errors
        assert not any(th.is_alive() for th in threads)
        for g in got:
            assert [ex.index for ex in g] == sorted(ex.index for ex in g)
            for w in range(WRITERS):
                mine = [ex.payload for ex in g if ex.payload.startswith(b"%d:" % w)]
                assert [int(m.split(b":")[1]) for m in mine] == list(range(N))
        assert got[0] == got[1]
        print("ok", len(got[0]), q.cycles() and 1)
    """
)


def test_mapping_grows_under_concurrent_threads(tmp_path: Path) -> None:
    """A pretoucher thread, appender threads and tailer threads grow and remap
    one cycle file at once: every excerpt arrives once, in order, intact."""
    r = subprocess.run([sys.executable, "-c", GROWTH_RACE], capture_output=True, text=True,
                       timeout=600, cwd=tmp_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    assert r.stdout.split() == ["ok", "12000", "1"]


@pytest.mark.checkout
def test_mapping_growth_under_address_sanitizer(tmp_path: Path) -> None:
    assert run_sanitized(tmp_path, GROWTH_RACE) == ["ok", "12000", "1"]
