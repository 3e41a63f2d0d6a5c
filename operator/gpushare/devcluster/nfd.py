"""Node Feature Discovery's nfd-master on the real node: what turns GPU Feature Discovery's findings
into Node labels.

NVIDIA's GPU Feature Discovery (GFD, ``gpushare.devcluster.nvidia.install_gfd``) does not label
Nodes itself: by default it writes one ``NodeFeature`` object per node (``nfd.k8s-sigs.io/v1alpha1``,
its labels in ``spec.labels``), and Node Feature Discovery's nfd-master copies those labels onto the
Node (and removes the ones a later ``NodeFeature`` drops). This module runs the real nfd-master
(``sigs.k8s.io/node-feature-discovery``, ``make nfd``: built from the Go module proxy, the version
realnode/nfd/go.mod pins) as NFD's kustomize base deploys it: a one-replica Deployment with NFD's
ClusterRole, NFD's own CRDs applied first. Its image (the two static binaries) is built here and
imported into the node's containerd (no registry).

What differs from NFD's deployment: the image, the node it runs on (the real node), smaller
resource requests, a restricted securityContext (non-root, read-only root filesystem, like NFD's
Helm chart) and no probes. nfd-worker is built too but not run: it publishes the node's own features
(CPU, kernel, PCI, ...), which NVIDIA's labels do not need when GFD writes ``NodeFeature``
objects (GFD's default, ``--use-node-feature-api``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from kubernetes_asyncio import client

from gpushare.devcluster.crds import install_crd_files
from gpushare.devcluster.images import build_files_image
from gpushare.devcluster.rbac import create_service_account, service_account_bodies
from gpushare.devcluster.realnode import REAL_NODE_LABEL, REPO
from gpushare.k8s.generated import refused

if TYPE_CHECKING:
    from gpushare.devcluster.cluster import DevCluster

MODULE = "sigs.k8s.io/node-feature-discovery"
NAMESPACE = "node-feature-discovery"
MASTER = "nfd-master"
MASTER_LABELS = {"app": "nfd-master"}
#: The file of NFD's CRDs that ``make nfd`` copies beside the binaries (NFD's deployment/base/nfd-crds).
CRDS_FILE = "nfd-api-crds.yaml"
#: NodeFeature objects: the API GFD writes and nfd-master reads.
GROUP, VERSION, PLURAL = "nfd.k8s-sigs.io", "v1alpha1", "nodefeatures"
#: The label that names a NodeFeature's node (nfd's ``NodeFeatureObjNodeNameLabel``).
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"


def nfd_version() -> str:
    """The NFD version realnode/nfd/go.mod pins (the cache key of its build)."""
    for line in (REPO / "realnode/nfd/go.mod").read_text().splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == MODULE:
            return words[1]
    raise RuntimeError(f"realnode/nfd/go.mod does not require {MODULE}")


def bin_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where ``make nfd`` puts nfd-master, nfd-worker and :data:`CRDS_FILE`."""
    env = os.environ if environ is None else environ
    if env.get("GPUSHARE_NFD_BIN"):
        return Path(env["GPUSHARE_NFD_BIN"])
    cache = Path(env["GPUSHARE_CACHE"]) if env.get("GPUSHARE_CACHE") else Path.home() / ".cache/gpushare"
    return cache / "bin" / f"node-feature-discovery-{nfd_version()}"


def image_ref() -> str:
    return f"localhost/gpushare/node-feature-discovery:{nfd_version()}"


def build_nfd_image(out_dir: Path, environ: Mapping[str, str] | None = None) -> Path:
    """A docker-archive of :func:`image_ref`: nfd-master and nfd-worker (static) in /usr/bin."""
    bins = bin_dir(environ)
    programs = {f"usr/bin/{p}": bins / p for p in ("nfd-master", "nfd-worker")}
    absent = [str(p) for p in programs.values() if not p.exists()]
    if absent:
        raise FileNotFoundError(f"{', '.join(absent)} not built: run `make nfd`")
    return build_files_image(
        image_ref(),
        programs,
        out_dir / "node-feature-discovery.tar",
        entrypoint=["nfd-master"],
        env=["PATH=/usr/bin"],
    )


def master_rbac_bodies() -> list[dict[str, Any]]:
    """NFD's master ServiceAccount, ClusterRole (deployment/base/rbac/master-clusterrole.yaml) and
    its binding."""
    rules = [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["watch", "list"]},
        {
            "apiGroups": [""],
            "resources": ["nodes", "nodes/status"],
            "verbs": ["get", "patch", "update", "list"],
        },
        {
            "apiGroups": [GROUP],
            "resources": ["nodefeatures", "nodefeaturerules", "nodefeaturegroups"],
            "verbs": ["get", "list", "watch"],
        },
        {"apiGroups": [GROUP], "resources": ["nodefeaturegroup/status"], "verbs": ["patch", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["nfd-master.nfd.kubernetes.io"],
            "verbs": ["get", "update"],
        },
    ]
    return service_account_bodies(MASTER, NAMESPACE, rules)


def master_deployment_body() -> dict[str, Any]:
    """nfd-master as NFD's kustomize base deploys it (deployment/base/master/master-deployment.yaml),
    on the real node, with the namespace and node in its environment as NFD's Helm chart sets them."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": MASTER, "namespace": NAMESPACE, "labels": {"app": "nfd"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": dict(MASTER_LABELS)},
            "template": {
                "metadata": {"labels": dict(MASTER_LABELS)},
                "spec": {
                    "serviceAccountName": MASTER,
                    "enableServiceLinks": False,
                    "nodeSelector": {REAL_NODE_LABEL: "true"},
                    "containers": [
                        {
                            "name": MASTER,
                            "image": image_ref(),
                            "imagePullPolicy": "Never",
                            "command": ["nfd-master"],
                            "env": [
                                {
                                    "name": "NODE_NAME",
                                    "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                                },
                                {
                                    "name": "KUBERNETES_NAMESPACE",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                                },
                            ],
                            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "runAsNonRoot": True,
                                "runAsUser": 65534,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                },
            },
        },
    }


async def install(api: client.ApiClient, dev: DevCluster) -> None:
    """NFD's CRDs, namespace, RBAC and nfd-master on a cluster with a real node (its image imported
    into the node's containerd). Creates or replaces each object."""
    if dev.info is None:
        raise RuntimeError("the control plane is not started")
    await install_crd_files(api, [bin_dir() / CRDS_FILE])
    dev.import_image(build_nfd_image(dev.info.dir / "realnode" / "images"))
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    with refused(409):
        await core.create_namespace(cast(Any, {"metadata": {"name": NAMESPACE}}))
    await create_service_account(api, master_rbac_bodies())
    body = cast(Any, master_deployment_body())
    with refused(409) as exists:
        await apps.create_namespaced_deployment(NAMESPACE, body)
    if exists:
        await apps.replace_namespaced_deployment(MASTER, NAMESPACE, body)


async def uninstall(api: client.ApiClient) -> None:
    """Remove nfd-master (the labels it wrote stay on the Node, as when NFD is uninstalled)."""
    with refused(404):
        await client.AppsV1Api(api).delete_namespaced_deployment(MASTER, NAMESPACE, grace_period_seconds=0)
