"""The JVM reader on a Spark standalone cluster and on S3.

A master and a worker (one core, executors of 512 MB) started from the
pip-installed PySpark as separate JVMs on 127.0.0.1, an S3 server (moto's server
mode, in its own process) holding a copy of a queue, and one job
(``cluster_job.py``) as its own driver process, set up as docs/spark.md says:
``session_config(s3a=..., jar_cache=...)`` (hadoop-aws and the AWS SDK's ``s3``
and ``s3-transfer-manager``, resolved once by Spark's Ivy from Maven Central or
``~/.ivy2.5.2`` and then named in ``spark.jars``) and ``register`` (the jar).  The
job's batch reads of a multi-cycle queue, from its directory and from
``s3a://``, by the JVM reader and by the Python data source, and its stream into
Parquet, stopped and restarted while another process appends, are checked here
against the library's own reads.  Then docs/spark.md's S3 recipe runs as printed
(but for its host names) as a driver of its own, with the job's jar list.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3  # moto[server] of the dev extra brings it
import pytest
from test_spark_damaged import PER_CYCLE, _not_complete, _payload
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


def _damaged_in_a_sealed_cycle(path: Path) -> None:
    """3 cycles of 1,000 excerpts whose middle cycle's 501st excerpt header is not
    complete: the driver plans the read from the index, and the executor that
    reads that cycle finds the damage."""
    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(path, roll_cycle=ac.RollCycles.TEST_SECONDLY, time_provider=clock) as q:
        a = q.appender()
        for c in range(3):
            for i in range(PER_CYCLE):
                a.append(_payload(c, i))
            clock.advance_millis(1000)
    _not_complete(sorted(path.glob("*.cq4"))[1])


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Run the job once on a fresh cluster and S3 server; its results."""
    assert shutil.which("java") is not None or os.environ.get("JAVA_HOME"), \
        "Spark needs Java (none on PATH or in JAVA_HOME)"

    tmp = tmp_path_factory.mktemp("cluster")
    queue = tmp / "q"
    _queue(queue)
    _damaged_queue(tmp / "damaged")
    _damaged_in_a_sealed_cycle(tmp / "damaged_scan")
    creds = {"access.key": "test-key", "secret.key": "test-secret"}
    with s3_server() as endpoint, standalone_cluster(tmp / "cluster", memory="512m") as master:
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=creds["access.key"],
                          aws_secret_access_key=creds["secret.key"])
        s3.create_bucket(Bucket="bucket")
        for f in sorted(queue.iterdir()):
            s3.upload_file(str(f), "bucket", f"queue/{f.name}")
        spec = {"master": master, "tmp": str(tmp), "queue": str(queue),
                "damaged": str(tmp / "damaged"), "damaged_scan": str(tmp / "damaged_scan"),
                "jar_cache": str(tmp / "cache" / "aiochronicle" / "spark-jars.json"),
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
        result["job_log"] = (tmp / "job.log").read_text()
        for f in sorted(queue.iterdir()):  # where the recipe reads
            s3.upload_file(str(f), "bucket", f"queues/md/{f.name}")
        result["recipe"] = _run_recipe(tmp, endpoint, master, creds)
    result["spec"] = spec
    yield result


def _recipe_code() -> str:
    """docs/spark.md's S3 recipe: the Python block of its S3 section."""
    text = (HERE.parents[1] / "docs" / "spark.md").read_text()
    section = text[text.index("\n### S3\n"):]
    section = section[:section.index("\n## ")]
    (code,) = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
    return str(code)


def _run_recipe(tmp: Path, endpoint: str, master: str, creds: dict[str, str]) -> dict[str, Any]:
    """Run the recipe as printed but for its two host names, as its own driver
    process, with the job's list of resolved jars as its ``jar_cache``
    ($XDG_CACHE_HOME) and the cluster's small executors as site defaults
    ($SPARK_CONF_DIR: the recipe sets no memory, and the worker offers 512 MB)."""
    code = _recipe_code()
    for printed, here in (("http://s3.internal:9000", endpoint),
                          ("spark://master-host:7077", master)):
        assert code.count(printed) == 1, printed
        code = code.replace(printed, here)
    out = tmp / "recipe.json"
    script = tmp / "recipe.py"
    script.write_text(code + textwrap.dedent(f"""
        import json
        rows = df.selectExpr("index", "cycle", "sequence", "hex(payload)").collect()
        plan = str(df._jdf.queryExecution().executedPlan().toString())
        with open({str(out)!r}, "w") as f:
            json.dump({{"rows": [list(r) for r in rows], "plan": plan}}, f)
        spark.stop()
        """))
    conf = tmp / "recipe-conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(
        "spark.executor.memory 512m\nspark.driver.memory 512m\nspark.ui.enabled false\n"
        "spark.driver.host 127.0.0.1\nspark.driver.bindAddress 127.0.0.1\n"
        f"spark.local.dir {tmp / 'recipe-local'}\n")
    env = dict(os.environ, AWS_ACCESS_KEY_ID=creds["access.key"],
               AWS_SECRET_ACCESS_KEY=creds["secret.key"], SPARK_CONF_DIR=str(conf),
               PYTHONPATH=str(HERE.parents[1]),  # this checkout, from the recipe's directory
               XDG_CACHE_HOME=str(tmp / "cache"))
    with (tmp / "recipe.log").open("w") as log:
        try:
            rc: int | str = subprocess.run([sys.executable, str(script)], cwd=tmp, env=env,
                                           stdout=log, stderr=subprocess.STDOUT,
                                           timeout=JOB_TIMEOUT).returncode
        except subprocess.TimeoutExpired:
            rc = f"not done in {JOB_TIMEOUT} s"
    got: dict[str, Any] = {"rc": rc, "log": (tmp / "recipe.log").read_text()}
    if out.exists():
        got.update(json.loads(out.read_text()))
    return got


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


