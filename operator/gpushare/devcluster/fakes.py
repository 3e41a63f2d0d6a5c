"""Fake GPU nodes (kwok-managed) and a stand-in gpushare device-plugin DaemonSet.

kwok keeps nodes annotated ``kwok.x-k8s.io/node: fake`` Ready and moves pods bound to
them to Running; kube-controller-manager and kube-scheduler do the rest, as on a real
cluster. This is test and demo tooling; the operator's own API calls live in
``gpushare.k8s``.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from kubernetes_asyncio import client

from gpushare import constants as c
from gpushare.devcluster import migsim, nvidia, nvidiasim
from gpushare.devcluster.pluginsim import ANNOTATION_NUDGE, LABEL_SIMULATED, SIMULATED_VALUE, seen_pod
from gpushare.devcluster.rbac import create_service_account, service_account_bodies
from gpushare.gpu.fake import FakeGPU, FakeNVML
from gpushare.gpu.inventory import collect_inventory, desired_node_metadata
from gpushare.k8s.generated import refused

T = TypeVar("T")

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
FAKE_LABEL = "gpushare.io/fake-node"
POOL_LABEL = "alibabacloud.com/nodepool-id"
PLUGIN_DS_NAME = "gpushare-device-plugin-ds"
PLUGIN_NODE_SELECTOR = {"gpushare": "true"}
#: ...and not on a node that NVIDIA's plugin serves: one that names an NVIDIA sharing config (a node
#: of an NVIDIA pool). With NVIDIA's DaemonSet kept off the nodes of ACK pools
#: (``gpushare.devcluster.nvidia.NODE_AFFINITY``), the two plugins never share a node of a pool, and
#: a node moving between the two backends changes plugin with the operator's label patch
#: (docs/concepts/backends.md, "Which plugin runs on a node").
PLUGIN_NODE_AFFINITY: dict[str, Any] = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": c.LABEL_NVIDIA_CONFIG, "operator": "DoesNotExist"}]}
            ]
        }
    }
}
#: The stand-in plugin's image: nothing on kwok nodes; the project's device plugin on real nodes.
PLUGIN_IMAGE = "registry.invalid/gpushare-device-plugin:fake"
#: Its ServiceAccount on clusters with real nodes (it reads its node, patches node status and pods).
PLUGIN_SERVICE_ACCOUNT = "gpushare-device-plugin"
#: Nodes created at once by ``create_gpu_nodes`` (5000 one after another took minutes).
CREATE_CONCURRENCY = 32
#: Which device plugin ``pluginsim`` plays on a node: ACK's (``ack``) or NVIDIA's (``nvidia``).
PLUGINS = (SIMULATED_VALUE, nvidiasim.SIMULATED_VALUE)


async def wait_for(
    check: Callable[[], Awaitable[T | None]],
    *,
    what: str,
    timeout_s: float = 30.0,
    interval: float = 0.2,
) -> T:
    """Poll ``check`` until it returns something other than None/False; TimeoutError otherwise.

    The error names ``what`` and the last value or exception seen.
    """
    deadline = time.monotonic() + timeout_s
    last: object = "never checked"
    while True:
        value: T | None = None
        with refused() as error:
            value = await check()
        if error:
            last = f"API error {error.status}: {error.reason}"
        else:
            if value is not None and value is not False:
                return value
            last = value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s:g}s waiting for {what}; last result: {last!r}")
        await asyncio.sleep(interval)


def gpu_node_body(
    name: str,
    *,
    labels: Mapping[str, str],
    gpus_per_node: int,
    gpu_mem_gib_per_gpu: int,
    core_percentage: bool,
    cpu: str = "32",
    memory: str = "256Gi",
    pods: str = "110",
    simulated_gpus: Sequence[FakeGPU] | None = None,
    plugin: str = SIMULATED_VALUE,
) -> dict[str, Any]:
    """The Node object (with status) of a kwok-managed GPU node.

    With ``simulated_gpus`` the node starts without GPU resources: it carries the agent inventory
    of those GPUs and the label that lets ``pluginsim`` advertise them when its plugin starts
    (``plugin``: ACK's or NVIDIA's). A node of NVIDIA's plugin also carries the labels GPU Feature
    Discovery gives it (``nvidiasim.gfd_labels``) and the node agent's (``gpushare.io/gpu.*``).
    """
    resources = {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": "1Ti"}
    annotations = {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"}
    extra: dict[str, str] = {}
    if simulated_gpus is not None:
        inventory = collect_inventory(FakeNVML(gpus=list(simulated_gpus)))
        annotations[c.ANNOTATION_INVENTORY] = inventory.to_json()
        extra[LABEL_SIMULATED] = plugin
        if plugin == nvidiasim.SIMULATED_VALUE:
            agent, _ = desired_node_metadata(inventory)
            extra |= nvidiasim.gfd_labels(simulated_gpus)
            extra |= {k: v for k, v in agent.items() if v is not None}
    elif gpus_per_node > 0:
        resources[c.RES_GPU_MEM] = str(gpu_mem_gib_per_gpu * gpus_per_node)
        resources[c.RES_GPU_COUNT] = str(gpus_per_node)
        if core_percentage:
            resources[c.RES_GPU_CORE] = str(100 * gpus_per_node)
    all_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        # A kubelet sets the beta twins too; kcm's node-lifecycle controller would add them
        # later, which would show up as a spurious label change in tests.
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "type": "kwok",
        FAKE_LABEL: "true",
        **extra,
        **labels,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": all_labels,
            "annotations": annotations,
        },
        "spec": {},
        "status": {"capacity": dict(resources), "allocatable": dict(resources)},
    }


async def create_gpu_nodes(
    api: client.ApiClient,
    n: int,
    *,
    prefix: str = "gpu-node",
    pool_labels: Mapping[str, str] | None = None,
    gpus_per_node: int = 1,
    gpu_mem_gib_per_gpu: int = 16,
    core_percentage: bool = False,
    extra_labels: Mapping[str, str] | None = None,
    start: int = 0,
    wait_ready: bool = True,
    timeout_s: float = 60.0,
    simulate_plugin: bool = False,
    gpus: Sequence[FakeGPU] | None = None,
    plugin: str = SIMULATED_VALUE,
) -> list[str]:
    """Create ``n`` kwok GPU nodes named ``<prefix>-<i>``; returns their names.

    Each carries ``gpushare=true`` (the device plugin's nodeSelector), the pool labels
    (e.g. ``{"alibabacloud.com/nodepool-id": "np-a"}``) and ``extra_labels``; capacity and
    allocatable include ``aliyun.com/gpu-mem`` (GiB, per-GPU x count), ``gpu-count`` and,
    with ``core_percentage``, ``gpu-core.percentage`` (100 x count). No taint is added.

    ``simulate_plugin``: the capacity is not fixed; ``pluginsim`` (started with the cluster) sets
    it from the node's labels each time a new device-plugin pod runs there, as ACK's plugin does.
    The node carries an agent inventory of ``gpus`` (default: ``gpus_per_node`` GPUs of
    ``gpu_mem_gib_per_gpu`` GiB); with ``wait_ready``, this waits until the plugin registered.
    ``plugin="nvidia"`` (with ``simulate_plugin``): NVIDIA's plugin instead of ACK's, the node
    labelled as GPU Feature Discovery and the agent would (``nvidia.com/gpu.present=true``, NVIDIA's
    DaemonSet's nodeSelector, instead of ``gpushare=true``); its plugin pods come from
    :func:`ensure_nvidia_plugin`.
    """
    if plugin not in PLUGINS or (plugin != SIMULATED_VALUE and not simulate_plugin):
        raise ValueError(f"plugin {plugin!r}: one of {PLUGINS}, and NVIDIA's only with simulate_plugin")
    core = client.CoreV1Api(api)
    selector = PLUGIN_NODE_SELECTOR if plugin == SIMULATED_VALUE else nvidia.NODE_SELECTOR
    labels = {**selector, **(pool_labels or {}), **(extra_labels or {})}
    names = [f"{prefix}-{i}" for i in range(start, start + n)]
    simulated: list[FakeGPU] | None = None
    if simulate_plugin:
        simulated = (
            list(gpus)
            if gpus is not None
            else [
                FakeGPU(name="NVIDIA A10", memory_mib=gpu_mem_gib_per_gpu * 1024)
                for _ in range(gpus_per_node)
            ]
        )
    in_flight = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def one(name: str) -> None:
        body = gpu_node_body(
            name,
            labels=labels,
            gpus_per_node=gpus_per_node,
            gpu_mem_gib_per_gpu=gpu_mem_gib_per_gpu,
            core_percentage=core_percentage,
            simulated_gpus=[
                FakeGPU(name=g.name, memory_mib=g.memory_mib, uuid=g.uuid or f"GPU-{name}-{i}", mig=g.mig)
                for i, g in enumerate(simulated)
            ]
            if simulated is not None
            else None,
            plugin=plugin,
        )
        async with in_flight:
            await core.create_node(cast(Any, body))
            # Status sent with a create is kept for nodes, but patch it explicitly so the
            # extended resources are there whatever kwok's first status update carried.
            await core.patch_node_status(name, {"status": body["status"]})

    await asyncio.gather(*(one(name) for name in names))
    if wait_ready:
        await wait_nodes_ready(api, names, timeout_s=timeout_s)
        if simulate_plugin:
            await wait_plugin_registered(api, names, timeout_s=timeout_s)
    return names


async def wait_plugin_registered(
    api: client.ApiClient,
    names: Iterable[str],
    *,
    timeout_s: float = 60.0,
    other_than: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Wait until ``pluginsim`` has acted on a plugin pod of every node (one whose UID differs from
    ``other_than[node]``); returns node -> that pod's UID."""
    core = client.CoreV1Api(api)
    wanted = sorted(set(names))
    before = dict(other_than or {})

    async def registered() -> dict[str, str] | None:
        out = {}
        for name in wanted:
            node = await core.read_node(name)
            uid = seen_pod(node.metadata.annotations)
            if not uid or uid == before.get(name):
                return None
            out[name] = uid
        return out

    try:
        result: dict[str, str] = await wait_for(
            registered, what=f"the simulated device plugin to register on {wanted}", timeout_s=timeout_s
        )
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}\n{await _plugin_diagnosis(core, wanted, before)}") from None
    return result


async def _plugin_diagnosis(core: client.CoreV1Api, names: Sequence[str], before: Mapping[str, str]) -> str:
    """Where registration stopped on each node of ``names`` still without it: the node's readiness,
    the device-plugin pods bound to it (ACK's and NVIDIA's namespaces) and their phases, and what
    ``pluginsim`` last recorded there; so that a time-out on a loaded machine says which step lagged
    (no pod: the DaemonSet controller or the scheduler; a pod not Running: kwok; a Running pod
    with nothing recorded: pluginsim)."""
    lines = []
    for name in names:
        with refused() as error:
            node = await core.read_node(name)
        if error:
            lines.append(f"  {name}: node not readable (API error {error.status})")
            continue
        uid = seen_pod(node.metadata.annotations)
        if uid and uid != before.get(name):
            continue
        ready = next((cond.status for cond in node.status.conditions or [] if cond.type == "Ready"), "?")
        pods = []
        for namespace in (c.DEFAULT_PLUGIN_NAMESPACE, c.NVIDIA_PLUGIN_NAMESPACE):
            with refused():
                listed = await core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={name}")
                pods += [
                    f"{namespace}/{p.metadata.name} {p.status.phase} uid={p.metadata.uid}"
                    + (f" shown to kwok again {n} times" if (n := _nudges(p.metadata.annotations)) else "")
                    for p in listed.items
                ]
        lines.append(
            f"  {name}: Ready={ready}; recorded plugin pod: {uid or 'none'}; "
            f"plugin pods bound here: {', '.join(pods) or 'none'}"
        )
    return "\n".join(lines)


def _nudges(annotations: Mapping[str, str] | None) -> str:
    return (annotations or {}).get(ANNOTATION_NUDGE, "")


async def wait_nodes_ready(api: client.ApiClient, names: Iterable[str], *, timeout_s: float = 60.0) -> None:
    core = client.CoreV1Api(api)
    wanted = set(names)

    async def not_ready() -> bool:
        nodes = await core.list_node(label_selector=f"{FAKE_LABEL}=true")
        ready = {
            node.metadata.name
            for node in nodes.items
            if any(cond.type == "Ready" and cond.status == "True" for cond in node.status.conditions or [])
            and not any(t.key == "node.kubernetes.io/not-ready" for t in node.spec.taints or [])
        }
        missing = wanted - ready
        return not missing

    await wait_for(
        not_ready, what=f"nodes {sorted(wanted)} to be Ready (kwok) and untainted", timeout_s=timeout_s
    )


async def list_fake_nodes(api: client.ApiClient) -> list[str]:
    nodes = await client.CoreV1Api(api).list_node(label_selector=f"{FAKE_LABEL}=true")
    return sorted(node.metadata.name for node in nodes.items)


async def delete_nodes(api: client.ApiClient, names: Iterable[str], *, wait: bool = True) -> None:
    core = client.CoreV1Api(api)
    names = list(names)
    for name in names:
        with refused(404):
            await core.delete_node(name)
    if wait and names:
        gone = set(names)

        async def all_gone() -> bool:
            return not (set(await list_fake_nodes(api)) & gone)

        await wait_for(all_gone, what=f"nodes {sorted(gone)} to be deleted", timeout_s=30)


def device_plugin_daemonset_body(
    namespace: str = c.DEFAULT_PLUGIN_NAMESPACE, *, real_nodes: RealNodePlugin | None = None
) -> dict[str, Any]:
    """A stand-in for ACK's gpushare-device-plugin-ds (same name, labels and nodeSelector), kept off
    the nodes of NVIDIA pools (:data:`PLUGIN_NODE_AFFINITY`).

    With ``real_nodes`` the pod is also what ACK's DaemonSet is on a real node: hostNetwork,
    Guaranteed, the kubelet's device-plugin directory mounted, a ServiceAccount token, the
    apiserver at 127.0.0.1 and the GPU inventory in its arguments (``realnode/deviceplugin``).
    """
    labels = {**c.DEFAULT_PLUGIN_LABELS, "component": "gpushare-device-plugin", "app": "gpushare"}
    body: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": PLUGIN_DS_NAME, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "selector": {"matchLabels": dict(c.DEFAULT_PLUGIN_LABELS)},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": dict(PLUGIN_NODE_SELECTOR),
                    "affinity": copy.deepcopy(PLUGIN_NODE_AFFINITY),
                    "tolerations": [{"operator": "Exists"}],
                    "priorityClassName": "system-node-critical",
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "gpushare",
                            "image": PLUGIN_IMAGE,
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "32Mi"},
                                "limits": {"cpu": "10m", "memory": "32Mi"},
                            },
                        }
                    ],
                },
            },
        },
    }
    if real_nodes is not None:
        pod = body["spec"]["template"]["spec"]
        pod.update(
            hostNetwork=True,
            serviceAccountName=PLUGIN_SERVICE_ACCOUNT,
            automountServiceAccountToken=True,
            volumes=[{"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}],
        )
        container = pod["containers"][0]
        container.update(
            args=[
                f"--gpus={real_nodes.gpus}",
                f"--gpu-memory-mib={real_nodes.gpu_memory_mib}",
                f"--memory-unit={real_nodes.memory_unit}",
            ],
            env=[
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                # hostNetwork: the apiserver listens on the host's loopback (no kube-proxy here).
                {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                {"name": "KUBERNETES_SERVICE_PORT", "value": str(real_nodes.api_port)},
            ],
            volumeMounts=[{"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"}],
            resources={
                "requests": {"cpu": "50m", "memory": "64Mi"},
                "limits": {"cpu": "50m", "memory": "64Mi"},
            },
        )
    return body


@dataclass(frozen=True)
class RealNodePlugin:
    """What the device plugin needs on real nodes: the apiserver's port and the GPUs it advertises."""

    api_port: int
    gpus: int = 1
    gpu_memory_mib: int = 16 * 1024
    memory_unit: str = "GiB"


def plugin_rbac_bodies(namespace: str = c.DEFAULT_PLUGIN_NAMESPACE) -> list[dict[str, Any]]:
    """ServiceAccount, ClusterRole and binding of the device plugin on real nodes (what ACK's has)."""
    rules = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch", "update"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
    ]
    return service_account_bodies(PLUGIN_SERVICE_ACCOUNT, namespace, rules)


async def ensure_device_plugin_daemonset(
    api: client.ApiClient,
    namespace: str = c.DEFAULT_PLUGIN_NAMESPACE,
    *,
    real_nodes: RealNodePlugin | None = None,
) -> None:
    """Create the stand-in device-plugin DaemonSet, or bring an existing one back to the stand-in spec.

    ``real_nodes``: the real-node variant (see :func:`device_plugin_daemonset_body`), with its
    ServiceAccount and RBAC.
    """
    apps = client.AppsV1Api(api)
    body = device_plugin_daemonset_body(namespace, real_nodes=real_nodes)
    if real_nodes is not None:
        await create_service_account(api, plugin_rbac_bodies(namespace))
    with refused(409) as exists:
        await apps.create_namespaced_daemon_set(namespace, cast(Any, body))
    if exists:
        await apps.replace_namespaced_daemon_set(PLUGIN_DS_NAME, namespace, cast(Any, body))


def nvidia_plugin_daemonset_body() -> dict[str, Any]:
    """A stand-in for NVIDIA's plugin DaemonSet as its chart deploys it, for kwok nodes: the name,
    namespace and labels the operator looks for by default (``gpushare.constants.NVIDIA_PLUGIN_*``),
    the nodeSelector (``nvidia.com/gpu.present=true``) and the affinity off ACK pools' nodes of
    ``gpushare.devcluster.nvidia.daemonset_body`` (the real one, for real nodes); ``pluginsim``
    plays what its pods would do."""
    labels = dict(nvidia.APP_LABELS)
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": nvidia.DS_NAME, "namespace": nvidia.NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "nodeSelector": dict(nvidia.NODE_SELECTOR),
                    "affinity": copy.deepcopy(nvidia.NODE_AFFINITY),
                    "tolerations": [{"operator": "Exists"}],
                    "priorityClassName": "system-node-critical",
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "nvidia-device-plugin-ctr",
                            "image": "registry.invalid/nvidia-device-plugin:fake",
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "32Mi"},
                                "limits": {"cpu": "10m", "memory": "32Mi"},
                            },
                        }
                    ],
                },
            },
        },
    }


