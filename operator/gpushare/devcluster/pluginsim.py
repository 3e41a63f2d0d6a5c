"""A simulator of ACK's gpushare device plugin for the local control plane (devcluster only).

``python -m gpushare.devcluster.pluginsim --kubeconfig FILE`` runs next to kwok (``DevCluster``
starts and stops it). It watches the stand-in plugin pods (``name=gpushare-device-plugin-ds`` in
kube-system). Whenever a plugin pod with a UID not seen before is Running on a node that opts in
(label ``gpushare.io/fake-plugin=ack``, set by ``create_gpu_nodes(simulate_plugin=True)``), it reads
the node's labels *at that moment* and patches the node's ``status.capacity`` and
``status.allocatable`` as ACK's plugin does for that mode (see :func:`advertised_resources`):

* ``default`` (or no ``ack.node.gpu.schedule``): ``nvidia.com/gpu`` = GPU count;
* ``cgpu``, ``share``, ``mps``: ``aliyun.com/gpu-mem`` (first GPU's memory in GiB, floored, times
  the count) and ``aliyun.com/gpu-count``;
* ``core_mem``: those plus ``aliyun.com/gpu-core.percentage`` (100 per GPU);
* ``topology``: ``aliyun.com/gpu`` = GPU count;

and every other mode's resource 0. It records what it saw in the annotation
``gpushare.io/simulated-plugin`` (pod UID, mode, isolation). A label change without a new plugin
pod changes nothing, as on a real node: ACK's plugin reads the labels only when it starts.

The GPUs (count, memory) come from the node agent's inventory annotation
(``gpushare.io/gpu-inventory``); a node without one is left alone until it has one. A node
annotated ``gpushare.io/simulated-plugin-hang=true`` gets plugin pods that run but never register
(its resources stay as they are): a plugin that never comes back.

kwok owns node *conditions* (heartbeats); it keeps ``capacity``/``allocatable`` it finds on the
node, so the simulator patches them through the ``status`` subresource.

It also plays NVIDIA's device plugin and config-manager on the nodes labelled
``gpushare.io/fake-plugin=nvidia`` (``create_gpu_nodes(plugin="nvidia")``): it watches NVIDIA's
plugin pods (``app.kubernetes.io/name=nvidia-device-plugin`` in ``nvidia-device-plugin``, the
stand-in DaemonSet of ``fakes.ensure_nvidia_plugin_daemonset``) and the plugin's named-config
ConfigMap (``nvidia-device-plugin-configs`` there), and a node with a Running plugin pod advertises
``replicas x GPUs`` of its config's resource once its ``nvidia.com/device-plugin.config`` label
names a key of the ConfigMap, or the default config for an unknown key, as the real stack does.
What it decides, and what it does not model, is in :mod:`gpushare.devcluster.nvidiasim` (pure);
the annotation ``gpushare.io/simulated-plugin`` records the pod UID, the label and the key in effect.

On the same nodes it plays NVIDIA's MIG manager: it watches the manager's ConfigMap of mig-parted
configs (``default-mig-parted-config`` in ``gpu-operator``) and follows each node's
``nvidia.com/mig.config`` (``pending``, the operands paused, then ``success`` or ``failed`` in
``nvidia.com/mig.config.state``); the plugin then advertises the node's MIG devices under its
config's MIG strategy. What it decides is in :mod:`gpushare.devcluster.migsim`; the annotation
``gpushare.io/simulated-mig`` records the label it acted on, the state, each GPU's devices and why
it failed.

kwok can miss a pod that is bound in the instant it takes a new node on (the node's lease held,
its cache not yet saying so: kubernetes-sigs/kwok#1572) and does not look at that pod again until
the pod changes: a DaemonSet's plugin pod, bound as its node is created, can then stay Pending for
good. The simulator shows such a pod to kwok again (:func:`nudges_due`): a plugin pod on a
simulated node still Pending ``NUDGE_AFTER`` after it was first seen so gets the annotation
``gpushare.io/simulated-kwok-nudge`` (a count), which kwok sees as a change, and the log says so.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes_asyncio import client

from gpushare import constants as c
from gpushare.devcluster import migsim
from gpushare.devcluster import nvidiasim as nv
from gpushare.gpu.inventory import Inventory, inventory_from_annotations
from gpushare.k8s.generated import refused

log = logging.getLogger("gpushare.pluginsim")

#: Opt-in label on fake nodes whose plugin the simulator plays.
LABEL_SIMULATED: str = f"{c.GROUP}/fake-plugin"
SIMULATED_VALUE = "ack"
#: What the simulated plugin saw when it last started on the node (JSON).
ANNOTATION_STATE: str = f"{c.GROUP}/simulated-plugin"
#: ``"true"``: plugin pods on this node run but never register resources.
ANNOTATION_HANG: str = f"{c.GROUP}/simulated-plugin-hang"

RES_NVIDIA_GPU = "nvidia.com/gpu"
RES_ALIYUN_GPU = "aliyun.com/gpu"
#: Every resource the simulated plugin sets (to 0 when the mode does not advertise it).
RESOURCES: tuple[str, ...] = (RES_NVIDIA_GPU, c.RES_GPU_MEM, c.RES_GPU_COUNT, c.RES_GPU_CORE, RES_ALIYUN_GPU)
MEMORY_MODES = ("cgpu", "share", "mps")
#: How long a plugin pod bound to a simulated node may stay Pending before kwok is shown it again
#: (and again after each such span): kwok runs a pod it has seen within a second or two.
NUDGE_AFTER = timedelta(seconds=10)
#: How many times kwok was shown the pod again (module docstring).
ANNOTATION_NUDGE: str = f"{c.GROUP}/simulated-kwok-nudge"


@dataclass(frozen=True)
class PendingPod:
    """A plugin pod bound to a simulated node and not yet Running: since when it was seen so, and
    how many times kwok was shown it again."""

    namespace: str
    name: str
    node: str
    since: datetime
    nudges: int = 0


def is_pending(pod: Mapping[str, Any]) -> bool:
    """Whether a pod is bound to a node, not being deleted and still Pending."""
    meta = pod.get("metadata") or {}
    if not (pod.get("spec") or {}).get("nodeName") or meta.get("deletionTimestamp"):
        return False
    return bool((pod.get("status") or {}).get("phase", "Pending") == "Pending")


def nudges_due(pending: Mapping[tuple[str, str], PendingPod], now: datetime) -> list[PendingPod]:
    """The pods to show kwok again now: each Pending ``NUDGE_AFTER`` times one more than it was
    nudged (pure)."""
    return [p for p in pending.values() if now - p.since >= NUDGE_AFTER * (p.nudges + 1)]


def plugin_mode(labels: Mapping[str, str]) -> str:
    """The mode ACK's plugin starts in: ``ack.node.gpu.schedule``, ``default`` when absent."""
    return labels.get(c.LABEL_SCHEDULE) or c.SCHEDULE_DEFAULT


