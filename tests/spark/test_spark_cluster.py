"""The JVM reader on a Spark standalone cluster and on S3.

A master and a worker (one core, executors of 512 MB) started from the
pip-installed PySpark as separate JVMs on 127.0.0.1, an S3 server (moto's server
mode, in its own process) holding a copy of a queue, and one job
(``cluster_job.py``) as its own driver process, set up as docs/spark.md says:
``session_config(s3a=...)`` (hadoop-aws and the AWS SDK's ``s3`` and
``s3-transfer-manager`` through ``spark.jars.packages``, resolved by Spark from
Maven Central and cached in ``~/.ivy2.5.2``) and ``register`` (the jar).  The
job's batch reads of a multi-cycle queue, from its directory and from
``s3a://``, and its stream into Parquet, stopped and restarted while another
process appends, are checked here against the library's own reads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3  # moto[server] of the dev extra brings it
import pytest
from test_spark_jvm import DAY, T0, tailed

import aiochronicle as ac

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "bench"))

from _standalone import standalone_cluster  # noqa: E402  (bench/_standalone.py)

JOB_TIMEOUT = 900
"""Seconds the job may take: its JVM, Maven resolution (cached after the first
run), three reads, and two streaming queries."""
STREAM_TIMEOUT = 180
"""Seconds the restarted streaming query has to read its first rows."""


@contextmanager
def s3_server() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1 (a free port) in its own process; its endpoint URL.
    It stops when its standard input closes."""
    code = ("import sys\nfrom moto.server import ThreadedMotoServer\n"
            "s = ThreadedMotoServer('127.0.0.1', 0, verbose=False)\ns.start()\n"
            "print(s.get_host_and_port()[1], flush=True)\nsys.stdin.read()\ns.stop()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        port = proc.stdout.readline().strip()
        assert port.isdigit(), f"moto did not start: {port!r}"
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.stdin.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _queue(path: Path) -> None:
    """3,000 excerpts over three cycles with a missing day between two, of
    varied lengths, with metadata excerpts among them."""
    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(path, time_provider=clock) as q:
        a = q.appender()
        for i in range(3000):
            a.append(b"%d:" % i + bytes([i % 251]) * (i % 97))
            if i % 400 == 0:
                a.append_metadata(b"note")
            if i in (999, 1999):
                clock.advance_millis(DAY * (1 if i == 999 else 2))


def _damaged_queue(path: Path) -> None:
    """A queue whose last excerpt's header claims ~1 GiB past the end of its file."""
    with ac.open_queue(path, time_provider=ac.SetTimeProvider(T0)) as q:
        a = q.appender()
        for i in range(5):
            a.append(b"e%d" % i)
    (cycle_file,) = path.glob("*.cq4")
    with open(cycle_file, "r+b") as f:
        pos, last = 0, -1
        while (word := int.from_bytes(f.read(4), "little")) not in (0, 0xC0000000):
            if not word & 0x40000000:
                last = pos
            pos = (pos + 4 + (word & 0x3FFFFFFF) + 3) & ~3
            f.seek(pos)
        f.seek(last)
        f.write((0x3FFFFFF0).to_bytes(4, "little"))


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Run the job once on a fresh cluster and S3 server; its results."""
    assert shutil.which("java") is not None or os.environ.get("JAVA_HOME"), \
        "Spark needs Java (none on PATH or in JAVA_HOME)"

    tmp = tmp_path_factory.mktemp("cluster")
    queue = tmp / "q"
    _queue(queue)
    _damaged_queue(tmp / "damaged")
    creds = {"access.key": "test-key", "secret.key": "test-secret"}
    with s3_server() as endpoint, standalone_cluster(tmp / "cluster", memory="512m") as master:
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=creds["access.key"],
                          aws_secret_access_key=creds["secret.key"])
        s3.create_bucket(Bucket="bucket")
        for f in sorted(queue.iterdir()):
            s3.upload_file(str(f), "bucket", f"queue/{f.name}")
        spec = {"master": master, "tmp": str(tmp), "queue": str(queue),
                "damaged": str(tmp / "damaged"),
                "s3": {"url": "s3a://bucket/queue",
                       "settings": {"endpoint": endpoint, "endpoint.region": "us-east-1",
                                    "path.style.access": "true",
                                    "connection.ssl.enabled": "false", **creds}},
                "stream": {"queue": str(tmp / "live"), "out": str(tmp / "out"),
                           "checkpoint": str(tmp / "ckpt"), "timeout": STREAM_TIMEOUT}}
        (tmp / "spec.json").write_text(json.dumps(spec))
        with (tmp / "job.log").open("w") as log:
            try:
                rc: int | str = subprocess.run(
                    [sys.executable, str(HERE / "cluster_job.py"), str(tmp / "spec.json"),
                     str(tmp / "result.json")],
                    stdout=log, stderr=subprocess.STDOUT, timeout=JOB_TIMEOUT).returncode
            except subprocess.TimeoutExpired:
                rc = f"not done in {JOB_TIMEOUT} s"
        if rc != 0 or not (tmp / "result.json").exists():
            pytest.fail(f"the job failed ({rc}): {(tmp / 'job.log').read_text()[-4000:]}")
        result = json.loads((tmp / "result.json").read_text())
    result["spec"] = spec
    yield result


def _ok(job: dict[str, Any], name: str) -> dict[str, Any]:
    got: dict[str, Any] = job[name]
    assert "error" not in got, got.get("error")
    return got


def _on_executor(job: dict[str, Any], got: dict[str, Any]) -> None:
    """The scan ran in the worker's executor JVMs, not in the driver's."""
    assert got["pids"] and job["driver_jvm_pid"] not in got["pids"]
    assert all("CoarseGrainedExecutorBackend" in c for c in got["cmdlines"]), got["cmdlines"]
    assert "(Python)" not in got["plan"] and "BatchScan chronicle" in got["plan"]


def _library(path: str) -> list[list[Any]]:
    with ac.open_queue(path, read_only=True) as q:
        shift = q.roll_cycle.cycle_shift
    return [[i, i >> shift, i & ((1 << shift) - 1), p.hex().upper()]
            for i, p in tailed(Path(path))]


def test_a_multi_cycle_queue_reads_exactly_in_the_executors(job: dict[str, Any]) -> None:
    got = _ok(job, "batch")
    want = _library(job["spec"]["queue"])
    assert got["rows"] == want and len(want) == 3000
    assert len({r[1] for r in want}) == 3 and got["partitions"] == 3
    _on_executor(job, got)


def test_a_second_session_ships_the_jar_again(job: dict[str, Any]) -> None:
    """``register`` in a new session of the same driver JVM (which still loads the
    JVM reader's classes) adds the jar again, so the new executors have it."""
    got = _ok(job, "again")
    assert got["rows"] == _library(job["spec"]["queue"])
    _on_executor(job, got)
    assert not set(got["pids"]) & set(job["batch"]["pids"])  # new executors


def test_a_queue_in_s3_reads_through_s3a(job: dict[str, Any]) -> None:
    got = _ok(job, "s3")
    assert got["rows"] == _library(job["spec"]["queue"])
    _on_executor(job, got)


def test_a_corrupt_queue_error_keeps_its_name_through_register(job: dict[str, Any]) -> None:
    """The executor's CorruptQueueException reaches the driver, whose JVM has the jar
    only through register()'s ADD JAR, with its class name and message (Spark reported
    a failure whose class the driver cannot load as UnknownReason)."""
    raised = _ok(job, "damaged")["raised"]
    assert raised is not None
    assert ("io.aiochronicle.spark.CorruptQueueException: an excerpt runs past the end of "
            "the file") in raised, raised[:3000]
    assert "UnknownReason" not in raised, raised[:3000]


def test_a_restarted_stream_holds_every_appended_index_once(job: dict[str, Any]) -> None:
    import pyarrow.parquet as pq

    got = _ok(job, "stream")
    st = job["spec"]["stream"]
    appended = tailed(Path(st["queue"]))
    assert len(appended) == got["written"]
    assert len({r[1] for r in _library(st["queue"])}) >= 3  # it rolled while streaming
    table = pq.read_table(st["out"]).sort_by("index")
    out = list(zip(table.column("index").to_pylist(), table.column("payload").to_pylist(),
                   strict=True))
    assert out == appended  # every index once, none missing, none twice
    # both runs of the one query (same id, from the checkpoint) read rows
    assert got["same_id"] and got["first"] >= 300 and got["second"] > 0


def test_session_config_names_s3a_and_its_packages() -> None:
    import pyspark

    from aiochronicle.spark import s3a_packages, session_config

    jars = Path(pyspark.__file__).parent / "jars"
    assert (jars / "hadoop-client-api-3.5.0.jar").is_file()  # PySpark 4.3.0's Hadoop
    conf = session_config(s3a={"endpoint": "http://s3:9000", "fs.s3a.path.style.access": "true"},
                          packages=["org.example:extra:1"], excludes=["org.example:big"])
    assert conf == {
        "spark.hadoop.fs.s3a.endpoint": "http://s3:9000",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.jars.packages": "org.apache.hadoop:hadoop-aws:3.5.0,software.amazon.awssdk:s3:"
                               "2.35.4,software.amazon.awssdk:s3-transfer-manager:2.35.4,"
                               "org.example:extra:1",
        "spark.jars.excludes": "software.amazon.awssdk:bundle,org.example:big"}
    assert "spark.jars" not in session_config(s3a=True)  # register adds the jar
    assert session_config() == {}
    with pytest.raises(ValueError, match="aws_sdk="):
        s3a_packages("3.9.9")
    assert s3a_packages("3.9.9", "2.40.0")[0] == "org.apache.hadoop:hadoop-aws:3.9.9"
