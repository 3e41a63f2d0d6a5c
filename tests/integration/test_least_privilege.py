"""Least privilege with the shipped manifests, on a real control plane (docs/security.md, issue 14).

- The agent's ServiceAccount, with a token bound to an agent pod on node A (TokenRequest with
  boundObjectRef Pod, as the kubelet gets it), may write only A, only its own label and annotation
  keys, nothing in A's spec or status (manifests/agent/node-restriction.yaml); a token not bound to
  a pod may write no Node; other users are untouched; the real agent cycle still works with it.
- The operator's ServiceAccount deletes pods only in the device-plugin namespaces, evicts anywhere,
  and a whole rollout (labels, device-plugin restart, Evict mode switch, restore) works with its
  token; a pool whose device plugin lives elsewhere is reported, not a 403 traceback.

Its own cluster (module scope), like test_manifests.py: the shipped webhook configuration fails
closed for pods, so pods made here carry ``gpushare.io/webhook: ignore``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import structlog.testing
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare import agent as agent_loop
from gpushare import constants as c
from gpushare.devcluster import ClusterInfo, DevCluster, create_gpu_nodes, wait_for
from gpushare.devcluster.cluster import write_kubeconfig
from gpushare.devcluster.fakes import POOL_LABEL, ensure_device_plugin_daemonset, wait_plugin_ready
from gpushare.gpu.fake import FakeGPU, FakeNVML
from gpushare.gpu.inventory import AGENT_LABELS
from gpushare.gpu.isolation import IsolationPaths
from gpushare.k8s.client import make_api_client
from gpushare.k8s.cluster import Cluster, PluginNamespaceNotAllowed
from support.operator_proc import launch_operator

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
NS = "gpushare-system"
AGENT_SA = "gpushare-agent"
OPERATOR_SA = "gpushare-operator"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
NODEPOOL = "np-lp"
IGNORE = {c.LABEL_WEBHOOK: c.WEBHOOK_IGNORE}
MERGE: dict[str, Any] = {"_content_type": "application/merge-patch+json"}
H200 = FakeGPU(name="NVIDIA H200", memory_mib=143771)


def kubectl(info: ClusterInfo, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(info.kubeconfig)}
    proc = subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        pytest.fail(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def token(info: ClusterInfo, sa: str, *, bound_pod: str | None = None) -> str:
    """`kubectl create token` for a ServiceAccount of gpushare-system, optionally bound to a pod."""
    args = ["create", "token", sa, "-n", NS, "--duration=1h"]
    if bound_pod:
        args += ["--bound-object-kind=Pod", f"--bound-object-name={bound_pod}"]
    return kubectl(info, *args).stdout.strip()


def kubeconfig_for(info: ClusterInfo, tok: str, path: Path) -> Path:
    write_kubeconfig(path, info.server, info.ca_pem, tok, name="as-sa")
    return path


def whoami(info: ClusterInfo, tok: str) -> dict[str, Any]:
    """A SelfSubjectReview made with ``tok`` (what the apiserver authenticated)."""
    out = kubectl(info, "auth", "whoami", f"--token={tok}", "-o", "json").stdout
    user: dict[str, Any] = json.loads(out)["status"]["userInfo"]
    return user


def pod_body(
    name: str, node: str, *, sa: str | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod bound to ``node`` that Pod Security ``restricted`` admits (kwok "runs" it)."""
    spec: dict[str, Any] = {
        "nodeName": node,
        "tolerations": [{"operator": "Exists"}],
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/probe:1",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    }
    if sa:
        spec["serviceAccountName"] = sa
    return {"metadata": {"name": name, "labels": {**IGNORE, **(labels or {})}}, "spec": spec}


async def _prepare(info: ClusterInfo) -> None:
    async with await make_api_client(str(info.kubeconfig)) as api:
        await create_gpu_nodes(api, 3, prefix="lp", pool_labels={POOL_LABEL: NODEPOOL})
        await ensure_device_plugin_daemonset(api)
        core = client.CoreV1Api(api)
        await core.create_namespace(cast(Any, {"metadata": {"name": "team-a"}}))
        # The agent's pod on node lp-0, as the DaemonSet would make it (the test's own, so its
        # name is known): tokens are bound to it.
        await core.create_namespaced_pod(NS, cast(Any, pod_body("agent-probe", "lp-0", sa=AGENT_SA)))
        for node in ("lp-0", "lp-1", "lp-2"):
            await wait_plugin_ready(api, node, timeout_s=90)


async def _policy_in_force(info: ClusterInfo, timeout_s: float = 120.0) -> None:
    """Wait until the apiserver enforces both node-restriction policies (the agent's, the operator's).

    A new ValidatingAdmissionPolicy and its binding take effect when the apiserver's policy
    informer has compiled them, which can take a while on a busy machine (the manifests also carry
    the large GPU-rules policy): probe each with a dry-run write it must refuse.
    """
    probes = (
        (
            "agent",
            token(info, AGENT_SA, bound_pod="agent-probe"),
            {"metadata": {"labels": {c.LABEL_SCHEDULE: "default"}}},
        ),
        ("operator", token(info, OPERATOR_SA), {"spec": {"podCIDR": "10.9.0.0/24"}}),
    )
    deadline = time.monotonic() + timeout_s
    for who, bearer, body in probes:
        path = Path(tempfile.mkdtemp()) / f"{who}-probe.kubeconfig"
        kubeconfig_for(info, bearer, path)
        async with await make_api_client(str(path)) as api:
            while True:
                try:
                    await client.CoreV1Api(api).patch_node("lp-1", body, dry_run="All", **MERGE)
                except ApiException as exc:
                    if exc.status in (403, 422):
                        break
                    raise
                if time.monotonic() > deadline:
                    pytest.fail(f"the {who} node-restriction policy was not in force after {timeout_s:.0f} s")
                await asyncio.sleep(1.0)


@pytest.fixture(scope="module")
def installed(cluster: ClusterInfo) -> Iterator[ClusterInfo]:
    # ``cluster`` makes a missing control plane fail with its message; this test needs its own.
    dev = DevCluster()
    info = dev.start()
    try:
        kubectl(info, "apply", "--server-side", "-k", str(MANIFESTS / "crd"))
        kubectl(
            info, "wait", "--for=condition=Established", "--timeout=60s",
            "crd/gpusharepools.gpushare.io", "crd/clusterkopfpeerings.kopf.dev",
        )  # fmt: skip
        kubectl(info, "apply", "--server-side", "-k", str(MANIFESTS))
        asyncio.run(_prepare(info))
        asyncio.run(_policy_in_force(info))
        yield info
    finally:
        dev.stop()


@pytest.fixture(scope="module")
def agent_token(installed: ClusterInfo) -> str:
    return token(installed, AGENT_SA, bound_pod="agent-probe")


@pytest.fixture
async def admin(installed: ClusterInfo) -> AsyncIterator[client.ApiClient]:
    async with await make_api_client(str(installed.kubeconfig)) as api:
        yield api


@pytest.fixture
async def as_agent(
    installed: ClusterInfo, agent_token: str, tmp_path: Path
) -> AsyncIterator[client.ApiClient]:
    path = kubeconfig_for(installed, agent_token, tmp_path / "agent.kubeconfig")
    async with await make_api_client(str(path)) as api:
        yield api


async def _patch(api: client.ApiClient, node: str, body: dict[str, Any]) -> Any:
    return await client.CoreV1Api(api).patch_node(node, body, **MERGE)


async def _denied(api: client.ApiClient, node: str, body: dict[str, Any]) -> str:
    """The apiserver's message for a patch that must be refused with 403."""
    with pytest.raises(ApiException) as err:
        await _patch(api, node, body)
    assert err.value.status == 403, err.value.body
    message: str = json.loads(cast(bytes, err.value.body))["message"]
    return message


async def _meta(api: client.ApiClient, node: str) -> tuple[dict[str, str], dict[str, str], Any]:
    obj = await client.CoreV1Api(api).read_node(node)
    return dict(obj.metadata.labels or {}), dict(obj.metadata.annotations or {}), obj.spec


# --- agent -----------------------------------------------------------------------------------


def test_a_token_bound_to_the_agent_pod_carries_its_node(installed: ClusterInfo, agent_token: str) -> None:
    user = whoami(installed, agent_token)
    assert user["username"] == f"system:serviceaccount:{NS}:{AGENT_SA}"
    assert user["extra"][NODE_NAME_EXTRA] == ["lp-0"]
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == ["agent-probe"]
    plain = whoami(installed, token(installed, AGENT_SA))
    assert NODE_NAME_EXTRA not in (plain.get("extra") or {})


async def test_agent_cannot_label_or_taint_another_node(
    as_agent: client.ApiClient, admin: client.ApiClient
) -> None:
    before = await _meta(admin, "lp-1")
    for body in (
        {"metadata": {"labels": {c.LABEL_SCHEDULE: "default"}}},
        {"metadata": {"labels": {c.LABEL_GPU_COUNT: "8"}}},  # even its own keys, on another node
        {"spec": {"taints": [{"key": "evil", "value": "x", "effect": "NoSchedule"}]}},
        {"spec": {"unschedulable": True}},
    ):
        message = await _denied(as_agent, "lp-1", body)
        assert "the gpushare agent on node lp-0 may not modify node lp-1" in message, message
    with pytest.raises(ApiException) as err:
        await client.CoreV1Api(as_agent).patch_node_status("lp-1", {"metadata": {"labels": {"x": "y"}}})
    assert err.value.status == 403
    assert await _meta(admin, "lp-1") == before


async def test_agent_cannot_change_foreign_keys_or_spec_of_its_own_node(
    as_agent: client.ApiClient, admin: client.ApiClient
) -> None:
    labels_before, annotations_before, spec_before = await _meta(admin, "lp-0")
    for key, value in (
        (c.LABEL_SCHEDULE, "default"),
        (c.LABEL_CGPU, "false"),
        (c.LABEL_DISABLE_ISOLATION, "true"),
        (c.LABEL_POOL, "other"),
        (POOL_LABEL, None),  # removing a label it does not own
    ):
        message = await _denied(as_agent, "lp-0", {"metadata": {"labels": {key: value}}})
        assert f"this request changes {key}" in message, message
    message = await _denied(as_agent, "lp-0", {"metadata": {"annotations": {c.ANNOTATION_OWNED: "{}"}}})
    assert f"this request changes {c.ANNOTATION_OWNED}" in message
    for spec in (
        {"unschedulable": True},
        {"taints": [{"key": "evil", "value": "x", "effect": "NoSchedule"}]},
        {"podCIDR": "10.9.0.0/24"},
    ):
        message = await _denied(as_agent, "lp-0", {"spec": spec})
        assert "may not change the Node's spec" in message, message
    message = await _denied(as_agent, "lp-0", {"metadata": {"finalizers": ["example.com/keep"]}})
    assert "ownerReferences or finalizers" in message
    # Allowed keys do not smuggle a forbidden change through.
    message = await _denied(
        as_agent, "lp-0", {"metadata": {"labels": {c.LABEL_GPU_COUNT: "1", c.LABEL_SCHEDULE: "share"}}}
    )
    assert f"this request changes {c.LABEL_SCHEDULE}" in message
    core = client.CoreV1Api(as_agent)
    with pytest.raises(ApiException) as err:
        await core.patch_node_status("lp-0", {"status": {"capacity": {c.RES_GPU_MEM: "999"}}})
    assert err.value.status == 403
    with pytest.raises(ApiException) as err:
        await core.delete_node("lp-0")
    assert err.value.status == 403
    assert await _meta(admin, "lp-0") == (labels_before, annotations_before, spec_before)


async def test_agent_can_write_its_own_labels_and_inventory(
    as_agent: client.ApiClient, admin: client.ApiClient
) -> None:
    labels_before, _, spec_before = await _meta(admin, "lp-0")
    mine = {
        c.LABEL_GPU_COUNT: "8",
        c.LABEL_GPU_PRODUCT: "NVIDIA-H200",
        c.LABEL_GPU_MEMORY_MIB: "143771",
        c.LABEL_CGPU_ISOLATION: "absent",
    }
    await _patch(
        as_agent, "lp-0", {"metadata": {"labels": mine, "annotations": {c.ANNOTATION_INVENTORY: "{}"}}}
    )
    labels, annotations, spec = await _meta(admin, "lp-0")
    assert {k: labels[k] for k in mine} == mine
    assert annotations[c.ANNOTATION_INVENTORY] == "{}"
    assert {k: v for k, v in labels.items() if k not in mine} == labels_before
    assert spec == spec_before
    # and remove them again (a merge patch with null), still allowed
    await _patch(
        as_agent,
        "lp-0",
        {"metadata": {"labels": dict.fromkeys(mine), "annotations": {c.ANNOTATION_INVENTORY: None}}},
    )
    labels, annotations, _ = await _meta(admin, "lp-0")
    assert labels == labels_before
    assert c.ANNOTATION_INVENTORY not in annotations


async def test_the_policy_holds_even_if_rbac_grants_more(
    installed: ClusterInfo, as_agent: client.ApiClient, admin: client.ApiClient
) -> None:
    """Status, create and delete are refused by the policy too, not only by RBAC."""
    kubectl(installed, "create", "clusterrole", "agent-too-much", "--verb=create,update,patch,delete",
            "--resource=nodes,nodes/status")  # fmt: skip
    kubectl(installed, "create", "clusterrolebinding", "agent-too-much", "--clusterrole=agent-too-much",
            f"--serviceaccount={NS}:{AGENT_SA}")  # fmt: skip
    core = client.CoreV1Api(as_agent)
    try:

        async def rbac_applied() -> bool:
            try:
                await core.delete_node("lp-0", dry_run="All")
            except ApiException as exc:
                return "ValidatingAdmissionPolicy" in json.loads(cast(bytes, exc.body))["message"]
            pytest.fail("the agent deleted its node (dry run)")

        await wait_for(rbac_applied, what="the widened RBAC to reach the authorizer", timeout_s=30)
        attempts: dict[str, Callable[[], Awaitable[Any]]] = {
            "UPDATE of nodes/status": lambda: core.patch_node_status(
                "lp-0", {"status": {"capacity": {c.RES_GPU_MEM: "1"}}}
            ),
            "DELETE of a Node": lambda: core.delete_node("lp-0"),
            "CREATE of a Node": lambda: core.create_node(cast(Any, {"metadata": {"name": "lp-new"}})),
        }
        for what, request in attempts.items():
            with pytest.raises(ApiException) as err:
                await request()
            assert err.value.status == 403
            message = json.loads(cast(bytes, err.value.body))["message"]
            assert f"may only update Node metadata; {what} is denied" in message
    finally:
        kubectl(installed, "delete", "clusterrolebinding,clusterrole", "agent-too-much")
    assert (await client.CoreV1Api(admin).read_node("lp-0")).metadata.deletion_timestamp is None


async def test_a_token_without_a_node_may_write_no_node(
    installed: ClusterInfo, admin: client.ApiClient, tmp_path: Path
) -> None:
    plain = kubeconfig_for(installed, token(installed, AGENT_SA), tmp_path / "plain.kubeconfig")
    async with await make_api_client(str(plain)) as api:
        await client.CoreV1Api(api).read_node("lp-0")  # RBAC still lets it read
        for node in ("lp-0", "lp-1"):
            message = await _denied(api, node, {"metadata": {"labels": {c.LABEL_GPU_COUNT: "1"}}})
            assert "carries no node name" in message, message
    labels, _, _ = await _meta(admin, "lp-0")
    assert c.LABEL_GPU_COUNT not in labels


async def test_other_users_are_not_confined(admin: client.ApiClient) -> None:
    """Both node policies match only gpushare's ServiceAccounts: an admin taints and relabels as before."""
    await _patch(
        admin,
        "lp-1",
        {
            "metadata": {"labels": {"team": "x", c.LABEL_GPU_COUNT: "4"}},
            "spec": {"taints": [{"key": "admin", "value": "x", "effect": "NoSchedule"}]},
        },
    )
    labels, _, spec = await _meta(admin, "lp-1")
    assert labels["team"] == "x" and labels[c.LABEL_GPU_COUNT] == "4"
    assert [t.key for t in spec.taints] == ["admin"]
    await _patch(
        admin,
        "lp-1",
        {"metadata": {"labels": {"team": None, c.LABEL_GPU_COUNT: None}}, "spec": {"taints": None}},
    )
    labels, _, spec = await _meta(admin, "lp-1")
    assert "team" not in labels and not spec.taints


async def test_operator_node_writes_are_confined_to_its_keys(
    installed: ClusterInfo, admin: client.ApiClient, tmp_path: Path
) -> None:
    """The operator may write its five labels, its annotations and the cordon on any node; nothing else."""
    cfg = kubeconfig_for(installed, token(installed, OPERATOR_SA), tmp_path / "op.kubeconfig")
    labels_before, annotations_before, spec_before = await _meta(admin, "lp-1")
    async with await make_api_client(str(cfg)) as api:
        for body in (
            {"spec": {"taints": [{"key": "evil", "value": "x", "effect": "NoSchedule"}]}},
            {"spec": {"podCIDR": "10.9.0.0/24"}},
        ):
            message = await _denied(api, "lp-1", body)
            assert "may change only spec.unschedulable" in message, message
        for key in (
            POOL_LABEL,
            c.LABEL_GPU_COUNT,
            "kubernetes.io/hostname",
            "node-role.kubernetes.io/control-plane",
        ):
            message = await _denied(api, "lp-1", {"metadata": {"labels": {key: "x"}}})
            assert f"this request changes {key}" in message, message
        message = await _denied(api, "lp-1", {"metadata": {"annotations": {c.ANNOTATION_INVENTORY: "{}"}}})
        assert f"this request changes {c.ANNOTATION_INVENTORY}" in message
        message = await _denied(api, "lp-1", {"metadata": {"finalizers": ["example.com/keep"]}})
        assert "ownerReferences or finalizers" in message
        assert await _meta(admin, "lp-1") == (labels_before, annotations_before, spec_before)
        # what it does own, on any node
        await _patch(
            api,
            "lp-1",
            {
                "metadata": {
                    "labels": {c.LABEL_SCHEDULE: "share", c.LABEL_POOL: "p"},
                    "annotations": {c.ANNOTATION_CORDONED_BY: "p"},
                },
                "spec": {"unschedulable": True},
            },
        )
        labels, annotations, spec = await _meta(admin, "lp-1")
        assert labels[c.LABEL_SCHEDULE] == "share" and annotations[c.ANNOTATION_CORDONED_BY] == "p"
        assert spec.unschedulable
        await _patch(
            api,
            "lp-1",
            {
                "metadata": {
                    "labels": {c.LABEL_SCHEDULE: None, c.LABEL_POOL: None},
                    "annotations": {c.ANNOTATION_CORDONED_BY: None},
                },
                "spec": {"unschedulable": None},
            },
        )

    async def back() -> bool:  # kcm removes its node.kubernetes.io/unschedulable taint a moment later
        return await _meta(admin, "lp-1") == (labels_before, annotations_before, spec_before)

    await wait_for(back, what="lp-1 back as it was", timeout_s=30)


async def test_the_real_agent_cycle_works_under_the_policy(
    as_agent: client.ApiClient, admin: client.ApiClient, tmp_path: Path
) -> None:
    (tmp_path / "modules").write_text("nvidia 1 0 - Live 0x0\n")
    paths = IsolationPaths(proc_modules=tmp_path / "modules", proc_cgpu=tmp_path / "cgpu_km")
    nvml = FakeNVML(gpus=[H200, H200])
    labels_before, _, _ = await _meta(admin, "lp-0")
    state = agent_loop.AgentState()
    assert await agent_loop.run_agent(as_agent, "lp-0", nvml, paths=paths, once=True, state=state) == 0
    assert state.writes == 1
    labels, annotations, _ = await _meta(admin, "lp-0")
    assert labels[c.LABEL_GPU_COUNT] == "2"
    assert labels[c.LABEL_GPU_PRODUCT] == "NVIDIA-H200"
    assert labels[c.LABEL_CGPU_ISOLATION] == "absent"
    assert json.loads(annotations[c.ANNOTATION_INVENTORY])["state"] == "ok"
    assert {k: v for k, v in labels.items() if k not in AGENT_LABELS} == labels_before
    # the next cycle finds nothing to write
    assert await agent_loop.run_agent(as_agent, "lp-0", nvml, paths=paths, once=True, state=state) == 0
    assert state.writes == 1
    # run as if on another node (wrong NODE_NAME): refused, reported, not a crash
    other = agent_loop.AgentState()
    with structlog.testing.capture_logs() as logs:
        assert await agent_loop.run_agent(as_agent, "lp-1", nvml, paths=paths, once=True, state=other) == 1
    assert other.errors == 1
    (error,) = [e for e in logs if e["event"] == "cannot update node; retrying next period"]
    assert "forbidden: " in error["error"] and "may not modify node lp-1" in error["error"], error
    labels_1, annotations_1, _ = await _meta(admin, "lp-1")
    assert c.LABEL_GPU_COUNT not in labels_1 and c.ANNOTATION_INVENTORY not in annotations_1


# --- operator --------------------------------------------------------------------------------


async def test_operator_deletes_pods_only_in_device_plugin_namespaces(
    installed: ClusterInfo, admin: client.ApiClient, tmp_path: Path
) -> None:
    core = client.CoreV1Api(admin)
    await core.create_namespaced_pod("team-a", cast(Any, pod_body("victim", "lp-2")))
    await core.create_namespaced_pod("kube-system", cast(Any, pod_body("plugin-like", "lp-2")))
    cfg = kubeconfig_for(installed, token(installed, OPERATOR_SA), tmp_path / "op.kubeconfig")
    async with await make_api_client(str(cfg)) as api:
        as_operator = client.CoreV1Api(api)
        with pytest.raises(ApiException) as err:
            await as_operator.delete_namespaced_pod("victim", "team-a")
        assert err.value.status == 403
        with pytest.raises(ApiException) as err:
            await as_operator.delete_collection_namespaced_pod("kube-system")
        assert err.value.status == 403
        await as_operator.delete_namespaced_pod("plugin-like", "kube-system", grace_period_seconds=0)
        # the operator's own guard refuses before asking the apiserver, with a message that says why
        cluster = Cluster(api, plugin_namespaces=frozenset({"kube-system"}))
        victim = await core.read_namespaced_pod("victim", "team-a")
        with pytest.raises(PluginNamespaceNotAllowed) as refused:
            await cluster.delete_pod("team-a", "victim", victim.metadata.uid)
        assert "spec.devicePlugin.namespace='team-a'" in str(refused.value)
        assert await cluster.plugin_namespaces_denied() == []
        assert await Cluster(api, plugin_namespaces=frozenset({"team-a"})).plugin_namespaces_denied() == [
            "team-a"
        ]
        # Evictions (which honour PDBs) stay possible in every namespace.
        assert await cluster.evict_pod("team-a", "victim") == "evicted"

    async def gone() -> bool:
        try:
            pod = await core.read_namespaced_pod("victim", "team-a")
        except ApiException as exc:
            return exc.status == 404
        return pod.metadata.deletion_timestamp is not None

    await wait_for(gone, what="team-a/victim evicted", timeout_s=30)


#: ``gpushare run`` as the Deployment runs it (with the operator ServiceAccount's token).
OPERATOR_ARGS = (
    "--namespace-for-events", "default", "--plugin-namespaces", "kube-system",
    "--peering", "gpushare-operator",  # the shipped ClusterKopfPeering, as the Deployment runs
)  # fmt: skip


async def _pool(admin: client.ApiClient, name: str, **spec: Any) -> None:
    body = {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {POOL_LABEL: NODEPOOL}}, **spec},
    }
    await client.CustomObjectsApi(admin).create_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, body)


