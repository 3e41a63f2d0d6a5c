"""The shipped artifacts on a real node: the product's image and the Helm chart (issue 20).

The module's own control plane has one real node, ``realnode-0`` (``DevCluster(real_nodes=1)``).
The product's image is built without a Docker engine by ``hack/build-image-local.sh`` (cached in
~/.cache/gpushare/image; what the Dockerfile builds, on a debootstrapped Debian) and imported into
the node's containerd; ``charts/gpushare-operator`` is installed with helm, as docs/getting-started/install.md
says. Every pod of the release is a real container on the real node: the operator (2 replicas,
Kopf peering), which serves the webhook that the apiserver reaches through its Service (routed to
the pods' IPs), and the agent DaemonSet, whose pod-bound token the kubelet projected. Pods reach
the apiserver at the kubernetes Service's ClusterIP (a DNAT set up by the devcluster).

A real Prometheus (Debian's ``prometheus``, the shipped rule groups) scrapes the release's pods as
the chart's ServiceMonitor selects them: the Service ``gpushare-operator-metrics``, its ports
``metrics`` and ``webhook-metrics``, path ``/metrics``, the pods' IPs on the real node (which the host
reaches over the pods' bridge), with the labels the Prometheus Operator's jobs set. Debian's build has
no Kubernetes service discovery, so ``ServiceMonitorDiscovery`` lists the EndpointSlices and feeds
the targets as file_sd. The last tests stop replicas and read the operator alerts back (issue 38).

Marked ``realnode``: ``make test REAL_NODES=0`` deselects it; without root or cgroups it FAILS.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

from gpushare import constants as c
from gpushare.devcluster import BinariesMissing, ClusterInfo, DevCluster, DevClusterError, find_binaries
from gpushare.devcluster.cluster import free_port
from gpushare.devcluster.fakes import POOL_LABEL
from gpushare.devcluster.prometheus import (
    APIServerTarget,
    Prometheus,
    PrometheusMissing,
    ServiceMonitorDiscovery,
    rule_file,
)
from gpushare.devcluster.realnode import RealNodeUnavailable, preflight
from support.alerts import Row, Scenario, report
from support.host import container_pids, frozen

pytestmark = pytest.mark.realnode

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gpushare-operator"
NODE = "realnode-0"
OTHER_NODE = "rn-chart-other"
NS = "gpushare-system"
RELEASE = "gpushare"
IMAGE_REPO = "localhost/gpushare-operator"
WAIT = 240.0
#: The chart's ClusterKopfPeering (``gpushare run --peering``).
PEERING = "gpushare-operator"


def _version() -> str:
    for line in (REPO / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise AssertionError("no version in pyproject.toml")


@dataclass
class Release:
    info: ClusterInfo
    dev: DevCluster
    helm_bin: str
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.info.kubeconfig)}

    def run(
        self, cmd: list[str], check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(cmd, env=self.env, input=stdin, capture_output=True, text=True, timeout=420)
        if check and proc.returncode != 0:
            pytest.fail(
                f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
                f"\n{self.diagnose()}",
                pytrace=False,
            )
        return proc

    def kubectl(
        self, *args: str, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self.run(["kubectl", *args], check, stdin)

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def pods(self, component: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get_json(
            "pods", "-n", NS, "-l", f"app.kubernetes.io/component={component}"
        )["items"]
        return items

    def diagnose(self) -> str:
        out = subprocess.run(
            ["kubectl", "get", "pods", "-A", "-o", "wide"], env=self.env, capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
        ev = subprocess.run(
            ["kubectl", "get", "events", "-n", NS, "--sort-by=.lastTimestamp"], env=self.env,
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        logs = ""
        for prev in ("--previous", ""):
            res = subprocess.run(
                ["kubectl", "logs", "-n", NS, "-l", "app.kubernetes.io/component=operator", "--prefix",
                 "--all-containers", "--tail=15", *([prev] if prev else [])],
                env=self.env, capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            logs += f"--- operator logs {prev} ---\n{res.stdout[-4000:]}{res.stderr[-500:]}\n"
        return f"--- pods ---\n{out.stdout}{out.stderr}\n--- events in {NS} ---\n{ev.stdout[-3000:]}\n{logs}"


def _active(release: Release, pod: str) -> bool:
    """Whether Kopf runs the handlers in ``pod``'s operator (its log's last word on peering)."""
    log = release.kubectl("logs", "-n", NS, pod, "-c", "operator", check=False).stdout
    return log.rfind("Resuming operations") > log.rfind("Pausing operations")


def _ready(pod: dict[str, Any]) -> bool:
    conds = {x["type"]: x["status"] for x in (pod.get("status") or {}).get("conditions") or []}
    return conds.get("Ready") == "True"


def _wait(pred: Callable[[], bool], what: str, rel: Release, timeout_s: float = WAIT) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(
                f"timed out after {timeout_s:.0f}s waiting for {what}\n{rel.diagnose()}", pytrace=False
            )
        time.sleep(1)


def _eventually(pred: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    return True


@pytest.fixture(scope="module")
def release(helm_bin: str) -> Iterator[Release]:
    try:
        find_binaries()
        preflight(1)
    except (BinariesMissing, RealNodeUnavailable) as exc:
        pytest.fail(f"real-node tier cannot run: {exc}", pytrace=False)
    started = time.monotonic()
    built = subprocess.run(
        ["bash", str(REPO / "hack/build-image-local.sh")], capture_output=True, text=True, timeout=1200
    )
    if built.returncode != 0:
        pytest.fail(f"hack/build-image-local.sh failed:\n{built.stderr[-3000:]}", pytrace=False)
    archive = Path(built.stdout.strip().splitlines()[-1])
    image_s = time.monotonic() - started
    dev = DevCluster(real_nodes=1)
    try:
        info = dev.start()
        dev.import_image(archive)
    except DevClusterError as exc:
        dev.stop(failed=True)
        pytest.fail(f"control plane with a real node did not start: {exc}", pytrace=False)
    rel = Release(info, dev, helm_bin, timings={"image": image_s})
    ok = False
    try:
        # As docs/getting-started/install.md: the namespace with its Pod Security labels, then the chart.
        rel.kubectl("create", "namespace", NS)
        rel.kubectl(
            "label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted",
            "pod-security.kubernetes.io/enforce-version=latest",
        )  # fmt: skip
        # The agent's DaemonSet runs where gpushare=true (a GPU node); a second Node (no kubelet)
        # for the agent to try to write.
        rel.kubectl("label", "node", NODE, "gpushare=true")
        rel.kubectl("create", "-f", "-", stdin=json.dumps(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": OTHER_NODE}}
        ))  # fmt: skip
        t0 = time.monotonic()
        rel.run([
            helm_bin, "install", RELEASE, str(CHART), "--namespace", NS,
            "--set", f"image.repository={IMAGE_REPO}", "--set", f"image.tag={_version()}",
            "--wait", "--timeout", "300s",
        ])  # fmt: skip
        rel.timings["install"] = time.monotonic() - t0
        print(f"\nrealnode chart: image {image_s:.0f}s, helm install --wait {rel.timings['install']:.0f}s")
        ok = True
        yield rel
    finally:
        dev.stop(failed=not ok)


def test_operator_and_webhook_pods_ready_with_leader_election(release: Release) -> None:
    # helm --wait lets a Deployment through with replicas - maxUnavailable pods ready: wait for both.
    _wait(lambda: sum(map(_ready, release.pods("operator"))) == 2, "both operator pods Ready", release)
    ops = release.pods("operator")
    assert len(ops) == 2, [p["metadata"]["name"] for p in ops]
    for pod in ops:
        assert pod["spec"]["nodeName"] == NODE
        assert not pod["spec"].get("hostNetwork")
        assert pod["status"]["podIP"].startswith("10.88.0."), pod["status"]
        assert _ready(pod), pod["status"]
    names = sorted(p["metadata"]["name"] for p in ops)

    # Kopf peering: both replicas are peers of the chart's ClusterKopfPeering (POD_ID = pod name).
    def peers() -> bool:
        status = release.get_json("clusterkopfpeering", PEERING).get("status") or {}
        return sorted(status) == names

    _wait(peers, f"both replicas {names} in the peering", release)

    # Mandatory peering: each replica starts paused, and Kopf resumes the one that sees no live peer
    # of a higher priority; a replica that sees one later pauses again.
    def one_leader() -> bool:
        status = release.get_json("clusterkopfpeering", PEERING).get("status") or {}
        if sorted(status) != names:
            return False
        highest = max(names, key=lambda n: int(status[n]["priority"]))
        return [n for n in names if _active(release, n)] == [highest]

    if not _eventually(one_leader, WAIT):
        status = release.get_json("clusterkopfpeering", PEERING).get("status")
        lines = {
            n: [
                ln[:300]
                for ln in release.kubectl(
                    "logs", "-n", NS, n, "-c", "operator", check=False
                ).stdout.splitlines()
                if "operations" in ln or "peer" in ln.lower() or "priority" in ln
            ]
            for n in names
        }
        pytest.fail(f"not one leader (the highest priority): peering {status}; logs {lines}", pytrace=False)
    # The webhook's Service has both pods as ready endpoints (what the apiserver dials).
    slices = release.get_json("endpointslices", "-n", NS, "-l", "kubernetes.io/service-name=gpushare-webhook")
    ready = sorted(
        ep["addresses"][0]
        for s in slices["items"]
        for ep in s.get("endpoints") or []
        if (ep.get("conditions") or {}).get("ready")
    )
    assert ready == sorted(p["status"]["podIP"] for p in ops), slices


def _dry_run_pod(release: Release, name: str, limits: dict[str, str]) -> subprocess.CompletedProcess[str]:
    ctr = {"name": name, "image": "registry.invalid/x:1", "resources": {"limits": limits}}
    return release.kubectl(
        "run", name, "-n", "default", "--image=registry.invalid/x:1", "--restart=Never", "--dry-run=server",
        "--overrides", json.dumps({"spec": {"containers": [ctr]}}), check=False,
    )  # fmt: skip


def test_a_33_percent_pod_is_denied_by_the_webhook_through_its_service(release: Release) -> None:
    limits = {"aliyun.com/gpu-mem": "2", "aliyun.com/gpu-core.percentage": "33"}
    # As shipped (failurePolicy Fail), the chart installs neither GPU-rules ValidatingAdmissionPolicy:
    # a GPU pod is judged once, by the webhook. The apiserver calls the gpushare-webhook Service,
    # routed to an operator pod's IP on the real node.
    out = release.kubectl("get", "validatingadmissionpolicies", "-o", "name").stdout.split()
    policies = [name.rpartition("/")[2] for name in out]
    assert "gpushare-agent-node-restriction" in policies, policies
    assert not [p for p in policies if p.startswith("gpushare-stateless-rules")], policies

    def denied_by_webhook() -> bool:
        res = _dry_run_pod(release, "core-33", limits)
        return res.returncode != 0 and 'admission webhook "validate-pods.gpushare.io" denied' in res.stderr

    _wait(denied_by_webhook, "the webhook to deny the 33 % pod", release, timeout_s=60)
    res = _dry_run_pod(release, "core-33", limits)
    assert "GS001-core-percentage-step" in res.stderr, res.stderr
    # A stateful rule only the webhook has: a GPU pod with no pool target.
    res = _dry_run_pod(release, "no-pool", {"aliyun.com/gpu-mem": "4"})
    assert 'admission webhook "validate-pods.gpushare.io" denied the request' in res.stderr, res.stderr
    assert "GS007-pool-target-missing" in res.stderr, res.stderr


#: Longer than the operator container's readiness probe would have taken to fail (3 x 10 s), and
#: shorter than its liveness probe takes to restart it (10 s + 3 x 20 s).
HUNG_WINDOW_S = 45.0


def test_a_hung_operator_does_not_take_the_webhook_beside_it_out_of_the_service(release: Release) -> None:
    """Both replicas' operator containers frozen (SIGSTOP on the host: no reconciling, no answer on
    their health port). The webhook containers beside them keep their pods Ready and in the
    webhook Service, and keep denying the 33 % pod with the rule's message, through a window
    longer than a readiness probe on the operator container would have taken to fail."""
    limits = {"aliyun.com/gpu-mem": "2", "aliyun.com/gpu-core.percentage": "33"}
    pods = release.pods("operator")
    assert len(pods) == 2 and all(_ready(p) for p in pods), [p["metadata"]["name"] for p in pods]
    pids = [pid for pod in pods for pid in _pids(pod, "operator")]
    assert pids, "no host process of the operator containers"
    with frozen(pids):
        deadline = time.monotonic() + HUNG_WINDOW_S
        reviews = 0
        while time.monotonic() < deadline:
            res = _dry_run_pod(release, "core-33", limits)
            assert 'admission webhook "validate-pods.gpushare.io" denied' in res.stderr, res.stderr
            assert "GS001-core-percentage-step" in res.stderr, res.stderr
            reviews += 1
        pods = release.pods("operator")
        assert all(_ready(p) for p in pods), [(p["metadata"]["name"], p["status"]) for p in pods]
        assert reviews > 1


def _agent_token(release: Release, pod: dict[str, Any]) -> str:
    """The ServiceAccount token the kubelet projected into the agent pod (read on the host)."""
    uid = str(pod["metadata"]["uid"])
    vols = release.dev.kubelet_root(NODE) / "pods" / uid / "volumes/kubernetes.io~projected"
    tokens = sorted(vols.glob("kube-api-access-*/token"))
    assert tokens, f"no projected token under {vols}"
    return tokens[0].read_text().strip()


def _patch_node(release: Release, token: str, node: str, annotations: dict[str, str]) -> tuple[int, str]:
    body = json.dumps({"metadata": {"annotations": annotations}}).encode()
    req = urllib.request.Request(
        f"{release.info.server}/api/v1/nodes/{node}", data=body, method="PATCH",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/merge-patch+json"},
    )  # fmt: skip
    ctx = ssl.create_default_context(cafile=str(release.info.ca_path))
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def test_the_agent_publishes_its_nodes_inventory_and_may_not_write_another_node(release: Release) -> None:
    agents = release.pods("agent")
    assert [p["spec"]["nodeName"] for p in agents] == [NODE], agents
    agent = agents[0]
    assert _ready(agent) or agent["status"]["phase"] == "Running", agent["status"]

    def published() -> bool:
        node = release.get_json("node", NODE)
        return c.ANNOTATION_INVENTORY in (node["metadata"].get("annotations") or {})

    _wait(published, f"the agent to publish {c.ANNOTATION_INVENTORY} on {NODE}", release)
    inventory = json.loads(release.get_json("node", NODE)["metadata"]["annotations"][c.ANNOTATION_INVENTORY])
    # No NVIDIA driver here (the image has the real NVML binding, never the tests' stand-in): the
    # agent publishes what it found, state unknown with NVML's reason, instead of inventing GPUs.
    assert inventory["state"] == "unknown", inventory
    assert "NVML" in inventory["error"], inventory
    other = release.get_json("node", OTHER_NODE)["metadata"].get("annotations") or {}
    assert c.ANNOTATION_INVENTORY not in other

    # The same token the agent uses, as the kubelet projected it (bound to the pod, so to the node).
    token = _agent_token(release, agent)
    code, body = _patch_node(release, token, OTHER_NODE, {c.ANNOTATION_INVENTORY: "{}"})
    assert code == 403, body
    assert f"the gpushare agent on node {NODE} may not modify node {OTHER_NODE}" in body, body
    assert "gpushare-agent-node-restriction" in body, body
    # Its own node, the annotation it owns: allowed.
    code, body = _patch_node(release, token, NODE, {c.ANNOTATION_INVENTORY: json.dumps(inventory)})
    assert code == 200, body


# --- the release scraped by a real Prometheus, as its ServiceMonitor selects (issue 38) -----------------


@dataclass
class Monitoring:
    prom: Prometheus
    discovery: ServiceMonitorDiscovery
    monitor: dict[str, Any]


@pytest.fixture(scope="module")
def monitoring(
    release: Release, helm_bin: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Monitoring]:
    """Prometheus scraping the release's pods through the chart's own ServiceMonitor (rendered with
    monitoring.serviceMonitor.enabled, as a cluster with the Prometheus Operator gets it)."""
    rendered = release.run([
        helm_bin, "template", RELEASE, str(CHART), "--namespace", NS,
        "--set", "monitoring.serviceMonitor.enabled=true", "--api-versions", "monitoring.coreos.com/v1",
        "--show-only", "templates/monitoring.yaml",
    ]).stdout  # fmt: skip
    (monitor,) = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "ServiceMonitor"]
    work = tmp_path_factory.mktemp("prometheus")
    token = work / "apiserver.token"
    token.write_text(release.info.token)
    token.chmod(0o600)
    discovery = ServiceMonitorDiscovery(
        monitor, APIServerTarget(release.info.server, token, release.info.ca_path), work / "sd"
    )
    discovery.start()
    try:
        prom = Prometheus.start(work, free_port(), [], scrape_configs=discovery.scrape_configs())
    except PrometheusMissing as exc:
        discovery.stop()
        pytest.fail(str(exc), pytrace=False)
    yield Monitoring(prom, discovery, monitor)
    prom.stop()
    discovery.stop()


def _targets(mon: Monitoring) -> list[tuple[str, str, str, str, str]]:
    """(endpoint, pod, container, scrape URL, health) of every active target of the operator's job."""
    return sorted(
        (
            t["labels"].get("endpoint", ""),
            t["labels"].get("pod", ""),
            t["labels"].get("container", ""),
            t["scrapeUrl"],
            t["health"],
        )
        for t in mon.prom.targets()
        if t["labels"].get("job") == "gpushare-operator"
    )


