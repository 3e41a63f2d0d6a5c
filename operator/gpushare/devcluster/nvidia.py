"""NVIDIA's real device plugin and config-manager on the real node, over the project's own NVML.

No GPU here, so the GPUs come from ``libnvidia-ml.so.1`` of the project's own
(``realnode/fakenvml``, ``make fake-nvml``): it pretends the GPUs of a small key=value file whose
path is in ``GPUSHARE_FAKE_NVML_CONFIG`` (default: 2 x A100-SXM4-40GB). It lies in a driver root
(``build/realnode/driver-root/usr/lib64``), mounted into the plugin's pod as NVIDIA's Helm chart
mounts the host's driver root: at ``/driver-root``. NVIDIA's two programs (``make nvidia-plugin``)
are packed with their C library into an image imported into the node's containerd (no registry).
:func:`install` puts it all on a cluster with a real node (tests/integration/test_realnode_nvidia.py).

Seen on this test bed (kubelet v1.34, 2 shared CPUs; December 2026):

* What the plugin (v0.19.3, nvml discovery, health checks on) called in the fake library, traced
  (``install(trace_nvml=True)``) over a start, two SIGHUPs, an Allocate and its health loop:
  nvmlInit_v2, nvmlShutdown, nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2,
  nvmlDeviceGetHandleByUUID, nvmlDeviceGetUUID, nvmlDeviceGetName, nvmlDeviceGetMinorNumber,
  nvmlDeviceGetMemoryInfo (v1), nvmlDeviceGetPciInfo_v3, nvmlDeviceGetCudaComputeCapability,
  nvmlDeviceGetMigMode, nvmlEventSetCreate/Free, nvmlDeviceGetSupportedEventTypes,
  nvmlDeviceRegisterEvents, nvmlEventSetWait_v2; no generated stub. The health checks run
  (their waits time out): ``DP_DISABLE_HEALTHCHECKS`` is not needed. A pod asking for 2 of the
  ts4 replicas got both GPUs' UUIDs in ``NVIDIA_VISIBLE_DEVICES``.
* Label ``nvidia.com/device-plugin.config=ts4`` (replicas 4, 2 GPUs) on a node whose plugin pod
  was just created: allocatable ``nvidia.com/gpu: 8`` 8.8 s later; relabelled ``ts2``: 4, 10.3 s
  later (config-manager relinks and sends SIGHUP at once; the wait is the kubelet's 10 s node
  status sync).
* A key added to the named-config ConfigMap reached the running pod's mounted directory after
  59 s, 73 s and 90 s (three keys in a row) with the kubelet's default ``syncFrequency`` (1 min):
  the kubelet rewrites a pod's ConfigMap volumes at its periodic pod sync (plus up to half of it in
  jitter), not when the ConfigMap changes. The test bed's kubelet now syncs every 15 s
  (``realnode.py``), and the tests' pools set ``configPropagationSeconds`` to match.
  A label naming a key not yet there is an unknown name (next point) until then.
* An unknown config name makes the sidecar exit ("specified config ... does not exist"); each
  restart first applies ``DEFAULT_CONFIG`` (its first read of the label is empty), sends SIGHUP,
  and then fails again: the node falls back to the default (unshared) count, silently.
  The same first empty read shows at every pod start: the ONESHOT init container links the
  default (not the label's config) and exits, the plugin starts on it, and the sidecar signals
  it twice, default then the label's config: three registrations within a second (seen: node
  labelled ts4 before the pod existed; the plugin's log shows the two SIGHUPs 20 ms apart).
"""

from __future__ import annotations

import copy
import os
import subprocess
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import yaml
from kubernetes_asyncio import client

from gpushare import constants as c
from gpushare.devcluster.images import build_files_image
from gpushare.devcluster.rbac import create_service_account, service_account_bodies
from gpushare.devcluster.realnode import REPO, programs_dir
from gpushare.k8s.generated import refused

if TYPE_CHECKING:
    from gpushare.devcluster.cluster import DevCluster

#: Environment variable naming the fake library's GPU file (read by realnode/fakenvml at init).
FAKE_NVML_CONFIG_ENV = "GPUSHARE_FAKE_NVML_CONFIG"
#: The UUID of the fake library's GPU ``i`` when its file does not name one.
DEFAULT_UUID_PREFIX = "GPU-fa4e0000-0000-4000-8000-"
DEFAULT_GPUS = 2


