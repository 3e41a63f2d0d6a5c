"""gpushare.devcluster.prometheus: the configuration and rule file the live Prometheus gets are ones
promtool accepts, built from the shipped PrometheusRule (tests/integration/test_alerts_prometheus.py
runs the server itself)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpushare.devcluster.prometheus import (
    OPERATOR_JOB,
    RULES,
    APIServerTarget,
    config,
    dashboard_queries,
    rule_file,
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
    assert "SUCCESS: 12 rules found" in proc.stdout, proc.stdout


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


def test_dashboard_queries_fill_in_grafanas_variables() -> None:
    queries = dashboard_queries(rate_interval="1m")
    assert len({title for title, _ in queries}) == 19
    assert all("$" not in expr for _, expr in queries), [e for _, e in queries if "$" in e]