def _expected_targets(release: Release) -> list[tuple[str, str, str, str, str]]:
    out = []
    for pod in release.pods("operator"):
        ip, name = pod["status"].get("podIP", ""), pod["metadata"]["name"]
        out += [
            ("metrics", name, "operator", f"http://{ip}:8080/metrics", "up"),
            ("webhook-metrics", name, "webhook", f"http://{ip}:8082/metrics", "up"),
        ]
    return sorted(out)


def _all_up(release: Release, mon: Monitoring, replicas: int) -> bool:
    pods = release.pods("operator")
    if len(pods) != replicas or not all(map(_ready, pods)):
        return False
    return _targets(mon) == _expected_targets(release)


def _pids(pod: dict[str, Any], container: str) -> list[int]:
    """The host PIDs of ``container`` of ``pod``."""
    (status,) = [s for s in pod["status"]["containerStatuses"] if s["name"] == container]
    return container_pids(status["containerID"])


def test_prometheus_scrapes_both_replicas_and_webhooks_through_the_servicemonitors_ports(
    release: Release, monitoring: Monitoring
) -> None:
    prom = monitoring.prom
    groups = {g["name"]: [r["name"] for r in g["rules"]] for g in prom.rule_groups()}
    assert groups == {g["name"]: [r["alert"] for r in g["rules"]] for g in rule_file()["groups"]}
    endpoints = [(e["port"], e["path"]) for e in monitoring.monitor["spec"]["endpoints"]]
    assert endpoints == [("metrics", "/metrics"), ("webhook-metrics", "/metrics")]

    def scraped_up() -> bool:
        """The four targets healthy and their ``up`` samples stored (1): /targets reports a target's
        health apart from the samples a query and the rules read."""
        if not _all_up(release, monitoring, 2):
            return False
        ups = prom.query('up{job="gpushare-operator"} == 1')
        return sorted(x["metric"]["instance"] for x in ups) == sorted(
            t[3].split("/")[2] for t in _expected_targets(release)
        )

    _wait(scraped_up, "both replicas' two endpoints scraped, up == 1", release)
    scraped = time.time()
    targets = [t for t in prom.targets() if t["labels"].get("job") == "gpushare-operator"]
    lines = []
    for t in sorted(targets, key=lambda t: t["scrapeUrl"]):
        labels = t["labels"]
        assert labels["namespace"] == NS and labels["service"] == "gpushare-operator-metrics", labels
        assert labels["instance"] == t["scrapeUrl"].split("/")[2], t
        lines.append(f"{t['scrapeUrl']} {t['health']} {json.dumps(labels, sort_keys=True)}")
    report(".realnode-targets", "\n".join(lines))
    # Both endpoints serve what the alerts read: the operator's own metrics, and the webhook's
    # decisions (the earlier tests had it deny pods).
    ups = prom.query('up{job="gpushare-operator"} == 1')
    assert sorted(x["metric"]["endpoint"] for x in ups) == ["metrics"] * 2 + ["webhook-metrics"] * 2, ups
    _wait(
        lambda: bool(prom.query('gpushare_admission_requests_total{endpoint="webhook-metrics"}')),
        "the webhook containers' admission counters scraped",
        release,
        timeout_s=60,
    )
    # Alert states are what the rules' last evaluation found. This Prometheus started with no sample:
    # its first evaluations found `absent(up == 1)` true, the two Down alerts pending. An evaluation
    # after every `up == 1` above was stored must find them all inactive.
    _wait(
        lambda: prom.evaluated_after("gpushare-operator", scraped),
        "an evaluation of the operator alerts after every target was scraped up",
        release,
        timeout_s=60,
    )
    for alert in ("GPUShareOperatorDown", "GPUShareWebhookDown", "GPUShareOperatorReplicaDown"):
        assert not prom.alert_states(alert), (alert, prom.alert_states(alert))