def default_uuid(index: int) -> str:
    return f"{DEFAULT_UUID_PREFIX}{index:012x}"


def plugin_version() -> str:
    """The k8s-device-plugin version realnode/nvidia/go.mod pins (the cache key of its build)."""
    for line in (REPO / "realnode/nvidia/go.mod").read_text().splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "github.com/NVIDIA/k8s-device-plugin":
            return words[1]
    raise RuntimeError("realnode/nvidia/go.mod does not require github.com/NVIDIA/k8s-device-plugin")


def plugin_bin_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where ``make nvidia-plugin`` puts nvidia-device-plugin, config-manager and
    gpu-feature-discovery."""
    env = os.environ if environ is None else environ
    if env.get("GPUSHARE_NVIDIA_PLUGIN_BIN"):
        return Path(env["GPUSHARE_NVIDIA_PLUGIN_BIN"])
    cache = Path(env["GPUSHARE_CACHE"]) if env.get("GPUSHARE_CACHE") else Path.home() / ".cache/gpushare"
    return cache / "bin" / f"nvidia-device-plugin-{plugin_version()}"


#: The fake library's MIG state file (realnode/fakenvml); unset: MIG disabled and unchangeable.
FAKE_NVML_MIG_STATE_ENV = "GPUSHARE_FAKE_NVML_MIG_STATE"
#: Where the plugin's pod mounts the host folder of the MIG state file (``install(mig_state_dir=)``).
MIG_STATE_MOUNT = "/run/gpushare-mig"
#: The state file's name in that folder (on the host and in the pod).
MIG_STATE_FILE = "state"
#: With NVIDIA's MIG manager (:mod:`gpushare.devcluster.migmanager`): the GPU Operator's label on
#: the plugin's pods, which reconfigure-mig.sh waits on, and the node label its DaemonSet selects,
#: which reconfigure-mig.sh sets to ``paused-for-mig-change`` around a change.
GPU_OPERATOR_POD_LABELS = {"app": "nvidia-device-plugin-daemonset"}
GPU_OPERATOR_DEPLOY_LABEL = "nvidia.com/gpu.deploy.device-plugin"
#: The project's wrapper that lays out /proc/driver/nvidia-caps/mig-minors for the plugin
#: (realnode/nvcaps, ``make realnode-bins``).
NVIDIA_CAPS = "gpushare-nvidia-caps"


def mig_parted_version() -> str:
    """The mig-parted version realnode/migparted/go.mod pins (the cache key of its build)."""
    for line in (REPO / "realnode/migparted/go.mod").read_text().splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "github.com/NVIDIA/mig-parted":
            return words[1]
    raise RuntimeError("realnode/migparted/go.mod does not require github.com/NVIDIA/mig-parted")


def mig_parted(
    state_dir: Path, *args: str, environ: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """NVIDIA's ``nvidia-mig-parted`` with ``args`` on this host, over the fake library and the MIG
    state file in ``state_dir`` (the one :func:`install`'s ``mig_state_dir`` shares with the
    plugin's pods), in hack/mig-ns.sh's mount namespace (an ``nvidia`` line in /proc/modules, the
    GPUs' PCI devices in sysfs). Needs root. The GPUs are the library's default (2 x A100 40GB)."""
    env = {
        **(os.environ if environ is None else environ),
        "LD_LIBRARY_PATH": str(fake_nvml_lib(environ).parent),
        FAKE_NVML_MIG_STATE_ENV: str(state_dir / MIG_STATE_FILE),
    }
    env.pop(FAKE_NVML_CONFIG_ENV, None)
    state_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [
            "bash",
            str(REPO / "hack/mig-ns.sh"),
            "--",
            str(mig_parted_bin_dir(environ) / "nvidia-mig-parted"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def mig_parted_bin_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where ``make mig-parted`` puts nvidia-mig-parted and nvidia-mig-manager."""
    env = os.environ if environ is None else environ
    if env.get("GPUSHARE_MIG_PARTED_BIN"):
        return Path(env["GPUSHARE_MIG_PARTED_BIN"])
    cache = Path(env["GPUSHARE_CACHE"]) if env.get("GPUSHARE_CACHE") else Path.home() / ".cache/gpushare"
    return cache / "bin" / f"mig-parted-{mig_parted_version()}"


def driver_root(environ: Mapping[str, str] | None = None) -> Path:
    """The fake driver root: ``usr/lib64/libnvidia-ml.so.1`` in it (``make fake-nvml``)."""
    return programs_dir(environ) / "driver-root"


def fake_nvml_lib(environ: Mapping[str, str] | None = None) -> Path:
    return driver_root(environ) / "usr/lib64/libnvidia-ml.so.1"


def fake_nvml_config(
    count: int = DEFAULT_GPUS,
    *,
    name: str | None = None,
    memory_mib: int | None = None,
    uuids: Mapping[int, str] | None = None,
) -> str:
    """The text of a fake library's GPU file (realnode/fakenvml/fakenvml.c documents its keys)."""
    lines = [f"count={count}"]
    if name is not None:
        lines.append(f"name={name}")
    if memory_mib is not None:
        lines.append(f"memory_mib={memory_mib}")
    lines += [f"gpu.{i}.uuid={uuid}" for i, uuid in sorted((uuids or {}).items())]
    return "\n".join(lines) + "\n"


# -- the DaemonSet, as NVIDIA's Helm chart (nvidia-device-plugin v0.19) deploys it ----------------

NAMESPACE = "nvidia-device-plugin"
DS_NAME = "nvidia-device-plugin"
SERVICE_ACCOUNT = "nvidia-device-plugin"
#: The ConfigMap of named plugin configs (one key per config name) and the one of the fake GPUs.
CONFIGS_CONFIGMAP = "nvidia-device-plugin-configs"
FAKE_NVML_CONFIGMAP = "gpushare-fake-nvml"
#: The label config-manager reads on its own Node: the name of the config (a key of the ConfigMap).
CONFIG_LABEL = "nvidia.com/device-plugin.config"
#: The config the node gets without the label (a key every install has).
DEFAULT_CONFIG = "default"
#: The DaemonSet's nodeSelector (GPU Feature Discovery sets it on GPU nodes; here the test does).
NODE_SELECTOR = {"nvidia.com/gpu.present": "true"}
#: ...but not on a node of an ACK pool (``cgpu=true``, which every ACK pool writes): ACK's plugin
#: serves it (its DaemonSet stays off nodes naming an NVIDIA config:
#: ``gpushare.devcluster.fakes.PLUGIN_NODE_AFFINITY``). NVIDIA's chart takes such a term in its
#: ``affinity`` value; docs/concepts/backends.md, "Which plugin runs on a node".
NODE_AFFINITY: dict[str, Any] = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": c.LABEL_CGPU, "operator": "NotIn", "values": ["true"]}]}
            ]
        }
    }
}
RESOURCE = "nvidia.com/gpu"
APP_LABELS = {"app.kubernetes.io/name": "nvidia-device-plugin"}
_FAKE_NVML_DIR = "/etc/gpushare-fake-nvml"