async def ensure_nvidia_plugin(
    api: client.ApiClient, configs: Mapping[str, str], *, daemonset: bool = True
) -> None:
    """NVIDIA's plugin for the kwok nodes of ``create_gpu_nodes(plugin="nvidia")``: its namespace,
    its named-config ConfigMap (``configs``: name -> plugin config YAML; created when absent, left
    as it is otherwise: the operator adds its keys there) and, with ``daemonset``, the stand-in
    DaemonSet (created, or brought back to the stand-in's spec)."""
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    ns = nvidia.NAMESPACE
    with refused(409):
        await core.create_namespace(cast(Any, {"metadata": {"name": ns}}))
    cm = nvidia.configmap_body(nvidia.CONFIGS_CONFIGMAP, configs)
    with refused(409):
        await core.create_namespaced_config_map(ns, cast(Any, cm))
    if not daemonset:
        return
    body = cast(Any, nvidia_plugin_daemonset_body())
    with refused(409) as exists:
        await apps.create_namespaced_daemon_set(ns, body)
    if exists:
        await apps.replace_namespaced_daemon_set(nvidia.DS_NAME, ns, body)


async def ensure_mig_manager(api: client.ApiClient) -> None:
    """The MIG manager's ConfigMap of mig-parted configs (its namespace, and the chart's own
    configs under ``config.yaml``: ``migsim.CHART_DOCUMENT``), created when absent and left as it is
    otherwise (the operator adds its configs there, as entries of ``config.yaml``, the one file the
    manager reads). ``pluginsim`` plays the manager on every node of NVIDIA's simulated plugin that
    carries ``nvidia.com/mig.config``."""
    core = client.CoreV1Api(api)
    with refused(409):
        await core.create_namespace(cast(Any, {"metadata": {"name": c.MIG_CONFIGS_NAMESPACE}}))
    body = {"metadata": {"name": c.MIG_CONFIGS_CONFIGMAP}, "data": {migsim.CHART_KEY: migsim.CHART_DOCUMENT}}
    with refused(409):
        await core.create_namespaced_config_map(c.MIG_CONFIGS_NAMESPACE, cast(Any, body))


