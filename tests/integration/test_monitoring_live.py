"""The alerts and dashboard queries on what a real operator exports (not hand-written series).

`gpushare run` reconciles pools on the local control plane; its /metrics text is turned into
promtool input series, and `promtool test rules` evaluates the shipped alert rules and the
dashboard's own queries on them: a healthy pool fires nothing and shows up by mode and as 100%
rolled out; two pools that select the same nodes fire GPUSharePoolConflict for both.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from gpushare import constants as c
from gpushare.devcluster import ClusterInfo, wait_for
from gpushare.devcluster.cluster import free_port
from gpushare.devcluster.fakes import POOL_LABEL, FakeNodeSet

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "manifests" / "monitoring" / "prometheusrule.yaml"
DASHBOARD = REPO / "manifests" / "monitoring" / "dashboards" / "gpushare-operator.json"
SAMPLE = re.compile(r"^(gpushare_pool_[a-z_]+)\{(.*)\} (\S+)$")


class Operator:
    def __init__(self, cluster: ClusterInfo, log: Path) -> None:
        self.port = free_port()
        self.log = log
        cmd = [
            sys.executable, "-m", "gpushare", "run", "--kubeconfig", str(cluster.kubeconfig),
            "--metrics-port", str(self.port), "--log-format", "json",
        ]  # fmt: skip
        with log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ})

    def scrape(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as resp:
            text: str = resp.read().decode()
            return text

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


@pytest.fixture
def operator(cluster: ClusterInfo, tmp_path: Path) -> Iterator[Operator]:
    op = Operator(cluster, tmp_path / "operator.log")
    deadline = time.monotonic() + 60
    while True:
        assert op.proc.poll() is None, op.log.read_text()[-3000:]
        try:
            op.scrape()
            break
        except OSError:
            assert time.monotonic() < deadline, "gpushare run did not serve metrics in 60s"
            time.sleep(0.2)
    yield op
    op.stop()


def _promtool() -> str:
    exe = os.environ.get("PROMTOOL") or shutil.which("promtool")
    if not exe:
        pytest.fail("promtool not found: run `make promtool` (or set PROMTOOL)", pytrace=False)
    return exe


def _series(text: str, pools: set[str]) -> list[dict[str, str]]:
    """The operator's pool samples as constant promtool series, with the labels Prometheus adds."""
    # Both endpoints of the pod are up (the ServiceMonitor's endpoint label: its port names).
    out = [
        {"series": f'up{{job="gpushare-operator", endpoint="{endpoint}", instance="op-0"}}', "values": "1x30"}
        for endpoint in ("metrics", "webhook-metrics")
    ]
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m and any(f'pool="{p}"' in m.group(2) for p in pools):
            labels = f'{m.group(2)},job="gpushare-operator",instance="op-0"'
            out.append({"series": f"{m.group(1)}{{{labels}}}", "values": f"{float(m.group(3))!r}x30"})
    return out


def _dashboard_expr(title: str, pool: str) -> str:
    panel = next(p for p in json.loads(DASHBOARD.read_text())["panels"] if p["title"] == title)
    return str(panel["targets"][0]["expr"]).replace("$__rate_interval", "5m").replace("$pool", pool)


def _promtool_test(tmp_path: Path, series: list[dict[str, str]], tests: dict[str, Any]) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(yaml.safe_load(RULES.read_text())["spec"]))
    case = {"interval": "1m", "input_series": series, **tests}
    (tmp_path / "live_test.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "tests": [case]}))
    proc = subprocess.run(
        [_promtool(), "test", "rules", str(tmp_path / "live_test.yaml")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr + "\nseries:\n" + yaml.safe_dump(series)


async def _condition(api: client.ApiClient, pool: str, ctype: str) -> str | None:
    obj = await client.CustomObjectsApi(api).get_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, pool)
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == ctype:
            return str(cond["status"])
    return None


async def test_alerts_and_dashboard_on_real_operator_metrics(
    cluster: ClusterInfo, api: client.ApiClient, fake_nodes: FakeNodeSet, operator: Operator, tmp_path: Path
) -> None:
    np = f"np-mon-{secrets.token_hex(3)}"
    a, b = f"mon-a-{secrets.token_hex(3)}", f"mon-b-{secrets.token_hex(3)}"
    await fake_nodes.create(2, pool_labels={POOL_LABEL: np})
    custom = client.CustomObjectsApi(api)

    def body(name: str) -> dict[str, Any]:
        return {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND,
            "metadata": {"name": name},
            "spec": {"nodeSelector": {"matchLabels": {POOL_LABEL: np}}, "memoryIsolation": True},
        }

    created: list[str] = []
    try:
        await custom.create_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, body(a))
        created.append(a)

        async def ready() -> bool:
            return await _condition(api, a, "Ready") == "True"

        await wait_for(ready, what=f"pool {a} Ready", timeout_s=180)

        async def exported() -> str | None:
            text = await asyncio.to_thread(operator.scrape)
            ok = f'gpushare_pool_condition{{condition="Ready",pool="{a}"}} 1.0' in text
            return text if ok else None

        text = await wait_for(exported, what="the Ready pool in /metrics", timeout_s=60)
        _promtool_test(
            tmp_path,
            _series(text, {a}),
            {
                "alert_rule_test": [
                    {"eval_time": "20m", "alertname": name, "exp_alerts": []}
                    for name in (
                        "GPUSharePoolRolloutStuck",
                        "GPUSharePoolDegraded",
                        "GPUSharePoolConflict",
                        "GPUSharePoolNodeHeld",
                        "GPUShareOperatorDown",
                    )
                ],
                "promql_expr_test": [
                    {
                        "expr": _dashboard_expr("Pools by mode", a),
                        "eval_time": "5m",
                        "exp_samples": [{"labels": '{mode="cgpu"}', "value": 1}],
                    },
                    {
                        "expr": _dashboard_expr("Rollout progress (Ready / matched nodes)", a),
                        "eval_time": "5m",
                        "exp_samples": [{"labels": f'{{pool="{a}"}}', "value": 1}],
                    },
                ],
            },
        )

        # A second pool selecting the same nodes: both report Conflict, the alert fires for both.
        await custom.create_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, body(b))
        created.append(b)

        async def conflict() -> str | None:
            text = await asyncio.to_thread(operator.scrape)
            both = all(
                f'gpushare_pool_condition{{condition="Conflict",pool="{p}"}} 1.0' in text for p in (a, b)
            )
            return text if both else None

        text = await wait_for(conflict, what="Conflict=1 for both pools in /metrics", timeout_s=180)
        alert = {
            "eval_time": "10m",
            "alertname": "GPUSharePoolConflict",
            "exp_alerts": [
                {
                    "exp_labels": {"severity": "warning", "pool": p},
                    "exp_annotations": {
                        "summary": f"GPUSharePool {p} selects nodes another pool selects",
                        "description": f"Nodes selected by pool {p} and another pool are left unchanged. "
                        "Narrow one nodeSelector; the Conflict condition names the nodes and pools.",
                    },
                }
                for p in sorted((a, b))
            ],
        }
        _promtool_test(tmp_path, _series(text, {a, b}), {"alert_rule_test": [alert]})
    finally:
        for name in created:
            await custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, name)

        async def gone() -> bool:
            items = (await custom.list_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL))["items"]
            return not {i["metadata"]["name"] for i in items} & set(created)

        await wait_for(gone, what="the pools' finalizers to finish", timeout_s=120)
