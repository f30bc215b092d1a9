"""The Grafana dashboard (deploy/grafana/sidecar-dashboard.json) and the example alerting rules
(deploy/grafana/sidecar-alerts.yaml) ask only for what a real
``sidecar serve --push``'s /metrics exposes: every metric it names, every label value it
matches exactly, every label it groups by (besides those Prometheus adds when it scrapes)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import promql_parser
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support.helpers import ROOT, Serve, Spawner, free_port, wait_until

DASHBOARD = ROOT / "deploy" / "grafana" / "sidecar-dashboard.json"
ALERTS = ROOT / "deploy" / "grafana" / "sidecar-alerts.yaml"
#: Labels Prometheus's Kubernetes discovery adds to what it scrapes, not sidecar's own.
SCRAPE_LABELS = {"namespace", "pod", "instance", "job"}
_METRIC = re.compile(r"\b(sidecar_[a-z_]+)\b(\{[^}]*\})?")
_MATCHER = re.compile(r'(\w+)\s*(=~|!=|!~|=)\s*"([^"]*)"')
_BY = re.compile(r"\bby\s*\(([^)]*)\)")


def queries(doc: dict[str, Any]) -> list[str]:
    found = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    for variable in doc["templating"]["list"]:
        if variable["type"] == "query":
            found.append(variable["definition"])
    return found


def alert_queries(rules: dict[str, Any]) -> list[str]:
    """The expressions of the example alerting rules, each rule checked for what Prometheus
    needs of it."""
    found = []
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert {"alert", "expr", "labels", "annotations"} <= set(rule), rule
            assert rule["labels"]["severity"] in ("warning", "critical"), rule
            assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule
            found.append(str(rule["expr"]))
    return found


def exposed(text: str) -> dict[str, list[dict[str, str]]]:
    """Sample name -> the label sets of its samples; a family with no samples now (no
    untraceable process, say) is there by its name, its labels unknown."""
    out: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        if not family.samples:
            out[family.name] = []
        for sample in family.samples:
            out.setdefault(sample.name, []).append(dict(sample.labels))
    return out


def test_every_dashboard_query_names_what_metrics_exposes(spawn: Spawner, tmp_path: Path) -> None:
    doc = json.loads(DASHBOARD.read_text())
    exprs = queries(doc)
    assert len(exprs) >= 15
    alerts = alert_queries(yaml.safe_load(ALERTS.read_text()))
    assert len(alerts) == 3
    exprs += alerts
    # each parses as PromQL, Grafana's variables given values (label_values() is Grafana's)
    for expr in (e for e in exprs if not e.startswith("label_values(")):
        promql_parser.parse(expr.replace("$namespace", ".*").replace("$__rate_interval", "1m"))
    target = spawn.target("tornado_app")
    # pushing to a port nobody listens on: the push metrics are there, failing
    server = Serve(
        tmp_path / "d.db",
        "--window",
        "1",
        "--pid",
        str(target.pid),
        "--push",
        f"http://127.0.0.1:{free_port()}",
    )
    try:

        def metrics() -> dict[str, list[dict[str, str]]]:
            return exposed(server.request("/metrics")[1].decode())

        # a window in: the loop's shares and the target's cgroup read (once a window)
        assert wait_until(
            lambda: (
                bool(metrics().get("sidecar_loop_share"))
                and "sidecar_cpu_cfs_periods_total" in metrics()
            ),
            timeout=30,
        )
        samples = metrics()
    finally:
        server.stop()
    named: set[str] = set()
    for expr in exprs:
        grouped = {g.strip() for m in _BY.finditer(expr) for g in m[1].split(",") if g.strip()}
        metrics_here = list(_METRIC.finditer(expr))
        assert metrics_here, expr
        for match in metrics_here:
            name = match[1]
            named.add(name)
            assert name in samples, f"{name} (in {expr!r}) is not in /metrics"
            if not samples[name]:
                continue
            labels = set().union(*(set(s) for s in samples[name]))
            for label, op, value in _MATCHER.findall(match[2] or ""):
                if label in SCRAPE_LABELS:
                    continue
                assert label in labels, f"{name} has no label {label} (in {expr!r})"
                if op == "=":
                    values = {s.get(label) for s in samples[name]}
                    assert value in values, f"{name}{{{label}={value!r}}}: only {values}"
            assert grouped - SCRAPE_LABELS <= labels | SCRAPE_LABELS, (expr, labels)
    # the dashboard covers the loop shares and stalls, the CPU throttling, the sampler, the store
    # and the push
    for prefix in (
        "sidecar_loop_share",
        "sidecar_loop_stall_seconds_bucket",
        "sidecar_loop_stall_seconds_count",
        "sidecar_cpu_cfs_",
        "sidecar_sampler_",
        "sidecar_store_",
        "sidecar_push_",
    ):
        assert any(name.startswith(prefix) for name in named), prefix