RESOLVING = ":: resolving dependencies ::"
"""What Spark's Ivy prints when it resolves packages."""


def test_the_s3_recipe_runs_as_printed(job: dict[str, Any]) -> None:
    """docs/spark.md's S3 recipe, run as its own driver on the cluster against moto:
    its executor reads the queue's rows from ``s3a://`` with the credentials the
    recipe names, and its driver start resolves no package (``jar_cache``)."""
    got = job["recipe"]
    assert got["rc"] == 0, got["log"][-4000:]
    want = _library(job["spec"]["queue"])
    assert got["rows"] == want
    assert "BatchScan chronicle" in got["plan"]
    assert RESOLVING not in got["log"], got["log"][-4000:]


def test_packages_resolve_once_with_jar_cache(job: dict[str, Any]) -> None:
    """The job's two sessions (``session_config(jar_cache=...)``) resolved the S3A
    packages once, in the JVM ``session_config`` starts for it, and their driver
    starts named the 51 jars in ``spark.jars``."""
    assert job["job_log"].count(RESOLVING) == 1, job["job_log"][-4000:]
    cache = json.loads(Path(job["spec"]["jar_cache"]).read_text())
    (jars,) = cache.values()
    assert len(jars) == 51 and all(Path(j).is_file() for j in jars)
    assert any(Path(j).name == "org.apache.hadoop_hadoop-aws-3.5.0.jar" for j in jars)
    assert not any("awssdk_bundle" in j for j in jars)  # excluded
    assert job["s3"]["rows"] == _library(job["spec"]["queue"])  # they serve s3a://


def test_session_config_reads_a_kept_jar_list(job: dict[str, Any], tmp_path: Path) -> None:
    """With the job's list kept, ``session_config(jar_cache=...)`` names its jars in
    ``spark.jars`` and asks Spark for no package (the S3A settings stay)."""
    from aiochronicle.spark import session_config

    kept = tmp_path / "jars.json"
    shutil.copy(job["spec"]["jar_cache"], kept)
    (jars,) = json.loads(kept.read_text()).values()
    conf = session_config(s3a={"endpoint": "http://s3:9000"}, jar_cache=kept)
    assert conf == {"spark.hadoop.fs.s3a.endpoint": "http://s3:9000",
                    "spark.jars": ",".join(jars)}


def test_the_python_source_from_register_runs_in_the_executors(job: dict[str, Any]) -> None:
    """``register``'s Python data source (pickled by reference) is imported by the
    executors' Python workers, reads the rows, and its error on a damaged queue
    reaches the driver by name (a user saw UnknownReason there)."""
    got = _ok(job, "python")
    assert got["rows"] == _library(job["spec"]["queue"])
    assert got["pids"] and job["driver_jvm_pid"] not in got["pids"]
    assert "(Python)" in got["plan"] or "PythonDataSource" in got["plan"], got["plan"]
    raised = _ok(job, "damaged_python")["raised"]
    assert raised is not None
    assert "CorruptQueueError" in raised, raised[:3000]
    assert "UnknownReason" not in raised, raised[:3000]


def test_an_executors_corrupt_queue_error_keeps_its_name(job: dict[str, Any]) -> None:
    """Damage the driver's plan does not see, found by the executor's scan: the task's
    failure crosses from the executor's JVM (the jar from register()'s ADD JAR) to the
    driver's, and the reader's error reaches PySpark by name, from each reader.  (The
    driver could not load the exception's class, only in the jar ADD JAR gave the
    session, and Spark reported the failure as UnknownReason; the damage of the test
    above is found while planning, on the driver, and never crossed.)"""
    raised = _ok(job, "damaged_scan")["raised"]
    assert raised is not None
    assert "Lost task" in raised and "executor 0" in raised, raised[:3000]  # on the executor
    assert "CorruptQueueException" in raised and "corrupt excerpt header" in raised, \
        raised[:3000]
    assert "UnknownReason" not in raised, raised[:3000]
    raised = _ok(job, "damaged_scan_python")["raised"]
    assert raised is not None
    assert "CorruptQueueError" in raised and "UnknownReason" not in raised, raised[:3000]


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