async def plugin_pods_on(
    api: client.ApiClient,
    node: str,
    namespace: str = c.DEFAULT_PLUGIN_NAMESPACE,
    labels: Mapping[str, str] = c.DEFAULT_PLUGIN_LABELS,
) -> list[Any]:
    """The device-plugin pods bound to ``node`` (label and field selector, as the operator does)."""
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    pods = await client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=selector, field_selector=f"spec.nodeName={node}"
    )
    return list(pods.items)


def pod_running_and_ready(pod: Any) -> bool:
    if pod.metadata.deletion_timestamp is not None or pod.status.phase != "Running":
        return False
    return any(cond.type == "Ready" and cond.status == "True" for cond in pod.status.conditions or [])


async def wait_plugin_ready(
    api: client.ApiClient, node: str, *, other_than: str | None = None, timeout_s: float = 60.0
) -> Any:
    """Wait for a Running+Ready device-plugin pod on ``node`` (whose uid differs from ``other_than``)."""

    async def ready_pod() -> Any:
        for pod in await plugin_pods_on(api, node):
            if pod.metadata.uid != other_than and pod_running_and_ready(pod):
                return pod
        return None

    return await wait_for(
        ready_pod, what=f"a Running, Ready device-plugin pod on {node}", timeout_s=timeout_s
    )


class FakeNodeSet:
    """Creates kwok GPU nodes under one unique prefix and remembers them (used by test fixtures)."""

    def __init__(self, api: client.ApiClient, prefix: str) -> None:
        self.api = api
        self.prefix = prefix
        self.created: list[str] = []
        self._count = 0

    async def create(self, n: int = 1, *, prefix: str = "gpu", **kwargs: Any) -> list[str]:
        """``create_gpu_nodes`` with names ``<set prefix>-<prefix>-<i>``."""
        names = await create_gpu_nodes(
            self.api, n, prefix=f"{self.prefix}-{prefix}", start=self._count, **kwargs
        )
        self._count += n
        self.created += names
        return names