def image_ref() -> str:
    return f"localhost/gpushare/nvidia-device-plugin:{plugin_version()}"


def time_slicing_config(replicas: int, *, rename_by_default: bool = False) -> str:
    """A plugin config (YAML) sharing every GPU ``replicas`` times (``sharing.timeSlicing``)."""
    body: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": "none"}}
    if replicas > 1:
        body["sharing"] = {
            "timeSlicing": {
                "renameByDefault": rename_by_default,
                "resources": [{"name": RESOURCE, "replicas": replicas}],
            }
        }
    return yaml.safe_dump(body, sort_keys=False)


def shared_libraries(binary: Path) -> list[Path]:
    """The libraries ``binary`` loads (``ldd``), the dynamic loader included; none for a static one."""
    done = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
    if done.returncode != 0 and "not a dynamic executable" in done.stdout + done.stderr:
        return []
    done.check_returncode()
    out = done.stdout
    libs = []
    for line in out.splitlines():
        words = line.split()
        path = words[2] if len(words) >= 3 and words[1] == "=>" else words[0] if words else ""
        if path.startswith("/"):
            libs.append(Path(path))
    return libs


#: NVIDIA's programs in the image (one image for the plugin and GFD, as NVIDIA ships them).
PROGRAMS = ("nvidia-device-plugin", "config-manager", "gpu-feature-discovery")