async def test_replicas_stopped_on_the_real_node_the_operator_alerts_are_pending_then_clear(
    release: Release, monitoring: Monitoring
) -> None:
    prom = monitoring.prom
    sc = Scenario(prom)
    _wait(lambda: _all_up(release, monitoring, 2), "both replicas scraped, up", release)
    try:
        # A container frozen (SIGSTOP on the host): its pod is still an endpoint of the Service (not
        # ready once its probe fails), scraped, and the scrape times out. One replica's operator
        # container, then the other replica's webhook container.
        pods = sorted(release.pods("operator"), key=lambda p: p["metadata"]["name"])
        for pod, container, port in ((pods[0], "operator", 8080), (pods[1], "webhook", 8082)):
            instance = f"{pod['status']['podIP']}:{port}"
            pids = _pids(pod, container)
            assert pids, f"no host process of {pod['metadata']['name']}'s {container} container"
            with frozen(pids):
                stopped = await sc.pending(
                    "GPUShareOperatorReplicaDown",
                    f"one replica's {container} container frozen (SIGSTOP)",
                    instance,
                )
                sc.absent("GPUShareOperatorDown")
                sc.absent("GPUShareWebhookDown")
            await sc.cleared(stopped, instance)

        # One replica scaled away: once its pod is gone it is no endpoint of the Service, so no
        # target at all, and `up == 0` does not name it (watched until its targets are gone).
        release.kubectl("scale", "-n", NS, "deployment/gpushare-operator", "--replicas=1")
        seen: set[str] = set()

        def one_left() -> bool:
            seen.update(prom.alert_states("GPUShareOperatorReplicaDown"))
            return _all_up(release, monitoring, 1)

        _wait(one_left, "one replica left, its two endpoints scraped", release)

        # While the pod terminates it stays in the EndpointSlice (terminating): once its processes
        # have exited, its scrapes fail, and the alert may be pending for that moment (sampled every
        # second here, so not asserted); it is inactive once the pod is gone (its targets dropped,
        # their series marked stale).
        def replica_down_inactive() -> bool:
            seen.update(prom.alert_states("GPUShareOperatorReplicaDown"))
            return not prom.alert_states("GPUShareOperatorReplicaDown")

        _wait(replica_down_inactive, "GPUShareOperatorReplicaDown inactive with one replica", release, 60)
        sc.rows.append(
            Row(
                "GPUShareOperatorReplicaDown",
                "deployment scaled 2 -> 1 (the pod deleted): only while it terminates",
                [f"{k}: seen" for k in sorted(seen)] or ["not seen"],
                cleared=True,
            )
        )
        sc.absent("GPUShareOperatorDown")
        sc.absent("GPUShareWebhookDown")

        # No replica: no target up.
        release.kubectl("scale", "-n", NS, "deployment/gpushare-operator", "--replicas=0")
        down = await sc.pending(
            "GPUShareOperatorDown", "deployment scaled to 0 replicas", "-", timeout_s=WAIT
        )
        hooks = await sc.pending(
            "GPUShareWebhookDown", "deployment scaled to 0 replicas", "-", timeout_s=WAIT
        )
    except BaseException:
        report(".realnode-operator", sc.table())
        raise
    finally:
        release.kubectl("scale", "-n", NS, "deployment/gpushare-operator", "--replicas=2")
    _wait(lambda: _all_up(release, monitoring, 2), "both replicas back, scraped, up", release)
    await sc.cleared(down, "-")
    await sc.cleared(hooks, "-")
    report(".realnode-operator", sc.table())