def plugin_isolation(labels: Mapping[str, str]) -> str:
    """``disabled`` when the plugin would inject ``CGPU_DISABLE=true`` (label true at start)."""
    return "disabled" if labels.get(c.LABEL_DISABLE_ISOLATION) == "true" else "enabled"


def advertised_resources(labels: Mapping[str, str], inventory: Inventory) -> dict[str, str]:
    """The extended resources ACK's plugin puts in capacity and allocatable, every one present.

    ``gpu-mem`` is in GiB: the first GPU's memory floored to whole GiB (ACK assumes every GPU of
    the node has the first one's memory), times the GPU count.
    """
    count = len(inventory.gpus)
    per_gpu_gib = inventory.gpus[0].memory_mib // 1024 if inventory.gpus else 0
    out = dict.fromkeys(RESOURCES, 0)
    mode = plugin_mode(labels)
    if mode == c.SCHEDULE_DEFAULT:
        out[RES_NVIDIA_GPU] = count
    elif mode in MEMORY_MODES or mode == c.SCHEDULE_CORE_MEM:
        out[c.RES_GPU_MEM] = per_gpu_gib * count
        out[c.RES_GPU_COUNT] = count
        if mode == c.SCHEDULE_CORE_MEM:
            out[c.RES_GPU_CORE] = 100 * count
    elif mode == "topology":
        out[RES_ALIYUN_GPU] = count
    return {name: str(value) for name, value in out.items()}


