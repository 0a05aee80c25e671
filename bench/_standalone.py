"""A Spark standalone cluster on this host, for bench/spark.py ``--cluster`` and
tests/spark/test_spark_cluster.py: a master and a worker started from the
pip-installed PySpark (``bin/spark-class``), each its own JVM on 127.0.0.1.

Both bind port 0 (the master's URL is read from its log, so no port is guessed);
the worker offers ``cores`` and ``memory`` to executors, which it starts as its
own child processes.  Leaving the ``with`` block stops them all, however it is
left: each daemon is a process group of its own, ended as a group.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

MASTER_URL = r"Starting Spark master at (spark://\S+)"
REGISTERED = "Successfully registered with master"


def spark_home() -> Path:
    """The Spark distribution inside the installed PySpark package."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class Daemon:
    """A ``spark-class`` process whose log lines are watched for a pattern."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.log = name, log
        self._lines: list[str] = []
        self._seen = threading.Condition()
        self._out = log.open("w")
        self.proc = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args], env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._out.write(line)
            self._out.flush()
            with self._seen:
                self._lines.append(line)
                self._seen.notify_all()
        with self._seen:
            self._lines.append("")  # end of output
            self._seen.notify_all()

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first log line matching ``pattern`` (its match), waiting up to ``timeout`` s."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._seen:
            while True:
                for line in self._lines[seen:]:
                    if line == "":
                        raise RuntimeError(f"{self.name} exited ({self.proc.poll()}) before "
                                           f"{rx.pattern!r}: {self.tail()}")
                    m = rx.search(line)
                    if m:
                        return m
                seen = len(self._lines)
                left = deadline - time.monotonic()
                if left <= 0 or not self._seen.wait(left):
                    raise TimeoutError(f"{self.name}: no {rx.pattern!r} in {timeout:g} s: "
                                       f"{self.tail()}")

    def tail(self) -> str:
        with self._seen:
            return "".join(self._lines[-40:])

    def stop(self) -> None:
        """Stop the daemon (SIGTERM to its process group, then SIGKILL)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        self._reader.join(10)
        self._out.close()


@contextmanager
def standalone_cluster(base: Path, *, cores: int = 1, memory: str = "1g",
                       timeout: float = 120.0) -> Iterator[str]:
    """Start a master and one worker under ``base``; yield the master's ``spark://`` URL."""
    base.mkdir(parents=True, exist_ok=True)
    conf = base / "conf"
    conf.mkdir(exist_ok=True)  # an empty configuration directory: no site defaults
    env = dict(os.environ, SPARK_HOME=str(spark_home()), SPARK_CONF_DIR=str(conf),
               SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(base / "logs"),
               SPARK_DAEMON_MEMORY="256m", SPARK_DAEMON_JAVA_OPTS="-XX:+UseSerialGC")
    with ExitStack() as stack:
        master = Daemon("master", ["org.apache.spark.deploy.master.Master", "--host",
                                   "127.0.0.1", "--port", "0", "--webui-port", "0"],
                        env, base / "master.log")
        stack.callback(master.stop)
        url = master.wait_for(MASTER_URL, timeout).group(1)
        worker = Daemon("worker", ["org.apache.spark.deploy.worker.Worker", "--host",
                                   "127.0.0.1", "--port", "0", "--webui-port", "0",
                                   "--cores", str(cores), "--memory", memory,
                                   "--work-dir", str(base / "work"), url],
                        dict(env, SPARK_LOCAL_DIRS=str(base / "local")), base / "worker.log")
        stack.callback(worker.stop)
        worker.wait_for(REGISTERED, timeout)
        yield url