def build_plugin_image(out_dir: Path, environ: Mapping[str, str] | None = None) -> Path:
    """A docker-archive of :func:`image_ref`: NVIDIA's programs in /usr/bin (as in NVIDIA's
    image, so that the sidecar finds the plugin by its argv[0]) and the C library they link."""
    bins = plugin_bin_dir(environ)
    programs = {f"usr/bin/{p}": bins / p for p in PROGRAMS}
    absent = [str(p) for p in programs.values() if not p.exists()]
    if absent:
        raise FileNotFoundError(f"{', '.join(absent)} not built: run `make nvidia-plugin`")
    caps = programs_dir(environ) / NVIDIA_CAPS
    if not caps.exists():
        raise FileNotFoundError(f"{caps} not built: run `make realnode-bins`")
    files = dict(programs)
    for program in programs.values():
        for lib in shared_libraries(program):
            files[str(lib).lstrip("/")] = lib.resolve()
    files[f"usr/bin/{NVIDIA_CAPS}"] = caps  # static
    return build_files_image(
        image_ref(),
        files,
        out_dir / "nvidia-device-plugin.tar",
        entrypoint=["nvidia-device-plugin"],
        env=["PATH=/usr/bin:/bin"],
    )


def _env(**values: str) -> list[dict[str, Any]]:
    return [{"name": k, "value": v} for k, v in values.items()]


def _config_manager(name: str, *, oneshot: bool, process: str = "nvidia-device-plugin") -> dict[str, Any]:
    """config-manager as NVIDIA's chart runs it: ``oneshot`` links the config and exits (the init
    container); otherwise it follows the node's label and sends SIGHUP to ``process``."""
    env = [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        *_env(
            ONESHOT=str(oneshot).lower(),
            KUBECONFIG="",
            NODE_LABEL=CONFIG_LABEL,
            CONFIG_FILE_SRCDIR="/available-configs",
            CONFIG_FILE_DST="/config/config.yaml",
            DEFAULT_CONFIG=DEFAULT_CONFIG,
            FALLBACK_STRATEGIES="named,single",
            SEND_SIGNAL=str(not oneshot).lower(),
            SIGNAL="1" if not oneshot else "",
            PROCESS_TO_SIGNAL=process if not oneshot else "",
        ),
    ]
    return {
        "name": name,
        "image": image_ref(),
        "imagePullPolicy": "Never",
        "command": ["config-manager"],
        "env": env,
        "securityContext": {"privileged": False},
        "volumeMounts": [
            {"name": "available-configs", "mountPath": "/available-configs"},
            {"name": "config", "mountPath": "/config"},
        ],
    }