def status_patch(labels: Mapping[str, str], inventory: Inventory) -> dict[str, Any]:
    """The merge patch of the node's status subresource for a plugin starting now."""
    resources = advertised_resources(labels, inventory)
    return {"status": {"capacity": dict(resources), "allocatable": dict(resources)}}


def state_annotation(labels: Mapping[str, str], pod_uid: str, now: datetime) -> str:
    return json.dumps(
        {
            "pod": pod_uid,
            "mode": plugin_mode(labels),
            "isolation": plugin_isolation(labels),
            "at": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def seen_pod(annotations: Mapping[str, str] | None) -> str:
    """The plugin pod UID the simulator last acted on for a node ("" when none)."""
    raw = (annotations or {}).get(ANNOTATION_STATE)
    if not raw:
        return ""
    try:
        data = json.loads(raw)
    except ValueError:
        return ""
    return str(data.get("pod", "")) if isinstance(data, dict) else ""


def _running(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    return bool(
        (pod.get("spec") or {}).get("nodeName")
        and not meta.get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") == "Running"
    )


#: The field manager of the simulated MIG manager's writes: its own, as the real one's
#: (``kubectl label`` in a pod of its own), never the test client's or gpushare's.
MIG_FIELD_MANAGER: str = "nvidia-mig-manager"
#: What the simulated MIG manager last did on the node (JSON, ``migsim.MigState``).
ANNOTATION_MIG: str = f"{c.GROUP}/simulated-mig"
#: ``"true"``: the MIG manager stays at ``pending`` with the operands paused (a wedge).
ANNOTATION_MIG_HANG: str = f"{c.GROUP}/simulated-mig-hang"
#: Seconds the simulated reconfiguration takes on this node (default ``migsim.DEFAULT_DELAY``).
ANNOTATION_MIG_DELAY: str = f"{c.GROUP}/simulated-mig-seconds"
#: Seconds the simulated MIG manager waits before it starts on a new ``nvidia.com/mig.config``
#: value (default 0): the node keeps the previous config's state (its ``success``) meanwhile.
ANNOTATION_MIG_START: str = f"{c.GROUP}/simulated-mig-start-seconds"


@dataclass(frozen=True)
class NvidiaNode:
    """What the simulator knows of a node whose NVIDIA plugin it plays (from the node watch)."""

    label: str
    gpus: int | None
    hang: bool
    seen: nv.Started | None
    #: The node's labels (the MIG manager reads its own and the operands').
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Each GPU's product name and whether it is MIG-capable (from the agent's inventory).
    models: tuple[tuple[str, bool], ...] = ()
    mig: migsim.MigState | None = None
    mig_hang: bool = False
    mig_delay: timedelta = migsim.DEFAULT_DELAY
    mig_start: timedelta = timedelta(0)
    #: The ``nvidia.com/mig-*`` resources the node has now (set to 0 when no longer advertised).
    mig_resources: tuple[str, ...] = ()


def _delay(raw: str | None, default: timedelta = migsim.DEFAULT_DELAY) -> timedelta:
    try:
        return timedelta(seconds=max(0.0, float(raw))) if raw else default
    except ValueError:
        return default


def nvidia_node(node: Mapping[str, Any]) -> NvidiaNode:
    """A node object (JSON) as the NVIDIA side of the simulator reads it."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    inventory = inventory_from_annotations(annotations)
    gpus = inventory.gpus if inventory is not None else ()
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return NvidiaNode(
        label=str(labels.get(c.LABEL_NVIDIA_CONFIG) or ""),
        gpus=len(gpus) or None,
        hang=annotations.get(ANNOTATION_HANG) == "true",
        seen=nv.parse_state(annotations.get(ANNOTATION_STATE)),
        labels={str(k): str(v) for k, v in labels.items()},
        models=tuple((g.name, g.name in migsim.MODELS) for g in gpus),
        mig=migsim.MigState.parse(annotations.get(ANNOTATION_MIG)),
        mig_hang=annotations.get(ANNOTATION_MIG_HANG) == "true",
        mig_delay=_delay(annotations.get(ANNOTATION_MIG_DELAY)),
        mig_start=_delay(annotations.get(ANNOTATION_MIG_START), timedelta(0)),
        mig_resources=tuple(
            sorted(str(k) for k in allocatable if str(k).startswith(c.RES_NVIDIA_MIG_PREFIX))
        ),
    )


Handler = Callable[[str, Mapping[str, Any]], Awaitable[None]]


class PluginSimulator:
    """List+watch the plugin pods and the opted-in nodes; act once per new Running pod UID.

    The watches read raw JSON (no model objects), and nodes that do not opt in cost nothing but
    a dict entry: the simulator runs in every devcluster, benchmarks with thousands of nodes too.
    NVIDIA's side decides from what the watches delivered (:func:`nvidia_node`, the ConfigMap's
    data) with :func:`gpushare.devcluster.nvidiasim.decide`, and writes only when that changes.
    """

    def __init__(self, api: client.ApiClient, namespace: str = c.DEFAULT_PLUGIN_NAMESPACE) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.selector = ",".join(f"{k}={v}" for k, v in c.DEFAULT_PLUGIN_LABELS.items())
        #: nodes labelled LABEL_SIMULATED=ack (from the node watch)
        self.opted: set[str] = set()
        #: node -> the latest Running plugin pod UID seen on it
        self.latest: dict[str, str] = {}
        #: node -> the last plugin pod UID acted on (or found not to need action)
        self.done: dict[str, str] = {}
        #: node -> a Running pod UID to act on again (no inventory yet, or an API error)
        self.waiting: dict[str, str] = {}
        #: NVIDIA's side: nodes labelled LABEL_SIMULATED=nvidia, their latest Running plugin pod
        #: UID, the named configs (None until the ConfigMap was listed; {} when absent), and the
        #: nodes to write again after an API error.
        self.nv_nodes: dict[str, NvidiaNode] = {}
        self.nv_latest: dict[str, str] = {}
        self.nv_configs: dict[str, str] | None = None
        self.nv_retry: set[str] = set()
        #: node -> what the simulator last wrote there: it wins over the annotation of a node event
        #: sent before that write (after a restart of the simulator, the annotation is all there is).
        self.nv_written: dict[str, nv.Started] = {}
        #: The MIG manager's side: the named configs of its ConfigMap (None until listed), and what
        #: it last wrote on each node (wins over an older annotation, as nv_written does).
        self.mig_configs: dict[str, list[Any]] | None = None
        self.mig_written: dict[str, migsim.MigState] = {}
        #: When the MIG manager first saw each node's current ``nvidia.com/mig.config`` value.
        self.mig_noticed: dict[str, tuple[str, datetime]] = {}
        #: plugin pods (both stacks') bound and still Pending, for :func:`nudges_due`
        self.pending: dict[tuple[str, str], PendingPod] = {}
        self._lock = asyncio.Lock()

    async def handle(self, node_name: str, uid: str) -> None:
        if self.done.get(node_name) == uid:
            return
        with refused(404) as gone:
            node = await self.core.read_node(node_name)
        if gone:
            self.waiting.pop(node_name, None)
            return
        labels = dict(node.metadata.labels or {})
        annotations = dict(node.metadata.annotations or {})
        if labels.get(LABEL_SIMULATED) != SIMULATED_VALUE or seen_pod(annotations) == uid:
            self.done[node_name] = uid
            self.waiting.pop(node_name, None)
            return
        if annotations.get(ANNOTATION_HANG) == "true":
            log.info("plugin pod %s on %s hangs (annotation %s)", uid, node_name, ANNOTATION_HANG)
            self.done[node_name] = uid
            self.waiting.pop(node_name, None)
            return
        inventory = inventory_from_annotations(annotations)
        if inventory is None or not inventory.gpus:
            log.info("node %s has no GPU inventory yet; plugin pod %s waits for it", node_name, uid)
            self.waiting[node_name] = uid
            return
        patch = status_patch(labels, inventory)
        await self.core.patch_node_status(node_name, patch)
        await self.core.patch_node(
            node_name,
            {
                "metadata": {
                    "annotations": {ANNOTATION_STATE: state_annotation(labels, uid, datetime.now(UTC))}
                }
            },
        )
        self.done[node_name] = uid
        self.waiting.pop(node_name, None)
        log.info(
            "plugin pod %s started on %s: mode %s, isolation %s, advertises %s",
            uid,
            node_name,
            plugin_mode(labels),
            plugin_isolation(labels),
            {k: v for k, v in patch["status"]["allocatable"].items() if v != "0"},
        )

    async def _safe(self, node_name: str, uid: str) -> None:
        async with self._lock:  # one node at a time: events for a node are handled in order
            with refused() as error:
                await self.handle(node_name, uid)
            if error:
                log.warning("node %s: API error %s %s; retrying", node_name, error.status, error.reason)
                self.waiting[node_name] = uid

    def _track(self, event_type: str, pod: Mapping[str, Any]) -> None:
        """Follow a plugin pod's phase for :meth:`nudge`."""
        meta = pod.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if event_type == "DELETED" or not is_pending(pod):
            self.pending.pop(key, None)
        elif key not in self.pending:
            node = str((pod.get("spec") or {}).get("nodeName") or "")
            self.pending[key] = PendingPod(*key, node, datetime.now(UTC))

    async def nudge(self, now: datetime) -> None:
        """Show kwok again each plugin pod on a simulated node that has stayed Pending too long."""
        for pod in nudges_due(self.pending, now):
            if pod.node not in self.opted and pod.node not in self.nv_nodes:
                continue  # not a simulated node (the real node's pods are the kubelet's)
            count = pod.nudges + 1
            with refused() as error:
                patch = {"metadata": {"annotations": {ANNOTATION_NUDGE: str(count)}}}
                await self.core.patch_namespaced_pod(pod.name, pod.namespace, patch)
            if error and error.status == 404:
                self.pending.pop((pod.namespace, pod.name), None)
                continue
            if (pod.namespace, pod.name) in self.pending:  # not gone while the patch was sent
                self.pending[(pod.namespace, pod.name)] = dataclasses.replace(pod, nudges=count)
            log.warning(
                "plugin pod %s/%s on %s still Pending after %.0fs: shown to kwok again (%d)%s",
                pod.namespace,
                pod.name,
                pod.node,
                (now - pod.since).total_seconds(),
                count,
                f"; API error {error.status}" if error else "",
            )

    async def _pod(self, event_type: str, pod: Mapping[str, Any]) -> None:
        self._track(event_type, pod)
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if event_type == "DELETED" or not _running(pod):
            return
        self.latest[node] = uid
        if node in self.opted:
            await self._safe(node, uid)

    async def _node(self, event_type: str, node: Mapping[str, Any]) -> None:
        meta = node.get("metadata") or {}
        name = str(meta.get("name") or "")
        plays = (meta.get("labels") or {}).get(LABEL_SIMULATED)
        if event_type == "DELETED" or plays != SIMULATED_VALUE:
            self.opted.discard(name)
            self.latest.pop(name, None)
            self.done.pop(name, None)
            self.waiting.pop(name, None)
        if event_type == "DELETED" or plays != nv.SIMULATED_VALUE:
            self.nv_nodes.pop(name, None)
            self.nv_retry.discard(name)
            self.nv_written.pop(name, None)
            self.mig_written.pop(name, None)
            self.mig_noticed.pop(name, None)
        if event_type == "DELETED":
            return
        if plays == nv.SIMULATED_VALUE:
            self.nv_nodes[name] = nvidia_node(node)
            await self._mig(name)
            await self._nvidia(name)
            return
        if plays == SIMULATED_VALUE and name not in self.opted:
            self.opted.add(name)
            if name in self.latest:
                await self._safe(name, self.latest[name])

    # -- NVIDIA's device plugin and config-manager ---------------------------------------------

    async def _nvidia_pod(self, event_type: str, pod: Mapping[str, Any]) -> None:
        self._track(event_type, pod)
        if event_type == "DELETED" or not _running(pod):
            return
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        self.nv_latest[node] = str((pod.get("metadata") or {}).get("uid") or "")
        await self._nvidia(node)

    async def _nvidia_configmap(self, event_type: str, cm: Mapping[str, Any]) -> None:
        self.nv_configs = {} if event_type == "DELETED" else dict(cm.get("data") or {})
        for node in list(self.nv_nodes):
            await self._nvidia(node)

    async def _nvidia_listed(self, items: list[Mapping[str, Any]]) -> None:
        if not items:  # no ConfigMap: every node falls back, as far as it can (no key at all)
            await self._nvidia_configmap("DELETED", {})

    async def _nvidia(self, name: str) -> None:
        """Decide for one node from what the watches delivered; write when that changed (one node
        at a time, so that a decision always sees the writes before it)."""
        async with self._lock:
            view, pod, configs = self.nv_nodes.get(name), self.nv_latest.get(name), self.nv_configs
            if view is None or pod is None or configs is None or view.hang or view.gpus is None:
                return
            mig = self.mig_written.get(name) or view.mig
            token = mig.token if mig is not None else ""
            started = nv.decide(pod, view.label, configs, self.nv_written.get(name) or view.seen, token)
            if started is None:
                return
            devices = mig.devices if mig is not None else None
            resources = (
                None if started.config is None else nv.advertised(configs[started.config], view.gpus, devices)
            )
            if resources is not None:
                resources = dict.fromkeys(view.mig_resources, "0") | resources
            with refused() as error:
                if resources is not None:
                    await self.core.patch_node_status(name, nv.status_patch(resources))
                annotation = nv.state_annotation(started, datetime.now(UTC))
                await self.core.patch_node(
                    name, {"metadata": {"annotations": {ANNOTATION_STATE: annotation}}}
                )
            if error:
                if error.status == 404:
                    self.nv_nodes.pop(name, None)
                    self.nv_written.pop(name, None)
                else:
                    log.warning("node %s: API error %s %s; retrying", name, error.status, error.reason)
                    self.nv_retry.add(name)
                return
            self.nv_retry.discard(name)
            self.nv_written[name] = started
        fallback = "" if started.config == nv.wanted(started.label) else " (config-manager fell back)"
        log.info(
            "NVIDIA plugin pod %s on %s: label %r, config %s%s, advertises %s",
            pod,
            name,
            started.label,
            started.config,
            fallback,
            {k: v for k, v in (resources or {}).items() if v != "0"},
        )

    # -- NVIDIA's MIG manager --------------------------------------------------------------------

    async def _mig_configmap(self, event_type: str, cm: Mapping[str, Any]) -> None:
        self.mig_configs = {} if event_type == "DELETED" else migsim.configs_in(cm.get("data") or {})
        for node in list(self.nv_nodes):
            await self._mig(node)

    async def _mig_listed(self, items: list[Mapping[str, Any]]) -> None:
        if not items:
            await self._mig_configmap("DELETED", {})

    async def _mig(self, name: str) -> None:
        """The MIG manager's next step on one node (:func:`gpushare.devcluster.migsim.decide`):
        write it, and look again when it says so."""
        async with self._lock:
            view, configs = self.nv_nodes.get(name), self.mig_configs
            if view is None or configs is None:
                return
            seen = self.mig_written.get(name) or view.mig
            now = datetime.now(UTC)
            label = view.labels.get(c.LABEL_MIG_CONFIG, "")
            if self.mig_noticed.get(name, ("", now))[0] != label or name not in self.mig_noticed:
                self.mig_noticed[name] = (label, now)
            step = migsim.decide(
                view.labels,
                seen,
                configs,
                view.models,
                now,
                delay=view.mig_delay,
                hang=view.mig_hang,
                start=view.mig_start,
                noticed=self.mig_noticed[name][1],
            )
            if step is None:
                return
            if step.state != seen or step.labels:
                meta = {"labels": dict(step.labels), "annotations": {ANNOTATION_MIG: step.state.to_json()}}
                with refused() as error:
                    await self.core.patch_node(name, {"metadata": meta}, field_manager=MIG_FIELD_MANAGER)
                if error:
                    log.warning("node %s: MIG manager: API error %s %s", name, error.status, error.reason)
                    if error.status != 404:
                        self._later(name, timedelta(seconds=1))
                    return
                self.mig_written[name] = step.state
                log.info(
                    "MIG manager on %s: %s=%s %s %s",
                    name,
                    c.LABEL_MIG_CONFIG,
                    step.state.label,
                    step.state.state,
                    step.state.reason or [dict(d) for d in step.state.devices],
                )
        if step.again is not None:
            self._later(name, step.again)

    def _later(self, name: str, after: timedelta) -> None:
        asyncio.get_running_loop().call_later(
            after.total_seconds(), lambda: asyncio.ensure_future(self._mig(name))
        )

    async def retry_loop(self, interval: float = 1.0) -> None:
        while True:
            await asyncio.sleep(interval)
            for node_name, uid in list(self.waiting.items()):
                await self._safe(node_name, uid)
            for node_name in list(self.nv_retry):
                await self._nvidia(node_name)
            await self.nudge(datetime.now(UTC))

    async def _list_watch(
        self,
        what: str,
        list_fn: Any,
        args: tuple[Any, ...],
        selector: str,
        on: Handler,
        *,
        field_selector: str = "",
        listed: Callable[[list[Mapping[str, Any]]], Awaitable[None]] | None = None,
    ) -> None:
        """List, then watch from that resourceVersion; raw JSON lines; list again on any end.
        ``listed`` is called with each list's items, after ``on`` saw them."""
        selectors = {"label_selector": selector, "field_selector": field_selector}
        while True:
            try:
                resp = await list_fn(*args, **selectors, _preload_content=False)
                async with resp:
                    listed_body = json.loads(await resp.read())
                items = listed_body.get("items") or []
                for item in items:
                    await on("ADDED", item)
                if listed is not None:
                    await listed(items)
                rv = (listed_body.get("metadata") or {}).get("resourceVersion")
                while True:
                    resp = await list_fn(
                        *args,
                        **selectors,
                        watch=True,
                        resource_version=rv,
                        timeout_seconds=120,
                        allow_watch_bookmarks=True,
                        _preload_content=False,
                    )
                    async with resp:
                        async for line in resp.content:
                            if not line.strip():
                                continue
                            event = json.loads(line)
                            kind = event.get("type")
                            obj = event.get("object") or {}
                            if kind == "ERROR":
                                raise RuntimeError(f"watch error: {obj.get('message', obj)}")
                            rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                            if kind != "BOOKMARK":
                                await on(kind, obj)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("watch of %s ended (%s); listing again", what, exc)
                await asyncio.sleep(0.5)

    async def run(self) -> None:
        nv_selector = ",".join(f"{k}={v}" for k, v in c.NVIDIA_PLUGIN_LABELS.items())
        await asyncio.gather(
            self._list_watch("nodes", self.core.list_node, (), LABEL_SIMULATED, self._node),
            self._list_watch(
                "plugin pods", self.core.list_namespaced_pod, (self.namespace,), self.selector, self._pod
            ),
            self._list_watch(
                "NVIDIA plugin pods",
                self.core.list_namespaced_pod,
                (c.NVIDIA_PLUGIN_NAMESPACE,),
                nv_selector,
                self._nvidia_pod,
            ),
            self._list_watch(
                "NVIDIA's named configs",
                self.core.list_namespaced_config_map,
                (c.NVIDIA_PLUGIN_NAMESPACE,),
                "",
                self._nvidia_configmap,
                field_selector=f"metadata.name={c.NVIDIA_CONFIGS_CONFIGMAP}",
                listed=self._nvidia_listed,
            ),
            self._list_watch(
                "the MIG manager's configs",
                self.core.list_namespaced_config_map,
                (c.MIG_CONFIGS_NAMESPACE,),
                "",
                self._mig_configmap,
                field_selector=f"metadata.name={c.MIG_CONFIGS_CONFIGMAP}",
                listed=self._mig_listed,
            ),
            self.retry_loop(),
        )


async def _main(kubeconfig: str) -> None:
    from gpushare.k8s.client import make_api_client

    api = await make_api_client(kubeconfig)
    async with api:
        sim = PluginSimulator(api)
        task = asyncio.ensure_future(sim.run())
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        log.info(
            "simulating ACK's gpushare device plugin on nodes labelled %s=%s, NVIDIA's on %s=%s",
            LABEL_SIMULATED,
            SIMULATED_VALUE,
            LABEL_SIMULATED,
            nv.SIMULATED_VALUE,
        )
        try:
            await task
        except asyncio.CancelledError:
            log.info("stopped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpushare.devcluster.pluginsim", description=__doc__)
    parser.add_argument("--kubeconfig", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stdout)
    asyncio.run(_main(args.kubeconfig))
    return 0


if __name__ == "__main__":
    sys.exit(main())