def _pool_gauges(prom: Prometheus, pool: str) -> list[dict[str, Any]]:
    """The pool's ``gpushare_pool_*`` series (all gauges) as Prometheus last scraped them."""
    series: list[dict[str, Any]] = prom.query(f'{{__name__=~"gpushare_pool_.+", pool="{pool}"}}')
    return series


#: What ``kopf freeze`` records in the peering object: a peer above any replica's priority
#: (``gpushare run`` draws 1..32767), alive for its lifetime unless removed first.
FREEZER = "gpushare-tests-freeze"


async def test_the_leader_alone_exports_a_pools_gauges_and_a_degraded_pool_is_pending(
    release: Release, monitoring: Monitoring
) -> None:
    """A pool (devicePlugin.restart Never, no memory isolation) over the real node, where this module
    runs no device plugin: labelled, the node does not advertise the pool's mode and nobody will
    restart its plugin, so the chart's operator reports the pool Degraded (PluginRestartNeeded), and
    GPUSharePoolDegraded is pending from the series the ServiceMonitor's scrape gives.

    The pool's gauges come from one pod only: the replica Kopf runs (the other is paused by
    peering). A peer above both (as ``kopf freeze`` records it) pauses both: the replica that
    reconciled the pool gives its gauges up, and no pod exports any; once that peer is gone, the
    leader exports them again, alone. Deleted (its cleanup restores the node's labels), the pool's
    gauges go and the alert is inactive. Every step is awaited with a deadline, none timed.

    (The Node without kubelet would not do: once the node lifecycle controller marks it Ready
    Unknown, its node status is NodeNotReady, which leaves the pool not Ready but not Degraded.)"""
    prom = monitoring.prom
    sc = Scenario(prom)
    pool = "rn-chart-degraded"
    _wait(lambda: _all_up(release, monitoring, 2), "both replicas scraped, up", release)
    names = sorted(p["metadata"]["name"] for p in release.pods("operator"))

    def exporters() -> set[str]:
        return {str(s["metric"].get("pod")) for s in _pool_gauges(prom, pool)}

    def leader_alone() -> bool:
        """Series of the pool from one pod, the one replica active, and Degraded 1 there."""
        series = _pool_gauges(prom, pool)
        degraded = [
            s["value"][1]
            for s in series
            if s["metric"]["__name__"] == "gpushare_pool_condition" and s["metric"]["condition"] == "Degraded"
        ]
        active = [n for n in names if _active(release, n)]
        return (
            len(active) == 1
            and {s["metric"].get("pod") for s in series} == set(active)
            and {s["metric"].get("container") for s in series} == {"operator"}
            and degraded == ["1"]
        )

    def fail(what: str) -> NoReturn:
        active = [n for n in names if _active(release, n)]
        peering = release.get_json("clusterkopfpeering", PEERING).get("status")
        pytest.fail(
            f"{what}\nseries: {_pool_gauges(prom, pool)}\nactive: {active}\npeering: {peering}"
            f"\n{release.diagnose()}",
            pytrace=False,
        )

    release.kubectl("label", "node", NODE, f"{POOL_LABEL}={pool}")
    body = {
        "apiVersion": f"{c.GROUP}/{c.VERSION}",
        "kind": c.KIND,
        "metadata": {"name": pool},
        "spec": {
            "nodeSelector": {"matchLabels": {POOL_LABEL: pool}},
            "memoryIsolation": False,
            "devicePlugin": {"restart": "Never"},
        },
    }
    release.kubectl("create", "-f", "-", stdin=json.dumps(body))
    try:

        def condition(ctype: str) -> dict[str, Any]:
            status = release.get_json(c.PLURAL, pool).get("status") or {}
            return next((x for x in status.get("conditions") or [] if x["type"] == ctype), {})

        if not _eventually(lambda: condition("Degraded").get("status") == "True", WAIT):
            pytest.fail(
                f"pool {pool} not Degraded: {release.get_json(c.PLURAL, pool).get('status')}", pytrace=False
            )
        reason = condition("Degraded")["reason"]
        try:
            row = await sc.pending(
                "GPUSharePoolDegraded",
                f"chart's operator: a pool (restart Never) over the real node without plugin ({reason})",
                pool,
                timeout_s=90,
            )
        except TimeoutError as exc:
            status = release.get_json(c.PLURAL, pool).get("status")
            fail(f"{exc}\nalerts: {prom.alerts()}\npool status: {status}")
        if not _eventually(leader_alone, WAIT):
            fail("the pool's gauges not from the active replica alone (Degraded 1)")
        print(f"pool {pool} ({reason}): gauges from the leader {sorted(exporters())} only")

        # Kopf freeze: both replicas pause; the leader gives the pool's gauges up.
        freezer = {"priority": 65535, "lifetime": 600, "lastseen": datetime.now(UTC).isoformat()}
        release.kubectl(
            "patch",
            "clusterkopfpeering",
            PEERING,
            "--type=merge",
            "-p",
            json.dumps({"status": {FREEZER: freezer}}),
        )
        try:
            if not _eventually(lambda: not any(_active(release, n) for n in names), WAIT):
                fail("both replicas not paused behind a peer of a higher priority")
            if not _eventually(lambda: not exporters(), WAIT):
                fail("a paused replica still exports the pool's gauges")
            print(f"both replicas paused: no pod exports {pool}'s gauges")
        finally:
            release.kubectl(
                "patch", "clusterkopfpeering", PEERING, "--type=merge", "-p",
                json.dumps({"status": {FREEZER: None}}), check=False,
            )  # fmt: skip
        if not _eventually(leader_alone, WAIT):
            fail("resumed, the pool's gauges not from the active replica alone (Degraded 1)")
        print(f"resumed: gauges from {sorted(exporters())} only")
    finally:
        release.kubectl("delete", c.PLURAL, pool, "--wait=false", check=False)
    _wait(lambda: not release.get_json(c.PLURAL)["items"], f"pool {pool} deleted (its cleanup done)", release)
    await sc.cleared(row, pool)
    if not _eventually(lambda: not _pool_gauges(prom, pool), WAIT):
        fail(f"pool {pool} deleted, its gauges still exported")
    release.kubectl("label", "node", NODE, f"{POOL_LABEL}-")
    report(".realnode-chart-pool", sc.table())
