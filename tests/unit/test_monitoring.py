"""manifests/monitoring: the alerts, the ServiceMonitor and the Grafana dashboard.

The structural checks run everywhere. The promtool checks (`promtool check rules` on the alerts and
on every dashboard query, `promtool test rules` with tests/monitoring/alerts_test.yaml) FAIL when
promtool is missing: `make test` and `make monitoring-check` install it first (hack/promtool.sh,
Debian's `prometheus` package), and PROMTOOL=/path/to/promtool points at another one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpushare import metrics

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "manifests" / "monitoring"
RULE_FILE = MONITORING / "prometheusrule.yaml"
DASHBOARD = MONITORING / "dashboards" / "gpushare-operator.json"
ALERT_TESTS = ROOT / "tests" / "monitoring" / "alerts_test.yaml"
OVERLAY = ROOT / "manifests" / "overlays" / "monitoring"

#: Metrics the rules and dashboard may use that gpushare does not export itself.
FOREIGN_METRICS = {
    "up": "Prometheus, per scrape target",
    "apiserver_admission_webhook_rejection_count": "kube-apiserver (k8s.io/apiserver admission metrics)",
    "apiserver_admission_webhook_admission_duration_seconds_bucket": "kube-apiserver (STABLE)",
}
#: What the dashboard must show (issue #13).
REQUIRED_PANELS = (
    "Pools by mode",
    "Nodes by phase",
    "Ready / held / failed nodes per pool",
    "Rollout progress (Ready / matched nodes)",
    "Webhook decision latency",
    "Denials by rule",
)


def _rule_doc() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(RULE_FILE.read_text())
    return doc


def _alerts() -> list[dict[str, Any]]:
    return [r for g in _rule_doc()["spec"]["groups"] for r in g["rules"] if "alert" in r]


def _dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def _panels() -> list[dict[str, Any]]:
    return [p for p in _dashboard()["panels"] if p.get("type") != "row"]


def _dashboard_exprs() -> list[tuple[str, str]]:
    return [(f"{p['title']} [{t['refId']}]", t["expr"]) for p in _panels() for t in p["targets"]]


def _as_promql(expr: str) -> str:
    """Grafana variables replaced by what Prometheus would see for 'All' and a 5m step."""
    return expr.replace("$__rate_interval", "5m").replace("$__range", "1h").replace("$pool", ".*")


def _exported_names() -> set[str]:
    names: set[str] = set()
    for metric in metrics.REGISTRY.collect():
        names.update(sample.name for sample in metric.samples)
        names.add(metric.name)
        if metric.type == "counter":
            names.add(f"{metric.name}_total")
        if metric.type == "histogram":
            names.update(f"{metric.name}_{s}" for s in ("bucket", "sum", "count"))
    return names


def _metric_names(expr: str) -> set[str]:
    without_strings = re.sub(r'"[^"]*"', '""', expr)
    words = set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{|\[|\)|$|\s)", without_strings))
    return {w for w in words if w.startswith(("gpushare_", "apiserver_")) or w == "up"}


def _kustomize(path: Path) -> list[dict[str, Any]]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(path)], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


# --- structure (no tools) ---------------------------------------------------------------------


def test_every_metric_used_is_exported() -> None:
    exported = _exported_names()
    used: dict[str, set[str]] = {}
    for rule in _alerts():
        for name in _metric_names(rule["expr"]):
            used.setdefault(name, set()).add(rule["alert"])
    for where, expr in _dashboard_exprs():
        for name in _metric_names(expr):
            used.setdefault(name, set()).add(where)
    assert "gpushare_pool_condition" in used and "gpushare_admission_duration_seconds_bucket" in used
    unknown = {n: sorted(w) for n, w in used.items() if n not in exported and n not in FOREIGN_METRICS}
    assert not unknown, f"metrics neither exported by gpushare.metrics nor listed as foreign: {unknown}"


def test_alerts_cover_the_issue_and_are_labelled() -> None:
    names = {r["alert"] for r in _alerts()}
    assert {
        "GPUSharePoolRolloutStuck",
        "GPUSharePoolDegraded",
        "GPUSharePoolConflict",
        "GPUSharePoolNodeHeld",
        "GPUSharePoolDemandUnmet",
        "GPUSharePoolMigSwitchFailed",
        "GPUShareWebhookErrors",
        "GPUShareWebhookSlow",
        "GPUShareOperatorDown",
    } <= names
    for rule in _alerts():
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        assert "for" in rule, f"{rule['alert']} fires on one bad scrape: give it a `for:`"


def test_every_alert_has_a_firing_unit_test_and_a_quiet_one() -> None:
    tests = yaml.safe_load(ALERT_TESTS.read_text())["tests"]
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in tests:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {r["alert"] for r in _alerts()}
    assert names - firing == set(), f"alerts never tested firing: {sorted(names - firing)}"
    assert names - quiet == set(), f"alerts never tested staying quiet: {sorted(names - quiet)}"


def test_dashboard_shape() -> None:
    dash = _dashboard()
    assert dash["uid"] == "gpushare-operator"
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["pool"]["allValue"] == ".*"
    titles = [p["title"] for p in _panels()]
    for required in REQUIRED_PANELS:
        assert required in titles
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in _panels():
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            if (
                "pool" in target["expr"]
                and "gpushare_pool_" in target["expr"]
                and panel["title"]
                not in (
                    "Pools",
                    "Pools by mode",
                    "Pools not Ready / Degraded / in Conflict",
                )
            ):
                assert "$pool" in target["expr"], f"{panel['title']}: ignores the pool variable"


def test_overlay_is_manifests_plus_monitoring() -> None:
    base = _kustomize(ROOT / "manifests")
    with_monitoring = _kustomize(OVERLAY)

    def key(o: dict[str, Any]) -> tuple[str, str]:
        return o["kind"], o["metadata"]["name"]

    extra = [o for o in with_monitoring if key(o) not in {key(b) for b in base}]
    assert sorted(key(o) for o in extra) == [
        ("ConfigMap", "gpushare-operator-dashboard"),
        ("PrometheusRule", "gpushare-operator"),
        ("ServiceMonitor", "gpushare-operator"),
    ]
    # everything else is exactly what manifests/ renders (the overlay must not drift from it)
    same = {key(o): o for o in with_monitoring}
    for obj in base:
        assert same[key(obj)] == obj, f"{key(obj)} differs between manifests/ and the monitoring overlay"
    cm = same[("ConfigMap", "gpushare-operator-dashboard")]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["gpushare-operator.json"]) == _dashboard()


def test_service_monitor_scrapes_the_metrics_service() -> None:
    objs = _kustomize(OVERLAY)
    (sm,) = [o for o in objs if o["kind"] == "ServiceMonitor"]
    services = [
        o
        for o in objs
        if o["kind"] == "Service"
        and o["metadata"]["namespace"] in sm["spec"]["namespaceSelector"]["matchNames"]
        and sm["spec"]["selector"]["matchLabels"].items() <= o["metadata"].get("labels", {}).items()
    ]
    assert [s["metadata"]["name"] for s in services] == ["gpushare-operator-metrics"]
    (svc,) = services
    # One endpoint per container: the operator's metrics and the webhook's.
    assert [e["port"] for e in sm["spec"]["endpoints"]] == ["metrics", "webhook-metrics"]
    assert {e["port"] for e in sm["spec"]["endpoints"]} <= {p["name"] for p in svc["spec"]["ports"]}
    (deploy,) = [o for o in objs if o["kind"] == "Deployment"]
    for ctr in deploy["spec"]["template"]["spec"]["containers"]:
        assert "--metrics-addr=0.0.0.0" in ctr["args"], (
            f"{ctr['name']} must listen beyond loopback to be scraped"
        )
    # the alerts select job="<value of the Service's jobLabel label>"
    job = svc["metadata"]["labels"][sm["spec"]["jobLabel"]]
    assert all(f'job="{job}"' in r["expr"] for r in _alerts() if re.search(r"\bup\{", r["expr"])), (
        f"operator-down alerts must select job={job!r}"
    )


# --- promtool ---------------------------------------------------------------------------------


def _promtool() -> str:
    exe = os.environ.get("PROMTOOL") or shutil.which("promtool")
    if not exe:
        pytest.fail(
            "promtool not found: run `make promtool` (installs Debian's prometheus package, which ships "
            "it) or set PROMTOOL=/path/to/promtool; the alert rules and dashboard queries are NOT checked",
            pytrace=False,
        )
    return exe


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def test_promtool_check_rules(tmp_path: Path) -> None:
    promtool = _promtool()
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(_rule_doc()["spec"], sort_keys=False))
    proc = _run(promtool, "check", "rules", str(rules))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in proc.stdout + proc.stderr


def test_promtool_test_rules(tmp_path: Path) -> None:
    promtool = _promtool()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(_rule_doc()["spec"], sort_keys=False))
    shutil.copy(ALERT_TESTS, tmp_path / "alerts_test.yaml")
    proc = _run(promtool, "test", "rules", str(tmp_path / "alerts_test.yaml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_promtool_checks_every_dashboard_query(tmp_path: Path) -> None:
    promtool = _promtool()
    exprs = _dashboard_exprs()
    group = {
        "name": "dashboard-queries",
        "rules": [
            {"record": f"dashboard:query_{i}", "expr": _as_promql(e)} for i, (_, e) in enumerate(exprs)
        ],
    }
    rules = tmp_path / "dashboard-rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": [group]}, sort_keys=False))
    proc = _run(promtool, "check", "rules", str(rules))
    if proc.returncode != 0:  # name the panel, not just the index
        bad = [where for i, (where, _) in enumerate(exprs) if f"query_{i}" in proc.stdout + proc.stderr]
        pytest.fail(f"dashboard queries promtool rejects {bad}:\n{proc.stdout}{proc.stderr}")
    assert f"SUCCESS: {len(exprs)} rules found" in proc.stdout + proc.stderr


def test_promtool_rejects_a_broken_query(tmp_path: Path) -> None:
    """The dashboard check above would catch a typo: promtool really parses the expressions."""
    promtool = _promtool()
    rules = tmp_path / "broken.yaml"
    rules.write_text(
        yaml.safe_dump({"groups": [{"name": "x", "rules": [{"record": "r:x", "expr": "sum by (pool (up)"}]}]})
    )
    assert _run(promtool, "check", "rules", str(rules)).returncode != 0
