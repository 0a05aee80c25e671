"""The JVM reader on a real HDFS: Hadoop's MiniDFSCluster (a name node and a data node)
in a separate JVM whose classpath Maven resolves from ``tests/spark/hdfs/pom.xml``
(Maven Central only; cached in ``~/.m2``).  A queue copied there through Hadoop's
FileSystem API reads the same rows over ``hdfs://`` as from the local directory:
raw columns, decoded method calls, and a stream of them."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_spark_jvm import DAY, T0, plan, rows, tailed

import aiochronicle as ac
from aiochronicle.spark import hadoop_version

HERE = Path(__file__).resolve().parent / "hdfs"


def _classpath(out: Path) -> str:
    mvn = shutil.which("mvn")
    assert mvn is not None, "mvn not found on PATH: the HDFS test needs Maven"
    subprocess.run([mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(HERE / "pom.xml"),
                    f"-Dhadoop.version={hadoop_version()}", "dependency:build-classpath",
                    f"-Dmdep.outputFile={out}"], check=True, timeout=600)
    return out.read_text().strip()


@pytest.fixture(scope="module")
def hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The ``hdfs://host:port`` of a MiniDFSCluster that lives as long as this module."""
    tmp = tmp_path_factory.mktemp("hdfs")
    java = shutil.which("java")
    assert java is not None
    cp = _classpath(tmp / "classpath.txt")
    log = (tmp / "minidfs.log").open("w")
    proc = subprocess.Popen([java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                             "-cp", cp, str(HERE / "MiniHdfs.java"), str(tmp / "dfs")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=log, text=True)
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin is not None and stdout is not None
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(120)
    try:
        if not (got and got[0].startswith("hdfs://")):
            tail = (tmp / "minidfs.log").read_text()[-3000:]
            pytest.fail(f"MiniDFSCluster did not start ({got}): {tail}")
        yield got[0].strip()
    finally:
        stdin.close()  # it shuts the cluster down when its input closes
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _queue(path: Path) -> None:
    """Method calls over three cycles (a gap between), metadata, small blocks (HDFS
    stores the files' whole length)."""
    from spark_messages import Point, Quote, Trading

    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(path, time_provider=clock, block_size=64 << 10) as q:
        ac.set_queue_codec(q, "msgpack")
        a = q.appender()
        w = a.method_writer(Trading)
        for i in range(300):
            w.on_quote(Quote(i, i / 8, f"S{i % 17}"))
            w.on_point(Point(i, -i / 2))
            w.fill(f"F{i}", i)
            if i % 50 == 0:
                a.append_metadata(b"note")
            if i in (100, 200):
                clock.advance_millis(DAY * (1 if i == 100 else 3))


def _copy_in(spark: Any, local: Path, url: str) -> None:
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    dst = jvm.org.apache.hadoop.fs.Path(url)
    fs = dst.getFileSystem(conf)
    fs.copyFromLocalFile(False, True, jvm.org.apache.hadoop.fs.Path(local.as_uri()), dst)
    assert fs.getFileStatus(dst).isDirectory()


def test_a_queue_on_hdfs_reads_as_the_local_one(spark: Any, hdfs: str, tmp_path: Path) -> None:
    local = tmp_path / "q"
    _queue(local)
    url = f"{hdfs}/queues/q"
    _copy_in(spark, local, url)
    remote = spark.read.format("chronicle").option("engine", "jvm").load(url)
    assert "(Python)" not in plan(remote)
    got = rows(remote)
    assert [(r[0], r[3]) for r in got] == tailed(local)
    assert len({r[1] for r in got}) == 3  # every cycle
    for options in ({"includeMetadata": "true", "partitionSize": "128"},
                    {"interface": "spark_messages:Trading", "includePayload": "false"}):
        def read(path: str, opts: dict[str, str] = options) -> list[Any]:
            r = spark.read.format("chronicle").option("engine", "jvm")
            for k, v in opts.items():
                r = r.option(k, v)
            return rows(r.load(path))

        assert read(url) == read(str(local))
    # a stream over HDFS, its calls decoded in the JVM: every excerpt once
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    query = (spark.readStream.format("chronicle").option("maxRecordsPerTrigger", "400")
             .option("interface", "spark_messages:Trading").load(url)
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    streamed = spark.read.parquet(str(out)).orderBy("index")
    assert [(r["index"], bytes(r["payload"])) for r in streamed.collect()] == tailed(local)
    batch = (spark.read.format("chronicle").option("interface", "spark_messages:Trading")
             .load(str(local)))
    cols = ["index", "method", "on_quote", "fill"]
    assert rows(streamed.select(*cols)) == rows(batch.select(*cols))