async def _pool_obj(admin: client.ApiClient, name: str) -> dict[str, Any] | None:
    try:
        obj: dict[str, Any] = await client.CustomObjectsApi(admin).get_cluster_custom_object(
            c.GROUP, c.VERSION, c.PLURAL, name
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return obj


async def _plugin_uids(admin: client.ApiClient) -> dict[str, str]:
    selector = ",".join(f"{k}={v}" for k, v in c.DEFAULT_PLUGIN_LABELS.items())
    pods = await client.CoreV1Api(admin).list_namespaced_pod("kube-system", label_selector=selector)
    return {p.spec.node_name: p.metadata.uid for p in pods.items if p.metadata.deletion_timestamp is None}


async def test_operator_rollout_eviction_and_restore_with_its_service_account(
    installed: ClusterInfo, admin: client.ApiClient, tmp_path: Path
) -> None:
    """Labels, plugin restarts, an Evict mode switch and the restore, all with the shipped RBAC."""
    nodes = ["lp-0", "lp-1", "lp-2"]
    core = client.CoreV1Api(admin)
    # The shipped webhook fails closed for pools too, and nothing can serve it here (no Service
    # routing to a local process): this test is about RBAC, so admission goes.
    kubectl(installed, "delete", "validatingwebhookconfiguration", "gpushare-webhook")
    cfg = kubeconfig_for(installed, token(installed, OPERATOR_SA), tmp_path / "op.kubeconfig")
    before = {n: (await _meta(admin, n))[0] for n in nodes}
    plugins_before = await _plugin_uids(admin)
    op = launch_operator(cfg, tmp_path / "operator.log", *OPERATOR_ARGS)
    try:
        await _pool(admin, "lp-share", rollout={"maxUnavailable": "100%", "modeSwitch": "Evict"})

        async def rolled_out() -> bool:
            for n in nodes:
                labels, annotations, _ = await _meta(admin, n)
                record = json.loads(annotations.get(c.ANNOTATION_PLUGIN_RESTART) or "null")
                if labels.get(c.LABEL_SCHEDULE) != "cgpu" or not record or record["state"] != "Done":
                    return False
            return True

        await wait_for(rolled_out, what="cgpu labels and Done plugin restarts on lp-*", timeout_s=120)
        plugins_after = await _plugin_uids(admin)
        assert all(plugins_after.get(n) != plugins_before.get(n) for n in nodes), "plugins not restarted"

        # A GPU pod on lp-2 blocks a mode switch: with modeSwitch Evict it is evicted.
        await core.create_namespaced_pod(
            "team-a",
            cast(
                Any,
                {
                    "metadata": {"name": "gpu-job", "labels": IGNORE},
                    "spec": {
                        "nodeName": "lp-2",
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [
                            {
                                "name": "cuda",
                                "image": "registry.invalid/cuda:fake",
                                "resources": {"limits": {c.RES_GPU_MEM: "2"}},
                            }
                        ],
                    },
                },
            ),
        )

        async def running() -> bool:
            pod = await core.read_namespaced_pod("gpu-job", "team-a")
            return bool(pod.status.phase == "Running")

        await wait_for(running, what="team-a/gpu-job Running", timeout_s=30)
        await client.CustomObjectsApi(admin).patch_cluster_custom_object(
            c.GROUP, c.VERSION, c.PLURAL, "lp-share", {"spec": {"memoryIsolation": False}}, **MERGE
        )

        async def switched() -> bool:
            labels, _, _ = await _meta(admin, "lp-2")
            return labels.get(c.LABEL_SCHEDULE) == "share"

        await wait_for(switched, what="lp-2 switched to share after evicting team-a/gpu-job", timeout_s=120)
        evicted = await core.list_namespaced_pod("team-a", field_selector="metadata.name=gpu-job")
        assert all(p.metadata.deletion_timestamp is not None for p in evicted.items)

        async def uncordoned() -> bool:
            return not (await _meta(admin, "lp-2"))[2].unschedulable

        await wait_for(uncordoned, what="lp-2 uncordoned after the switch", timeout_s=60)

        # A second pool whose device plugin lives outside --plugin-namespaces: reported, nothing deleted.
        await client.CustomObjectsApi(admin).delete_cluster_custom_object(
            c.GROUP, c.VERSION, c.PLURAL, "lp-share"
        )

        async def restored() -> str | bool:
            if await _pool_obj(admin, "lp-share") is not None:
                return False  # wait_for reports the last value: say what is missing below
            for n in nodes:
                labels, _, spec = await _meta(admin, n)
                managed = {k: v for k, v in labels.items() if k in c.MANAGED_LABELS}
                if managed != {c.LABEL_SCHEDULE: "default"} or spec.unschedulable:
                    return False
            return "restored"

        await wait_for(restored, what="lp-* restored and the pool's finalizer removed", timeout_s=120)
        for n in nodes:
            labels, _, _ = await _meta(admin, n)
            foreign = {k: v for k, v in labels.items() if k not in c.MANAGED_LABELS and k not in AGENT_LABELS}
            assert foreign == {k: v for k, v in before[n].items() if k not in AGENT_LABELS}

        await _pool(admin, "lp-elsewhere", devicePlugin={"namespace": "gpu-plugins"})

        async def reported() -> Any:
            events = await core.list_namespaced_event(
                "default", field_selector=f"involvedObject.kind={c.KIND},involvedObject.name=lp-elsewhere"
            )
            return next((e for e in events.items if e.reason == "DevicePluginNamespaceNotAllowed"), None)

        event = await wait_for(reported, what="Event DevicePluginNamespaceNotAllowed", timeout_s=60)
        assert event.type == "Warning"
        assert "spec.devicePlugin.namespace='gpu-plugins'" in event.message

        async def degraded() -> Any:
            obj = await _pool_obj(admin, "lp-elsewhere")
            for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
                if (
                    cond["type"] == "Degraded"
                    and cond["status"] == "True"
                    and "gpu-plugins" in cond["message"]
                ):
                    return cond
            return None

        cond = await wait_for(degraded, what="lp-elsewhere Degraded naming gpu-plugins", timeout_s=60)
        assert "--plugin-namespaces" in cond["message"]
        # The way out the message offers: no restarts for this pool; then it can go.
        await client.CustomObjectsApi(admin).patch_cluster_custom_object(
            c.GROUP,
            c.VERSION,
            c.PLURAL,
            "lp-elsewhere",
            {"spec": {"devicePlugin": {"restart": "Never"}}},
            **MERGE,
        )
        await client.CustomObjectsApi(admin).delete_cluster_custom_object(
            c.GROUP, c.VERSION, c.PLURAL, "lp-elsewhere"
        )

        async def elsewhere_gone() -> bool:
            return await _pool_obj(admin, "lp-elsewhere") is None

        await wait_for(elsewhere_gone, what="lp-elsewhere deleted", timeout_s=120)
    finally:
        op.stop()
        print(
            f"--- {op.log_path} (tail) ---\n{op.log_path.read_text(errors='replace')[-6000:]}"
        )  # on failure
    assert op.proc.returncode == 0
    logs = op.logs()
    words = ("403", "forbidden", "not enough permissions")
    texts = [json.dumps({k: v for k, v in e.items() if k != "timestamp"}).lower() for e in logs]
    denied = [t for t in texts if any(w in t for w in words)]
    assert not denied, f"the operator hit RBAC denials with its ServiceAccount: {denied[:3]}"
    assert not [e for e in logs if e.get("event") == "Reconcile pass failed"]
    assert any(e.get("event") == "Device plugin namespace not allowed" for e in logs)
