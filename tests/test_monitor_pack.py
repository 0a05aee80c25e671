"""The dashboard and the alert pack of ``docs/monitoring/``: the rules pass
``promtool test rules`` (promtool built from the Prometheus Go module, see
``tests/promtool.py``), and every metric the dashboard's queries and the
rules name is served by a live exporter (or, for per-hop latency, by
:class:`~aiochronicle.metrics.ServiceMetrics`)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import promtool
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from skips import skip, under_ci
from test_monitor import TIMEOUT, Endpoint, _msgpack_call

import aiochronicle as ac
from aiochronicle.metrics import ServiceMetrics

PACK = Path(__file__).resolve().parent.parent / "docs" / "monitoring"
DASHBOARD = PACK / "aiochronicle-dashboard.json"
RULES = PACK / "aiochronicle-rules.yml"
RULES_TEST = PACK / "aiochronicle-rules.test.yml"

#: series Prometheus makes itself, not an exporter
FROM_PROMETHEUS = {"up"}
#: PromQL words that look like metric names
_WORDS = re.compile(r"\b([a-z_][a-z0-9_]*)\b(?!\s*\()")


def _exprs() -> list[str]:
    out = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"]
           for t in p.get("targets", [])]
    for var in json.loads(DASHBOARD.read_text())["templating"]["list"]:
        if var["type"] == "query":
            out.append(var["definition"])
    for g in yaml.safe_load(RULES.read_text())["groups"]:
        out.extend(r["expr"] for r in g["rules"])
    return out


def _metric_names(expr: str) -> set[str]:
    """The metric names in a PromQL expression: the names before a selector
    or standing alone, less label names, functions and keywords."""
    text = re.sub(r'"[^"]*"', '""', expr)  # label values
    text = re.sub(r"\{[^}]*\}", "{}", text)  # label matchers
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    return {w for w in _WORDS.findall(text)
            if w.startswith(("aiochronicle_", "process_")) or w in FROM_PROMETHEUS}


def test_metric_names_are_found() -> None:
    names = _metric_names('max by (queue, tailer) (aiochronicle_named_tailer_lag_seconds'
                          '{queue=~"$queue"}) > 300 and rate(up{job="x"}[5m]) == 0')
    assert names == {"aiochronicle_named_tailer_lag_seconds", "up"}


def test_every_metric_of_the_pack_is_served(tmp_path: Path,
                                            endpoint: list[Endpoint]) -> None:
    path = str(tmp_path / "q")
    with ac.open_queue(path) as q:
        a = q.appender()
        for i in range(5):
            a.append(_msgpack_call(ac.MessageHistory([(1, i)], [1000 + i])))
        t = q.tailer("audit")
        assert t.read_nowait() is not None
        t.close()
        e = Endpoint(path)
        endpoint.append(e)
        served = {s.name for fam in text_string_to_metric_families(e.text())
                  for s in fam.samples}
        # per-hop latency comes from a service's own registry
        registry = CollectorRegistry()
        ServiceMetrics(registry).observe_history(ac.MessageHistory([(3, 0)], [100, 900]))
        served |= {s.name for fam in text_string_to_metric_families(
            generate_latest(registry).decode()) for s in fam.samples}
    named = set().union(*map(_metric_names, _exprs()))
    assert "aiochronicle_named_tailer_lag_seconds" in named  # the parse found them
    assert "aiochronicle_hop_latency_seconds_bucket" in named
    assert named - FROM_PROMETHEUS - served == set()
    e.stop()


@pytest.mark.slow
def test_alert_pack_passes_promtool() -> None:
    tool, why = promtool.build()
    if tool is None:
        if under_ci():
            pytest.fail(f"promtool is needed in CI (scripts/test.sh builds it): {why}")
        skip("promtool", why)
    check = subprocess.run([str(tool), "check", "rules", str(RULES)], capture_output=True,
                           text=True, timeout=TIMEOUT)
    assert check.returncode == 0, check.stdout + check.stderr
    r = subprocess.run([str(tool), "test", "rules", RULES_TEST.name], cwd=PACK,
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout + r.stderr


def test_every_rule_has_a_severity_and_annotations() -> None:
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert any(r["alert"] == "AiochronicleExporterDown" for r in rules)
    for r in rules:
        assert r["labels"]["severity"] in ("critical", "warning", "info"), r["alert"]
        assert r["annotations"]["summary"] and r["annotations"]["description"], r["alert"]
