"""gpushare.devcluster.prometheus: the configuration and rule file the live Prometheus gets are ones
promtool accepts, built from the shipped PrometheusRule (tests/integration/test_alerts_prometheus.py
runs the server itself)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpushare.devcluster.prometheus import (
    OPERATOR_JOB,
    RULES,
    APIServerTarget,
    ServiceMonitorDiscovery,
    config,
    dashboard_queries,
    format_panel_report,
    rule_file,
    servicemonitor_target_groups,
)


def _promtool() -> str:
    exe = os.environ.get("PROMTOOL") or shutil.which("promtool")
    if not exe:
        pytest.fail("promtool not found: run `make promtool` (or set PROMTOOL)", pytrace=False)
    return exe


def test_the_rule_file_is_the_prometheusrules_groups_and_promtool_accepts_it(tmp_path: Path) -> None:
    groups = rule_file()["groups"]
    assert groups == yaml.safe_load(RULES.read_text())["spec"]["groups"]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule_file()))
    proc = subprocess.run(
        [_promtool(), "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    count = sum(len(g["rules"]) for g in groups)
    assert count >= 12 and f"SUCCESS: {count} rules found" in proc.stdout, proc.stdout


def test_the_config_scrapes_each_replica_as_the_servicemonitor_does_and_promtool_accepts_it(
    tmp_path: Path,
) -> None:
    rules, token, ca = tmp_path / "rules.yaml", tmp_path / "token", tmp_path / "ca.crt"
    rules.write_text(yaml.safe_dump(rule_file()))
    token.write_text("t")
    ca.write_text("")
    cfg = config(["127.0.0.1:1", "127.0.0.1:2"], rules, APIServerTarget("https://127.0.0.1:6443", token, ca))
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    endpoints = yaml.safe_load((RULES.parent / "servicemonitor.yaml").read_text())["spec"]["endpoints"]
    assert {e["path"] for e in endpoints} == {jobs[OPERATOR_JOB]["metrics_path"]}
    # Each target with the endpoint label the ServiceMonitor gives (its endpoints' port names); the
    # webhook served in the operator's process (gpushare run --webhook) by default, else its own.
    assert jobs[OPERATOR_JOB]["static_configs"] == [
        {"targets": ["127.0.0.1:1", "127.0.0.1:2"], "labels": {"endpoint": endpoints[0]["port"]}},
        {"targets": ["127.0.0.1:1", "127.0.0.1:2"], "labels": {"endpoint": endpoints[1]["port"]}},
    ]
    own = config(["127.0.0.1:1"], rules, webhooks=["127.0.0.1:3"])["scrape_configs"][0]["static_configs"]
    assert own[1] == {"targets": ["127.0.0.1:3"], "labels": {"endpoint": "webhook-metrics"}}
    assert jobs["apiserver"]["scheme"] == "https"
    assert jobs["apiserver"]["static_configs"] == [{"targets": ["127.0.0.1:6443"]}]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run(
        [_promtool(), "check", "config", str(path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _pod(name: str, phase: str = "Running") -> dict[str, Any]:
    ports = {"operator": [8080, 8081], "webhook": [9443, 8082, 8083]}
    containers = [{"name": n, "ports": [{"containerPort": p} for p in ps]} for n, ps in ports.items()]
    return {
        "metadata": {"namespace": "gpushare-system", "name": name},
        "spec": {"containers": containers},
        "status": {"phase": phase},
    }


def _slice(
    service: str, ports: dict[str, int], endpoints: dict[str, str], ns: str = "gpushare-system"
) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": ns,
            "name": f"{service}-x",
            "labels": {"kubernetes.io/service-name": service},
        },
        "ports": [{"name": n, "port": p} for n, p in ports.items()],
        "endpoints": [
            {"addresses": [ip], "conditions": {"ready": True}, "targetRef": {"kind": "Pod", "name": pod}}
            for pod, ip in endpoints.items()
        ],
    }


def test_the_servicemonitors_targets_are_its_services_named_ports_with_the_labels_its_jobs_set(
    tmp_path: Path,
) -> None:
    monitor = yaml.safe_load((RULES.parent / "servicemonitor.yaml").read_text())
    metrics_labels = {"app.kubernetes.io/name": "gpushare-operator", "app.kubernetes.io/component": "metrics"}
    services = [
        {"metadata": {"namespace": "gpushare-system", "name": "gpushare-operator-metrics",
                      "labels": metrics_labels}},
        # the webhook's Service: not selected (no component=metrics)
        {"metadata": {"namespace": "gpushare-system", "name": "gpushare-webhook",
                      "labels": {"app.kubernetes.io/name": "gpushare-operator"}}},
        # selected labels, another namespace: not selected
        {"metadata": {"namespace": "other", "name": "gpushare-operator-metrics", "labels": metrics_labels}},
    ]  # fmt: skip
    both = {"op-a": "10.88.0.5", "op-b": "10.88.0.6"}
    slices = [
        _slice(
            "gpushare-operator-metrics",
            {"metrics": 8080, "webhook-metrics": 8082},
            {**both, "op-old": "10.88.0.4"},
        ),
        _slice("gpushare-webhook", {"https": 9443}, both),
        _slice("gpushare-operator-metrics", {"metrics": 8080}, {"x": "10.0.0.9"}, ns="other"),
    ]
    pods = [_pod("op-a"), _pod("op-b"), _pod("op-old", phase="Succeeded")]
    groups = servicemonitor_target_groups(monitor, services, slices, pods)
    common = {"job": OPERATOR_JOB, "namespace": "gpushare-system", "service": "gpushare-operator-metrics"}
    assert groups == [
        [
            {"targets": [f"{ip}:{port}"], "labels": {**common, "endpoint": ep, "pod": pod, "container": ctr}}
            for pod, ip in both.items()
        ]
        for ep, port, ctr in (("metrics", 8080, "operator"), ("webhook-metrics", 8082, "webhook"))
    ]
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    discovery = ServiceMonitorDiscovery(
        monitor, APIServerTarget("https://127.0.0.1:6443", token, ca), tmp_path / "sd"
    )
    jobs = discovery.scrape_configs()
    assert [(j["job_name"], j["metrics_path"]) for j in jobs] == [
        ("serviceMonitor/gpushare-system/gpushare-operator/0", "/metrics"),
        ("serviceMonitor/gpushare-system/gpushare-operator/1", "/metrics"),
    ]
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(rule_file()))
    cfg = config([], rules) | {"scrape_configs": jobs}
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run(
        [_promtool(), "check", "config", str(path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dashboard_queries_fill_in_grafanas_variables() -> None:
    queries = dashboard_queries(rate_interval="1m")
    assert len({title for title, _ in queries}) == 19
    assert all("$" not in expr for _, expr in queries), [e for _, e in queries if "$" in e]


def test_the_panel_report_gives_each_empty_panel_its_reason_or_says_it_has_none() -> None:
    report = {"Pools": [1], "Latency": [0, 2], "Evictions": [0], "Warnings": [0, 0]}
    text = format_panel_report(report, {"Evictions": "nothing was evicted", "Pools": "unused"})
    assert text.splitlines() == [
        "dashboard panels: 2/4 return data (2 empty: 1 by design, 1 without a reason)",
        "  data  Pools: series per query [1]",
        "  data  Latency: series per query [0, 2]",
        "  EMPTY Evictions: series per query [0] (empty by design: nothing was evicted)",
        "  EMPTY Warnings: series per query [0, 0] (NO REASON: should have data)",
    ]
