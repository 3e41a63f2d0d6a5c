"""NVIDIA's MIG manager on the real node, as the GPU Operator deploys it, over the project's NVML.

``nvidia-mig-manager`` (github.com/NVIDIA/mig-parted, ``make mig-parted``) watches its node's
``nvidia.com/mig.config`` label and runs NVIDIA's ``reconfigure-mig.sh`` for each value: kubectl
sets ``nvidia.com/mig.config.state=pending`` and the ``nvidia.com/gpu.deploy.*`` labels to
``paused-for-mig-change`` (the device plugin's DaemonSet, which selects
``nvidia.com/gpu.deploy.device-plugin=true``, leaves the node), waits for the plugin's pods
(``app=nvidia-device-plugin-daemonset``) to go, runs ``nvidia-mig-parted apply``, sets the labels
back and the state to ``success`` (or ``failed``). All three programs are NVIDIA's, unmodified.

What is the project's: the image (NVIDIA's programs, the host's static kubectl, bash and the few
host tools the scripts call, with their libraries: no registry here), and its entrypoint,
``hack/mig-ns.sh`` (the mount namespace with the ``nvidia`` line in /proc/modules and the GPUs' PCI
devices in sysfs that mig-parted reads before NVML; the container is privileged, as the GPU
Operator runs the manager). NVML is the project's ``libnvidia-ml.so.1`` from the fake driver
root, and its MIG state file sits in the host folder the plugin's pods mount too
(:func:`gpushare.devcluster.nvidia.install`, ``mig_state_dir``). The plugin's DaemonSet must then
carry the GPU Operator's labels (``gpu_operator_labels``) for the pause to reach it.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from kubernetes_asyncio import client

from gpushare import constants as c
from gpushare.devcluster import migsim
from gpushare.devcluster import nvidia as nv
from gpushare.devcluster.images import build_files_image
from gpushare.devcluster.rbac import create_service_account, service_account_bodies
from gpushare.devcluster.realnode import REPO, programs_dir

if TYPE_CHECKING:
    from gpushare.devcluster.cluster import DevCluster

NAMESPACE = c.MIG_CONFIGS_NAMESPACE
DS_NAME = "nvidia-mig-manager"
SERVICE_ACCOUNT = "nvidia-mig-manager"
APP_LABELS = {"app": "nvidia-mig-manager"}
#: The GPU Operator's node selector of the manager (set on GPU nodes by the operator; here the test).
NODE_SELECTOR = {"nvidia.com/gpu.deploy.mig-manager": "true"}
#: The host programs reconfigure-mig.sh and hack/mig-ns.sh call (kubectl apart).
HOST_TOOLS = (
    "bash",
    "env",
    "id",
    "mktemp",
    "rmdir",
    "unshare",
    "awk",
    "tail",
    "mount",
    "mkdir",
    "ln",
    "cat",
    "sleep",
)
_CONFIG_DIR = "/mig-parted-config"
#: NVIDIA's programs in the image (``make mig-parted``).
NVIDIA_PROGRAMS = ("nvidia-mig-manager", "nvidia-mig-parted", "reconfigure-mig.sh")


def missing(environ: Mapping[str, str] | None = None) -> list[str]:
    """What the MIG manager on the real node needs and is not built, each as ``path (make target)``:
    NVIDIA's programs and the plugin's nvidia-caps wrapper (empty: all there)."""
    needed = [
        *((nv.mig_parted_bin_dir(environ) / p, "mig-parted") for p in NVIDIA_PROGRAMS),
        (programs_dir(environ) / nv.NVIDIA_CAPS, "realnode-bins"),
    ]
    return [f"{path} (make {target})" for path, target in needed if not path.exists()]


def image_ref() -> str:
    return f"localhost/gpushare/nvidia-mig-manager:{nv.mig_parted_version()}"


def _host_program(name: str) -> Path:
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found on this host (the MIG manager's image takes it from here)")
    return Path(found).resolve()


def build_image(out_dir: Path, environ: Mapping[str, str] | None = None) -> Path:
    """A docker-archive of :func:`image_ref`: NVIDIA's nvidia-mig-manager, nvidia-mig-parted and
    reconfigure-mig.sh (``make mig-parted``), kubectl, the host tools, their libraries, and
    hack/mig-ns.sh as ``gpushare-mig-ns`` (the entrypoint)."""
    bins = nv.mig_parted_bin_dir(environ)
    nvidia = {f"usr/bin/{p}": bins / p for p in NVIDIA_PROGRAMS}
    absent = [str(p) for p in nvidia.values() if not p.exists()]
    if absent:
        raise FileNotFoundError(f"{', '.join(absent)} not built: run `make mig-parted`")
    files = {
        **nvidia,
        "usr/bin/kubectl": _host_program("kubectl"),
        "usr/bin/gpushare-mig-ns": REPO / "hack/mig-ns.sh",
        **{f"usr/bin/{t}": _host_program(t) for t in HOST_TOOLS},
    }
    for dest, program in list(files.items()):
        if dest.endswith((".sh", "mig-ns")):
            continue
        for lib in nv.shared_libraries(program):
            files[str(lib).lstrip("/")] = lib.resolve()
    return build_files_image(
        image_ref(),
        files,
        out_dir / "nvidia-mig-manager.tar",
        entrypoint=["gpushare-mig-ns", "--", "nvidia-mig-manager"],
        env=["PATH=/usr/bin:/bin"],
        links={"bin": "usr/bin"},
    )


def daemonset_body(mig_state_dir: Path, *, plugin_namespace: str = nv.NAMESPACE) -> dict[str, Any]:
    """The MIG manager's DaemonSet as the GPU Operator renders it (``nvidia-mig-manager``: privileged,
    the mig-parted configs from ``default-mig-parted-config``, no reboot, no host GPU clients to
    stop, no CDI), with the fake driver root and the MIG state folder of the plugin's pods."""
    manager = {
        "name": "nvidia-mig-manager",
        "image": image_ref(),
        "imagePullPolicy": "Never",
        "command": ["gpushare-mig-ns", "--", "nvidia-mig-manager"],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            *(
                {"name": k, "value": v}
                for k, v in {
                    "CONFIG_FILE": f"{_CONFIG_DIR}/{migsim.CHART_KEY}",
                    "DEFAULT_GPU_CLIENTS_NAMESPACE": plugin_namespace,
                    "WITH_REBOOT": "false",
                    "WITH_SHUTDOWN_HOST_GPU_CLIENTS": "false",
                    "CDI_ENABLED": "false",
                    "LD_LIBRARY_PATH": "/driver-root/usr/lib64",
                    nv.FAKE_NVML_MIG_STATE_ENV: f"{nv.MIG_STATE_MOUNT}/{nv.MIG_STATE_FILE}",
                }.items()
            ),
        ],
        "securityContext": {"privileged": True},
        "volumeMounts": [
            {"name": "driver-root", "mountPath": "/driver-root", "readOnly": True},
            {"name": "mig-state", "mountPath": nv.MIG_STATE_MOUNT},
            {"name": "mig-parted-config", "mountPath": _CONFIG_DIR},
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": DS_NAME, "namespace": NAMESPACE, "labels": dict(APP_LABELS)},
        "spec": {
            "selector": {"matchLabels": dict(APP_LABELS)},
            "template": {
                "metadata": {"labels": dict(APP_LABELS)},
                "spec": {
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "priorityClassName": "system-node-critical",
                    "nodeSelector": dict(NODE_SELECTOR),
                    "tolerations": [{"key": nv.RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [manager],
                    "volumes": [
                        {"name": "driver-root", "hostPath": {"path": str(nv.driver_root())}},
                        {
                            "name": "mig-state",
                            "hostPath": {"path": str(mig_state_dir), "type": "DirectoryOrCreate"},
                        },
                        {"name": "mig-parted-config", "configMap": {"name": c.MIG_CONFIGS_CONFIGMAP}},
                    ],
                },
            },
        },
    }


def rbac_bodies() -> list[dict[str, Any]]:
    """What reconfigure-mig.sh's kubectl needs: its node read and labelled, the GPU clients' pods
    watched and deleted."""
    rules = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch", "update"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
    ]
    return service_account_bodies(SERVICE_ACCOUNT, NAMESPACE, rules)


async def install(
    api: client.ApiClient, dev: DevCluster, mig_state_dir: Path, configs: str | None = None
) -> None:
    """The MIG manager on the real nodes labelled :data:`NODE_SELECTOR`: its image imported, the
    namespace, RBAC, the ConfigMap of mig-parted configs (``configs``, a mig-parted document; default
    the chart's) and the DaemonSet. Creates or replaces each object."""
    if dev.info is None:
        raise RuntimeError("the control plane is not started")
    dev.import_image(build_image(dev.info.dir / "realnode" / "images"))
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    await nv.apply(lambda: core.create_namespace(cast(Any, {"metadata": {"name": NAMESPACE}})), None)
    await create_service_account(api, rbac_bodies())
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": c.MIG_CONFIGS_CONFIGMAP, "namespace": NAMESPACE},
        "data": {migsim.CHART_KEY: configs or migsim.CHART_DOCUMENT},
    }
    await nv.apply(
        lambda: core.create_namespaced_config_map(NAMESPACE, cast(Any, cm)),
        lambda: core.replace_namespaced_config_map(c.MIG_CONFIGS_CONFIGMAP, NAMESPACE, cast(Any, cm)),
    )
    ds = daemonset_body(mig_state_dir)
    await nv.apply(
        lambda: apps.create_namespaced_daemon_set(NAMESPACE, cast(Any, ds)),
        lambda: apps.replace_namespaced_daemon_set(DS_NAME, NAMESPACE, cast(Any, ds)),
    )