def daemonset_body(
    *,
    disable_health_checks: bool = False,
    trace_nvml: bool = False,
    mig_state_dir: Path | None = None,
    gpu_operator_labels: bool = False,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """NVIDIA's plugin DaemonSet as its chart renders it with a named-config ConfigMap: an init
    config-manager (ONESHOT) writes /config/config.yaml, the plugin reads it, and the
    config-manager sidecar relinks it and sends the plugin SIGHUP when the node's
    ``nvidia.com/device-plugin.config`` label changes (``shareProcessNamespace``).

    What differs from the chart: the image (built here), the driver root (the fake NVML's, not the
    host's ``/``), the fake GPUs' file, and the flags that need no device nodes, CDI or container
    toolkit (nvml discovery, envvar device lists, no device specs), and the node affinity that keeps
    it off the nodes of ACK pools (:data:`NODE_AFFINITY`).

    ``mig_state_dir``: the host folder of the fake library's MIG state file, mounted into the pod,
    so that the plugin sees the MIG devices ``nvidia-mig-parted`` made on the host. The plugin then
    runs privileged, as the chart runs it whenever a MIG strategy is not ``none``, under the
    project's ``gpushare-nvidia-caps`` (realnode/nvcaps), which lays out the
    /proc/driver/nvidia-caps/mig-minors the plugin reads for each MIG device (no driver here).
    ``gpu_operator_labels``: the pods also carry :data:`GPU_OPERATOR_POD_LABELS` and the DaemonSet
    also selects :data:`GPU_OPERATOR_DEPLOY_LABEL` ``=true``, as the GPU Operator's, so that NVIDIA's
    MIG manager pauses the plugin around a change."""
    plugin: dict[str, Any] = {
        "name": "nvidia-device-plugin-ctr",
        "image": image_ref(),
        "imagePullPolicy": "Never",
        "command": ["nvidia-device-plugin"],
        "args": [
            "--device-discovery-strategy=nvml",
            "--device-list-strategy=envvar",
            "--pass-device-specs=false",
        ],
        "env": _env(
            CONFIG_FILE="/config/config.yaml",
            NVIDIA_MIG_MONITOR_DEVICES="all",
            NVIDIA_VISIBLE_DEVICES="all",
            NVIDIA_DRIVER_CAPABILITIES="compute,utility",
            **{FAKE_NVML_CONFIG_ENV: f"{_FAKE_NVML_DIR}/gpus.conf"},
            **({"DP_DISABLE_HEALTHCHECKS": "all"} if disable_health_checks else {}),
            # The fake library names each NVML call on stderr: the plugin's log.
            **({"GPUSHARE_FAKE_NVML_TRACE": "1"} if trace_nvml else {}),
        ),
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [
            {"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"},
            {"name": "driver-root", "mountPath": "/driver-root", "readOnly": True},
            {"name": "available-configs", "mountPath": "/available-configs"},
            {"name": "config", "mountPath": "/config"},
            {"name": "fake-nvml", "mountPath": _FAKE_NVML_DIR, "readOnly": True},
        ],
    }
    volumes: list[dict[str, Any]] = [
        {"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}},
        {"name": "driver-root", "hostPath": {"path": str(driver_root(environ))}},
        {"name": "available-configs", "configMap": {"name": CONFIGS_CONFIGMAP}},
        {"name": "config", "emptyDir": {}},
        {"name": "fake-nvml", "configMap": {"name": FAKE_NVML_CONFIGMAP}},
    ]
    if mig_state_dir is not None:
        plugin["command"] = [NVIDIA_CAPS, "--", "nvidia-device-plugin"]
        plugin["securityContext"] = {"privileged": True}
        plugin["env"] += _env(**{FAKE_NVML_MIG_STATE_ENV: f"{MIG_STATE_MOUNT}/{MIG_STATE_FILE}"})
        plugin["volumeMounts"].append({"name": "mig-state", "mountPath": MIG_STATE_MOUNT})
        volumes.append(
            {"name": "mig-state", "hostPath": {"path": str(mig_state_dir), "type": "DirectoryOrCreate"}}
        )
    pod_labels, node_selector = dict(APP_LABELS), dict(NODE_SELECTOR)
    if gpu_operator_labels:
        pod_labels |= GPU_OPERATOR_POD_LABELS
        node_selector[GPU_OPERATOR_DEPLOY_LABEL] = "true"
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": DS_NAME, "namespace": NAMESPACE, "labels": dict(APP_LABELS)},
        "spec": {
            "selector": {"matchLabels": dict(APP_LABELS)},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "shareProcessNamespace": True,
                    "nodeSelector": node_selector,
                    "affinity": copy.deepcopy(NODE_AFFINITY),
                    "tolerations": [{"key": RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
                    "initContainers": [_config_manager("nvidia-device-plugin-init", oneshot=True)],
                    "containers": [_config_manager("nvidia-device-plugin-sidecar", oneshot=False), plugin],
                    "volumes": volumes,
                },
            },
        },
    }


def rbac_bodies() -> list[dict[str, Any]]:
    """The chart's ServiceAccount and ClusterRole (config-manager watches its own Node)."""
    rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
    return service_account_bodies(SERVICE_ACCOUNT, NAMESPACE, rules)


def configmap_body(name: str, data: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": dict(data),
    }


async def apply(create: Callable[[], Awaitable[Any]], replace: Callable[[], Awaitable[Any]] | None) -> None:
    with refused(409) as exists:
        await create()
    if exists and replace is not None:
        await replace()


async def _apply_configmap(core: client.CoreV1Api, name: str, data: Mapping[str, str]) -> None:
    body = cast(Any, configmap_body(name, data))
    await apply(
        lambda: core.create_namespaced_config_map(NAMESPACE, body),
        lambda: core.replace_namespaced_config_map(name, NAMESPACE, body),
    )


async def install(
    api: client.ApiClient,
    dev: DevCluster,
    configs: Mapping[str, str],
    *,
    gpus: str | None = None,
    disable_health_checks: bool = False,
    trace_nvml: bool = False,
    mig_state_dir: Path | None = None,
    gpu_operator_labels: bool = False,
) -> None:
    """NVIDIA's plugin on the real nodes labelled :data:`NODE_SELECTOR`: its image imported into
    their containerd, namespace, RBAC, the named configs (``configs``: name -> plugin config YAML,
    :data:`DEFAULT_CONFIG` added when absent), the fake GPUs (``gpus``: a fake NVML file,
    :func:`fake_nvml_config`; default 2 GPUs) and the DaemonSet. Creates or replaces each object.
    ``mig_state_dir``, ``gpu_operator_labels``: MIG (:func:`daemonset_body`)."""
    if dev.info is None:
        raise RuntimeError("the control plane is not started")
    dev.import_image(build_plugin_image(dev.info.dir / "realnode" / "images"))
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    await apply(lambda: core.create_namespace(cast(Any, {"metadata": {"name": NAMESPACE}})), None)
    await create_service_account(api, rbac_bodies())
    named = {DEFAULT_CONFIG: time_slicing_config(1), **configs}
    for name, data in (
        (CONFIGS_CONFIGMAP, named),
        (FAKE_NVML_CONFIGMAP, {"gpus.conf": gpus or fake_nvml_config()}),
    ):
        await _apply_configmap(core, name, data)
    ds = daemonset_body(
        disable_health_checks=disable_health_checks,
        trace_nvml=trace_nvml,
        mig_state_dir=mig_state_dir,
        gpu_operator_labels=gpu_operator_labels,
    )
    await apply(
        lambda: apps.create_namespaced_daemon_set(NAMESPACE, cast(Any, ds)),
        lambda: apps.replace_namespaced_daemon_set(DS_NAME, NAMESPACE, cast(Any, ds)),
    )


async def plugin_pods_on(api: client.ApiClient, node: str) -> list[Any]:
    selector = ",".join(f"{k}={v}" for k, v in APP_LABELS.items())
    pods = await client.CoreV1Api(api).list_namespaced_pod(
        NAMESPACE, label_selector=selector, field_selector=f"spec.nodeName={node}"
    )
    return list(pods.items)


async def set_configs(api: client.ApiClient, configs: Mapping[str, str]) -> None:
    """Replace the named configs (a key added here reaches the plugin pods' mounted directory only
    at the kubelet's next sync of the pod's volumes; see docs of the real node)."""
    named = {DEFAULT_CONFIG: time_slicing_config(1), **configs}
    await client.CoreV1Api(api).patch_namespaced_config_map(CONFIGS_CONFIGMAP, NAMESPACE, {"data": named})


# -- GPU Feature Discovery, as NVIDIA's chart deploys it (gfd.enabled) -----------------------------

GFD_DS_NAME = "nvidia-device-plugin-gpu-feature-discovery"
GFD_SERVICE_ACCOUNT = "gpu-feature-discovery"
GFD_LABELS = {"app.kubernetes.io/name": "gpu-feature-discovery"}
#: What GFD logs at each pass, before it writes the labels of that pass (its NodeFeature object is
#: updated only when they differ: ``nvidia.com/gfd.timestamp`` is the time GFD last (re)loaded its
#: config, at start or SIGHUP, not the time of a pass).
GFD_PASS_LINE = "Creating Labels"
#: Between two passes (the chart's ``gfd.sleepInterval``; NVIDIA's default is 60 s): short, so that
#: a test sees several passes.
GFD_SLEEP_INTERVAL = "5s"


def gfd_daemonset_body(*, sleep_interval: str = GFD_SLEEP_INTERVAL) -> dict[str, Any]:
    """NVIDIA's GPU Feature Discovery DaemonSet as the plugin's chart renders it
    (``templates/daemonset-gfd.yml``): an init config-manager (ONESHOT) and a config-manager
    sidecar that follow the same ``nvidia.com/device-plugin.config`` label and ConfigMap as the
    plugin and send SIGHUP to ``gpu-feature-discovery``, which labels the node from NVML and the
    sharing config every ``sleep_interval``, through a ``NodeFeature`` object (its default
    ``--use-node-feature-api``; nfd-master makes the labels: ``gpushare.devcluster.nfd``).

    What differs from the chart: the image (built here), NVML from the fake driver root through
    ``LD_LIBRARY_PATH`` (what the NVIDIA container runtime's library mount gives GFD on a GPU node),
    the fake GPUs' file, nvml discovery, not privileged and no host ``/sys`` (it reads the
    machine type and PCI classes there: absent for the fake GPUs, GFD labels them ``unknown``)."""
    gfd = {
        "name": "gpu-feature-discovery-ctr",
        "image": image_ref(),
        "imagePullPolicy": "Never",
        "command": ["gpu-feature-discovery"],
        "env": [
            *(
                {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
                for name, path in (
                    ("NODE_NAME", "spec.nodeName"),
                    ("NAMESPACE", "metadata.namespace"),
                    ("POD_NAME", "metadata.name"),
                )
            ),
            *_env(
                MIG_STRATEGY="none",
                FAIL_ON_INIT_ERROR="true",
                GFD_NO_TIMESTAMP="false",
                GFD_SLEEP_INTERVAL=sleep_interval,
                CONFIG_FILE="/config/config.yaml",
                NVIDIA_MIG_MONITOR_DEVICES="all",
                DEVICE_DISCOVERY_STRATEGY="nvml",
                LD_LIBRARY_PATH="/driver-root/usr/lib64",
                **{FAKE_NVML_CONFIG_ENV: f"{_FAKE_NVML_DIR}/gpus.conf"},
            ),
        ],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [
            {"name": "driver-root", "mountPath": "/driver-root", "readOnly": True},
            {"name": "available-configs", "mountPath": "/available-configs"},
            {"name": "config", "mountPath": "/config"},
            {"name": "fake-nvml", "mountPath": _FAKE_NVML_DIR, "readOnly": True},
        ],
    }
    process = "gpu-feature-discovery"
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": GFD_DS_NAME, "namespace": NAMESPACE, "labels": dict(GFD_LABELS)},
        "spec": {
            "selector": {"matchLabels": dict(GFD_LABELS)},
            "template": {
                "metadata": {"labels": dict(GFD_LABELS)},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "serviceAccountName": GFD_SERVICE_ACCOUNT,
                    "shareProcessNamespace": True,
                    "nodeSelector": dict(NODE_SELECTOR),
                    "affinity": copy.deepcopy(NODE_AFFINITY),
                    "tolerations": [{"key": RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
                    "initContainers": [_config_manager("gpu-feature-discovery-init", oneshot=True)],
                    "containers": [
                        _config_manager("gpu-feature-discovery-sidecar", oneshot=False, process=process),
                        gfd,
                    ],
                    "volumes": [
                        {"name": "driver-root", "hostPath": {"path": str(driver_root())}},
                        {"name": "available-configs", "configMap": {"name": CONFIGS_CONFIGMAP}},
                        {"name": "config", "emptyDir": {}},
                        {"name": "fake-nvml", "configMap": {"name": FAKE_NVML_CONFIGMAP}},
                    ],
                },
            },
        },
    }


def gfd_rbac_bodies() -> list[dict[str, Any]]:
    """The chart's rules for GFD (``templates/role.yml`` with gfd.enabled): its own Node (the
    sidecar), NodeFeature objects (GFD's output) and its own pod (their owner reference)."""
    name = GFD_SERVICE_ACCOUNT
    rules = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["nfd.k8s-sigs.io"],
            "resources": ["nodefeatures"],
            "verbs": ["get", "list", "watch", "create", "update"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
    ]
    return service_account_bodies(name, NAMESPACE, rules)


async def install_gfd(api: client.ApiClient, *, sleep_interval: str = GFD_SLEEP_INTERVAL) -> None:
    """GFD on the nodes NVIDIA's plugin runs on (after :func:`install`, whose image, ConfigMaps
    and namespace it uses; NFD's CRDs and nfd-master first: ``gpushare.devcluster.nfd.install``)."""
    apps = client.AppsV1Api(api)
    await create_service_account(api, gfd_rbac_bodies())
    ds = cast(Any, gfd_daemonset_body(sleep_interval=sleep_interval))
    await apply(
        lambda: apps.create_namespaced_daemon_set(NAMESPACE, ds),
        lambda: apps.replace_namespaced_daemon_set(GFD_DS_NAME, NAMESPACE, ds),
    )


async def gfd_passes(api: client.ApiClient, node: str) -> int:
    """How many passes GFD's running container on ``node`` has made (the lines of its log that
    say :data:`GFD_PASS_LINE`; 0 while none runs)."""
    core = client.CoreV1Api(api)
    selector = ",".join(f"{k}={v}" for k, v in GFD_LABELS.items())
    pods = await core.list_namespaced_pod(
        NAMESPACE, label_selector=selector, field_selector=f"spec.nodeName={node}"
    )
    count = 0
    for pod in pods.items:
        running = {s.name for s in pod.status.container_statuses or [] if s.state and s.state.running}
        if "gpu-feature-discovery-ctr" in running:
            log: str = await core.read_namespaced_pod_log(
                pod.metadata.name, NAMESPACE, container="gpu-feature-discovery-ctr"
            )
            count += log.count(GFD_PASS_LINE)
    return count


async def uninstall_gfd(api: client.ApiClient) -> None:
    """Remove GFD's DaemonSet (its NodeFeature object and the labels nfd-master made stay)."""
    with refused(404):
        await client.AppsV1Api(api).delete_namespaced_daemon_set(GFD_DS_NAME, NAMESPACE)


# -- the node agent over the same library -----------------------------------------------------

AGENT_DS_NAME = "gpushare-agent"
AGENT_SERVICE_ACCOUNT = "gpushare-agent"
AGENT_LABELS = {"app.kubernetes.io/name": "gpushare-agent"}


def agent_daemonset_body(
    image: str,
    *,
    interval_s: int = 5,
    mig_state_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``gpushare agent`` (the product's image, as the chart runs it: uid 65532, read-only root)
    on the nodes NVIDIA's plugin runs on, reading NVML through pynvml over the fake library: the
    driver root mounted at /driver-root and named by ``LD_LIBRARY_PATH`` (what the NVIDIA
    container runtime's library mount does on a GPU node), the same fake GPUs' ConfigMap.
    ``mig_state_dir``: the library's MIG state folder of the plugin's pods, mounted read-only, so
    that the agent reads the MIG devices NVIDIA's tools made."""
    env = _env(
        LD_LIBRARY_PATH="/driver-root/usr/lib64", **{FAKE_NVML_CONFIG_ENV: f"{_FAKE_NVML_DIR}/gpus.conf"}
    )
    mounts: list[dict[str, Any]] = [
        {"name": "driver-root", "mountPath": "/driver-root", "readOnly": True},
        {"name": "fake-nvml", "mountPath": _FAKE_NVML_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "driver-root", "hostPath": {"path": str(driver_root(environ))}},
        {"name": "fake-nvml", "configMap": {"name": FAKE_NVML_CONFIGMAP}},
        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}},
    ]
    if mig_state_dir is not None:
        env += _env(**{FAKE_NVML_MIG_STATE_ENV: f"{MIG_STATE_MOUNT}/{MIG_STATE_FILE}"})
        mounts.append({"name": "mig-state", "mountPath": MIG_STATE_MOUNT, "readOnly": True})
        volumes.append(
            {"name": "mig-state", "hostPath": {"path": str(mig_state_dir), "type": "DirectoryOrCreate"}}
        )
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": AGENT_DS_NAME, "namespace": NAMESPACE, "labels": dict(AGENT_LABELS)},
        "spec": {
            "selector": {"matchLabels": dict(AGENT_LABELS)},
            "template": {
                "metadata": {"labels": dict(AGENT_LABELS)},
                "spec": {
                    "serviceAccountName": AGENT_SERVICE_ACCOUNT,
                    "nodeSelector": dict(NODE_SELECTOR),
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532},
                    "containers": [
                        {
                            "name": "agent",
                            "image": image,
                            "imagePullPolicy": "Never",
                            "command": ["gpushare", "agent"],
                            "args": [f"--interval={interval_s}", "--log-format=console"],
                            "env": [
                                {
                                    "name": "NODE_NAME",
                                    "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                                },
                                *env,
                            ],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": mounts,
                        }
                    ],
                    "volumes": volumes,
                },
            },
        },
    }


async def install_agent(
    api: client.ApiClient, dev: DevCluster, archive: Path, image: str, *, mig_state_dir: Path | None = None
) -> None:
    """The node agent beside NVIDIA's plugin (after :func:`install`): ``archive`` (the product's
    image, ``make image-local``) imported as ``image``, the agent's RBAC and its DaemonSet
    (``mig_state_dir``: :func:`agent_daemonset_body`)."""
    dev.import_image(archive)
    apps = client.AppsV1Api(api)
    rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    await create_service_account(api, service_account_bodies(AGENT_SERVICE_ACCOUNT, NAMESPACE, rules))
    ds = cast(Any, agent_daemonset_body(image, mig_state_dir=mig_state_dir))
    await apply(
        lambda: apps.create_namespaced_daemon_set(NAMESPACE, ds),
        lambda: apps.replace_namespaced_daemon_set(AGENT_DS_NAME, NAMESPACE, ds),
    )
